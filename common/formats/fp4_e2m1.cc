#include "common/formats/fp4_e2m1.h"

#include <array>
#include <bit>

namespace flashserve::formats {
namespace {

constexpr std::array<float, 8> kMagnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Returns the code (0..7) of a magnitude in [0, 6]. The midpoints between neighbouring grid values
// are exact in fp32, so comparing against them is the exact round-to-nearest; at a midpoint the
// even code wins, which is why the bound is inclusive (<=) below an even code and exclusive (<)
// below an odd one.
constexpr uint8_t MagnitudeCode(float a) {
  if (a <= 0.25f) return 0;
  if (a < 0.75f) return 1;
  if (a <= 1.25f) return 2;
  if (a < 1.75f) return 3;
  if (a <= 2.5f) return 4;
  if (a < 3.5f) return 5;
  if (a <= 5.0f) return 6;
  return 7;
}

}  // namespace

uint8_t FloatToE2m1(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint8_t sign = (bits >> 31) != 0 ? kE2m1SignBit : 0;
  const float a = std::bit_cast<float>(bits & 0x7FFFFFFFu);
  // NaN fails every comparison in MagnitudeCode and lands on code 7; clamping is implicit since
  // everything above 5 is 6.
  return sign | MagnitudeCode(a);
}

float E2m1ToFloat(uint8_t code) {
  const float m = kMagnitudes[code & 0x7u];
  return (code & kE2m1SignBit) != 0 ? -m : m;
}

}  // namespace flashserve::formats
