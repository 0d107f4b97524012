#include "model/engram/hash_multipliers.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "model/engram/engram_fixture.h"
#include "model/engram/numpy_random.h"

namespace flashserve::model::engram {
namespace {

std::vector<int64_t> Flatten(const nlohmann::json& rows) {
  std::vector<int64_t> out;
  for (const auto& row : rows) {
    for (const auto& v : row) out.push_back(v.get<int64_t>());
  }
  return out;
}

TEST(HashMultipliersTest, TinyConfigMatchesGolden) {
  const ModelConfig config = testing::TinyConfig();
  auto multipliers = ComputeHashMultipliers(config.engram_layer_ids, config.engram_max_ngram_size,
                                            config.engram_compressed_vocab_size);
  ASSERT_TRUE(multipliers.ok()) << multipliers.status();
  EXPECT_EQ(*multipliers, Flatten(testing::GoldenEngram().at("multipliers")));
}

TEST(HashMultipliersTest, FullModelLayersMatchGolden) {
  const ModelConfig config = testing::FullConfig();
  ASSERT_EQ(config.engram_compressed_vocab_size, 99092);
  auto multipliers = ComputeHashMultipliers(config.engram_layer_ids, config.engram_max_ngram_size,
                                            config.engram_compressed_vocab_size);
  ASSERT_TRUE(multipliers.ok()) << multipliers.status();
  EXPECT_EQ(*multipliers,
            Flatten(testing::GoldenEngram().at("multipliers_full_model_layers_1_14_vocab_99092")));
}

TEST(HashMultipliersTest, MultipliersAreOddAndKeepProductsInRange) {
  const int64_t vocab = 99092;
  auto bound = HashMultiplierBound(vocab);
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ(*bound, (std::numeric_limits<int64_t>::max() / vocab) / 2);
  const std::vector<int> layers = {1, 14, 27};
  auto multipliers = ComputeHashMultipliers(layers, 4, vocab);
  ASSERT_TRUE(multipliers.ok());
  ASSERT_EQ(multipliers->size(), 12u);
  for (int64_t m : *multipliers) {
    EXPECT_EQ(m % 2, 1);
    EXPECT_LE(m, 2 * *bound - 1);
    EXPECT_LE(m, std::numeric_limits<int64_t>::max() / (vocab - 1));
  }
}

TEST(HashMultipliersTest, BadArgumentsAreErrors) {
  const std::vector<int> layers = {1};
  const std::vector<int> negative = {-1};
  EXPECT_FALSE(ComputeHashMultipliers(layers, 4, 0).ok());
  EXPECT_FALSE(ComputeHashMultipliers(layers, 0, 1443).ok());
  EXPECT_FALSE(ComputeHashMultipliers(negative, 4, 1443).ok());
  // A bound inside numpy's 32-bit path is refused rather than guessed.
  EXPECT_EQ(ComputeHashMultipliers(layers, 4, int64_t{1} << 40).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(NumpyRandomTest, IntegersEdgeCases) {
  Pcg64 rng = Pcg64::FromSeed(10007);
  const Pcg64 before = rng;
  auto one = NumpyIntegersInt64(rng, 5, 6);  // width 1: no draw
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, 5);
  EXPECT_EQ(rng.state(), before.state());
  EXPECT_FALSE(NumpyIntegersInt64(rng, 6, 6).ok());
  // Draws stay inside [low, high) for a range with a large rejection zone.
  const int64_t low = -(int64_t{1} << 62);
  const int64_t high = (int64_t{1} << 62) + 12345;
  for (int i = 0; i < 1000; ++i) {
    auto v = NumpyIntegersInt64(rng, low, high);
    ASSERT_TRUE(v.ok());
    ASSERT_GE(*v, low);
    ASSERT_LT(*v, high);
  }
}

TEST(NumpyRandomTest, SeedSequenceSplitsWideEntropy) {
  // Entropy above 2^32 uses two words; the pools must differ from the truncated seed's.
  EXPECT_NE(SeedSequence::FromEntropy(uint64_t{1} << 32).pool(),
            SeedSequence::FromEntropy(0).pool());
  EXPECT_EQ(SeedSequence::FromEntropy(7).GenerateState(8).size(), 8u);
}

}  // namespace
}  // namespace flashserve::model::engram
