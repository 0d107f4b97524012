#include "model/sampling/logits_processing.h"

#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/sampling/sampling_test_util.h"

namespace flashserve::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits whose softmax is `probs` (up to float rounding).
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Ids with weight > 0 after ToFilteredWeights.
std::vector<TokenId> Kept(const SamplingParams& params, std::vector<float> logits) {
  std::vector<uint64_t> scratch(logits.size());
  const FilteredWeights f = ToFilteredWeights(params, logits, scratch);
  std::vector<TokenId> kept;
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > 0.0f) kept.push_back(static_cast<TokenId>(i));
    total += logits[i];
  }
  EXPECT_EQ(f.num_kept, static_cast<int32_t>(kept.size()));
  EXPECT_DOUBLE_EQ(f.total, total);
  return kept;
}

TEST(PenaltiesTest, ExactEffectOnLogits) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  TokenHistory history(5, /*track_ids=*/true);
  const TokenId prompt[] = {0, 4};
  history.AddPrompt(prompt);
  history.AddOutput(1);
  history.AddOutput(1);
  history.AddOutput(2);
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, -1.0f};
  ApplyPenalties(p, history, logits);
  // 0: prompt only: 2 / 2. 1: -2 * 2 - 0.5 * 2 - 0.25. 2: 1 / 2 - 0.5 - 0.25. 3: unseen.
  // 4: prompt only, negative: -1 * 2 (presence / frequency ignore the prompt).
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -5.25f, -0.25f, 0.5f, -2.0f}));
  EXPECT_EQ(history.output_count(1), 2);
  EXPECT_TRUE(history.in_prompt(4));
  EXPECT_FALSE(history.in_prompt(1));
}

TEST(PenaltiesTest, NegativePenaltiesRewardAndHistoryRollsBack) {
  SamplingParams p;
  p.frequency_penalty = -1.0f;
  p.presence_penalty = -0.5f;
  TokenHistory history(3, true);
  history.AddOutput(2);
  history.AddOutput(2);
  history.AddOutput(0);
  history.RemoveOutput(0);
  std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  ApplyPenalties(p, history, logits);
  EXPECT_EQ(logits, (std::vector<float>{0.0f, 0.0f, 2.5f}));
  EXPECT_EQ(history.num_outputs(), 2);
}

TEST(PenaltiesTest, UntrackedHistoryIsANoOp) {
  TokenHistory history(3, false);
  history.AddOutput(1);
  SamplingParams p;
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  ApplyPenalties(p, history, logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(history.num_outputs(), 1);
}

TEST(ArgmaxTest, LowestIdOnTies) {
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{-kInf, -5, -5}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{-kInf, -kInf}), -1);
}

TEST(FilterTest, TemperatureWeights) {
  SamplingParams p;
  p.temperature = 0.5f;
  std::vector<float> w = {1.0f, 3.0f, -kInf, 2.0f};
  std::vector<uint64_t> order(4);
  const FilteredWeights f = ToFilteredWeights(p, w, order);
  EXPECT_FLOAT_EQ(w[0], std::exp(-4.0f));
  EXPECT_EQ(w[1], 1.0f);
  EXPECT_EQ(w[2], 0.0f);
  EXPECT_FLOAT_EQ(w[3], std::exp(-2.0f));
  EXPECT_EQ(f.num_kept, 3);
  EXPECT_NEAR(f.total, 1.0 + std::exp(-4.0) + std::exp(-2.0), 1e-6);
}

TEST(FilterTest, TinyTemperatureIsArgmaxWithoutNaN) {
  SamplingParams p;
  p.temperature = 1e-30f;
  std::vector<float> w = {1.0f, 3.0f, 2.9999998f};
  std::vector<uint64_t> order(3);
  ToFilteredWeights(p, w, order);
  EXPECT_EQ(w, (std::vector<float>{0.0f, 1.0f, 0.0f}));
}

TEST(FilterTest, TopKKeepsTiesAtTheBoundary) {
  SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(Kept(p, {1, 3, 2, 3, 0}), (std::vector<TokenId>{1, 3}));
  p.top_k = 3;
  EXPECT_EQ(Kept(p, {1, 3, 2, 3, 0}), (std::vector<TokenId>{1, 2, 3}));
  p.top_k = 2;
  EXPECT_EQ(Kept(p, {5, 4, 1, 4}), (std::vector<TokenId>{0, 1, 3}));
  p.top_k = 1;
  EXPECT_EQ(Kept(p, {0, 7, -kInf, 2}), (std::vector<TokenId>{1}));
  p.top_k = 10;  // more than the vocabulary: off
  EXPECT_EQ(Kept(p, {0, 7, -kInf, 2}), (std::vector<TokenId>{0, 1, 3}));
}

TEST(FilterTest, TopPKeepsTheTokenThatCrosses) {
  const std::vector<float> logits = LogitsOf({0.1, 0.4, 0.2, 0.3});
  SamplingParams p;
  p.top_p = 0.39f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1}));
  p.top_p = 0.41f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1, 3}));
  p.top_p = 0.69f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1, 3}));
  p.top_p = 0.71f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1, 2, 3}));
  p.top_p = 0.95f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{0, 1, 2, 3}));
  // A tie with the crossing token stays.
  p.top_p = 0.5f;
  EXPECT_EQ(Kept(p, LogitsOf({0.3, 0.3, 0.3, 0.1})), (std::vector<TokenId>{0, 1, 2}));
}

TEST(FilterTest, TopPActsOnTheTopKSurvivors) {
  const std::vector<float> logits = LogitsOf({0.1, 0.4, 0.2, 0.3});
  SamplingParams p;
  p.top_p = 0.5f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1, 3}));
  p.top_k = 2;  // renormalised: 4/7 >= 0.5 alone
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1}));
}

TEST(FilterTest, MinPComparesWithTheTopToken) {
  const std::vector<float> logits = LogitsOf({0.1, 0.4, 0.2, 0.3});
  SamplingParams p;
  p.min_p = 0.6f;  // threshold 0.24
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1, 3}));
  p.min_p = 0.2f;  // threshold 0.08
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{0, 1, 2, 3}));
  p.min_p = 1.0f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1}));
  // Applied after top-p: top-p keeps {1, 3, 2}, min-p 0.6 then drops 2.
  p.min_p = 0.6f;
  p.top_p = 0.8f;
  EXPECT_EQ(Kept(p, logits), (std::vector<TokenId>{1, 3}));
}

TEST(FilterTest, LargeNucleusMatchesReference) {
  // ~10k nearly uniform logits: the nucleus is thousands of tokens, so the sorted prefix grows
  // several times (64, 256, 1024, 4096, ...).
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  std::vector<float> logits(10000);
  for (float& x : logits) x = dist(rng);
  for (const auto& [top_k, top_p] : {std::pair{0, 0.05f}, std::pair{0, 0.5f}, std::pair{0, 0.9f},
                                     std::pair{300, 1.0f}, std::pair{3000, 0.7f}}) {
    SamplingParams p;
    p.top_k = top_k;
    p.top_p = top_p;
    p.temperature = 0.8f;
    const std::vector<double> ref = testing::ReferenceDistribution(p, logits);
    std::vector<TokenId> expected;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (ref[i] > 0) expected.push_back(static_cast<TokenId>(i));
    }
    EXPECT_EQ(Kept(p, logits), expected) << top_k << " " << top_p;
  }
}

TEST(SampleFromWeightsTest, InverseCdf) {
  const std::vector<float> w = {0.0f, 1.0f, 0.0f, 3.0f};
  EXPECT_EQ(SampleFromWeights(w, 4.0, 0.0), 1);
  EXPECT_EQ(SampleFromWeights(w, 4.0, 0.2499), 1);
  EXPECT_EQ(SampleFromWeights(w, 4.0, 0.25), 3);
  EXPECT_EQ(SampleFromWeights(w, 4.0, 0.9999999), 3);
  // A total slightly above the true sum (rounding) falls back to the last positive weight.
  EXPECT_EQ(SampleFromWeights(w, 4.0000001, 0.99999999), 3);
}

TEST(LogSumExpTest, MatchesDouble) {
  const std::vector<float> x = {-1000.0f, 3.5f, 2.25f, -kInf, 0.0f};
  const double expected =
      3.5 + std::log(std::exp(-1003.5) + 1.0 + std::exp(-1.25) + std::exp(-3.5));
  EXPECT_NEAR(LogSumExp(x), expected, 1e-6);  // float exp per term
  EXPECT_EQ(LogSumExp(std::vector<float>{-kInf, -kInf}), -std::numeric_limits<double>::infinity());
}

TEST(TopNTest, OrderAndTies) {
  const std::vector<float> x = {1, 5, 3, 5, -kInf, 3, 4};
  TokenId out[7];
  TopN(x, 4, out);
  EXPECT_EQ(std::vector<TokenId>(out, out + 4), (std::vector<TokenId>{1, 3, 6, 2}));
  TopN(x, 7, out);
  EXPECT_EQ(std::vector<TokenId>(out, out + 7), (std::vector<TokenId>{1, 3, 6, 2, 5, 0, 4}));
}

}  // namespace
}  // namespace flashserve::sampling
