// FP8 E4M3 (torch float8_e4m3fn): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits.
//
// Finite range ±448; subnormals are m·2^-9 (smallest 2^-9); codes 0x7F and 0xFF are NaN; there is
// no infinity. Used for FP8 activations, the SWA KV cache, FP8 weights, the Engram table, and as
// the per-16 scale of the FP4 main KV cache (model spec §5). Pure functions: allocation-free and
// thread-safe.
#pragma once

#include <array>
#include <cstdint>

namespace flashserve::formats {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3MaxByte = 0x7E;  // +448
inline constexpr uint8_t kE4m3NanByte = 0x7F;  // positive NaN; 0xFF is the negative one

// Returns the E4M3 byte nearest to `x`: round to nearest, ties to even, over the whole grid
// including subnormals (so values up to 2^-10 round to zero and 2^-10 itself ties to zero).
// The sign is always taken from x's sign bit, so -0 and negative values that round to zero encode
// as 0x80. Saturating: |x| >= 448, including ±Inf, gives ±448 (0x7E / 0xFE) — the reference never
// relies on overflow because it clamps to ±448 first. NaN gives 0x7F with x's sign (0x7F / 0xFF).
// fp32 subnormal inputs encode as signed zero. Cost: a few integer operations.
uint8_t FloatToE4m3(float x);

namespace internal {
// Decoded value of every code; defined in fp8_e4m3.cc.
extern const std::array<float, 256> kE4m3ToFloat;
}  // namespace internal

// Returns the exact float value of E4M3 `code` (NaN for 0x7F / 0xFF). One table load.
inline float E4m3ToFloat(uint8_t code) { return internal::kE4m3ToFloat[code]; }

}  // namespace flashserve::formats
