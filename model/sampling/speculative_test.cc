// Sampler::Verify: greedy verification equals step-by-step greedy decoding; sampled
// verification reproduces the target distribution (chi-square over whole generated sequences
// of a Markov "model", with a deliberately different draft model and with penalties, so that
// the per-position history is exercised); errors roll back.
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "model/sampling/sampler.h"
#include "model/sampling/sampling_test_util.h"

namespace flashserve::sampling {
namespace {

// A toy target model over a small vocabulary: the next token's logits depend on the previous
// token only.
constexpr int32_t kVocab = 4;
const float kTargetLogits[kVocab][kVocab] = {
    {0.5f, 1.2f, -0.3f, 0.8f},
    {1.0f, -0.2f, 0.6f, 0.1f},
    {-0.4f, 0.9f, 0.3f, 1.1f},
    {0.7f, 0.0f, 1.0f, -0.6f},
};
// A draft model that disagrees with it a lot.
const double kDraftProbs[kVocab][kVocab] = {
    {0.05, 0.15, 0.6, 0.2},
    {0.1, 0.6, 0.1, 0.2},
    {0.5, 0.1, 0.3, 0.1},
    {0.2, 0.5, 0.05, 0.25},
};
constexpr TokenId kPrompt = 0;
constexpr int kLength = 3;  // tokens generated per trial: kVocab^3 = 64 joint outcomes
constexpr int kTrials = 30000;

std::vector<float> TargetRow(TokenId prev) {
  return std::vector<float>(kTargetLogits[prev], kTargetLogits[prev] + kVocab);
}

// Exact probability of each length-3 continuation of the prompt under `params`.
std::vector<double> ExactJoint(const SamplingParams& params) {
  std::vector<double> joint(kVocab * kVocab * kVocab, 0.0);
  const std::vector<TokenId> prompt = {kPrompt};
  const std::vector<double> p1 = testing::ReferenceDistribution(params, TargetRow(kPrompt), prompt);
  for (TokenId a = 0; a < kVocab; ++a) {
    const std::vector<double> p2 =
        testing::ReferenceDistribution(params, TargetRow(a), prompt, {a});
    for (TokenId b = 0; b < kVocab; ++b) {
      const std::vector<double> p3 =
          testing::ReferenceDistribution(params, TargetRow(b), prompt, {a, b});
      for (TokenId c = 0; c < kVocab; ++c)
        joint[(a * kVocab + b) * kVocab + c] = p1[a] * p2[b] * p3[c];
    }
  }
  return joint;
}

enum class DraftKind { kSampled, kGreedyOneHot };

// Generates kTrials sequences of kLength tokens by speculative decoding with `k` drafts per
// step and returns the counts of each joint outcome.
std::vector<int64_t> SpeculativeJointCounts(SamplingParams params, DraftKind kind, int k) {
  std::mt19937_64 draft_rng(77);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int64_t> counts(kVocab * kVocab * kVocab, 0);
  std::vector<TokenId> drafts;
  std::vector<float> q_rows, target_rows;
  std::vector<SampleResult> out(k + 1);
  for (int trial = 0; trial < kTrials; ++trial) {
    params.seed = 5000 + trial;
    absl::StatusOr<Sampler> sampler =
        Sampler::Create(params, kVocab, std::vector<TokenId>{kPrompt});
    EXPECT_TRUE(sampler.ok());
    std::vector<TokenId> generated;
    while (static_cast<int>(generated.size()) < kLength) {
      drafts.clear();
      q_rows.clear();
      TokenId prev = generated.empty() ? kPrompt : generated.back();
      target_rows = TargetRow(prev);
      for (int i = 0; i < k; ++i) {
        const double* q = kDraftProbs[prev];
        TokenId d = 0;
        if (kind == DraftKind::kGreedyOneHot) {
          d = static_cast<TokenId>(std::max_element(q, q + kVocab) - q);
        } else {
          double u = uniform(draft_rng), running = 0.0;
          for (d = 0; d < kVocab - 1; ++d) {
            running += q[d];
            if (u < running) break;
          }
          q_rows.insert(q_rows.end(), q, q + kVocab);
        }
        drafts.push_back(d);
        const std::vector<float> row = TargetRow(d);
        target_rows.insert(target_rows.end(), row.begin(), row.end());
        prev = d;
      }
      absl::StatusOr<int32_t> n = sampler->Verify(drafts, q_rows, target_rows, out);
      EXPECT_TRUE(n.ok()) << n.status();
      for (int j = 0; j < *n; ++j) generated.push_back(out[j].token);
    }
    ++counts[(generated[0] * kVocab + generated[1]) * kVocab + generated[2]];
  }
  return counts;
}

void ExpectTargetDistribution(const SamplingParams& params, DraftKind kind, int k) {
  const testing::ChiSquareResult r =
      testing::ChiSquare(SpeculativeJointCounts(params, kind, k), ExactJoint(params));
  EXPECT_TRUE(r.pass()) << "chi2 " << r.statistic << " > " << r.critical << " (df "
                        << r.degrees_of_freedom << "), impossible draws " << r.impossible;
}

TEST(SpeculativeTest, SampledDraftsReproduceTheTarget) {
  SamplingParams p;
  p.temperature = 0.8f;
  ExpectTargetDistribution(p, DraftKind::kSampled, 2);
}

TEST(SpeculativeTest, SampledDraftsWithPenaltiesAndFilters) {
  // Penalties make each row depend on the tokens emitted before it within the same Verify call.
  SamplingParams p;
  p.temperature = 1.2f;
  p.top_k = 3;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 0.6f;
  p.presence_penalty = 0.3f;
  ExpectTargetDistribution(p, DraftKind::kSampled, 3);
}

TEST(SpeculativeTest, GreedyDrafterWithSampledTarget) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.frequency_penalty = 0.8f;
  ExpectTargetDistribution(p, DraftKind::kGreedyOneHot, 2);
}

TEST(SpeculativeTest, DraftsFromTheTargetItselfAreAlwaysAccepted) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.seed = 3;
  constexpr int32_t kV = 50;
  constexpr int kK = 4;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  absl::StatusOr<Sampler> target = Sampler::Create(p, kV, {});
  absl::StatusOr<Sampler> drafter = Sampler::Create(p, kV, {});
  ASSERT_TRUE(target.ok() && drafter.ok());
  std::vector<SampleResult> out(kK + 1);
  int64_t accepted = 0;
  for (int step = 0; step < 200; ++step) {
    std::vector<float> rows((kK + 1) * kV), q(kK * kV);
    for (float& x : rows) x = normal(rng);
    std::vector<TokenId> drafts;
    for (int i = 0; i < kK; ++i) {
      std::span<float> qi(q.data() + i * kV, kV);
      ASSERT_TRUE(drafter->ComputeProbabilities({rows.data() + i * kV, kV}, qi).ok());
      std::discrete_distribution<int> pick(qi.begin(), qi.end());
      drafts.push_back(pick(rng));
    }
    absl::StatusOr<int32_t> n = target->Verify(drafts, q, rows, out);
    ASSERT_TRUE(n.ok()) << n.status();
    accepted += *n - 1;
  }
  EXPECT_EQ(accepted, 200 * kK);
}

// A deterministic toy target over 50 tokens: logits seeded by the whole context.
std::vector<float> ContextRow(const std::vector<TokenId>& context) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId t : context) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  std::mt19937_64 rng(h);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> row(50);
  for (float& x : row) x = normal(rng);
  // Favour recent tokens so that the penalties change the argmax.
  for (size_t i = context.size() > 3 ? context.size() - 3 : 0; i < context.size(); ++i) {
    row[context[i]] += 2.0f;
  }
  return row;
}

TEST(SpeculativeTest, GreedyVerificationEqualsStepByStepGreedy) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.4f;
  p.frequency_penalty = 0.5f;
  p.logprobs = 3;
  p.stop_token_ids = {7};
  p.max_tokens = 60;
  const std::vector<TokenId> prompt = {1, 2, 3};

  // Step by step.
  absl::StatusOr<Sampler> stepper = Sampler::Create(p, 50, prompt);
  ASSERT_TRUE(stepper.ok());
  std::vector<TokenId> context = prompt;
  std::vector<SampleResult> expected;
  while (expected.empty() || expected.back().finish == FinishReason::kNone) {
    absl::StatusOr<SampleResult> r = stepper->Sample(ContextRow(context));
    ASSERT_TRUE(r.ok());
    expected.push_back(*r);
    context.push_back(r->token);
  }
  ASSERT_GT(expected.size(), 10u);

  // Speculative: drafts are right about 70% of the time.
  for (int trial = 0; trial < 20; ++trial) {
    std::mt19937_64 rng(trial);
    absl::StatusOr<Sampler> verifier = Sampler::Create(p, 50, prompt);
    ASSERT_TRUE(verifier.ok());
    context = prompt;
    std::vector<SampleResult> got;
    int64_t accepted = 0;
    while (got.empty() || got.back().finish == FinishReason::kNone) {
      ASSERT_LT(got.size(), expected.size()) << "trial " << trial << " runs past the stop";
      const int k = 1 + static_cast<int>(rng() % 4);
      std::vector<TokenId> drafts;
      std::vector<float> rows = ContextRow(context);
      std::vector<TokenId> draft_context = context;
      for (int i = 0; i < k; ++i) {
        const size_t pos = got.size() + drafts.size();
        const TokenId d = (rng() % 10 < 7 && pos < expected.size())
                              ? expected[pos].token
                              : static_cast<TokenId>(rng() % 50);
        drafts.push_back(d);
        draft_context.push_back(d);
        const std::vector<float> row = ContextRow(draft_context);
        rows.insert(rows.end(), row.begin(), row.end());
      }
      std::vector<SampleResult> out(k + 1);
      absl::StatusOr<int32_t> n = verifier->Verify(drafts, {}, rows, out);
      ASSERT_TRUE(n.ok()) << n.status();
      for (int j = 0; j < *n; ++j) {
        got.push_back(out[j]);
        context.push_back(out[j].token);
      }
      accepted += *n - 1;
    }
    ASSERT_EQ(got.size(), expected.size()) << "trial " << trial;
    for (size_t t = 0; t < got.size(); ++t) {
      EXPECT_EQ(got[t].token, expected[t].token) << t;
      EXPECT_EQ(got[t].finish, expected[t].finish) << t;
      EXPECT_EQ(got[t].logprob, expected[t].logprob) << t;
      ASSERT_EQ(got[t].top_logprobs().size(), 3u);
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(got[t].top_logprobs()[j].token, expected[t].top_logprobs()[j].token);
        EXPECT_EQ(got[t].top_logprobs()[j].logprob, expected[t].top_logprobs()[j].logprob);
      }
    }
    EXPECT_GT(accepted, 0);
  }
}

TEST(SpeculativeTest, StopsAtAFinishingToken) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.stop_token_ids = {2};
  absl::StatusOr<Sampler> s = Sampler::Create(p, 3, {});
  ASSERT_TRUE(s.ok());
  // Rows prefer 1, 2, 0, 0: drafts 1, 2, 0 all match, but 2 stops the request.
  const std::vector<float> rows = {0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0};
  std::vector<SampleResult> out(4);
  absl::StatusOr<int32_t> n = s->Verify(std::vector<TokenId>{1, 2, 0}, {}, rows, out);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(out[1].token, 2);
  EXPECT_EQ(out[1].finish, FinishReason::kStop);
  EXPECT_EQ(s->num_output_tokens(), 2);
}

TEST(SpeculativeTest, ErrorsLeaveTheSamplerUnchanged) {
  SamplingParams p;
  p.seed = 9;
  p.frequency_penalty = 1.0f;
  absl::StatusOr<Sampler> s = Sampler::Create(p, 3, {});
  ASSERT_TRUE(s.ok());
  std::vector<SampleResult> out(3);
  const std::vector<float> rows = {-20, 20, -20, 0, 0, 0, 0, 0, 0};
  const auto message = [&](std::vector<TokenId> drafts, std::vector<float> q,
                           std::vector<float> target, size_t out_size) {
    absl::StatusOr<int32_t> n =
        s->Verify(drafts, q, target, std::span<SampleResult>(out.data(), out_size));
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(n.status().message());
  };
  EXPECT_TRUE(absl::StrContains(message({1, 2}, {}, {0, 0, 0}, 3), "target_logits"));
  EXPECT_TRUE(absl::StrContains(message({1, 2}, {1, 0}, rows, 3), "draft_probs"));
  EXPECT_TRUE(absl::StrContains(message({1, 2}, {}, rows, 2), "out"));
  EXPECT_TRUE(absl::StrContains(message({1, 3}, {}, rows, 3), "draft_tokens"));
  // Row 0 surely accepts draft 1 and commits it; row 1's q gives draft 2 probability 0: the
  // error must undo the commit.
  EXPECT_TRUE(absl::StrContains(message({1, 2}, {0, 1, 0, 1, 0, 0}, rows, 3), "draft token 2"));
  EXPECT_TRUE(absl::StrContains(message({1, 2}, {0, 1, 0, -1, 1, 1}, rows, 3), "draft_probs"));
  std::vector<float> nan_rows = rows;
  nan_rows[4] = std::nanf("");
  EXPECT_TRUE(absl::StrContains(message({1, 2}, {}, nan_rows, 3), "row 1"));
  EXPECT_EQ(s->num_output_tokens(), 0);
  // Token 1 carries no frequency penalty: the distribution equals a fresh sampler's.
  absl::StatusOr<Sampler> fresh = Sampler::Create(p, 3, {});
  std::vector<float> a(3), b(3);
  const std::vector<float> flat = {0, 0, 0};
  ASSERT_TRUE(s->ComputeProbabilities(flat, a).ok());
  ASSERT_TRUE(fresh->ComputeProbabilities(flat, b).ok());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace flashserve::sampling
