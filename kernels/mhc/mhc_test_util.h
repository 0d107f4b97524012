// Test-side references for the mHC kernels, written from spec §4.2 independently of cpu/*.cc.
// SplitSinkhornRecipe<T> is the one scalar recipe: T = double is the high-precision reference,
// T = float is "the exact fp32 recipe" the CPU body must reproduce bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels::mhc_test {

// pre[4], post[4], comb[16] (comb[i*4+j]: source i, destination j) of one token.
template <typename T>
struct SiteMix {
  T pre[kMhcStreams];
  T post[kMhcStreams];
  T comb[kMhcStreams * kMhcStreams];
};

template <typename T>
T SigmoidT(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

// Spec §4.2 A, B, C in type T: sums in ascending index order, divisions as divisions.
// `rows_last` swaps the order inside each later round (columns, then rows): NOT the reference; it
// exists to show that the exact-recipe tests can tell the two orders apart.
template <typename T>
SiteMix<T> SplitSinkhornRecipe(const T* mixes, const float* base, const float* scale, int iters,
                               float hc_eps, bool rows_last = false) {
  constexpr int kS = kMhcStreams;
  const T eps = static_cast<T>(hc_eps);
  SiteMix<T> out;
  for (int c = 0; c < kS; ++c) {
    out.pre[c] = SigmoidT<T>(mixes[c] * T(scale[0]) + T(base[c])) + eps;
    out.post[c] = T(2) * SigmoidT<T>(mixes[kS + c] * T(scale[1]) + T(base[kS + c]));
  }
  T m[kS][kS];
  for (int i = 0; i < kS; ++i) {
    T mx = -INFINITY;
    for (int j = 0; j < kS; ++j) {
      const int k = 2 * kS + kS * i + j;
      m[i][j] = mixes[k] * T(scale[2]) + T(base[k]);
      mx = m[i][j] > mx ? m[i][j] : mx;
    }
    T e[kS];
    T sum = 0;
    for (int j = 0; j < kS; ++j) {
      e[j] = std::exp(m[i][j] - mx);
      sum = j == 0 ? e[j] : sum + e[j];
    }
    for (int j = 0; j < kS; ++j) m[i][j] = e[j] / sum + eps;
  }
  auto columns = [&] {
    for (int j = 0; j < kS; ++j) {
      T s = m[0][j];
      for (int i = 1; i < kS; ++i) s += m[i][j];
      for (int i = 0; i < kS; ++i) m[i][j] = m[i][j] / (s + eps);
    }
  };
  auto rows = [&] {
    for (int i = 0; i < kS; ++i) {
      T s = m[i][0];
      for (int j = 1; j < kS; ++j) s += m[i][j];
      for (int j = 0; j < kS; ++j) m[i][j] = m[i][j] / (s + eps);
    }
  };
  columns();
  for (int it = 1; it < iters; ++it) {
    if (rows_last) {
      columns();
      rows();
    } else {
      rows();
      columns();
    }
  }
  for (int i = 0; i < kS; ++i) {
    for (int j = 0; j < kS; ++j) out.comb[kS * i + j] = m[i][j];
  }
  return out;
}

// Double-precision mixes of one token: (X·fn^T)·rsqrt(mean(X²)+norm_eps). x: 4·dim bf16 values.
// Also returns, per mix, sum_k |x_k·fn_k|·r (the scale of its fp32 rounding error) in `magnitude`.
void MixesRef(const uint16_t* x, int64_t dim, const float* fn, float norm_eps, double* mixes,
              double* magnitude);

// A site's parameters, random but shaped like the fixture's (fn ~ N(0, 1/(4D)), base ~ N(0, 1),
// scale ~ U(0.5, 1.4)) unless `logit_gain` scales base and fn up to stress the Sinkhorn.
struct SiteParams {
  std::vector<float> fn;     // [24, 4·dim]
  std::vector<float> base;   // [24]
  std::vector<float> scale;  // [3]
};
SiteParams RandomSite(int64_t dim, double logit_gain, std::mt19937_64& rng);

// `count` bf16 values ~ N(0, sigma²).
std::vector<uint16_t> RandomBf16(int64_t count, double sigma, std::mt19937_64& rng);

// Largest |a-b| over n values, and where.
struct MaxDiff {
  double value = 0;
  int64_t index = -1;
};
template <typename A, typename B>
MaxDiff MaxAbsDiff(const A* a, const B* b, int64_t n) {
  MaxDiff d;
  for (int64_t k = 0; k < n; ++k) {
    const double e = std::fabs(static_cast<double>(a[k]) - static_cast<double>(b[k]));
    if (!(e <= d.value)) d = {e, k};
  }
  return d;
}

}  // namespace flashserve::kernels::mhc_test
