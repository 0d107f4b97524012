// Unit tests of the scalar formats: bf16, E4M3, UE8M0, E2M1.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/formats/bf16.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "gtest/gtest.h"

namespace flashserve::formats {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }

// Brute-force nearest grid value with ties to the even code, computed in double: the independent
// oracle the bit-twiddling encoders are compared against. `decode` maps a code to its value;
// codes that decode to NaN are skipped. `max_code` bounds the positive codes searched.
template <typename Decode>
int NearestEvenCode(double x, int max_code, Decode decode) {
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= max_code; ++c) {
    const double v = decode(c);
    if (std::isnan(v)) continue;
    const double err = std::fabs(v - x);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

// ---- bf16 ----------------------------------------------------------------------------------

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16Bits(F(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(FloatToBf16Bits(F(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16Bits(F(0x3F808001)), 0x3F81);  // just above the tie
  EXPECT_EQ(FloatToBf16Bits(F(0x3F807FFF)), 0x3F80);  // just below the tie
  EXPECT_EQ(FloatToBf16Bits(F(0xBF818000)), 0xBF82);  // negative tie
  EXPECT_EQ(FloatToBf16Bits(F(0x3FFF8000)), 0x4000);  // carry into the exponent
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16Bits(F(0x00008000)), 0x0000);  // subnormal tie to even
  EXPECT_EQ(FloatToBf16Bits(F(0x00018000)), 0x0002);
  EXPECT_EQ(FloatToBf16Bits(F(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7F80);  // overflows to +Inf
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(Bf16Test, PreservesNan) {
  EXPECT_EQ(FloatToBf16Bits(F(0x7FC00001)), 0x7FC0);
  EXPECT_EQ(FloatToBf16Bits(F(0x7F800001)), 0x7FC0);  // signalling NaN with low payload only
  EXPECT_EQ(FloatToBf16Bits(F(0xFFFFFFFF)), 0xFFFF);
  EXPECT_TRUE(std::isnan(Bf16::FromFloat(F(0xFF800001)).ToFloat()));
}

TEST(Bf16Test, AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = Bf16BitsToFloat(bits);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (std::isnan(f)) {
      EXPECT_EQ(FloatToBf16Bits(f), bits | 0x0040) << b;
    } else {
      EXPECT_EQ(FloatToBf16Bits(f), bits) << b;
    }
  }
}

TEST(Bf16Test, MatchesNearestEvenOracleOnSampledFloats) {
  // A stride coprime with 2^16 visits every low-half pattern class across the whole range.
  for (uint64_t b = 0; b < 0x7F7F0000ull; b += 4099) {
    const float x = F(static_cast<uint32_t>(b));
    const uint16_t lo = static_cast<uint16_t>(b >> 16);
    const double err_lo = static_cast<double>(x) - Bf16BitsToFloat(lo);
    const double err_hi = static_cast<double>(Bf16BitsToFloat(lo + 1)) - x;
    const uint16_t want = (err_lo < err_hi || (err_lo == err_hi && lo % 2 == 0)) ? lo : lo + 1;
    ASSERT_EQ(FloatToBf16Bits(x), want) << "bits " << b;
  }
}

// ---- E4M3 ----------------------------------------------------------------------------------

TEST(E4m3Test, DecodesKnownCodes) {
  EXPECT_EQ(E4m3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(E4m3ToFloat(0x80)));
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4m3ToFloat(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(E4m3ToFloat(0xB8), -1.0f);
  EXPECT_EQ(E4m3ToFloat(0x3A), 1.25f);
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0xFF)));
}

TEST(E4m3Test, AllCodesRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E4m3Test, TiesGoToEvenCode) {
  EXPECT_EQ(FloatToE4m3(1.0625f), 0x38);  // 1 | 1.125
  EXPECT_EQ(FloatToE4m3(1.1875f), 0x3A);  // 1.125 | 1.25
  EXPECT_EQ(FloatToE4m3(-1.1875f), 0xBA);
  EXPECT_EQ(FloatToE4m3(432.0f), 0x7E);                      // 416 | 448
  EXPECT_EQ(FloatToE4m3(15 * std::ldexp(1.0f, -10)), 0x08);  // 7·2^-9 | 2^-6
  EXPECT_EQ(FloatToE4m3(17 * std::ldexp(1.0f, -10)), 0x08);  // 2^-6 | 2^-6+2^-9 (normal)
}

TEST(E4m3Test, SubnormalRange) {
  const float ulp = std::ldexp(1.0f, -9);
  EXPECT_EQ(FloatToE4m3(ulp / 2), 0x00);  // tie to zero
  EXPECT_EQ(FloatToE4m3(std::nextafter(ulp / 2, 1.0f)), 0x01);
  EXPECT_EQ(FloatToE4m3(1.5f * ulp), 0x02);  // tie 1 | 2 -> 2
  EXPECT_EQ(FloatToE4m3(2.5f * ulp), 0x02);  // tie 2 | 3 -> 2
  EXPECT_EQ(FloatToE4m3(3.5f * ulp), 0x04);
  EXPECT_EQ(FloatToE4m3(-ulp / 4), 0x80);  // negative underflow keeps the sign
  EXPECT_EQ(FloatToE4m3(-0.0f), 0x80);
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(E4m3Test, SaturatesAndHandlesNan) {
  EXPECT_EQ(FloatToE4m3(448.0f), 0x7E);
  EXPECT_EQ(FloatToE4m3(std::nextafter(448.0f, 0.0f)), 0x7E);
  EXPECT_EQ(FloatToE4m3(464.0f), 0x7E);
  EXPECT_EQ(FloatToE4m3(1e30f), 0x7E);
  EXPECT_EQ(FloatToE4m3(-500.0f), 0xFE);
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(FloatToE4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(FloatToE4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
}

TEST(E4m3Test, MatchesNearestEvenOracle) {
  auto decode = [](int c) { return static_cast<double>(E4m3ToFloat(static_cast<uint8_t>(c))); };
  // Every float in [0, 448] whose bits are a multiple of the stride, plus all grid midpoints.
  for (uint32_t b = 0; b <= std::bit_cast<uint32_t>(448.0f); b += 9973) {
    const float x = F(b);
    ASSERT_EQ(FloatToE4m3(x), NearestEvenCode(x, 0x7E, decode)) << x;
    ASSERT_EQ(FloatToE4m3(-x), 0x80 | NearestEvenCode(x, 0x7E, decode)) << -x;
  }
  for (int c = 0; c < 0x7E; ++c) {
    const float mid =
        (E4m3ToFloat(static_cast<uint8_t>(c)) + E4m3ToFloat(static_cast<uint8_t>(c + 1))) /
        2;  // exact in fp32
    EXPECT_EQ(FloatToE4m3(mid), c % 2 == 0 ? c : c + 1) << mid;
  }
}

// ---- UE8M0 ---------------------------------------------------------------------------------

TEST(Ue8m0Test, CeilRuleOnPowersOfTwoAndJustAbove) {
  EXPECT_EQ(Ue8m0CeilFromFloat(1.0f), 127);
  EXPECT_EQ(Ue8m0CeilFromFloat(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(Ue8m0CeilFromFloat(std::nextafter(1.0f, 0.0f)), 127);
  EXPECT_EQ(Ue8m0CeilFromFloat(0.75f), 127);
  EXPECT_EQ(Ue8m0CeilFromFloat(std::ldexp(1.0f, -22)), 105);
  EXPECT_EQ(Ue8m0CeilFromFloat(std::numeric_limits<float>::min()), 1);  // 2^-126
  EXPECT_EQ(Ue8m0CeilFromFloat(std::numeric_limits<float>::denorm_min()), 1);
  EXPECT_EQ(Ue8m0CeilFromFloat(0.0f), 0);
  EXPECT_EQ(Ue8m0CeilFromFloat(std::ldexp(1.0f, 127)), 254);
  EXPECT_EQ(Ue8m0CeilFromFloat(std::nextafter(std::ldexp(1.0f, 127), 1e38f * 4)), 255);
  EXPECT_EQ(Ue8m0CeilFromFloat(std::numeric_limits<float>::infinity()), 255);
  EXPECT_EQ(Ue8m0CeilFromFloat(-4.0f), 129);  // sign ignored
}

TEST(Ue8m0Test, DecodesAndRoundTrips) {
  EXPECT_EQ(Ue8m0ToFloat(127), 1.0f);
  EXPECT_EQ(Ue8m0ToFloat(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(Ue8m0ToFloat(1), std::ldexp(1.0f, -126));
  EXPECT_EQ(Ue8m0ToFloat(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(Ue8m0ToFloat(255)));
  for (int b = 1; b < 255; ++b) {
    const float v = Ue8m0ToFloat(static_cast<uint8_t>(b));
    EXPECT_EQ(v, std::ldexp(1.0f, b - 127));
    EXPECT_EQ(Ue8m0CeilFromFloat(v), b);
    EXPECT_EQ(Ue8m0CeilFromFloat(v * 1.5f), b + 1);
  }
}

// ---- E2M1 ----------------------------------------------------------------------------------

TEST(E2m1Test, DecodesAllCodes) {
  const float want[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(E2m1ToFloat(static_cast<uint8_t>(c)), want[c]);
    EXPECT_EQ(E2m1ToFloat(static_cast<uint8_t>(c | 8)), -want[c]);
  }
  EXPECT_TRUE(std::signbit(E2m1ToFloat(8)));
  EXPECT_EQ(E2m1ToFloat(0xF3), 1.5f);  // high bits ignored
}

TEST(E2m1Test, AllCodesRoundTrip) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(FloatToE2m1(E2m1ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E2m1Test, TiesGoToEvenCode) {
  // value -> expected value, from the model spec: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2,
  // 3.5->4, 5->4.
  EXPECT_EQ(FloatToE2m1(0.25f), 0);
  EXPECT_EQ(FloatToE2m1(0.75f), 2);
  EXPECT_EQ(FloatToE2m1(1.25f), 2);
  EXPECT_EQ(FloatToE2m1(1.75f), 4);
  EXPECT_EQ(FloatToE2m1(2.5f), 4);
  EXPECT_EQ(FloatToE2m1(3.5f), 6);
  EXPECT_EQ(FloatToE2m1(5.0f), 6);
  EXPECT_EQ(FloatToE2m1(-0.75f), 8 | 2);
  EXPECT_EQ(FloatToE2m1(-5.0f), 8 | 6);
  EXPECT_EQ(FloatToE2m1(std::nextafter(0.25f, 1.0f)), 1);
  EXPECT_EQ(FloatToE2m1(std::nextafter(5.0f, 6.0f)), 7);
}

TEST(E2m1Test, SignBitZeroAndClamp) {
  EXPECT_EQ(FloatToE2m1(0.0f), 0);
  EXPECT_EQ(FloatToE2m1(-0.0f), 8);
  EXPECT_EQ(FloatToE2m1(-0.1f), 8);
  EXPECT_EQ(FloatToE2m1(-0.25f), 8);
  EXPECT_EQ(FloatToE2m1(6.5f), 7);
  EXPECT_EQ(FloatToE2m1(-1e30f), 15);
  EXPECT_EQ(FloatToE2m1(std::numeric_limits<float>::infinity()), 7);
  EXPECT_EQ(FloatToE2m1(std::numeric_limits<float>::quiet_NaN()), 7);
  EXPECT_EQ(FloatToE2m1(-std::numeric_limits<float>::quiet_NaN()), 15);
}

TEST(E2m1Test, MatchesNearestEvenOracle) {
  auto decode = [](int c) { return static_cast<double>(E2m1ToFloat(static_cast<uint8_t>(c))); };
  for (uint32_t b = 0; b <= std::bit_cast<uint32_t>(7.0f); b += 1009) {
    const float x = F(b);
    ASSERT_EQ(FloatToE2m1(x), NearestEvenCode(std::fmin(x, 6.0f), 7, decode)) << x;
  }
}

TEST(E2m1Test, PacksEvenElementInLowNibble) {
  EXPECT_EQ(PackE2m1(0x1, 0x2), 0x21);
  EXPECT_EQ(PackE2m1(0xF, 0x8), 0x8F);
  EXPECT_EQ(PackE2m1(0x13, 0x24), 0x43);  // high bits of each code ignored
  EXPECT_EQ(UnpackE2m1Even(0x8F), 0xF);
  EXPECT_EQ(UnpackE2m1Odd(0x8F), 0x8);
}

}  // namespace
}  // namespace flashserve::formats
