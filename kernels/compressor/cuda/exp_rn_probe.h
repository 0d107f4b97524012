// Test-only: compressor_math::ExpRn (exp_rn.h) evaluated on the device, so that a plain C++ test
// can compare it with the host's over all fp32 bit patterns. Aborts on CUDA errors.
#pragma once

#include <cstdint>

namespace flashserve::kernels::compressor_testing {

// out[i] = bits of ExpRn(x) on the device for x with bits first_bits + i, i < n (n <= 2^28).
// `out` is HOST memory; the function allocates its own device buffer and synchronises.
void ExpRnOnDevice(uint32_t first_bits, int64_t n, uint32_t* out);

}  // namespace flashserve::kernels::compressor_testing
