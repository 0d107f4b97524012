// Sampler: turns a request's fp32 logits rows into tokens — plain decoding (Sample) and
// speculative verification (Verify) — with penalties, temperature, top-k / top-p / min-p,
// seeded reproducibility, stop ids and logprobs. One Sampler per request; it owns the request's
// token history and a scratch row sized to the vocabulary at creation, so a call allocates
// nothing. The order of operations and the numerics are in README.md.
//
// Threading: a Sampler is used by one thread at a time (the engine thread); different Samplers
// are independent. Reproducibility: the random number for output position t is
// PhiloxUniform(seed, t, stream), so the same seed and the same logits rows give the same tokens
// whatever the batch holds (given the same speculation pattern — verification consumes its own
// streams, see Verify).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/sampling/sampling_params.h"
#include "model/sampling/token_history.h"

namespace flashserve::sampling {

struct TokenLogprob {
  TokenId token = -1;
  float logprob = 0.0f;
};

enum class FinishReason {
  kNone,    // keep generating
  kStop,    // the token is in stop_token_ids
  kLength,  // the output reached max_tokens with this token
};

struct SampleResult {
  TokenId token = -1;
  FinishReason finish = FinishReason::kNone;
  // Set when params.logprobs is set: the token's logprob and the top-n alternatives (n =
  // *params.logprobs, best first, lower id first on ties), from the distribution that
  // params.logprobs_mode names.
  bool has_logprobs = false;
  float logprob = 0.0f;
  int32_t num_top_logprobs = 0;
  std::array<TokenLogprob, kMaxLogprobs> top_logprobs_storage;

  std::span<const TokenLogprob> top_logprobs() const {
    return {top_logprobs_storage.data(), static_cast<size_t>(num_top_logprobs)};
  }
};

class Sampler {
 public:
  // Validates `params` (Validate) and every token id (stop ids, prompt, output) against
  // [0, vocab_size); InvalidArgument naming the field otherwise. `output_tokens` are tokens
  // already generated (a resumed request): they count for the penalties and advance the random
  // position, so a resumed request continues exactly as the original would have. Without
  // params.seed a seed is drawn from the OS. Allocates 12 bytes per vocabulary id (+4 with
  // penalties).
  static absl::StatusOr<Sampler> Create(const SamplingParams& params, int32_t vocab_size,
                                        std::span<const TokenId> prompt_tokens,
                                        std::span<const TokenId> output_tokens = {});

  // Samples the next token from one logits row (vocab_size floats; -inf masks a token; NaN and
  // +inf are InvalidArgument, as is a row with every token masked) and commits it: the token
  // counts for later penalties and the position advances. Greedy (temperature 0): argmax of the
  // penalised logits, lowest id on ties. Cost O(vocab) (+ O(m log m) for top-p, see
  // ToFilteredWeights, + one more O(vocab) pass in raw logprobs mode).
  absl::StatusOr<SampleResult> Sample(std::span<const float> logits);

  // Speculative verification of k = draft_tokens.size() draft tokens d_1..d_k against the
  // target model's k + 1 logits rows (row i is the distribution of the token after d_1..d_i;
  // row-major, (k + 1) * vocab_size floats). Writes the emitted tokens to out[0..n) and returns
  // n; the first n - 1 are accepted drafts, the last is the correction or the bonus token — or
  // fewer, when an emitted token finishes the request (stop id or max_tokens). Each emitted
  // token is committed in order, and row i is penalised with the history that includes
  // d_1..d_i, exactly as k + 1 Sample calls would.
  //  - Greedy: accept d_{i+1} while it is the argmax of row i; the first mismatching row (or
  //    row k) gives its argmax. Identical to step-by-step greedy decoding.
  //  - Sampling: p_i is the processed distribution of row i (what Sample draws from). Accept
  //    d_{i+1} with probability min(1, p_i(d) / q_i(d)); on rejection emit a draw from
  //    normalise(max(0, p_i - q_i)) and stop; if all k are accepted, draw the bonus token from
  //    p_k. The emitted tokens are distributed exactly as under p (Leviathan et al. 2023,
  //    Chen et al. 2023). q_i comes from `draft_probs`: empty = one-hot drafts (a greedy
  //    drafter), else k rows of vocab_size probabilities (non-negative, finite; normalised here;
  //    q_i(d_{i+1}) > 0), the distribution each draft was actually drawn from. The drafter's
  //    randomness must be independent of this sampler's (do not reuse its seed unchanged).
  // Logprobs of emitted tokens are those of the target rows. Rows past the first rejection are
  // not read. Errors (InvalidArgument: sizes, ids, NaN/+inf, bad q row) leave the sampler as it
  // was. `out` must hold k + 1 results.
  absl::StatusOr<int32_t> Verify(std::span<const TokenId> draft_tokens,
                                 std::span<const float> draft_probs,
                                 std::span<const float> target_logits, std::span<SampleResult> out);

  // Writes the distribution Sample would draw from for `logits` (penalties, temperature and
  // filters; one-hot on the argmax when greedy) to `probs` (vocab_size floats), without
  // committing anything. For a drafter that samples with the target's parameters, and tests.
  absl::Status ComputeProbabilities(std::span<const float> logits, std::span<float> probs);

  // Commits a token chosen elsewhere (e.g. forced by a grammar): counts and position advance.
  // InvalidArgument for an id outside the vocabulary.
  absl::Status AppendToken(TokenId token);

  uint64_t seed() const { return seed_; }
  int32_t vocab_size() const { return vocab_size_; }
  int64_t num_output_tokens() const { return history_.num_outputs(); }
  const SamplingParams& params() const { return params_; }

 private:
  // The processed form of one row in work_: penalised logits (greedy) or filtered weights.
  struct Row {
    TokenId argmax = -1;  // greedy only
    float max_logit = 0;  // max penalised logit (sampling only)
    double total = 0;     // sum of weights (sampling only)
  };

  Sampler(const SamplingParams& params, int32_t vocab_size, uint64_t seed);

  // Copies `logits` into work_ (checking size, NaN, +inf), applies the penalties, then takes
  // the argmax (greedy) or the filtered weights.
  absl::StatusOr<Row> Process(std::span<const float> logits);
  // Fills the logprob fields of `result` for `token` drawn from `logits` processed as `row`.
  void FillLogprobs(std::span<const float> logits, const Row& row, TokenId token,
                    SampleResult* result) const;
  // Adds the token to the history and sets result->token / finish.
  void Commit(TokenId token, SampleResult* result);
  // One verification step on a processed sampling row: accepts `draft` or draws the residual.
  // Returns the emitted token; *accepted tells which.
  absl::StatusOr<TokenId> AcceptOrResample(const Row& row, TokenId draft, std::span<const float> q,
                                           bool* accepted) const;

  SamplingParams params_;
  int32_t vocab_size_;
  uint64_t seed_;
  TokenHistory history_;
  std::vector<float> work_;     // processed row
  std::vector<uint64_t> keys_;  // filter scratch (ToFilteredWeights)
};

}  // namespace flashserve::sampling
