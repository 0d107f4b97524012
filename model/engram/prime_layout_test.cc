#include "model/engram/prime_layout.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "model/engram/engram_fixture.h"

namespace flashserve::model::engram {
namespace {

bool IsPrimeByTrialDivision(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

TEST(IsPrimeTest, MatchesTrialDivisionBelow100000) {
  for (uint64_t n = 0; n < 100000; ++n) ASSERT_EQ(IsPrime(n), IsPrimeByTrialDivision(n)) << n;
}

TEST(IsPrimeTest, LargeValuesAndStrongPseudoprimes) {
  EXPECT_TRUE(IsPrime((uint64_t{1} << 61) - 1));                // Mersenne prime
  EXPECT_TRUE(IsPrime(18446744073709551557ULL));                // largest 64-bit prime
  EXPECT_FALSE(IsPrime(18446744073709551615ULL));               // 2^64 - 1
  EXPECT_FALSE(IsPrime(3215031751ULL));                         // strong pseudoprime to 2, 3, 5, 7
  EXPECT_FALSE(IsPrime(3825123056546413051ULL));                // strong pseudoprime to bases 2..23
  EXPECT_FALSE(IsPrime(561));                                   // Carmichael number
  EXPECT_FALSE(IsPrime(uint64_t{4294967291} * 4294967279ULL));  // product of two 32-bit primes
}

TEST(EngramLayoutTest, TinyConfigMatchesGolden) {
  auto layout = BuildEngramLayout(testing::TinyConfig());
  ASSERT_TRUE(layout.ok()) << layout.status();
  const EngramLayout golden = testing::GoldenLayout();
  EXPECT_EQ(layout->layer_ids, (std::vector<int>{1, 3}));
  EXPECT_EQ(layout->num_columns(), 12);
  EXPECT_EQ(layout->primes, golden.primes);
  EXPECT_EQ(layout->offsets, golden.offsets);
  EXPECT_EQ(layout->table_rows, golden.table_rows);
  EXPECT_EQ(layout->table_rows, (std::vector<int64_t>{12458, 13416}));
  EXPECT_EQ(layout->Prime(1, 0), 1087);
  EXPECT_EQ(layout->Offset(1, 11), 12253);
}

TEST(EngramLayoutTest, FullModelTableRows) {
  const ModelConfig config = testing::FullConfig();
  auto layout = BuildEngramLayout(config);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(layout->num_columns(), 24);
  EXPECT_EQ(layout->table_rows, (std::vector<int64_t>{384006168, 384016682}));
  // Every modulus is a distinct prime above the vocab size, ascending within each (layer, n).
  std::vector<int64_t> seen;
  for (int layer = 0; layer < 2; ++layer) {
    int64_t expected_offset = 0;
    for (int col = 0; col < 24; ++col) {
      const int64_t p = layout->Prime(layer, col);
      EXPECT_GT(p, config.engram_vocab_size - 1);
      EXPECT_TRUE(IsPrime(static_cast<uint64_t>(p)));
      if (col % 8 != 0) {
        EXPECT_GT(p, layout->Prime(layer, col - 1));
      }
      for (int64_t q : seen) EXPECT_NE(p, q);
      seen.push_back(p);
      EXPECT_EQ(layout->Offset(layer, col), expected_offset);
      expected_offset += p;
    }
  }
}

TEST(EngramLayoutTest, RowMismatchIsAnError) {
  ModelConfig config = testing::TinyConfig();
  config.engram_num_embeddings[1] += 1;
  auto layout = BuildEngramLayout(config);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("13416"), absl::string_view::npos) << layout.status();

  config = testing::TinyConfig();
  config.engram_num_embeddings.pop_back();
  EXPECT_FALSE(BuildEngramLayout(config).ok());
}

TEST(EngramLayoutTest, BadParametersAreErrors) {
  const std::vector<int> layers = {1};
  EXPECT_FALSE(BuildEngramLayout({}, 4, 4, 1000).ok());
  EXPECT_FALSE(BuildEngramLayout(layers, 1, 4, 1000).ok());
  EXPECT_FALSE(BuildEngramLayout(layers, 4, 0, 1000).ok());
  EXPECT_FALSE(BuildEngramLayout(layers, 4, 4, 0).ok());
}

}  // namespace
}  // namespace flashserve::model::engram
