// The per-row steps of sampling, as free functions over one fp32 row so that each can be tested
// on hand-made logits. Sampler strings them together; README.md gives the order and its sources.
// None allocates; all are single-threaded over the caller's buffers; cost O(vocab) unless noted.
#pragma once

#include <cstdint>
#include <span>

#include "model/sampling/sampling_params.h"
#include "model/sampling/token_history.h"

namespace flashserve::sampling {

// The penalised logit of one token whose TokenHistory entry is `entry`: first the repetition
// penalty (seen in prompt or output: x > 0 ? x / r : x * r), then x -= frequency * count, then
// x -= presence if count > 0. Exactly the arithmetic ApplyPenalties does per element.
inline float PenalizedLogit(const SamplingParams& params, uint32_t entry, float x) {
  const int32_t count = static_cast<int32_t>(entry & TokenHistory::kCountMask);
  if (entry != 0 && params.repetition_penalty != 1.0f) {
    x = x > 0.0f ? x / params.repetition_penalty : x * params.repetition_penalty;
  }
  if (count > 0) {
    x -= params.frequency_penalty * static_cast<float>(count);
    x -= params.presence_penalty;
  }
  return x;
}

// Applies PenalizedLogit to every element. No-op unless history.tracks_ids().
void ApplyPenalties(const SamplingParams& params, const TokenHistory& history,
                    std::span<float> logits);

// Index of the largest value, the lowest index among equals; -1 when every value is -inf.
// Values must not be NaN.
TokenId Argmax(std::span<const float> values);

struct FilteredWeights {
  double total = 0.0;    // sum of the kept weights (> 0)
  int32_t num_kept = 0;  // tokens with weight > 0
};

// Turns a penalised logits row (no NaN / +inf, max finite) into unnormalised sampling weights,
// in place: w_i = exp((x_i - max) / temperature), so the top token weighs exactly 1; then
// zeroes the tokens removed by top-k, top-p and min-p, in that order, each acting on what the
// previous one kept (top-p's mass is relative to the top-k survivors; min-p compares with the
// top weight, which no filter removes). Ties at a top-k or top-p boundary are all kept.
// `scratch` holds at least work.size() entries. Requires temperature > 0.
// Cost: O(V): one exp per token that survives top-k, a heap pass for top-k, an expected-linear
// selection (nth_element halving) for top-p.
FilteredWeights ToFilteredWeights(const SamplingParams& params, std::span<float> work,
                                  std::span<uint64_t> scratch);

// Inverse-CDF draw from weights (>= 0, summing to `total` in index order): the first index
// whose running sum exceeds u * total, for u in [0, 1). Falls back to the last positive weight
// when rounding leaves the running sum short.
TokenId SampleFromWeights(std::span<const float> weights, double total, double u);

// log(sum_i exp(x_i)), in double, shifted by the maximum; -inf when every x_i is -inf.
double LogSumExp(std::span<const float> values);

// Writes the indices of the n largest values to out[0..n), largest first, lower index first
// among equals. Requires n <= values.size(). Cost O(V * n) worst case, ~O(V) on real logits.
void TopN(std::span<const float> values, int32_t n, TokenId* out);

}  // namespace flashserve::sampling
