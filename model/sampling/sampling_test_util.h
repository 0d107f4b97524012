// Test helpers: an independent double-precision reference of the distribution a SamplingParams
// describes (written the Hugging Face way — softmax, then renormalise after each filter, full
// sorts, no shortcuts), and Pearson's chi-square test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "model/sampling/sampling_params.h"

namespace flashserve::sampling::testing {

// Penalised logits in double: repetition over prompt + outputs, then frequency and presence
// over outputs.
inline std::vector<double> ReferencePenalised(const SamplingParams& params,
                                              const std::vector<float>& logits,
                                              const std::vector<TokenId>& prompt,
                                              const std::vector<TokenId>& outputs) {
  std::vector<double> x(logits.begin(), logits.end());
  for (size_t id = 0; id < x.size(); ++id) {
    const auto count = std::count(outputs.begin(), outputs.end(), static_cast<TokenId>(id));
    const bool in_prompt =
        std::find(prompt.begin(), prompt.end(), static_cast<TokenId>(id)) != prompt.end();
    if (in_prompt || count > 0) {
      x[id] = x[id] > 0 ? x[id] / params.repetition_penalty : x[id] * params.repetition_penalty;
    }
    x[id] -= static_cast<double>(params.frequency_penalty) * static_cast<double>(count);
    if (count > 0) x[id] -= params.presence_penalty;
  }
  return x;
}

inline void Renormalise(std::vector<double>* p) {
  const double total = std::accumulate(p->begin(), p->end(), 0.0);
  for (double& v : *p) v /= total;
}

// The probability of each token under `params` given the history.
inline std::vector<double> ReferenceDistribution(const SamplingParams& params,
                                                 const std::vector<float>& logits,
                                                 const std::vector<TokenId>& prompt = {},
                                                 const std::vector<TokenId>& outputs = {}) {
  const std::vector<double> x = ReferencePenalised(params, logits, prompt, outputs);
  const size_t v = x.size();
  std::vector<double> p(v, 0.0);
  if (params.greedy()) {
    p[std::max_element(x.begin(), x.end()) - x.begin()] = 1.0;  // first max = lowest id
    return p;
  }
  const double max_x = *std::max_element(x.begin(), x.end());
  for (size_t i = 0; i < v; ++i) p[i] = std::exp((x[i] - max_x) / params.temperature);
  Renormalise(&p);
  std::vector<size_t> ids(v);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < v) {
    const double kth = p[ids[params.top_k - 1]];
    for (double& q : p) {
      if (q < kth) q = 0.0;
    }
    Renormalise(&p);
  }
  if (params.top_p < 1.0f) {
    double mass = 0.0;
    double threshold = 0.0;
    for (size_t id : ids) {
      mass += p[id];
      threshold = p[id];
      if (mass >= params.top_p) break;
    }
    for (double& q : p) {
      if (q < threshold) q = 0.0;
    }
    Renormalise(&p);
  }
  if (params.min_p > 0.0f) {
    const double threshold = params.min_p * *std::max_element(p.begin(), p.end());
    for (double& q : p) {
      if (q < threshold) q = 0.0;
    }
    Renormalise(&p);
  }
  return p;
}

// Log-softmax in double.
inline std::vector<double> ReferenceLogSoftmax(const std::vector<double>& x) {
  const double max_x = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (double v : x) sum += std::exp(v - max_x);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - max_x - std::log(sum);
  return out;
}

struct ChiSquareResult {
  double statistic = 0.0;
  int degrees_of_freedom = 0;
  double critical = 0.0;   // upper 1e-6 point
  int64_t impossible = 0;  // draws of tokens with probability 0
  bool pass() const { return impossible == 0 && statistic <= critical; }
};

// Upper 1e-6 quantile of chi-square(df) by the Wilson-Hilferty approximation (z = 4.7534). It
// overestimates the exact quantile for small df (27.5 vs 23.9 at df = 1), so the false-failure
// rate is below 1e-6 per test.
inline double ChiSquareCritical(int df) {
  const double z = 4.7534;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Pearson's statistic of `counts` (n draws) against `probs`; categories with probability 0
// are counted as `impossible` instead.
inline ChiSquareResult ChiSquare(const std::vector<int64_t>& counts,
                                 const std::vector<double>& probs) {
  ChiSquareResult r;
  const int64_t n = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int categories = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] <= 0.0) {
      r.impossible += counts[i];
      continue;
    }
    const double expected = probs[i] * static_cast<double>(n);
    const double d = static_cast<double>(counts[i]) - expected;
    r.statistic += d * d / expected;
    ++categories;
  }
  r.degrees_of_freedom = std::max(1, categories - 1);
  r.critical = ChiSquareCritical(r.degrees_of_freedom);
  return r;
}

}  // namespace flashserve::sampling::testing
