// LinearCudaParams::stream_ctas (gemm_cuda.h): the weight-streaming plan's CTA target. Host-only
// (the plan, the workspace, the validation); the kernels it plans are the stream kernel's usual
// grids, run on the GPU by moe_gpu_shared_test.cc (the shared expert with stream_ctas).
#include <algorithm>
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "kernels/gemm/gemm_cuda.h"

namespace flashserve::kernels {
namespace {

int64_t Ctas(const LinearCudaPlan& p) { return p.n_tiles * p.splits * p.m_tiles; }
int64_t CeilDivForTest(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(LinearCudaPlanTest, StreamCtasTargetsTheGrid) {
  struct Shape {
    int64_t n, k;
  };
  // The shared expert's w1 | w3 and w2, wq_b, wo_b, wkv.
  for (const Shape s : {Shape{4608, 5120}, Shape{5120, 2304}, Shape{32768, 1280}, Shape{5120, 8192},
                        Shape{512, 5120}}) {
    for (const int64_t m : {1, 8}) {
      SCOPED_TRACE(::testing::Message() << s.n << " x " << s.k << " m " << m);
      const LinearCudaPlan auto_plan = PlanLinearCuda(m, s.n, s.k);
      ASSERT_EQ(auto_plan.kernel, LinearCudaKernel::kStream);
      // 0 is the automatic plan's 264.
      const LinearCudaPlan same = PlanLinearCuda(m, s.n, s.k, 0, 0, true, true, true, false, 264);
      EXPECT_EQ(same.splits, auto_plan.splits);
      EXPECT_EQ(same.n_tiles, auto_plan.n_tiles);
      for (const int64_t target : {66, 132}) {
        const LinearCudaPlan p = PlanLinearCuda(m, s.n, s.k, 0, 0, true, true, true, false, target);
        EXPECT_EQ(p.kernel, LinearCudaKernel::kStream);
        EXPECT_LE(p.splits, auto_plan.splits);
        // At most the target, unless the weight's 128-row tiles alone exceed it.
        EXPECT_LE(Ctas(p), std::max(target, CeilDivForTest(s.n, 128)));
        EXPECT_LE(Ctas(p), Ctas(auto_plan));
        // Every split has work; the splits cover K.
        EXPECT_GE(p.steps_per_split * p.splits, p.k_steps);
        EXPECT_LT((p.splits - 1) * p.steps_per_split, p.k_steps);
      }
    }
  }
}

TEST(LinearCudaParamsTest, StreamCtasValidationAndWorkspace) {
  alignas(16) static uint8_t codes[16];
  static uint8_t scales[1];
  const Fp8LinearDevice w{4608, 5120, codes, scales, nullptr};
  static uint16_t x[5120], y[4608];
  for (const int64_t target : {0, 66, 132, 264, 1000}) {
    const size_t bytes = LinearCudaWorkspaceBytes(w, 8, 0, 0, true, true, true, false, target);
    for (const int64_t m : {1, 3, 8}) {
      LinearCudaParams p;
      p.weight = &w;
      p.m = m;
      p.x_bf16 = x;
      p.x_stride = 5120;
      p.y_bf16 = y;
      p.y_stride = 4608;
      p.stream_ctas = target;
      p.workspace = reinterpret_cast<void*>(uintptr_t{1} << 20);  // never dereferenced
      p.workspace_bytes = bytes;
      EXPECT_TRUE(ValidateLinearCudaParams(p).ok()) << target << " " << ValidateLinearCudaParams(p);
    }
  }
  LinearCudaParams p;
  p.weight = &w;
  p.m = 1;
  for (const int64_t bad : {int64_t{-1}, kLinearCudaMaxStreamCtas + 1}) {
    p.stream_ctas = bad;
    const absl::Status s = ValidateLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("stream_ctas"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace flashserve::kernels
