// Statistical tests of Sampler::Sample: draw tokens with a fixed seed and compare the counts
// with the double-precision reference distribution (sampling_test_util.h) by Pearson's
// chi-square at the 1e-6 level, plus an exact check that filtered tokens are never drawn. The
// design and its error rates are in README.md.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "model/sampling/sampler.h"
#include "model/sampling/sampling_test_util.h"

namespace flashserve::sampling {
namespace {

constexpr int kDraws = 20000;

// Logits whose softmax is proportional to `weights`.
std::vector<float> LogitsOf(const std::vector<double>& weights) {
  std::vector<float> logits;
  for (double w : weights) logits.push_back(static_cast<float>(std::log(w)));
  return logits;
}

// Samples kDraws tokens from one sampler (the history stays empty: no penalties here).
void ExpectDistribution(const SamplingParams& params, const std::vector<float>& logits) {
  SamplingParams p = params;
  p.seed = 20240601;
  absl::StatusOr<Sampler> sampler = Sampler::Create(p, static_cast<int32_t>(logits.size()), {});
  ASSERT_TRUE(sampler.ok());
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[sampler->Sample(logits)->token];
  const std::vector<double> probs = testing::ReferenceDistribution(p, logits);
  const testing::ChiSquareResult r = testing::ChiSquare(counts, probs);
  EXPECT_TRUE(r.pass()) << "chi2 " << r.statistic << " > " << r.critical << " (df "
                        << r.degrees_of_freedom << "), impossible draws " << r.impossible;
}

const std::vector<double> kShape = {0.22, 0.18, 0.15, 0.12, 0.1, 0.08, 0.06, 0.05, 0.04};

TEST(SamplerStatisticsTest, PlainSoftmax) {
  ExpectDistribution(SamplingParams(), LogitsOf(kShape));
}

TEST(SamplerStatisticsTest, Temperature) {
  SamplingParams p;
  p.temperature = 0.5f;
  ExpectDistribution(p, LogitsOf(kShape));
  p.temperature = 1.8f;
  ExpectDistribution(p, LogitsOf(kShape));
}

TEST(SamplerStatisticsTest, TopK) {
  SamplingParams p;
  p.top_k = 5;
  ExpectDistribution(p, LogitsOf(kShape));
}

TEST(SamplerStatisticsTest, TopP) {
  // Cumulative 0.22, 0.40, 0.55, 0.67, 0.77: top_p 0.6 keeps 4 tokens; one too few or too many
  // is caught both by the impossible-draw count and by the renormalised masses.
  SamplingParams p;
  p.top_p = 0.6f;
  ExpectDistribution(p, LogitsOf(kShape));
  p.top_p = 0.7f;
  p.temperature = 0.8f;
  ExpectDistribution(p, LogitsOf(kShape));
}

TEST(SamplerStatisticsTest, MinP) {
  SamplingParams p;
  p.min_p = 0.3f;  // threshold 0.066 of the top: drops the last three
  ExpectDistribution(p, LogitsOf(kShape));
}

TEST(SamplerStatisticsTest, AllFiltersTogether) {
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_k = 7;
  p.top_p = 0.8f;
  p.min_p = 0.35f;
  ExpectDistribution(p, LogitsOf(kShape));
}

TEST(SamplerStatisticsTest, PenalisedDistribution) {
  // The history is fixed (each draw is a fresh Sampler with its own seed) so that every draw
  // comes from the same penalised distribution.
  SamplingParams p;
  p.temperature = 0.9f;
  p.repetition_penalty = 1.6f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.3f;
  p.top_k = 6;
  const std::vector<float> logits = {1.0f, -0.5f, 0.8f, 0.2f, 1.2f, -1.0f, 0.0f, 0.5f};
  const std::vector<TokenId> prompt = {0, 1};
  const std::vector<TokenId> outputs = {4, 4, 2, 1};
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    p.seed = 1000 + i;
    absl::StatusOr<Sampler> s = Sampler::Create(p, 8, prompt, outputs);
    ASSERT_TRUE(s.ok());
    ++counts[s->Sample(logits)->token];
  }
  const testing::ChiSquareResult r =
      testing::ChiSquare(counts, testing::ReferenceDistribution(p, logits, prompt, outputs));
  EXPECT_TRUE(r.pass()) << "chi2 " << r.statistic << " > " << r.critical << ", impossible "
                        << r.impossible;
}

}  // namespace
}  // namespace flashserve::sampling
