#include "model/sampling/sampler.h"

#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "model/sampling/logits_processing.h"
#include "model/sampling/philox.h"

namespace flashserve::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

absl::Status CheckIds(std::string_view field, std::span<const TokenId> ids, int32_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling param '", ToAbsl(field), "': token ", ids[i], " at index ", i,
                       " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A seed for a request that gave none: the kernel's CSPRNG; if that is unavailable, the clock
// mixed with a process-wide counter, which still differs between requests.
uint64_t SeedFromOs() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof(seed), 0) == static_cast<ssize_t>(sizeof(seed))) return seed;
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return SplitMix64(static_cast<uint64_t>(now) ^ SplitMix64(counter.fetch_add(1)));
}

}  // namespace

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params, int32_t vocab_size,
                                        std::span<const TokenId> prompt_tokens,
                                        std::span<const TokenId> output_tokens) {
  RETURN_IF_ERROR(Validate(params));
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size: must be > 0, got ", vocab_size));
  }
  RETURN_IF_ERROR(CheckIds("stop_token_ids", params.stop_token_ids, vocab_size));
  RETURN_IF_ERROR(CheckIds("prompt_tokens", prompt_tokens, vocab_size));
  RETURN_IF_ERROR(CheckIds("output_tokens", output_tokens, vocab_size));
  Sampler sampler(params, vocab_size, params.seed.has_value() ? *params.seed : SeedFromOs());
  sampler.history_.AddPrompt(prompt_tokens);
  for (TokenId t : output_tokens) sampler.history_.AddOutput(t);
  return sampler;
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size, uint64_t seed)
    : params_(params),
      vocab_size_(vocab_size),
      seed_(seed),
      history_(vocab_size, params.has_penalties()),
      work_(vocab_size),
      keys_(vocab_size) {}

absl::StatusOr<Sampler::Row> Sampler::Process(std::span<const float> logits) {
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits: expected ", vocab_size_, " values (the vocabulary), got ", logits.size()));
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == kInf) {
      return absl::InvalidArgumentError(
          absl::StrCat("logits: token ", i, " is ", x, " (only finite values and -inf allowed)"));
    }
    work_[i] = x;
  }
  ApplyPenalties(params_, history_, work_);
  const float max_logit = *std::max_element(work_.begin(), work_.end());
  if (max_logit == -kInf) {
    return absl::InvalidArgumentError("logits: every token is masked (-inf)");
  }
  if (max_logit == kInf) {
    return absl::InvalidArgumentError("logits: a penalised logit overflowed to +inf");
  }
  Row row;
  row.max_logit = max_logit;
  if (params_.greedy()) {
    row.argmax = Argmax(work_);
    return row;
  }
  row.total = ToFilteredWeights(params_, work_, keys_).total;
  return row;
}

void Sampler::FillLogprobs(std::span<const float> logits, const Row& row, TokenId token,
                           SampleResult* result) const {
  if (!params_.logprobs.has_value()) return;
  const int32_t n = std::min(*params_.logprobs, vocab_size_);
  std::array<TokenId, kMaxLogprobs> top;
  double log_normaliser = 0.0;
  std::span<const float> ranked;  // the values whose order is the order of the logprobs
  if (params_.logprobs_mode == LogprobsMode::kRaw) {
    ranked = logits;
    log_normaliser = LogSumExp(logits);
  } else if (params_.greedy()) {
    ranked = work_;  // penalised logits
    log_normaliser = LogSumExp(work_);
  } else {
    ranked = work_;  // filtered weights
    log_normaliser = std::log(row.total);
  }
  const auto logprob = [&](TokenId id) -> float {
    if (params_.logprobs_mode == LogprobsMode::kRaw || params_.greedy()) {
      return static_cast<float>(ranked[id] - log_normaliser);
    }
    if (work_[id] <= 0.0f) return -kInf;
    // Recomputed from the logit rather than log(weight): exact for weights that underflowed
    // to denormals, and the same float arithmetic that produced the weight.
    const float penalised = history_.tracks_ids()
                                ? PenalizedLogit(params_, history_.entry(id), logits[id])
                                : logits[id];
    return static_cast<float>((penalised - row.max_logit) / params_.temperature - log_normaliser);
  };
  TopN(ranked, n, top.data());
  result->has_logprobs = true;
  result->logprob = logprob(token);
  result->num_top_logprobs = n;
  for (int32_t j = 0; j < n; ++j) result->top_logprobs_storage[j] = {top[j], logprob(top[j])};
}

void Sampler::Commit(TokenId token, SampleResult* result) {
  history_.AddOutput(token);
  result->token = token;
  if (std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
      params_.stop_token_ids.end()) {
    result->finish = FinishReason::kStop;
  } else if (params_.max_tokens.has_value() && history_.num_outputs() >= *params_.max_tokens) {
    result->finish = FinishReason::kLength;
  } else {
    result->finish = FinishReason::kNone;
  }
}

absl::StatusOr<SampleResult> Sampler::Sample(std::span<const float> logits) {
  ASSIGN_OR_RETURN(const Row row, Process(logits));
  const TokenId token =
      params_.greedy()
          ? row.argmax
          : SampleFromWeights(work_, row.total,
                              PhiloxUniform(seed_, history_.num_outputs(), RandomStream::kSample));
  SampleResult result;
  FillLogprobs(logits, row, token, &result);
  Commit(token, &result);
  return result;
}

absl::Status Sampler::ComputeProbabilities(std::span<const float> logits, std::span<float> probs) {
  if (probs.size() != static_cast<size_t>(vocab_size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("probs: expected ", vocab_size_, " values, got ", probs.size()));
  }
  ASSIGN_OR_RETURN(const Row row, Process(logits));
  if (params_.greedy()) {
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[row.argmax] = 1.0f;
    return absl::OkStatus();
  }
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = static_cast<float>(work_[i] / row.total);
  return absl::OkStatus();
}

absl::Status Sampler::AppendToken(TokenId token) {
  const TokenId ids[] = {token};
  RETURN_IF_ERROR(CheckIds("token", ids, vocab_size_));
  history_.AddOutput(token);
  return absl::OkStatus();
}

}  // namespace flashserve::sampling
