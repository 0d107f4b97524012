// SamplingParams: how one request turns logits rows into tokens (the OpenAI / vLLM sampling
// fields), and their range checks. The gateway fills it from the API request; the sampler reads
// it. See README.md for the order in which the fields act on a logits row.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace flashserve::sampling {

// A vocabulary index; a logits row has one float per id.
using TokenId = int32_t;

// The most top-n alternatives a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxLogprobs = 20;

// Which distribution the reported logprobs describe.
enum class LogprobsMode {
  // log_softmax of the model's logits as they came in (OpenAI's and vLLM's default).
  kRaw,
  // log_softmax after penalties, temperature and the top-k / top-p / min-p filters (filtered
  // tokens have -inf): the distribution the token was actually drawn from. For greedy requests
  // the temperature and filters are skipped (penalties still apply).
  kProcessed,
};

struct SamplingParams {
  // 0 selects greedy decoding (argmax, lowest id on ties; the filters are ignored). Otherwise
  // logits are divided by it. Range [0, 2].
  float temperature = 1.0f;
  // Keep the top_k highest logits (plus any tied with the k-th). 0 = off. Range >= 0.
  int32_t top_k = 0;
  // Nucleus: keep the most likely tokens until their mass reaches top_p (the token that crosses
  // is kept, and any tied with it). 1 = off. Range (0, 1].
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p times the most likely token's. 0 = off.
  // Range [0, 1].
  float min_p = 0.0f;
  // OpenAI penalties over the tokens generated so far (not the prompt): each token's logit is
  // reduced by frequency_penalty * count + presence_penalty * (count > 0). Range [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Hugging Face / vLLM repetition penalty over prompt and generated tokens: a seen token's
  // positive logit is divided by it, a negative one multiplied. 1 = off. Range (0, 2].
  float repetition_penalty = 1.0f;
  // Same seed + same logits rows = same tokens, whatever else is in the batch. Without one the
  // sampler draws a seed from the OS (Sampler::seed() reports it).
  std::optional<uint64_t> seed;
  // A sampled token in this list finishes the request (SampleResult::finish == kStop); the
  // token itself is reported. Ids must be in [0, vocab_size) (checked by Sampler::Create).
  std::vector<TokenId> stop_token_ids;
  // nullopt: no logprobs are computed. n in [0, kMaxLogprobs]: the chosen token's logprob and
  // the n most likely alternatives (vLLM's `logprobs`; OpenAI's logprobs=true, top_logprobs=n).
  std::optional<int32_t> logprobs;
  LogprobsMode logprobs_mode = LogprobsMode::kRaw;
  // The token that makes the output this long has finish == kLength. nullopt = no limit.
  // Range >= 1.
  std::optional<int32_t> max_tokens;

  bool greedy() const { return temperature == 0.0f; }
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// OK, or InvalidArgumentError "sampling param '<field>': must be <range>, got <value>" for the
// first field out of range (NaN is out of every range). Token ids are checked against the
// vocabulary by Sampler::Create, which calls this. Pure; thread-safe.
absl::Status Validate(const SamplingParams& params);

}  // namespace flashserve::sampling
