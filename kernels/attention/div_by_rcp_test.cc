// DivByRcp (div_by_rcp.h): the correctly rounded a / b from one reciprocal, bit for bit against
// the IEEE division, over random operands in and out of its range, the attention denominators'
// range, exact quotients and the special values. The host runs the same IEEE operations as the
// device's inline PTX (mul.rn, fma.rn, rcp.rn = RN(1/b)).
#include "kernels/attention/div_by_rcp.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace flashserve::kernels::attention_internal {
namespace {

// A random float with a uniform exponent in [lo, hi], a random mantissa and sign.
float RandomFloat(std::mt19937_64& rng, int lo, int hi, bool negative_too = true) {
  std::uniform_int_distribution<int> exp(lo, hi);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  const float m = 1.0f + static_cast<float>(mant(rng)) * 0x1p-23f;
  const float v = std::ldexp(m, exp(rng));
  return negative_too && (rng() & 1) ? -v : v;
}

bool SameBits(float x, float y) {
  if (std::isnan(x) && std::isnan(y)) return true;
  return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
}

int64_t Mismatches(float a, float b, int64_t& naive_mismatches) {
  const float y = RcpRn(b);
  naive_mismatches += SameBits(a * y, a / b) ? 0 : 1;
  return SameBits(DivByRcp(a, b, y), a / b) ? 0 : 1;
}

TEST(DivByRcpTest, EqualsTheDivisionOverTheWholeRange) {
  std::mt19937_64 rng(7);
  int64_t bad = 0, naive = 0;
  for (int i = 0; i < 4'000'000; ++i) {
    bad += Mismatches(RandomFloat(rng, -60, 59), RandomFloat(rng, -60, 59), naive);
  }
  EXPECT_EQ(bad, 0);
  // The test has teeth: a·RN(1/b) alone is off by an ulp on a good share of these pairs.
  EXPECT_GT(naive, 100'000);
}

TEST(DivByRcpTest, EqualsTheDivisionOnAttentionDenominators) {
  // The epilogues divide accumulators by denom + exp(sink − m) in [1, entries + 1] and the
  // combine by sums of such terms: b in [1, 2^12), a of any magnitude the values reach.
  std::mt19937_64 rng(11);
  int64_t bad = 0, naive = 0;
  for (int i = 0; i < 200; ++i) {
    const float b = RandomFloat(rng, 0, 11, false);
    for (int j = 0; j < 10'000; ++j) bad += Mismatches(RandomFloat(rng, -40, 20), b, naive);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(naive, 0);
}

TEST(DivByRcpTest, ExactQuotientsStayExact) {
  std::mt19937_64 rng(13);
  int64_t bad = 0, naive = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    // q and b with 12-bit mantissas: q·b is exact in fp32, so a / b = q exactly.
    const float q =
        std::ldexp(static_cast<float>(rng() % 4096 + 1), static_cast<int>(rng() % 40) - 30);
    const float b =
        std::ldexp(static_cast<float>(rng() % 4096 + 1), static_cast<int>(rng() % 20) - 10);
    const float a = q * b;
    bad += Mismatches(a, b, naive);
    EXPECT_EQ(DivByRcp(a, b, RcpRn(b)), q) << a << " / " << b;
    if (bad > 0) break;
  }
  EXPECT_EQ(bad, 0);
}

TEST(DivByRcpTest, SpecialValuesTakeTheDivision) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  const float as[] = {0.0f, -0.0f, tiny, -tiny, 0x1p-61f, -0x1p-100f, 0x1p61f, 0x1p127f,
                      inf,  -inf,  nan,  1.0f,  -3.0f,    0x1p-60f,   0x1p60f, -0x1p60f};
  const float bs[] = {1.0f, 3.0f, 641.0f, 0x1p-60f, 0x1p60f, 0x1p-61f, 0x1p61f, tiny, 0.0f, inf};
  for (float a : as) {
    for (float b : bs) {
      EXPECT_TRUE(SameBits(DivByRcp(a, b, RcpRn(b)), a / b)) << a << " / " << b;
    }
  }
  // The sign of a zero quotient is kept (the sequence alone would give +0 for -0 / b).
  EXPECT_TRUE(std::signbit(DivByRcp(-0.0f, 5.0f, RcpRn(5.0f))));
}

}  // namespace
}  // namespace flashserve::kernels::attention_internal
