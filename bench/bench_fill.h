// Bench support: deterministic synthetic tensors filled on the device (a hash of (seed, index)),
// so full-size weights (hundreds of MB) never pass through the host. Pointers are device pointers;
// each call enqueues one kernel on the default stream and aborts on CUDA errors.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashserve::bench {

// bf16 values uniform in [-amp, amp] (amp > 0; rounded to bf16).
void FillBf16(uint64_t seed, size_t n, float amp, uint16_t* out);
// fp32 values uniform in [lo, hi].
void FillF32(uint64_t seed, size_t n, float lo, float hi, float* out);
// E4M3 codes: every byte value except the two NaNs (0x7F, 0xFF), which become 0x7E / 0xFE.
void FillFp8Codes(uint64_t seed, size_t n, uint8_t* out);
// bf16 values code · 2^(scale - 127) of E4M3 codes [rows, cols] and UE8M0 bytes, one per 32 × 32
// block ([rows / 32, cols / 32]; rows and cols multiples of 32): a weight that is exactly its FP8
// form (kernels::NarrowFloatLinearWeightToFp8's input).
void Bf16FromFp8Blocks(const uint8_t* codes, const uint8_t* scales, size_t rows, size_t cols,
                       uint16_t* out);
// Bytes uniform in [lo, hi] (scale bytes, FP4 code pairs with lo = 0, hi = 255).
void FillBytes(uint64_t seed, size_t n, uint8_t lo, uint8_t hi, uint8_t* out);
// In each of `rows` rows of `row_bytes` bytes, bytes [offset, offset + count) uniform in [lo, hi]
// (e.g. the scale bytes of serving rows); the other bytes are left as they are.
void FillRowBytes(uint64_t seed, size_t rows, size_t row_bytes, size_t offset, size_t count,
                  uint8_t lo, uint8_t hi, uint8_t* out);

}  // namespace flashserve::bench
