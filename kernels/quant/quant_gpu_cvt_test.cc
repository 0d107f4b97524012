// The hardware conversions behind the fast paths equal the software ones (which quant_math_test
// checks against common/formats) for every fp32 input that can reach them.
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/quant/cuda/quant_cvt_probe.h"

namespace flashserve::kernels::quant::testing {
namespace {

TEST(QuantGpuCvtTest, HardwareConversionsMatchSoftwareForAllFloats) {
  FS_SKIP_WITHOUT_GPU();
  const CvtProbeResult r = ProbeHardwareConversions();
  EXPECT_EQ(r.e4m3_mismatches, 0u)
      << absl::StrFormat("cvt.rn.satfinite.e4m3x2.f32 differs, e.g. for %08x %08x %08x %08x",
                         r.first_e4m3[0], r.first_e4m3[1], r.first_e4m3[2], r.first_e4m3[3]);
  EXPECT_EQ(r.bf16_mismatches, 0u)
      << absl::StrFormat("cvt.rn.bf16x2.f32 differs, e.g. for %08x %08x %08x %08x", r.first_bf16[0],
                         r.first_bf16[1], r.first_bf16[2], r.first_bf16[3]);
}

}  // namespace
}  // namespace flashserve::kernels::quant::testing
