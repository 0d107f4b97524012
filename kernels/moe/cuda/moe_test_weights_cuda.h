// Test / bench support: device fill of the deterministic expert weights of moe_test_weights.h.
// No CUDA header; pointers are device pointers.
#pragma once

#include <cstdint>

#include "kernels/moe/moe_test_weights.h"

namespace flashserve::kernels::moe_test {

// codes: [n_experts, rows, cols/2] packed E2M1; scales: [n_experts, rows, cols/32] UE8M0; the
// same bytes as WeightCodeByte / WeightScaleByte. Synchronises the device. Aborts on CUDA errors.
void FillExpertProjection(uint64_t seed, WeightKind kind, int proj, int64_t n_experts, int64_t rows,
                          int64_t cols, uint8_t* codes, uint8_t* scales);

}  // namespace flashserve::kernels::moe_test
