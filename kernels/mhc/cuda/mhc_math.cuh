// Device fp32 arithmetic of the mHC kernels: each operation is the one correctly rounded IEEE
// operation the CPU bodies (built with -ffp-contract=off) perform, as inline PTX without .ftz and
// never contracted into an FMA, so no nvcc flag (-ftz, -use_fast_math, -fmad, -prec-div) changes a
// bit. bf16 conversions follow common/formats/bf16.h. Also the device port of MhcSplitSinkhorn
// (cpu/mhc_mixes_cpu.cc): the same operations in the same order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels::mhc_device {

// The exact fp32 / bf16 operations shared with the other families (kernels/common).
using namespace ::flashserve::kernels::exact;  // NOLINT(build/namespaces)

// ---- MhcSplitSinkhorn ------------------------------------------------------------------------

// exp rounded once to fp32 from CUDA's double exp (within 1 double ulp, so this is the correctly
// rounded fp32 value except within ~2^-52 of an fp32 tie). glibc's expf, which the CPU body calls,
// is not correctly rounded for ~6e-4 of the arguments in [2^-8, 64] (measured over every fp32 on
// glibc 2.36), so the two tails can differ by an ulp-level amount (README.md "CUDA").
__device__ __forceinline__ float ExpF(float x) { return DoubleToF32(exp(static_cast<double>(x))); }

__device__ __forceinline__ float Sigmoid(float v) { return DivRn(1.0f, AddRn(1.0f, ExpF(-v))); }

__device__ __forceinline__ void DivideByRowSums(float (&m)[kMhcStreams][kMhcStreams], float eps) {
#pragma unroll
  for (int i = 0; i < kMhcStreams; ++i) {
    float s = m[i][0];
#pragma unroll
    for (int j = 1; j < kMhcStreams; ++j) s = AddRn(s, m[i][j]);
    const float denom = AddRn(s, eps);
#pragma unroll
    for (int j = 0; j < kMhcStreams; ++j) m[i][j] = DivRn(m[i][j], denom);
  }
}

__device__ __forceinline__ void DivideByColumnSums(float (&m)[kMhcStreams][kMhcStreams],
                                                   float eps) {
#pragma unroll
  for (int j = 0; j < kMhcStreams; ++j) {
    float s = m[0][j];
#pragma unroll
    for (int i = 1; i < kMhcStreams; ++i) s = AddRn(s, m[i][j]);
    const float denom = AddRn(s, eps);
#pragma unroll
    for (int i = 0; i < kMhcStreams; ++i) m[i][j] = DivRn(m[i][j], denom);
  }
}

// MhcSplitSinkhorn (mhc.h) on one token, operation for operation.
__device__ __forceinline__ void SplitSinkhorn(const float (&mixes)[kMhcMixes], const float* base,
                                              const float* scale, int sinkhorn_iters, float hc_eps,
                                              float* pre, float* post, float* comb) {
  constexpr int kS = kMhcStreams;
#pragma unroll
  for (int c = 0; c < kS; ++c) {
    pre[c] = AddRn(Sigmoid(AddRn(MulRn(mixes[c], scale[0]), base[c])), hc_eps);
  }
#pragma unroll
  for (int c = 0; c < kS; ++c) {
    post[c] = MulRn(2.0f, Sigmoid(AddRn(MulRn(mixes[kS + c], scale[1]), base[kS + c])));
  }
  float m[kS][kS];
#pragma unroll
  for (int i = 0; i < kS; ++i) {
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      const int k = 2 * kS + kS * i + j;
      m[i][j] = AddRn(MulRn(mixes[k], scale[2]), base[k]);
    }
  }
  // Round 1: softmax over j (max-subtracted; std::max's a < b ? b : a), + eps, then columns.
#pragma unroll
  for (int i = 0; i < kS; ++i) {
    float mx = m[i][0];
#pragma unroll
    for (int j = 1; j < kS; ++j) mx = mx < m[i][j] ? m[i][j] : mx;
    float e[kS];
#pragma unroll
    for (int j = 0; j < kS; ++j) e[j] = ExpF(SubRn(m[i][j], mx));
    float s = e[0];
#pragma unroll
    for (int j = 1; j < kS; ++j) s = AddRn(s, e[j]);
#pragma unroll
    for (int j = 0; j < kS; ++j) m[i][j] = AddRn(DivRn(e[j], s), hc_eps);
  }
  DivideByColumnSums(m, hc_eps);
#pragma unroll 1
  for (int it = 1; it < sinkhorn_iters; ++it) {
    DivideByRowSums(m, hc_eps);
    DivideByColumnSums(m, hc_eps);
  }
#pragma unroll
  for (int i = 0; i < kS; ++i) {
#pragma unroll
    for (int j = 0; j < kS; ++j) comb[kS * i + j] = m[i][j];
  }
}

// One value of hc_post: stream j's new value at a column, from the sublayer's output f there and
// the input streams' values r[i] there: post_j·f + (comb[0][j]·r[0] + comb[1][j]·r[1] + ...),
// each product and sum rounded, in this order. HcPostKernel and the MoE combine's fused hc_post
// (kernels/moe, MoeCombineParams::hc_post) compute it here.
__device__ __forceinline__ float HcPostValue(float post_j, const float (&comb_j)[kMhcStreams],
                                             float f, const float (&r)[kMhcStreams]) {
  float mix = MulRn(comb_j[0], r[0]);
#pragma unroll
  for (int i = 1; i < kMhcStreams; ++i) mix = AddRn(mix, MulRn(comb_j[i], r[i]));
  return AddRn(MulRn(post_j, f), mix);
}

}  // namespace flashserve::kernels::mhc_device
