#include "model/sampling/philox.h"

#include <cmath>

#include "gtest/gtest.h"

namespace flashserve::sampling {
namespace {

// Random123 tests/kat_vectors, the three "philox4x32 10" lines (counter, key -> output).
TEST(PhiloxTest, KnownAnswerVectors) {
  using Words = std::array<uint32_t, 4>;
  EXPECT_EQ(Philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      Philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      Philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, UniformIsInRangeAndRoughlyUniform) {
  constexpr int kDraws = 100000;
  double sum = 0.0;
  int buckets[10] = {};
  for (int i = 0; i < kDraws; ++i) {
    const double u = PhiloxUniform(7, i, RandomStream::kSample);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++buckets[static_cast<int>(u * 10)];
  }
  // Mean: sd = sqrt(1/12 / n) = 9.1e-4; 6 sd.
  EXPECT_NEAR(sum / kDraws, 0.5, 6 * 9.1e-4);
  for (int b : buckets) EXPECT_NEAR(b, kDraws / 10, 6 * 95);  // sd = sqrt(n p (1-p)) = 95
}

TEST(PhiloxTest, StreamsPositionsAndSeedsDiffer) {
  const double base = PhiloxUniform(1, 5, RandomStream::kSample);
  EXPECT_EQ(base, PhiloxUniform(1, 5, RandomStream::kSample));
  EXPECT_NE(base, PhiloxUniform(1, 5, RandomStream::kAccept));
  EXPECT_NE(base, PhiloxUniform(1, 5, RandomStream::kResidual));
  EXPECT_NE(base, PhiloxUniform(1, 6, RandomStream::kSample));
  EXPECT_NE(base, PhiloxUniform(2, 5, RandomStream::kSample));
  EXPECT_NE(base, PhiloxUniform(1ull << 32 | 1, 5, RandomStream::kSample));
  EXPECT_NE(base, PhiloxUniform(1, 5ull | 1ull << 32, RandomStream::kSample));
}

}  // namespace
}  // namespace flashserve::sampling
