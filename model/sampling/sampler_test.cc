#include "model/sampling/sampler.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "model/sampling/sampling_test_util.h"

namespace flashserve::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int32_t vocab, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = dist(rng);
  return logits;
}

Sampler MakeSampler(const SamplingParams& params, int32_t vocab, std::vector<TokenId> prompt = {}) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(params, vocab, prompt);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *std::move(sampler);
}

TEST(SamplerTest, GreedyTakesLowestIdOnTiesAndIgnoresFilters) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1;
  p.top_p = 0.01f;
  p.min_p = 1.0f;
  Sampler s = MakeSampler(p, 5);
  const std::vector<float> logits = {1.0f, 4.0f, -kInf, 4.0f, 3.0f};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<SampleResult> r = s.Sample(logits);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->token, 1);
    EXPECT_EQ(r->finish, FinishReason::kNone);
    EXPECT_FALSE(r->has_logprobs);
  }
  EXPECT_EQ(s.num_output_tokens(), 3);
}

TEST(SamplerTest, GreedyAppliesPenaltiesAsTheyAccumulate) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.frequency_penalty = 1.0f;
  Sampler s = MakeSampler(p, 3);
  const std::vector<float> logits = {3.0f, 1.5f, 2.5f};
  // Step 1: 3.0 vs 2.5 -> 0. Step 2: 2.0 vs 2.5 -> 2. Step 3: 2.0, 1.5, 1.5 -> 0.
  // Step 4: 1.0, 1.5, 1.5 -> 1 (tie 1 vs 2, lowest id).
  std::vector<TokenId> got;
  for (int i = 0; i < 4; ++i) got.push_back(s.Sample(logits)->token);
  EXPECT_EQ(got, (std::vector<TokenId>{0, 2, 0, 1}));
}

TEST(SamplerTest, RepetitionPenaltyCoversThePrompt) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  Sampler s = MakeSampler(p, 3, {0});
  // 4.0 / 2 = 2.0 < 3.0.
  EXPECT_EQ(s.Sample(std::vector<float>{4.0f, 3.0f, -1.0f})->token, 1);
}

TEST(SamplerTest, SameSeedSameTokensWhateverTheBatch) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.seed = 1234;
  const int32_t vocab = 1000;
  std::vector<std::vector<float>> rows;
  for (int t = 0; t < 50; ++t) rows.push_back(RandomLogits(vocab, 100 + t, 1.0f));

  // Batch A: alone. Batch B: interleaved with two other requests that draw in between.
  Sampler alone = MakeSampler(p, vocab);
  Sampler batched = MakeSampler(p, vocab);
  SamplingParams other_params = p;
  other_params.seed.reset();
  Sampler other1 = MakeSampler(other_params, vocab);
  Sampler other2 = MakeSampler(p, vocab);  // same seed, but one token ahead
  ASSERT_TRUE(other2.Sample(rows[0]).ok());
  std::vector<TokenId> a, b;
  for (const auto& row : rows) {
    a.push_back(alone.Sample(row)->token);
    ASSERT_TRUE(other1.Sample(row).ok());
    ASSERT_TRUE(other2.Sample(row).ok());
    b.push_back(batched.Sample(row)->token);
  }
  EXPECT_EQ(a, b);

  // A different seed gives a different sequence (50 draws from ~1000 plausible tokens).
  p.seed = 1235;
  Sampler reseeded = MakeSampler(p, vocab);
  std::vector<TokenId> c;
  for (const auto& row : rows) c.push_back(reseeded.Sample(row)->token);
  EXPECT_NE(a, c);

  // A resumed request (tokens so far handed to Create) continues the same sequence.
  p.seed = 1234;
  absl::StatusOr<Sampler> resumed =
      Sampler::Create(p, vocab, {}, std::vector<TokenId>(a.begin(), a.begin() + 20));
  ASSERT_TRUE(resumed.ok());
  for (size_t t = 20; t < rows.size(); ++t) EXPECT_EQ(resumed->Sample(rows[t])->token, a[t]);
}

TEST(SamplerTest, UnseededRequestsDrawDifferentSeeds) {
  SamplingParams p;
  Sampler a = MakeSampler(p, 10);
  Sampler b = MakeSampler(p, 10);
  EXPECT_NE(a.seed(), b.seed());
  p.seed = a.seed();
  Sampler replay = MakeSampler(p, 10);
  const std::vector<float> logits(10, 0.0f);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.Sample(logits)->token, replay.Sample(logits)->token);
}

TEST(SamplerTest, RawLogprobsMatchDoubleReference) {
  SamplingParams p;
  p.seed = 5;
  p.logprobs = 5;
  p.temperature = 0.7f;  // raw logprobs ignore it
  p.frequency_penalty = 1.0f;
  const int32_t vocab = 4000;
  Sampler s = MakeSampler(p, vocab);
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> logits = RandomLogits(vocab, step);
    const std::vector<double> ref =
        testing::ReferenceLogSoftmax(std::vector<double>(logits.begin(), logits.end()));
    absl::StatusOr<SampleResult> r = s.Sample(logits);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r->has_logprobs);
    EXPECT_NEAR(r->logprob, ref[r->token], 2e-5);
    ASSERT_EQ(r->top_logprobs().size(), 5u);
    std::vector<size_t> ids(vocab);
    for (int i = 0; i < vocab; ++i) ids[i] = i;
    std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(),
                      [&](size_t a, size_t b) { return ref[a] > ref[b]; });
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(r->top_logprobs()[j].token, static_cast<TokenId>(ids[j]));
      EXPECT_NEAR(r->top_logprobs()[j].logprob, ref[ids[j]], 2e-5);
    }
  }
}

TEST(SamplerTest, ProcessedLogprobsMatchDoubleReference) {
  SamplingParams p;
  p.seed = 6;
  p.logprobs = kMaxLogprobs;
  p.logprobs_mode = LogprobsMode::kProcessed;
  p.temperature = 0.7f;
  p.top_k = 12;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.5f;
  const int32_t vocab = 500;
  const std::vector<TokenId> prompt = {1, 2, 3};
  Sampler s = MakeSampler(p, vocab, prompt);
  std::vector<TokenId> outputs;
  for (int step = 0; step < 8; ++step) {
    std::vector<float> logits = RandomLogits(vocab, 50 + step, 1.0f);
    // Make the history matter: the earlier outputs and the prompt lead.
    for (TokenId t : prompt) logits[t] += 3.0f;
    for (TokenId t : outputs) logits[t] += 2.0f;
    const std::vector<double> probs = testing::ReferenceDistribution(p, logits, prompt, outputs);
    absl::StatusOr<SampleResult> r = s.Sample(logits);
    ASSERT_TRUE(r.ok());
    EXPECT_GT(probs[r->token], 0.0);
    EXPECT_NEAR(r->logprob, std::log(probs[r->token]), 2e-5);
    // 20 alternatives of which only 12 survive top-k: the rest are -inf.
    int finite = 0;
    for (const TokenLogprob& alt : r->top_logprobs()) {
      if (probs[alt.token] == 0.0) {
        EXPECT_EQ(alt.logprob, -kInf);
      } else {
        ++finite;
        EXPECT_NEAR(alt.logprob, std::log(probs[alt.token]), 2e-5);
      }
    }
    EXPECT_EQ(finite, 12);
    outputs.push_back(r->token);
  }
}

TEST(SamplerTest, GreedyProcessedLogprobsArePenalisedLogSoftmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 2;
  p.logprobs_mode = LogprobsMode::kProcessed;
  p.presence_penalty = 1.0f;
  Sampler s = MakeSampler(p, 3);
  ASSERT_EQ(s.Sample(std::vector<float>{2.0f, 1.5f, 0.0f})->token, 0);
  // Now token 0 is penalised to 1.0: log_softmax of {1.0, 1.5, 0.0}.
  absl::StatusOr<SampleResult> r = s.Sample(std::vector<float>{2.0f, 1.5f, 0.0f});
  const std::vector<double> ref = testing::ReferenceLogSoftmax({1.0, 1.5, 0.0});
  EXPECT_EQ(r->token, 1);
  EXPECT_NEAR(r->logprob, ref[1], 1e-6);
  EXPECT_EQ(r->top_logprobs()[1].token, 0);
  EXPECT_NEAR(r->top_logprobs()[1].logprob, ref[0], 1e-6);
}

TEST(SamplerTest, StopIdsAndMaxTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.stop_token_ids = {2};
  p.max_tokens = 3;
  Sampler s = MakeSampler(p, 4);
  EXPECT_EQ(s.Sample(std::vector<float>{0, 1, 0, 0})->finish, FinishReason::kNone);
  EXPECT_EQ(s.Sample(std::vector<float>{0, 0, 1, 0})->finish, FinishReason::kStop);
  EXPECT_EQ(s.Sample(std::vector<float>{0, 0, 0, 1})->finish, FinishReason::kLength);
}

TEST(SamplerTest, ComputeProbabilitiesMatchesReferenceOnFullVocabulary) {
  // The released vocabulary size, with top-p choosing a nucleus of hundreds of tokens.
  const int32_t vocab = 129280;
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.min_p = 0.001f;
  const std::vector<float> logits = RandomLogits(vocab, 9, 2.0f);
  Sampler s = MakeSampler(p, vocab);
  std::vector<float> probs(vocab);
  ASSERT_TRUE(s.ComputeProbabilities(logits, probs).ok());
  const std::vector<double> ref = testing::ReferenceDistribution(p, logits);
  double max_error = 0.0;
  int kept = 0;
  for (int i = 0; i < vocab; ++i) {
    ASSERT_EQ(probs[i] > 0.0f, ref[i] > 0.0) << i;
    max_error = std::max(max_error, std::abs(probs[i] - ref[i]));
    kept += ref[i] > 0.0;
  }
  EXPECT_LT(max_error, 1e-6);
  EXPECT_GT(kept, 100);
  EXPECT_EQ(s.num_output_tokens(), 0);  // nothing committed
}

TEST(SamplerTest, BadInputIsInvalidArgumentAndCommitsNothing) {
  SamplingParams p;
  p.seed = 1;
  Sampler s = MakeSampler(p, 4);
  const auto expect_error = [&](std::vector<float> logits, const char* needle) {
    absl::StatusOr<SampleResult> r = s.Sample(logits);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(r.status().message(), needle)) << r.status();
  };
  expect_error({0, 0, 0}, "logits: expected 4");
  expect_error({0, std::nanf(""), 0, 0}, "token 1");
  expect_error({0, 0, kInf, 0}, "token 2");
  expect_error({-kInf, -kInf, -kInf, -kInf}, "masked");
  EXPECT_EQ(s.num_output_tokens(), 0);
  EXPECT_EQ(s.AppendToken(4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.AppendToken(3).ok());
  EXPECT_EQ(s.num_output_tokens(), 1);
}

TEST(SamplerTest, CreateChecksIdsAgainstTheVocabulary) {
  SamplingParams p;
  p.stop_token_ids = {9};
  EXPECT_TRUE(absl::StrContains(Sampler::Create(p, 5, {}).status().message(), "stop_token_ids"));
  p.stop_token_ids = {};
  EXPECT_TRUE(absl::StrContains(
      Sampler::Create(p, 5, std::vector<TokenId>{0, 5}).status().message(), "prompt_tokens"));
  EXPECT_TRUE(absl::StrContains(
      Sampler::Create(p, 5, {}, std::vector<TokenId>{-1}).status().message(), "output_tokens"));
  EXPECT_TRUE(absl::StrContains(Sampler::Create(p, 0, {}).status().message(), "vocab_size"));
  p.top_p = 2.0f;
  EXPECT_TRUE(absl::StrContains(Sampler::Create(p, 5, {}).status().message(), "top_p"));
}

}  // namespace
}  // namespace flashserve::sampling
