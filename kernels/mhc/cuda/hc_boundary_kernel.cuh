// The fused site boundary (hc_boundary.h): hc_post (kPost) + hc_pre + RMSNorm, one block of
// kNormThreads per token. Device code of cuda/hc_boundary_launch.cu only.
//
// Thread l owns the 8-value chunks l, l + 256, ... (< D / 8) of its token, kSlots of them: the
// split RmsNormKernel uses for a row of more than 1024 values (kGroup = 256, kW = 8, the
// register-cached form), so the sum of squares is formed and reduced exactly as there
// (norm_rope_device::GroupSum). Per chunk: HcPostKernel's operations (the four sources summed in
// order, then the post term), the new streams stored as bf16; HcPreKernel's collapse of those
// bf16 values; the collapsed bf16 row stored and kept for the norm. Every load of a token is
// issued before its first use: one memory round trip per token instead of three kernels'.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/mhc/cuda/mhc_math.cuh"
#include "kernels/mhc/hc_boundary.h"
#include "kernels/norm_rope/cuda/norm_rope_rows.cuh"

namespace flashserve::kernels::mhc_device {

using norm_rope_device::kNormThreads;

using norm_rope_device::LoadBf16;  // 8 bf16 values (16-byte aligned) as fp32, and back (RNE)
using norm_rope_device::StoreBf16;
using norm_rope_device::UnpackBf16x8;

// ---- one token's chunks (both kernels below) ------------------------------------------------

// The token's sources of chunk j (f and the residual streams with kPost, else the streams) and
// the norm weight's 8 values.
template <bool kPost>
__device__ __forceinline__ void LoadChunk(const HcBoundaryParams& p, int64_t t, int64_t j,
                                          float (&x)[kMhcStreams][8], float (&f)[8],
                                          float (&w)[8]) {
  const int64_t dim = p.pre.dim;
  const uint16_t* src =
      kPost ? p.post.residual + t * p.post.residual_stride : p.pre.x + t * p.pre.x_stride;
#pragma unroll
  for (int c = 0; c < kMhcStreams; ++c) LoadBf16<8>(src + c * dim + 8 * j, x[c]);
  if constexpr (kPost) LoadBf16<8>(p.post.f + t * p.post.f_stride + 8 * j, f);
  LoadBf16<8>(p.norm.weight_bf16 + 8 * j, w);
}

// The token's mixes: pre, and with kPost post and comb.
template <bool kPost>
struct TokenMixes {
  float pre[kMhcStreams];
  float post[kMhcStreams];
  float comb[kMhcStreams][kMhcStreams];

  __device__ __forceinline__ void Load(const HcBoundaryParams& p, int64_t t) {
    constexpr int kS = kMhcStreams;
#pragma unroll
    for (int c = 0; c < kS; ++c) pre[c] = p.pre.pre[t * kS + c];
    if constexpr (kPost) {
#pragma unroll
      for (int c = 0; c < kS; ++c) post[c] = p.post.post[t * kS + c];
#pragma unroll
      for (int i = 0; i < kS; ++i) {
#pragma unroll
        for (int c = 0; c < kS; ++c) comb[i][c] = p.post.comb[(t * kS + i) * kS + c];
      }
    }
  }
};

// Chunk j of token t: hc_post (HcPostKernel's order), the new streams stored; then the collapse
// (HcPreKernel's order) of their bf16 values, stored and returned in v (the norm's input); its
// squares added to sum in double.
template <bool kPost>
__device__ __forceinline__ void PostAndCollapse(const HcBoundaryParams& p, int64_t t, int64_t j,
                                                const TokenMixes<kPost>& m,
                                                float (&x)[kMhcStreams][8], const float (&f)[8],
                                                float (&v)[8], double& sum) {
  constexpr int kS = kMhcStreams;
  const int64_t dim = p.pre.dim;
  if constexpr (kPost) {
    float y[kS][8];
#pragma unroll
    for (int c = 0; c < kS; ++c) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        float mix = MulRn(m.comb[0][c], x[0][k]);
#pragma unroll
        for (int i = 1; i < kS; ++i) mix = AddRn(mix, MulRn(m.comb[i][c], x[i][k]));
        y[c][k] = AddRn(MulRn(m.post[c], f[k]), mix);
      }
    }
    uint16_t* out = p.post.out + t * p.post.out_stride + 8 * j;
#pragma unroll
    for (int c = 0; c < kS; ++c) {
      uint32_t yw[4];  // StoreBf16's words, kept as the next stream values
      F32x8ToBf16x8(y[c], yw);
      const uint4 words = make_uint4(yw[0], yw[1], yw[2], yw[3]);
      *reinterpret_cast<uint4*>(out + c * dim) = words;
      UnpackBf16x8(words, x[c]);
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    float acc = MulRn(m.pre[0], x[0][k]);
#pragma unroll
    for (int c = 1; c < kS; ++c) acc = AddRn(acc, MulRn(m.pre[c], x[c][k]));
    v[k] = acc;
  }
  uint32_t vw[4];  // StoreBf16's words, kept as the norm's input
  F32x8ToBf16x8(v, vw);
  const uint4 words = make_uint4(vw[0], vw[1], vw[2], vw[3]);
  *reinterpret_cast<uint4*>(p.pre.out + t * p.pre.out_stride + 8 * j) = words;
  UnpackBf16x8(words, v);
#pragma unroll
  for (int k = 0; k < 8; ++k) sum += static_cast<double>(MulRn(v[k], v[k]));
}

// RmsNormKernel's 1 / rms from the row's sum of squares.
__device__ __forceinline__ float RowInverseRms(const HcBoundaryParams& p, double sum) {
  return norm_rope_device::InverseRmsFromSum(sum, DivRn(1.0f, Int64ToF32(p.pre.dim)), p.norm.eps);
}

// RmsNormKernel's pass 2 of chunk j: bf16(w · (v · r)).
__device__ __forceinline__ void NormStore(const HcBoundaryParams& p, int64_t t, int64_t j,
                                          const float (&w)[8], const float (&v)[8], float r) {
  float o[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) o[k] = MulRn(w[k], MulRn(v[k], r));
  StoreBf16<8>(p.norm.out + t * p.norm.out_stride + 8 * j, o);
}

// ---- one block per token ----------------------------------------------------------------------

template <bool kPost, int kSlots>
__global__ void __launch_bounds__(kNormThreads) HcBoundaryKernel(HcBoundaryParams p) {
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  __shared__ double warp_sums[kNormThreads / 32];
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t chunks = p.pre.dim / 8;
  for (int64_t t = blockIdx.x; t < p.pre.tokens; t += gridDim.x) {
    // Loads first: every owned chunk's sources and weight, and the mixes.
    float x[kSlots][kMhcStreams][8];
    float f[kSlots][8];
    float w[kSlots][8];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t j = lane + int64_t{s} * kNormThreads;
      if (j < chunks) LoadChunk<kPost>(p, t, j, x[s], f[s], w[s]);
    }
    TokenMixes<kPost> m;
    m.Load(p, t);
    float v[kSlots][8];
    double sum = 0.0;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t j = lane + int64_t{s} * kNormThreads;
      if (j < chunks) PostAndCollapse<kPost>(p, t, j, m, x[s], f[s], v[s], sum);
    }
    // RmsNormKernel's reduction and pass 2 (kGroup = 256, the cached rows).
    sum = norm_rope_device::GroupSum<kNormThreads>(sum, warp_sums);
    const float r = RowInverseRms(p, sum);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t j = lane + int64_t{s} * kNormThreads;
      if (j < chunks) NormStore(p, t, j, w[s], v[s], r);
    }
  }
}

// ---- a cluster of CTAs per token (HcBoundaryParams::cluster_ctas) ----------------------------

// Threads per CTA of the cluster kernel: CTA rank r of a token's cluster of n owns its chunks
// [r · per, (r + 1) · per), per = ceil(D / 8 / n), thread l the chunks r · per + l + s · 128.
inline constexpr int kHcClusterThreads = 128;

// Every CTA sums its squares (warps by shuffles, then the 4 warps' sums in order), publishes the
// sum in shared memory, and after a cluster barrier reads all n CTAs' sums in rank order through
// distributed shared memory; a second barrier keeps each CTA's shared memory alive until every
// CTA has read it. The double sum is exact whatever its order (GroupSum's premise), so r is the
// one-block kernel's and RmsNormKernel's.
template <bool kPost, int kSlots>
__global__ void __launch_bounds__(kHcClusterThreads) HcBoundaryClusterKernel(HcBoundaryParams p) {
  cuda_common::PdlLaunchDependents();
  __shared__ double warp_sums[kHcClusterThreads / 32];
  __shared__ double cta_sum;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int n = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t t = blockIdx.x / n;  // the token of this cluster (one per cluster)
  const int64_t chunks = p.pre.dim / 8;
  const int64_t per = (chunks + n - 1) / n;
  const int64_t first = rank * per, last = min(chunks, first + per);
  float x[kSlots][kMhcStreams][8];
  float f[kSlots][8];
  float w[kSlots][8];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t j = first + lane + int64_t{s} * kHcClusterThreads;
    if (j < last) LoadChunk<kPost>(p, t, j, x[s], f[s], w[s]);
  }
  TokenMixes<kPost> m;
  m.Load(p, t);
  float v[kSlots][8];
  double sum = 0.0;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t j = first + lane + int64_t{s} * kHcClusterThreads;
    if (j < last) PostAndCollapse<kPost>(p, t, j, m, x[s], f[s], v[s], sum);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  if (lane % 32 == 0) warp_sums[lane / 32] = sum;
  __syncthreads();
  if (lane == 0) {
    double c = warp_sums[0];
#pragma unroll
    for (int i = 1; i < kHcClusterThreads / 32; ++i) c += warp_sums[i];
    cta_sum = c;
  }
  cluster.sync();  // release / acquire: every CTA's cta_sum is visible cluster-wide
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += *cluster.map_shared_rank(&cta_sum, i);
  cluster.sync();  // no CTA exits while another still reads its cta_sum
  const float r = RowInverseRms(p, total);
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t j = first + lane + int64_t{s} * kHcClusterThreads;
    if (j < last) NormStore(p, t, j, w[s], v[s], r);
  }
}

}  // namespace flashserve::kernels::mhc_device
