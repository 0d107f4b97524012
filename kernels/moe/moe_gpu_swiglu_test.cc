// The SwiGLU gate factor the CUDA kernels compute (SwiGluGateFactor: kMoeSigTable, its closed
// forms, the formula for the rest) against the formula it replaced (a double-precision exp and an
// IEEE division), on the device, for every bf16 g and for clamp limits that are not bf16 values.
// The host side of the same claim is MoeSwiGluTableTest (kernels_moe_test).
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/base/casts.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/moe/cuda/moe_swiglu_check.h"

namespace flashserve::kernels {
namespace {

uint32_t Bits(float f) { return absl::bit_cast<uint32_t>(f); }

TEST(MoeGpuSwiGluTest, GateFactorIsTheFormulaForEveryBf16AndOtherLimits) {
  FS_SKIP_WITHOUT_GPU();
  std::vector<float> g;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint32_t f32 = b << 16;
    float f;
    std::memcpy(&f, &f32, 4);
    g.push_back(f);
  }
  // Clamp limits that are not bf16 values take the formula inside SwiGluGateFactor.
  for (float v : {7.0001f, 10.3f, 0.123456f, 1e-30f, 88.51f, -3.3f}) {
    ASSERT_NE(Bits(v) & 0xFFFFu, 0u) << v << " is a bf16 value";
    g.push_back(v);
  }
  std::vector<float> kernel(g.size()), formula(g.size());
  moe_test::SwiGluGateFactorsOnDevice(g.data(), static_cast<int64_t>(g.size()), kernel.data(),
                                      formula.data());
  int differ = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (Bits(kernel[i]) != Bits(formula[i]) && ++differ <= 10) {
      ADD_FAILURE() << "g " << g[i] << " (bits 0x" << std::hex << Bits(g[i]) << "): kernel 0x"
                    << Bits(kernel[i]) << ", formula 0x" << Bits(formula[i]);
    }
  }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace flashserve::kernels
