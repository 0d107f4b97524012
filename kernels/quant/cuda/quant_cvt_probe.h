// Test-only probe of the hardware conversions used by the fast paths (quant_fast.cuh) against the
// software conversions (quant_math.h), over all 2^32 fp32 bit patterns, on the current device.
// Declared without CUDA headers so a plain C++ test can call it. Aborts on CUDA errors.
#pragma once

#include <cstdint>

namespace flashserve::kernels::quant::testing {

struct CvtProbeResult {
  uint64_t e4m3_mismatches = 0;  // non-NaN x: E4m3x2 recipe with the sign OR-ed in vs F32ToE4m3
  uint64_t bf16_mismatches = 0;  // non-NaN x: Bf16x2 vs F32ToBf16
  uint32_t first_e4m3[4] = {};   // up to 4 mismatching inputs (fp32 bits)
  uint32_t first_bf16[4] = {};
};

// Runs the probe (a few milliseconds on an H200). Needs a CUDA device.
CvtProbeResult ProbeHardwareConversions();

}  // namespace flashserve::kernels::quant::testing
