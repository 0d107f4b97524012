#include "model/sampling/logits_processing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>

#include "common/base/check.h"

namespace flashserve::sampling {
namespace {

// Candidates are packed as 64-bit keys — the value's bits mapped to an order-preserving
// uint32, then the complemented id — so that comparing keys orders by value, descending, and
// by id, ascending, among equals, and the selection loops touch one contiguous array instead of
// chasing ids into the row.
uint32_t OrderedBits(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}
float KeyValue(uint64_t key) {
  const uint32_t ordered = static_cast<uint32_t>(key >> 32);
  return std::bit_cast<float>((ordered & 0x80000000u) != 0 ? ordered & 0x7fffffffu : ~ordered);
}
uint64_t MakeKey(float v, size_t id) {
  return (static_cast<uint64_t>(OrderedBits(v)) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
TokenId KeyId(uint64_t key) {
  return static_cast<TokenId>(0xffffffffu - static_cast<uint32_t>(key));
}

// Keeps the candidates keys[0..n) whose weight is >= threshold at the front, zeroes the weight
// of the others, and returns how many remain.
int32_t KeepAtLeast(float threshold, std::span<float> w, std::span<uint64_t> keys, int32_t n) {
  int32_t kept = 0;
  for (int32_t j = 0; j < n; ++j) {
    if (KeyValue(keys[j]) >= threshold) {
      keys[kept++] = keys[j];
    } else {
      w[KeyId(keys[j])] = 0.0f;
    }
  }
  return kept;
}

// The k-th largest value (the top-k threshold; HF's `scores < topk(...)[-1]` and vLLM's mask
// keep every value tied with it): a min-heap of k keys, one pass, O(V + r log k) for r heap
// replacements (~k log(V / k) on real logits).
float KthLargest(std::span<const float> x, int32_t k, std::span<uint64_t> heap) {
  const std::greater<uint64_t> min_heap;
  for (int32_t i = 0; i < k; ++i) heap[i] = MakeKey(x[i], i);
  std::make_heap(heap.begin(), heap.begin() + k, min_heap);
  for (size_t i = k; i < x.size(); ++i) {
    const uint64_t key = MakeKey(x[i], i);
    if (key > heap[0]) {
      std::pop_heap(heap.begin(), heap.begin() + k, min_heap);
      heap[k - 1] = key;
      std::push_heap(heap.begin(), heap.begin() + k, min_heap);
    }
  }
  return KeyValue(heap[0]);
}

// Top-p over the candidates: the crossing token is the first, by decreasing weight (lower id
// among equals), at which the running mass reaches top_p of the total; it and every token tied
// with it stay. Found without a full sort: halve the range with nth_element, keep the half
// that holds the crossing point (subtracting the heavier half's mass when moving right), and
// sort only the last <= 64 candidates. O(n) expected.
int32_t TopP(float top_p, std::span<float> w, std::span<uint64_t> keys, int32_t n) {
  if (top_p >= 1.0f || n <= 1) return n;
  double total = 0.0;
  for (int32_t j = 0; j < n; ++j) total += KeyValue(keys[j]);
  double need = static_cast<double>(top_p) * total;
  const std::greater<uint64_t> heavier;
  int32_t lo = 0;
  int32_t hi = n;
  while (hi - lo > 64) {
    const int32_t mid = lo + (hi - lo) / 2;
    std::nth_element(keys.begin() + lo, keys.begin() + mid, keys.begin() + hi, heavier);
    double left_mass = 0.0;
    for (int32_t j = lo; j < mid; ++j) left_mass += KeyValue(keys[j]);
    if (left_mass >= need) {
      hi = mid;
    } else {
      need -= left_mass;
      lo = mid;
    }
  }
  std::sort(keys.begin() + lo, keys.begin() + hi, heavier);
  double mass = 0.0;
  for (int32_t j = lo; j < hi; ++j) {
    mass += KeyValue(keys[j]);
    if (mass >= need) return KeepAtLeast(KeyValue(keys[j]), w, keys, n);
  }
  // Rounding left the mass a hair short of top_p * total: the crossing is the lightest token.
  return KeepAtLeast(KeyValue(keys[hi - 1]), w, keys, n);
}

}  // namespace

void ApplyPenalties(const SamplingParams& params, const TokenHistory& history,
                    std::span<float> logits) {
  if (!history.tracks_ids()) return;
  for (size_t i = 0; i < logits.size(); ++i) {
    const uint32_t entry = history.entry(static_cast<TokenId>(i));
    if (entry != 0) logits[i] = PenalizedLogit(params, entry, logits[i]);
  }
}

TokenId Argmax(std::span<const float> values) {
  TokenId best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] > best_value) {
      best_value = values[i];
      best = static_cast<TokenId>(i);
    }
  }
  return best;
}

FilteredWeights ToFilteredWeights(const SamplingParams& params, std::span<float> work,
                                  std::span<uint64_t> scratch) {
  CHECK(params.temperature > 0.0f);
  CHECK_GE(scratch.size(), work.size());
  const float max_logit = *std::max_element(work.begin(), work.end());
  CHECK(std::isfinite(max_logit));
  // Top-k acts on the logits (the same order as the weights), so that the exp is skipped for
  // the tokens it removes. Subtracting the max before dividing keeps (x - max) <= 0, so a tiny
  // temperature gives weights of 0 (1 for the top token), never inf / inf.
  const float kth_logit = params.top_k > 0 && static_cast<size_t>(params.top_k) < work.size()
                              ? KthLargest(work, params.top_k, scratch)
                              : -std::numeric_limits<float>::infinity();
  int32_t n = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    if (work[i] < kth_logit) {
      work[i] = 0.0f;
      continue;
    }
    work[i] = std::exp((work[i] - max_logit) / params.temperature);
    if (work[i] > 0.0f) scratch[n++] = MakeKey(work[i], i);
  }
  n = TopP(params.top_p, work, scratch, n);
  // The top token has weight exp(0) = 1 and survives every filter, so min_p * p_max is min_p
  // in weight units whatever the normalisation.
  if (params.min_p > 0.0f) n = KeepAtLeast(params.min_p, work, scratch, n);

  FilteredWeights result;
  result.num_kept = n;
  for (size_t i = 0; i < work.size(); ++i) result.total += work[i];
  return result;
}

TokenId SampleFromWeights(std::span<const float> weights, double total, double u) {
  const double target = u * total;
  double running = 0.0;
  TokenId last_positive = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0f) continue;
    running += weights[i];
    last_positive = static_cast<TokenId>(i);
    if (running > target) return last_positive;
  }
  return last_positive;
}

double LogSumExp(std::span<const float> values) {
  const float max_value = *std::max_element(values.begin(), values.end());
  if (max_value == -std::numeric_limits<float>::infinity()) return max_value;
  double sum = 0.0;
  // Float exp (rel. error ~1e-7 per term), double sum: logprobs good to ~1e-7 absolute.
  for (float v : values) sum += std::exp(v - max_value);
  return max_value + std::log(sum);
}

void TopN(std::span<const float> values, int32_t n, TokenId* out) {
  CHECK_LE(static_cast<size_t>(n), values.size());
  if (n == 0) return;
  // out[0..size) sorted best first; scanning ids upward means an equal later value never beats
  // an entry already held, which gives lowest-id-first on ties.
  int32_t size = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (size == n && !(v > values[out[n - 1]])) continue;
    int32_t pos = size < n ? size++ : n - 1;
    while (pos > 0 && v > values[out[pos - 1]]) {
      out[pos] = out[pos - 1];
      --pos;
    }
    out[pos] = static_cast<TokenId>(i);
  }
}

}  // namespace flashserve::sampling
