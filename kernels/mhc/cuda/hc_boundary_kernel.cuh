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

template <bool kPost, int kSlots>
__global__ void __launch_bounds__(kNormThreads) HcBoundaryKernel(HcBoundaryParams p) {
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  __shared__ double warp_sums[kNormThreads / 32];
  constexpr int kS = kMhcStreams;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t dim = p.pre.dim;
  const int64_t chunks = dim / 8;
  const float inv_n = DivRn(1.0f, Int64ToF32(dim));
  for (int64_t t = blockIdx.x; t < p.pre.tokens; t += gridDim.x) {
    // Loads first: the sources (f and the residual streams with kPost, else the streams), the
    // mixes and the norm weight of every owned chunk.
    float x[kSlots][kS][8];
    float f[kSlots][8];
    float w[kSlots][8];
    const uint16_t* src =
        kPost ? p.post.residual + t * p.post.residual_stride : p.pre.x + t * p.pre.x_stride;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t j = lane + int64_t{s} * kNormThreads;
      if (j < chunks) {
#pragma unroll
        for (int c = 0; c < kS; ++c) LoadBf16<8>(src + c * dim + 8 * j, x[s][c]);
        if constexpr (kPost) LoadBf16<8>(p.post.f + t * p.post.f_stride + 8 * j, f[s]);
        LoadBf16<8>(p.norm.weight_bf16 + 8 * j, w[s]);
      }
    }
    float pre[kS];
#pragma unroll
    for (int c = 0; c < kS; ++c) pre[c] = p.pre.pre[t * kS + c];
    float post[kS], comb[kS][kS];
    if constexpr (kPost) {
#pragma unroll
      for (int c = 0; c < kS; ++c) post[c] = p.post.post[t * kS + c];
#pragma unroll
      for (int i = 0; i < kS; ++i) {
#pragma unroll
        for (int c = 0; c < kS; ++c) comb[i][c] = p.post.comb[(t * kS + i) * kS + c];
      }
    }
    // hc_post (HcPostKernel's order), the new streams stored; then the collapse (HcPreKernel's
    // order) of their bf16 values, stored and kept for the norm; its squares summed in double.
    float v[kSlots][8];
    double sum = 0.0;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t j = lane + int64_t{s} * kNormThreads;
      if (j >= chunks) continue;
      if constexpr (kPost) {
        float y[kS][8];
#pragma unroll
        for (int c = 0; c < kS; ++c) {
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            float mix = MulRn(comb[0][c], x[s][0][k]);
#pragma unroll
            for (int i = 1; i < kS; ++i) mix = AddRn(mix, MulRn(comb[i][c], x[s][i][k]));
            y[c][k] = AddRn(MulRn(post[c], f[s][k]), mix);
          }
        }
        uint16_t* out = p.post.out + t * p.post.out_stride + 8 * j;
#pragma unroll
        for (int c = 0; c < kS; ++c) {
          uint32_t yw[4];  // StoreBf16's words, kept as the next stream values
          F32x8ToBf16x8(y[c], yw);
          const uint4 words = make_uint4(yw[0], yw[1], yw[2], yw[3]);
          *reinterpret_cast<uint4*>(out + c * dim) = words;
          UnpackBf16x8(words, x[s][c]);
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        float acc = MulRn(pre[0], x[s][0][k]);
#pragma unroll
        for (int c = 1; c < kS; ++c) acc = AddRn(acc, MulRn(pre[c], x[s][c][k]));
        v[s][k] = acc;
      }
      uint32_t vw[4];  // StoreBf16's words, kept as the norm's input
      F32x8ToBf16x8(v[s], vw);
      const uint4 words = make_uint4(vw[0], vw[1], vw[2], vw[3]);
      *reinterpret_cast<uint4*>(p.pre.out + t * p.pre.out_stride + 8 * j) = words;
      UnpackBf16x8(words, v[s]);
#pragma unroll
      for (int k = 0; k < 8; ++k) sum += static_cast<double>(MulRn(v[s][k], v[s][k]));
    }
    // RmsNormKernel's reduction and pass 2 (kGroup = 256, the cached rows).
    sum = norm_rope_device::GroupSum<kNormThreads>(sum, warp_sums);
    const float mean = MulRn(DoubleToF32(sum), inv_n);
    const float r = DivRn(1.0f, SqrtRn(AddRn(mean, p.norm.eps)));
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t j = lane + int64_t{s} * kNormThreads;
      if (j < chunks) {
        float o[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) o[k] = MulRn(w[s][k], MulRn(v[s][k], r));
        StoreBf16<8>(p.norm.out + t * p.norm.out_stride + 8 * j, o);
      }
    }
  }
}

}  // namespace flashserve::kernels::mhc_device
