// UE8M0 (torch float8_e8m0fnu): an unsigned power-of-two scale held in one byte.
//
// Byte b encodes 2^(b - 127) for b in [0, 254]; b = 255 is NaN. There is no zero and no sign.
// Used for the FP8 activation / SWA KV scales, the FP4 index K/Q scales and all weight scales
// (model spec §5). Pure constexpr functions: allocation-free and thread-safe.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace flashserve::formats {

inline constexpr uint8_t kUe8m0NanByte = 0xFF;

// Returns the UE8M0 byte of the smallest power of two >= `x`, computed from the fp32 bits exactly
// as the reference does: biased_exponent(x) + (mantissa(x) != 0). The sign bit is ignored.
// Intended for positive finite x in [2^-127, 2^127] (every caller floors its amax first).
// Outside that range: a subnormal x gives 1 (2^-126, still the correct ceiling), 0 gives 0
// (2^-127), x above 2^127 and Inf/NaN give kUe8m0NanByte.
constexpr uint8_t Ue8m0CeilFromFloat(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu;
  const uint32_t biased_exp = bits >> 23;
  const uint32_t mantissa = bits & 0x7FFFFFu;
  const uint32_t e = biased_exp + (mantissa != 0 ? 1u : 0u);
  return static_cast<uint8_t>(e > 255u ? 255u : e);
}

// Returns 2^(b - 127) as a float (exact: byte 0 is the fp32 subnormal 2^-127), or a quiet NaN for
// kUe8m0NanByte.
constexpr float Ue8m0ToFloat(uint8_t b) {
  if (b == kUe8m0NanByte) return std::numeric_limits<float>::quiet_NaN();
  if (b == 0) return std::bit_cast<float>(uint32_t{0x00400000u});
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 23);
}

}  // namespace flashserve::formats
