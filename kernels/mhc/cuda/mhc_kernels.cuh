// Device bodies of the mHC ops (launchers in mhc_launch.cu; per-value arithmetic and the Sinkhorn
// port in mhc_math.cuh).
//
// Mixes pass, kernel 1 (MixesPartialKernel): grid (blocks over token tiles of 32, slices of 256
// dims of D). A block stages fn[:, c*D + slice] (24 x 4 x 256 fp32, 96 KB) in shared memory once,
// then walks its token tiles; in a tile each warp takes 4 tokens: lane l handles the dim pairs d =
// slice + 2l + 64j (j = 0..3) of the 4 streams, accumulating 4 x 24 dot products and 4 sums of
// squares with fp32 FMAs (x read once, each fn value read from shared memory once per 4 tokens).
// The warp's 96 dot products are reduced by a transposing butterfly (5 exchange rounds, each
// halving the values a lane holds), so lane l ends with the warp sums of values 3l..3l+2; the
// partial sums go to the workspace [slice][25][tokens]. With pre_in set, the same loads also
// produce the collapse (HcPre's exact fp32 order). Kernel 2 (MixesFinishKernel): one thread per
// token sums the slices in ascending order (fp32), forms r and the mixes with MhcMixesCpu's
// operations, and runs the Sinkhorn port. Every token is reduced by the same tree whatever its slot
// in the tile, so outputs do not depend on the batch.
//
// HcPre / HcPost: elementwise, kW (8 when rows are 16-byte aligned, else 1) dims per thread,
// grid-stride over tokens x D/kW, the CPU's fp32 operations in the CPU's order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mhc/cuda/mhc_math.cuh"
#include "kernels/mhc/mhc.h"
#include "kernels/norm_rope/cuda/norm_rope_rows.cuh"

namespace flashserve::kernels::mhc_device {

inline constexpr int kMixThreads = 256;
inline constexpr int kTokensPerWarp = 4;
inline constexpr int kTokensPerTile = (kMixThreads / 32) * kTokensPerWarp;  // 32
inline constexpr int kSliceDims = static_cast<int>(kMhcMixesSliceDims);
inline constexpr int kPartials = kMhcMixes + 1;  // 24 dot products + the sum of squares
inline constexpr int kWarpValues = kTokensPerWarp * kMhcMixes;  // 96 = 32 lanes x 3
inline constexpr size_t kMixSmemBytes =
    sizeof(float) * kMhcMixes * kMhcStreams * static_cast<size_t>(kSliceDims);  // 96 KB
inline constexpr int kFinishThreads = 128;
inline constexpr int kElemThreads = 256;

static_assert(kSliceDims % 64 == 0, "a warp covers 64 dims (32 pairs) per step");
static_assert(kWarpValues == 32 * 3, "the butterfly leaves 3 values per lane");

// One exchange round of the transposing butterfly: lanes whose `mask` bit is set keep the upper
// kHalf values, the others the lower; each adds its partner's copy of the half it keeps.
template <int kHalf>
__device__ __forceinline__ void ButterflyRound(float (&v)[kWarpValues], int mask) {
  const bool upper = (threadIdx.x & mask) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float send = upper ? v[i] : v[i + kHalf];
    const float keep = upper ? v[i + kHalf] : v[i];
    v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, mask);
  }
}

// After the 5 rounds, v[i] (i < 3) of lane l is the warp sum of value 3l + i: round k keeps the
// half selected by lane bit 4-k, so the surviving index is i + 48 b4 + 24 b3 + 12 b2 + 6 b1 + 3 b0.
__device__ __forceinline__ void ReduceScatter(float (&v)[kWarpValues]) {
  ButterflyRound<48>(v, 16);
  ButterflyRound<24>(v, 8);
  ButterflyRound<12>(v, 4);
  ButterflyRound<6>(v, 2);
  ButterflyRound<3>(v, 1);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Values d and d + 1 of one stream row as a bf16 pair (d low; zeros past D). kPairVec: one
// 32-bit load (D even, rows 4-byte aligned).
template <bool kPairVec>
__device__ __forceinline__ uint32_t LoadPairBits(const uint16_t* row, int64_t dim, int64_t d) {
  if constexpr (kPairVec) {
    return d < dim ? *reinterpret_cast<const uint32_t*>(row + d) : 0u;
  } else {
    const uint32_t lo = d < dim ? row[d] : 0u;
    const uint32_t hi = d + 1 < dim ? row[d + 1] : 0u;
    return lo | (hi << 16);
  }
}

// The pairs at dim d of the 4 streams of a warp's 4 tokens (zeros for tokens past the end).
template <bool kPairVec>
__device__ __forceinline__ void LoadStep(const MhcMixesParams& p, int64_t tok0, int64_t d,
                                         uint32_t (&w)[kMhcStreams][kTokensPerWarp]) {
#pragma unroll
  for (int t = 0; t < kTokensPerWarp; ++t) {
    const bool valid = tok0 + t < p.tokens;
    const uint16_t* row = valid ? p.x + (tok0 + t) * p.x_stride : p.x;
#pragma unroll
    for (int c = 0; c < kMhcStreams; ++c) {
      w[c][t] = valid ? LoadPairBits<kPairVec>(row + c * p.dim, p.dim, d) : 0u;
    }
  }
}

// Grid (blocks over token tiles, slices); each block stages its slice of fn once and walks token
// tiles grid-stride. 255 registers (one block per SM): 96 accumulators, and the next step's x
// words loaded while the current step computes, so loads stay in flight.
template <bool kPairVec, bool kCollapse>
__global__ void __launch_bounds__(kMixThreads, 1)
    MixesPartialKernel(MhcMixesParams p, float* __restrict__ workspace) {
  extern __shared__ float4 smem_raw[];
  float* s_fn = reinterpret_cast<float*>(smem_raw);  // [24][4][kSliceDims]
  constexpr int kSteps = kSliceDims / 64;
  const int64_t dim = p.dim;
  const int64_t width = kMhcStreams * dim;
  const int64_t tokens = p.tokens;
  const int64_t tiles = (tokens + kTokensPerTile - 1) / kTokensPerTile;
  const int64_t d0 = int64_t{blockIdx.y} * kSliceDims;

#pragma unroll 8
  for (int i = threadIdx.x; i < kMhcMixes * kMhcStreams * kSliceDims; i += kMixThreads) {
    const int m = i / (kMhcStreams * kSliceDims);
    const int c = (i / kSliceDims) % kMhcStreams;
    const int64_t d = d0 + i % kSliceDims;
    s_fn[i] = d < dim ? p.fn[m * width + c * dim + d] : 0.0f;
  }
  __syncthreads();  // the only block-wide barrier: warps are independent from here on

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const float2* fn2 = reinterpret_cast<const float2*>(s_fn);
  float* slice_ws = workspace + int64_t{blockIdx.y} * kPartials * tokens;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t tok0 = tile * kTokensPerTile + warp * kTokensPerWarp;
    if (tok0 >= tokens) continue;  // warp-uniform
    float acc[kWarpValues];        // [token][mix]
    float sq[kTokensPerWarp];
    float pre_in[kTokensPerWarp][kMhcStreams];
#pragma unroll
    for (int i = 0; i < kWarpValues; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int t = 0; t < kTokensPerWarp; ++t) {
      sq[t] = 0.0f;
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) {
        pre_in[t][c] =
            kCollapse && tok0 + t < tokens ? p.pre_in[(tok0 + t) * kMhcStreams + c] : 0.0f;
      }
    }
    uint32_t cur[kMhcStreams][kTokensPerWarp];
    LoadStep<kPairVec>(p, tok0, d0 + 2 * lane, cur);
#pragma unroll 1
    for (int j = 0; j < kSteps; ++j) {
      const int dl = 2 * lane + 64 * j;  // pair offset inside the slice
      const int64_t d = d0 + dl;
      uint32_t next[kMhcStreams][kTokensPerWarp] = {};
      if (j + 1 < kSteps) LoadStep<kPairVec>(p, tok0, d + 64, next);
      float coll[kTokensPerWarp][2] = {};
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) {
        float xa[kTokensPerWarp];
        float xb[kTokensPerWarp];
#pragma unroll
        for (int t = 0; t < kTokensPerWarp; ++t) {
          xa[t] = Bf16ToF32(cur[c][t] & 0xFFFFu);
          xb[t] = Bf16ToF32(cur[c][t] >> 16);
        }
#pragma unroll
        for (int m = 0; m < kMhcMixes; ++m) {
          const float2 w = fn2[((m * kMhcStreams + c) * kSliceDims + dl) / 2];
#pragma unroll
          for (int t = 0; t < kTokensPerWarp; ++t) {
            acc[t * kMhcMixes + m] = FmaRn(xa[t], w.x, acc[t * kMhcMixes + m]);
            acc[t * kMhcMixes + m] = FmaRn(xb[t], w.y, acc[t * kMhcMixes + m]);
          }
        }
#pragma unroll
        for (int t = 0; t < kTokensPerWarp; ++t) {
          sq[t] = FmaRn(xa[t], xa[t], sq[t]);
          sq[t] = FmaRn(xb[t], xb[t], sq[t]);
          if constexpr (kCollapse) {
            // HcPre's order: p0*x0, then + p1*x1, + p2*x2, + p3*x3, each rounded.
            const float pa = MulRn(pre_in[t][c], xa[t]);
            const float pb = MulRn(pre_in[t][c], xb[t]);
            coll[t][0] = c == 0 ? pa : AddRn(coll[t][0], pa);
            coll[t][1] = c == 0 ? pb : AddRn(coll[t][1], pb);
          }
        }
      }
      if constexpr (kCollapse) {
#pragma unroll
        for (int t = 0; t < kTokensPerWarp; ++t) {
          if (tok0 + t >= tokens) continue;
          uint16_t* out = p.collapsed + (tok0 + t) * p.collapsed_stride;
          if (d < dim) out[d] = static_cast<uint16_t>(F32ToBf16(coll[t][0]));
          if (d + 1 < dim) out[d + 1] = static_cast<uint16_t>(F32ToBf16(coll[t][1]));
        }
      }
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) {
#pragma unroll
        for (int t = 0; t < kTokensPerWarp; ++t) cur[c][t] = next[c][t];
      }
    }

    ReduceScatter(acc);
    float my_sq = 0.0f;
#pragma unroll
    for (int t = 0; t < kTokensPerWarp; ++t) {
      const float total = WarpSum(sq[t]);
      if (lane == t) my_sq = total;
    }
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const int value = 3 * lane + i;
      const int64_t t = tok0 + value / kMhcMixes;
      if (t < tokens) slice_ws[(value % kMhcMixes) * tokens + t] = acc[i];
    }
    if (lane < kTokensPerWarp && tok0 + lane < tokens) {
      slice_ws[kMhcMixes * tokens + tok0 + lane] = my_sq;
    }
  }
}

// One thread per token: slices summed in ascending order, then MhcMixesCpu's r, mixes and tail.
__global__ void __launch_bounds__(kFinishThreads)
    MixesFinishKernel(MhcMixesParams p, const float* __restrict__ workspace, int64_t slices) {
  const int64_t tokens = p.tokens;
  float base[kMhcMixes];
#pragma unroll
  for (int m = 0; m < kMhcMixes; ++m) base[m] = p.base[m];
  const float scale[3] = {p.scale[0], p.scale[1], p.scale[2]};
  const float width_f = Int64ToF32(kMhcStreams * p.dim);
  for (int64_t t = int64_t{blockIdx.x} * kFinishThreads + threadIdx.x; t < tokens;
       t += int64_t{gridDim.x} * kFinishThreads) {
    float dot[kMhcMixes];
#pragma unroll
    for (int m = 0; m < kMhcMixes; ++m) dot[m] = workspace[m * tokens + t];
    float sq = workspace[kMhcMixes * tokens + t];
    for (int64_t s = 1; s < slices; ++s) {
      const float* w = workspace + s * kPartials * tokens + t;
#pragma unroll
      for (int m = 0; m < kMhcMixes; ++m) dot[m] = AddRn(dot[m], w[m * tokens]);
      sq = AddRn(sq, w[kMhcMixes * tokens]);
    }
    // MhcMixesCpu: mean = sum / fp32(width) (a division), r = 1 / sqrt(mean + norm_eps).
    const float mean = DivRn(sq, width_f);
    const float r = DivRn(1.0f, SqrtRn(AddRn(mean, p.norm_eps)));
    float mixes[kMhcMixes];
#pragma unroll
    for (int m = 0; m < kMhcMixes; ++m) mixes[m] = MulRn(dot[m], r);
    if (p.mixes != nullptr) {
#pragma unroll
      for (int m = 0; m < kMhcMixes; ++m) p.mixes[t * kMhcMixes + m] = mixes[m];
    }
    SplitSinkhorn(mixes, base, scale, p.sinkhorn_iters, p.hc_eps, p.pre + t * kMhcStreams,
                  p.post + t * kMhcStreams, p.comb + t * kMhcStreams * kMhcStreams);
  }
}

// ---- elementwise -------------------------------------------------------------------------------

// 8 (or 1) bf16 values as fp32 and back: the RMSNorm kernel's row helpers (the same bits).
using norm_rope_device::LoadBf16;
using norm_rope_device::StoreBf16;

// out[t] = bf16(((p0*x0 + p1*x1) + p2*x2) + p3*x3), as mhc_cpu::CollapseToken.
template <int kW>
__global__ void __launch_bounds__(kElemThreads) HcPreKernel(HcPreParams p) {
  const int64_t chunks = p.dim / kW;
  const int64_t total = p.tokens * chunks;
  for (int64_t g = int64_t{blockIdx.x} * kElemThreads + threadIdx.x; g < total;
       g += int64_t{gridDim.x} * kElemThreads) {
    const int64_t t = g / chunks;
    const int64_t e = (g - t * chunks) * kW;
    const uint16_t* x = p.x + t * p.x_stride + e;
    const float* pre = p.pre + t * kMhcStreams;
    float acc[kW];
    float v[kW];
    LoadBf16<kW>(x, v);
    const float p0 = pre[0];
#pragma unroll
    for (int i = 0; i < kW; ++i) acc[i] = MulRn(p0, v[i]);
#pragma unroll
    for (int c = 1; c < kMhcStreams; ++c) {
      LoadBf16<kW>(x + c * p.dim, v);
      const float pc = pre[c];
#pragma unroll
      for (int i = 0; i < kW; ++i) acc[i] = AddRn(acc[i], MulRn(pc, v[i]));
    }
    StoreBf16<kW>(p.out + t * p.out_stride + e, acc);
  }
}

// out[j] = bf16(post[j]*f + (((c0j*R0 + c1j*R1) + c2j*R2) + c3j*R3)), as HcPostCpu. All four
// sources are read before any destination is written (in place is safe).
template <int kW>
__global__ void __launch_bounds__(kElemThreads) HcPostKernel(HcPostParams p) {
  const int64_t chunks = p.dim / kW;
  const int64_t total = p.tokens * chunks;
  for (int64_t g = int64_t{blockIdx.x} * kElemThreads + threadIdx.x; g < total;
       g += int64_t{gridDim.x} * kElemThreads) {
    const int64_t t = g / chunks;
    const int64_t e = (g - t * chunks) * kW;
    const float* post = p.post + t * kMhcStreams;
    const float* comb = p.comb + t * kMhcStreams * kMhcStreams;  // [source i][destination j]
    float f[kW];
    float r[kMhcStreams][kW];
    LoadBf16<kW>(p.f + t * p.f_stride + e, f);
    const uint16_t* res = p.residual + t * p.residual_stride + e;
#pragma unroll
    for (int i = 0; i < kMhcStreams; ++i) LoadBf16<kW>(res + i * p.dim, r[i]);
    uint16_t* out = p.out + t * p.out_stride + e;
#pragma unroll
    for (int j = 0; j < kMhcStreams; ++j) {
      const float pj = post[j];
      float c[kMhcStreams];
#pragma unroll
      for (int i = 0; i < kMhcStreams; ++i) c[i] = comb[i * kMhcStreams + j];
      float y[kW];
#pragma unroll
      for (int k = 0; k < kW; ++k) {
        float rk[kMhcStreams];
#pragma unroll
        for (int i = 0; i < kMhcStreams; ++i) rk[i] = r[i][k];
        y[k] = HcPostValue(pj, c, f[k], rk);
      }
      StoreBf16<kW>(out + j * p.dim, y);
    }
  }
}

}  // namespace flashserve::kernels::mhc_device
