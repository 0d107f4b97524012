// CPU body of the mHC mixes pass (spec §4.2): rsqrt-normalised fp32 projection of the flattened
// streams onto hc_{site}_fn, then the per-token split into pre / post / Sinkhorn comb.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/mhc/cpu/mhc_cpu_internal.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels {
namespace {

// The reference's fp32 GEMM (cuBLAS, TF32 off) has its own blocked summation order; ours is fixed
// and independent of threading: element k of the 4·D row goes to accumulator lane k % kLanes, each
// lane sums in ascending k, and the lanes are combined as a balanced tree. Eight lanes also keep
// the fp32 error ~sqrt(4D/8) ulps instead of a single running sum's ~sqrt(4D).
constexpr int kLanes = 8;
// Elements of X converted to fp32 per step (a multiple of kLanes, so lanes do not depend on it).
constexpr int64_t kChunk = 512;
static_assert(kChunk % kLanes == 0);

float SumLanes(const float* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// comb[i][j] /= (sum_j comb[i][j] + eps), sums in ascending j.
void DivideByRowSums(float (&m)[kMhcStreams][kMhcStreams], float eps) {
  for (int i = 0; i < kMhcStreams; ++i) {
    float s = m[i][0];
    for (int j = 1; j < kMhcStreams; ++j) s += m[i][j];
    const float denom = s + eps;
    for (int j = 0; j < kMhcStreams; ++j) m[i][j] = m[i][j] / denom;
  }
}

// comb[i][j] /= (sum_i comb[i][j] + eps), sums in ascending i.
void DivideByColumnSums(float (&m)[kMhcStreams][kMhcStreams], float eps) {
  for (int j = 0; j < kMhcStreams; ++j) {
    float s = m[0][j];
    for (int i = 1; i < kMhcStreams; ++i) s += m[i][j];
    const float denom = s + eps;
    for (int i = 0; i < kMhcStreams; ++i) m[i][j] = m[i][j] / denom;
  }
}

// mixes[0..24) of token t: (X·fn^T) · rsqrt(mean(X²) + norm_eps).
void ComputeMixes(const MhcMixesParams& p, const uint16_t* x, float* mixes) {
  const int64_t width = kMhcStreams * p.dim;
  float dot[kMhcMixes][kLanes] = {};
  float sq[kLanes] = {};
  float xf[kChunk];
  for (int64_t k0 = 0; k0 < width; k0 += kChunk) {
    const int64_t n = std::min(kChunk, width - k0);
    // Zero padding to whole lanes only affects the last chunk and adds exact zeros.
    const int64_t n_padded = (n + kLanes - 1) / kLanes * kLanes;
    for (int64_t i = 0; i < n; ++i) xf[i] = formats::Bf16BitsToFloat(x[k0 + i]);
    for (int64_t i = n; i < n_padded; ++i) xf[i] = 0.0f;
    for (int64_t i = 0; i < n_padded; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) sq[l] += xf[i + l] * xf[i + l];
    }
    for (int m = 0; m < kMhcMixes; ++m) {
      const float* w = p.fn + m * width + k0;
      float* acc = dot[m];
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) acc[l] += xf[i + l] * w[i + l];
      }
      for (; i < n; ++i) acc[i % kLanes] += xf[i] * w[i];  // tail: fn has no padding
    }
  }
  const float mean_sq = SumLanes(sq) / static_cast<float>(width);
  const float r = 1.0f / std::sqrt(mean_sq + p.norm_eps);
  for (int m = 0; m < kMhcMixes; ++m) mixes[m] = SumLanes(dot[m]) * r;
}

}  // namespace

void MhcSplitSinkhorn(const float* mixes, const float* base, const float* scale, int sinkhorn_iters,
                      float hc_eps, float* pre, float* post, float* comb) {
  constexpr int kS = kMhcStreams;
  for (int c = 0; c < kS; ++c) pre[c] = Sigmoid(mixes[c] * scale[0] + base[c]) + hc_eps;
  for (int c = 0; c < kS; ++c) {
    post[c] = 2.0f * Sigmoid(mixes[kS + c] * scale[1] + base[kS + c]);
  }
  float m[kS][kS];
  for (int i = 0; i < kS; ++i) {
    for (int j = 0; j < kS; ++j) {
      const int k = 2 * kS + kS * i + j;
      m[i][j] = mixes[k] * scale[2] + base[k];
    }
  }
  // Round 1: softmax over j (max-subtracted), + eps, then column normalisation.
  for (int i = 0; i < kS; ++i) {
    float mx = m[i][0];
    for (int j = 1; j < kS; ++j) mx = std::max(mx, m[i][j]);
    float e[kS];
    for (int j = 0; j < kS; ++j) e[j] = std::exp(m[i][j] - mx);
    float s = e[0];
    for (int j = 1; j < kS; ++j) s += e[j];
    for (int j = 0; j < kS; ++j) m[i][j] = e[j] / s + hc_eps;
  }
  DivideByColumnSums(m, hc_eps);
  // Rounds 2..iters: rows, then columns (so the result is column-normalised last).
  for (int it = 1; it < sinkhorn_iters; ++it) {
    DivideByRowSums(m, hc_eps);
    DivideByColumnSums(m, hc_eps);
  }
  for (int i = 0; i < kS; ++i) {
    for (int j = 0; j < kS; ++j) comb[kS * i + j] = m[i][j];
  }
}

absl::Status MhcMixesCpu(const MhcMixesParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0) return absl::OkStatus();
  mhc_cpu::ForTokens(pool, p.tokens, /*min_chunk=*/4, [&p](size_t begin, size_t end) {
    for (auto t = static_cast<int64_t>(begin); t < static_cast<int64_t>(end); ++t) {
      const uint16_t* x = p.x + t * p.x_stride;
      float mixes[kMhcMixes];
      ComputeMixes(p, x, mixes);
      if (p.mixes != nullptr) std::copy(mixes, mixes + kMhcMixes, p.mixes + t * kMhcMixes);
      MhcSplitSinkhorn(mixes, p.base, p.scale, p.sinkhorn_iters, p.hc_eps, p.pre + t * kMhcStreams,
                       p.post + t * kMhcStreams, p.comb + t * kMhcStreams * kMhcStreams);
      // The fused collapse re-reads this token's X while it is still in cache.
      if (p.pre_in != nullptr) {
        mhc_cpu::CollapseToken(x, p.dim, p.pre_in + t * kMhcStreams,
                               p.collapsed + t * p.collapsed_stride);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
