// LinearCudaParams::x_norm's validation (gemm_cuda.h): the host checks, no device needed (the
// validator reads no memory). The fused kernel's bits: gemm_gpu_xnorm_test.cc, on the GPU.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm/gemm_cuda.h"

namespace flashserve::kernels {
namespace {

TEST(LinearCudaParamsTest, XNormValidation) {
  alignas(16) static uint8_t codes[16];
  static uint8_t scales[1];
  const int64_t n = 256, k = 512, m = 3;
  const Fp8LinearDevice w{n, k, codes, scales, nullptr};
  alignas(16) static uint16_t x[m * k], y[m * n], out[m * k + 8], weight[k + 1];
  alignas(16) static uint8_t ws[1 << 16];
  auto good = [&] {
    LinearCudaParams p;
    p.weight = &w;
    p.m = m;
    p.x_bf16 = x;
    p.x_stride = k;
    p.y_bf16 = y;
    p.y_stride = n;
    p.workspace = ws;
    p.workspace_bytes = sizeof(ws);  // more than the call needs
    p.x_norm.weight = weight;
    p.x_norm.out = out;
    p.x_norm.out_stride = k;
    return p;
  };
  ASSERT_TRUE(ValidateLinearCudaParams(good()).ok()) << ValidateLinearCudaParams(good());
  auto expect_field = [](const LinearCudaParams& p, const char* field, const char* why) {
    const absl::Status s = ValidateLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
    EXPECT_NE(s.message().find(why), std::string::npos) << s;
  };
  LinearCudaParams p = good();
  p.x_norm.out = nullptr;
  expect_field(p, "x_norm.out", "non-null");
  p = good();
  p.x_norm.out = out + 1;  // any 2-byte alignment is taken (the scalar path)
  EXPECT_TRUE(ValidateLinearCudaParams(p).ok()) << ValidateLinearCudaParams(p);
  p.x_norm.out = reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(out) + 1);
  expect_field(p, "x_norm.out", "aligned");
  p = good();
  p.x_norm.weight = reinterpret_cast<const uint16_t*>(reinterpret_cast<uint8_t*>(weight) + 1);
  expect_field(p, "x_norm.weight", "aligned");
  p = good();
  p.x_norm.out_stride = k - 1;
  expect_field(p, "x_norm.out_stride", "< K");
  for (const float eps : {0.f, -1e-6f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    p = good();
    p.x_norm.eps = eps;
    expect_field(p, "x_norm.eps", "finite");
  }
  p = good();
  p.x_qdq = true;
  expect_field(p, "x_qdq", "x_norm");
  // The normed rows may not land on x (in place: other CTAs still read x), y or the workspace.
  p = good();
  p.x_norm.out = x;
  expect_field(p, "x_norm.out", "overlaps x");
  p.x_norm.out = x + (m - 1) * k + k - 1;  // the last element of x
  expect_field(p, "x_norm.out", "overlaps x");
  p = good();
  p.y_bf16 = out + 8;  // y starting inside the normed rows
  expect_field(p, "x_norm.out", "overlaps y");
  p = good();
  p.y_bf16 = nullptr;
  p.y_f32 = reinterpret_cast<float*>(out) + 16;  // fp32 y starting inside the normed rows
  expect_field(p, "x_norm.out", "overlaps y");
  p = good();
  p.x_norm.out = reinterpret_cast<uint16_t*>(ws + 256);
  expect_field(p, "x_norm.out", "overlaps the workspace");
  // Without a norm weight the rest of x_norm is not looked at.
  p = good();
  p.x_norm.weight = nullptr;
  p.x_norm.out = x;
  p.x_qdq = true;
  EXPECT_TRUE(ValidateLinearCudaParams(p).ok()) << ValidateLinearCudaParams(p);
}

}  // namespace
}  // namespace flashserve::kernels
