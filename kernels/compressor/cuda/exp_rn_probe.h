// Test-only: compressor_math::ExpRn (exp_rn.h) evaluated on the device, so that a plain C++ test
// can compare it with the host's over all fp32 bit patterns, and the device's fast route to it
// (ExpRnFast) checked against it. Aborts on CUDA errors.
#pragma once

#include <cstdint>

namespace flashserve::kernels::compressor_testing {

// out[i] = bits of ExpRn(x) on the device for x with bits first_bits + i, i < n (n <= 2^28).
// `out` is HOST memory; the function allocates its own device buffer and synchronises.
void ExpRnOnDevice(uint32_t first_bits, int64_t n, uint32_t* out);

// ExpRnFast (cuda/exp_rn_fast.cuh) against ExpRn, both on the device, over every fp32 bit pattern:
// how many inputs the fast route accepts, how many of those disagree with ExpRn, and the smallest
// disagreeing bit pattern (0xFFFFFFFF if none).
struct ExpRnFastReport {
  int64_t accepted = 0;
  int64_t mismatches = 0;
  uint32_t first_mismatch = 0xFFFFFFFFu;
};
ExpRnFastReport ExpRnFastOnDeviceAllFloats();

// DivRnPooled (cuda/compress_vec.cuh) against div.rn.f32 on the device for every pair the ratio-2
// pooling's fast path forms: every fp32 e in [2^-92, 1], sum = 1 + e (rounded), quotients 1 / sum
// and e / sum. Returns the number of differing quotients (and the first e's bits, 0xFFFFFFFF if
// none) and how many e were tried.
struct DivRnPooledReport {
  int64_t tried = 0;
  int64_t mismatches = 0;
  uint32_t first_mismatch = 0xFFFFFFFFu;
};
DivRnPooledReport DivRnPooledOnDevice();

}  // namespace flashserve::kernels::compressor_testing
