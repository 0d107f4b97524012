#include "common/formats/fp8_e4m3.h"

#include <bit>

namespace flashserve::formats {
namespace {

// fp32 field layout.
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32Inf = 0x7F800000u;
constexpr uint32_t kF32Implicit = 0x00800000u;
constexpr uint32_t kF32MantMask = 0x007FFFFFu;
// fp32 biased exponent of 2^-6, the smallest normal E4M3 magnitude.
constexpr uint32_t kMinNormalBiasedExp = 127 - 6;

// Shifts `value` right by `shift` (1..31) rounding to nearest, ties to even.
constexpr uint32_t ShiftRightRne(uint32_t value, uint32_t shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

constexpr float DecodeE4m3(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xFu;
  const uint32_t mant = code & 0x7u;
  if (exp == 0xFu && mant == 0x7u) {
    return std::bit_cast<float>(sign | 0x7FC00000u);
  }
  float magnitude = 0.0f;
  if (exp == 0) {
    magnitude = static_cast<float>(mant) * (1.0f / 512.0f);  // m·2^-9, exact
  } else {
    magnitude = std::bit_cast<float>(((exp - 7u + 127u) << 23) | (mant << 20));
  }
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

constexpr std::array<float, 256> BuildDecodeTable() {
  std::array<float, 256> table{};
  for (int c = 0; c < 256; ++c) table[c] = DecodeE4m3(static_cast<uint8_t>(c));
  return table;
}

}  // namespace

namespace internal {
const std::array<float, 256> kE4m3ToFloat = BuildDecodeTable();
}  // namespace internal

uint8_t FloatToE4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) return sign | kE4m3NanByte;
  if (abs >= std::bit_cast<uint32_t>(kE4m3Max)) return sign | kE4m3MaxByte;

  const uint32_t biased_exp = abs >> 23;
  const uint32_t mant = abs & kF32MantMask;
  if (biased_exp >= kMinNormalBiasedExp) {
    // Normal range: keep 3 of the 23 mantissa bits. A rounding carry into bit 3 bumps the exponent,
    // which is the right answer; since |x| < 448 the result never passes 0x7E.
    const uint32_t e4 = biased_exp - kMinNormalBiasedExp + 1u;
    return sign | static_cast<uint8_t>((e4 << 3) + ShiftRightRne(mant, 20));
  }
  if (biased_exp == 0) return sign;  // fp32 subnormal: far below 2^-10
  // Subnormal range: the code is |x|·2^9 rounded to an integer in [0, 8]; 8 is the encoding of the
  // smallest normal (exponent field 1, mantissa 0), so the integer is the code itself.
  // |x|·2^9 = significand · 2^(biased_exp - 150 + 9).
  const uint32_t shift = 141u - biased_exp;  // >= 21 here
  if (shift >= 25u) return sign;             // |x|·2^9 < 0.5
  return sign | static_cast<uint8_t>(ShiftRightRne(mant | kF32Implicit, shift));
}

}  // namespace flashserve::formats
