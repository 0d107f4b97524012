// bfloat16: the storage type between ops in DeepSeek-V4.1 (model spec §10 item 1).
//
// A bf16 value is the top 16 bits of an IEEE-754 binary32. Conversion from float rounds to
// nearest, ties to even, exactly as torch's `.to(torch.bfloat16)` does; NaN stays NaN.
// Everything here is constexpr, allocation-free and thread-safe (pure functions).
#pragma once

#include <bit>
#include <cstdint>

namespace flashserve::formats {

// Returns the bf16 bit pattern nearest to `x` (round to nearest, ties to even). Values beyond the
// largest finite bf16 round to ±infinity, as in IEEE. A NaN keeps its sign and top payload bits and
// has its quiet bit forced, so it never collapses to infinity. Subnormals are kept (no flushing).
constexpr uint16_t FloatToBf16Bits(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding 0x7FFF plus the lowest kept bit rounds half-way cases towards the even result; a carry
  // out of the mantissa correctly bumps the exponent (and reaches infinity past the largest value).
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// Returns the float holding the bf16 value `bits` (exact; every bf16 is a float).
constexpr float Bf16BitsToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Rounds `x` to the nearest bf16 value and returns it as a float ("round-trip through bf16").
constexpr float RoundToBf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

// A bf16 value held by its bit pattern. Trivially copyable, 2 bytes, layout-compatible with the
// raw uint16 data found in safetensors files and device buffers. Equality compares bit patterns
// (so +0 != -0 and NaN == NaN when the bits agree), which is what conformance tests want.
struct Bf16 {
  uint16_t bits = 0;

  static constexpr Bf16 FromBits(uint16_t b) { return Bf16{b}; }
  static constexpr Bf16 FromFloat(float x) { return Bf16{FloatToBf16Bits(x)}; }
  constexpr float ToFloat() const { return Bf16BitsToFloat(bits); }

  friend constexpr bool operator==(Bf16 a, Bf16 b) { return a.bits == b.bits; }
};
static_assert(sizeof(Bf16) == 2);

}  // namespace flashserve::formats
