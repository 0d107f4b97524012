// FP4 E2M1 (torch float4_e2m1fn_x2 when packed): sign bit 3, 2 exponent bits, 1 mantissa bit.
//
// Codes 0..7 are the magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}; code | 8 is the negative value
// (8 is -0). No Inf, no NaN. Two codes share a byte: the EVEN element in the low nibble (bits 0-3),
// the odd element in bits 4-7 (model spec §5; weights, main KV, index K/Q). Pure functions:
// allocation-free and thread-safe.
#pragma once

#include <cstdint>

namespace flashserve::formats {

inline constexpr float kE2m1Max = 6.0f;
inline constexpr uint8_t kE2m1SignBit = 0x8;

// Returns the E2M1 code (0..15) of `v`, where v is the already-scaled value (the caller computes
// x / scale as an fp32 division). v is clamped to ±6, then rounded to the nearest magnitude with
// ties to the even code: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. The sign bit is
// copied from v's sign bit, so -0 and negatives that round to zero give code 8. ±Inf clamp to ±6;
// NaN (which the reference never produces) gives ±6 with its sign bit, so it stays visible.
uint8_t FloatToE2m1(float v);

// Returns the exact value of the low 4 bits of `code` (higher bits are ignored).
float E2m1ToFloat(uint8_t code);

// Packs two codes into a byte: `even` in bits 0-3, `odd` in bits 4-7 (high bits of each ignored).
constexpr uint8_t PackE2m1(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xFu) | ((odd & 0xFu) << 4));
}
// Returns the even (low-nibble) code of a packed byte.
constexpr uint8_t UnpackE2m1Even(uint8_t packed) { return packed & 0xFu; }
// Returns the odd (high-nibble) code of a packed byte.
constexpr uint8_t UnpackE2m1Odd(uint8_t packed) { return packed >> 4; }

}  // namespace flashserve::formats
