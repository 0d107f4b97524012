// Small-batch tensor-core body of the mixes pass (LaunchMhcMixes picks it at <=
// kMhcMixesSmallBatchAutoTokens tokens; forced, it runs up to kMhcMixesSmallBatchTokens). It
// computes exactly the large-batch body's arithmetic (mhc_tc_kernels.cuh), bit for bit, but
// spreads a slice's 32 chunks over 32 warps instead of walking them in one warp, and runs as ONE
// cooperative launch:
//
// Phase 1 (one item per (slice s, group j), 8 warps per block, items grid-strided):
//   warps 0..3: chunk 4j + w. The lane loads its own B fragments (FnFrag: LoadFnFrag, straight from
//     global / L2 into registers: 3 n-tiles x 3 pieces, no shared-memory staging), then per tile
//     of 16 tokens loads its two X words (the same A fragments as the large body) and runs the
//     same chain of 6 mma from zero per n-tile. The chunk results (not yet summed) go to the
//     workspace, [token][slice][mix][chunk].
//   warps 4..7: the Σx² FMA chains of this slice (a warp takes 8 tokens; lane 4m + q runs the large
//     body's chain of lane quarter q: group, stream, word ascending, lo then hi; the four quarters
//     combine as (q0 + q1) + (q2 + q3)), then (pre_in set) the fused collapse of the item's 32
//     dims for every token, HcPre's exact order. Σx² is per slice, so its blocks of 8 tokens are
//     dealt over the 8 groups x 4 aux warps of the slice (one block each up to 256 tokens).
// grid.sync()
// Phase 2 (one token pair per block, grid-strided): a thread per (token, slice, mix) adds its 32
//   chunk results in chunk order from zero (the large body's accumulator), into shared memory;
//   then warp 0 sums the slices in ascending order and runs FinishTokenLanes, the large body's
//   finish code.
//
// So a token's result is the same whichever body runs and whatever the batch (batch invariance
// holds across the threshold). Grid: min(slices x 8, co-resident blocks): every block is resident
// (cooperative launch), so grid.sync cannot deadlock, and items / pairs are grid-strided.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mhc/cuda/mhc_math.cuh"
#include "kernels/mhc/cuda/mhc_tc_kernels.cuh"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels::mhc_device {

inline constexpr int kSmallThreads = 256;
inline constexpr int kSmallChunkWarps = kMhcStreams;  // warps 0..3: one chunk each
inline constexpr int kSmallAuxWarps = 4;              // warps 4..7: Σx², collapse
inline constexpr int kSmallMaxSlices = static_cast<int>(kMhcMixesSmallBatchMaxSlices);
// Workspace floats per token and slice: 24 x 32 chunk results (Σx² sits after all of them).
inline constexpr int64_t kSmallChunkFloats = int64_t{kMhcMixes} * kTcChunks;

static_assert(kSmallThreads / 32 == kSmallChunkWarps + kSmallAuxWarps, "warp roles");
static_assert(kTcChunks == 32, "the chunk results of one mix are 8 float4");

// The fused collapse of 8 dims of one token: HcPre's order, p0*x0 + p1*x1 + p2*x2 + p3*x3, each
// product and sum rounded; x[c] holds the 8 bf16 of stream c.
__device__ __forceinline__ uint4 Collapse8(const uint4 (&x)[kMhcStreams],
                                           const float (&pre)[kMhcStreams]) {
  uint32_t out[4];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    float v = 0.0f;
#pragma unroll
    for (int c = 0; c < kMhcStreams; ++c) {
      const uint32_t w = Word(x[c], k / 2);
      const float xv = Bf16ToF32(k % 2 == 0 ? (w & 0xFFFFu) : (w >> 16));
      const float term = MulRn(pre[c], xv);
      v = c == 0 ? term : AddRn(v, term);
    }
    const uint32_t bits = F32ToBf16(v);
    out[k / 2] = k % 2 == 0 ? bits : (out[k / 2] | (bits << 16));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

template <bool kVec, int kFn, bool kCollapse>
struct SmallItem {
  const MhcMixesParams& p;
  float* chunk_ws;  // [token][slice][24][32] (written, then read after grid.sync: no __restrict__)
  float* sq_ws;     // [token][slice]
  int64_t slices;
  int64_t s;   // slice
  int j;       // group
  int64_t d0;  // first dim of the slice
  int lane;

  // Warps 0..3: chunk 4j + c over every tile.
  __device__ __forceinline__ void Chunk(int c) const {
    const int chunk = kMhcStreams * j + c;
    uint4 frag[kTcNTiles][kTcPieces];
#pragma unroll
    for (int nt = 0; nt < kTcNTiles; ++nt) FnFrag<kFn>(p, d0, chunk, nt, lane, frag[nt]);
    const int g = lane / 4;
    const int q = lane % 4;
    const int64_t d = d0 + kTcChunkDims * j + 8 * q;
    const int64_t tiles = mhc_tc::Tiles(p.tokens);
    uint4 next[2];
    LoadTile(0, c, d, next);
#pragma unroll 1
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const uint4 a = next[0];  // token g
      const uint4 b = next[1];  // token g + 8
      if (tile + 1 < tiles) LoadTile(tile + 1, c, d, next);
      float acc[kTcNTiles][4];
#pragma unroll
      for (int nt = 0; nt < kTcNTiles; ++nt) {
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[nt][k] = 0.0f;
          // The large body's chain: smallest piece first, two k16 halves each.
#pragma unroll
        for (int pc = kTcPieces - 1; pc >= 0; --pc) {
          const uint4 f = frag[nt][pc];
          MmaBf16(acc[nt], a.x, b.x, a.y, b.y, f.x, f.y);
          MmaBf16(acc[nt], a.z, b.z, a.w, b.w, f.z, f.w);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t t = tile * mhc_tc::kTileTokens + g + 8 * r;
        if (t < p.tokens) {
          float* out = chunk_ws + (t * slices + s) * kSmallChunkFloats + chunk;
#pragma unroll
          for (int nt = 0; nt < kTcNTiles; ++nt) {
#pragma unroll
            for (int k = 0; k < 2; ++k) out[(8 * nt + 2 * q + k) * kTcChunks] = acc[nt][2 * r + k];
          }
        }
      }
    }
  }

  __device__ __forceinline__ void LoadTile(int64_t tile, int c, int64_t d, uint4 (&x)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t t = tile * mhc_tc::kTileTokens + lane / 4 + 8 * r;
      const bool valid = t < p.tokens;
      const uint16_t* row = p.x + (valid ? t : 0) * p.x_stride;
      x[r] = LoadX8<kVec>(row + c * p.dim, p.dim, d, valid);
    }
  }

  // Aux warp w (0..3) of group j: Σx² of the slice for the token blocks 8 (4j + w) + 256i + m;
  // lane 4m + q runs quarter q's chain.
  __device__ __forceinline__ void SumSquares(int w) const {
    constexpr int kStep = 8 * kSmallAuxWarps * kTcGroups;  // 256 tokens
    const int q = lane % 4;
    for (int64_t t0 = 8 * (kSmallAuxWarps * j + w); t0 < p.tokens; t0 += kStep) {  // warp-uniform
      const int64_t t = t0 + lane / 4;
      const bool valid = t < p.tokens;
      const uint16_t* row = p.x + (valid ? t : 0) * p.x_stride;
      float sq = 0.0f;
#pragma unroll 8
      for (int g = 0; g < kTcGroups; ++g) {
        uint4 x[kMhcStreams];
#pragma unroll
        for (int c = 0; c < kMhcStreams; ++c) {
          x[c] = LoadX8<kVec>(row + c * p.dim, p.dim, d0 + kTcChunkDims * g + 8 * q, valid);
        }
#pragma unroll
        for (int c = 0; c < kMhcStreams; ++c) {
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const uint32_t w = Word(x[c], k);
            const float lo = Bf16ToF32(w & 0xFFFFu);
            const float hi = Bf16ToF32(w >> 16);
            sq = FmaRn(lo, lo, sq);
            sq = FmaRn(hi, hi, sq);
          }
        }
      }
      // (q0 + q1) + (q2 + q3), as the large body's Store.
      float v = AddRn(sq, __shfl_xor_sync(0xFFFFFFFFu, sq, 1));
      v = AddRn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
      if (valid && q == 0) sq_ws[t * slices + s] = v;
    }
  }

  // Aux thread `thread` (0..127): the collapse of dims d0 + 32j .. + 31 for every token, 8 dims
  // per thread.
  __device__ __forceinline__ void Collapse(int thread, bool coll_vec) const {
    const int64_t units = 4 * p.tokens;
    for (int64_t u = thread; u < units; u += 32 * kSmallAuxWarps) {
      const int64_t t = u / 4;
      const int64_t d = d0 + kTcChunkDims * j + 8 * (u % 4);
      if (d >= p.dim) continue;
      const uint16_t* row = p.x + t * p.x_stride;
      uint4 x[kMhcStreams];
      float pre[kMhcStreams];
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) {
        x[c] = LoadX8<kVec>(row + c * p.dim, p.dim, d, true);
        pre[c] = p.pre_in[t * kMhcStreams + c];
      }
      const uint4 out = Collapse8(x, pre);
      uint16_t* dst = p.collapsed + t * p.collapsed_stride + d;
      if (coll_vec) {
        *reinterpret_cast<uint4*>(dst) = out;
      } else {
        const uint32_t w[4] = {out.x, out.y, out.z, out.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          if (d + k < p.dim) dst[k] = static_cast<uint16_t>(w[k / 2] >> (16 * (k % 2)));
        }
      }
    }
  }
};

// Cooperative launch only (grid.sync). kVec: D % 8 == 0 and X rows 16-byte aligned. kFn: how
// fn's fragments are read (mhc_tc_kernels.cuh). workspace: kMhcMixesSmallBatch layout (mhc.h).
template <bool kVec, int kFn, bool kCollapse>
__global__ void __launch_bounds__(kSmallThreads, 2)
    MixesSmallTcKernel(MhcMixesParams p, float* workspace, bool coll_vec) {
  __shared__ float s_part[2][kSmallMaxSlices][kMhcMixes + 1];
  __shared__ float s_dot[2][kMhcMixes + 1];
  const int64_t slices = mhc_tc::Slices(p.dim);
  float* chunk_ws = workspace;
  float* sq_ws = workspace + p.tokens * slices * kSmallChunkFloats;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;

  // Phase 1.
  for (int64_t item = blockIdx.x; item < slices * kTcGroups; item += gridDim.x) {
    const int64_t s = item / kTcGroups;
    const int j = static_cast<int>(item % kTcGroups);
    const SmallItem<kVec, kFn, kCollapse> it{
        p, chunk_ws, sq_ws, slices, s, j, s * kMhcMixesSliceDims, lane};
    if (warp < kSmallChunkWarps) {
      it.Chunk(warp);
    } else {
      it.SumSquares(warp - kSmallChunkWarps);
      if constexpr (kCollapse) {
        it.Collapse(static_cast<int>(threadIdx.x) - 32 * kSmallChunkWarps, coll_vec);
      }
    }
  }
  cooperative_groups::this_grid().sync();

  // Phase 2.
  const int64_t pairs = (p.tokens + 1) / 2;
  const int64_t per_token = slices * kMhcMixes;
  for (int64_t pair = blockIdx.x; pair < pairs; pair += gridDim.x) {
    // Only real tokens are summed; a spare half (odd token count) finishes on half 0's sums,
    // as the large body's spare half computes on the last real row. Two items per thread per
    // round, their loads issued together.
    const int halves = 2 * pair + 1 < p.tokens ? 2 : 1;
    const int64_t items = halves * per_token;
    for (int64_t i0 = threadIdx.x; i0 < items; i0 += 2 * kSmallThreads) {
      float4 v[2][kTcChunks / 4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int64_t i = i0 + u * kSmallThreads;
        if (i < items) {
          const int64_t t = 2 * pair + i / per_token;
          const int64_t s = (i % per_token) / kMhcMixes;
          const float4* src = reinterpret_cast<const float4*>(
              chunk_ws + (t * slices + s) * kSmallChunkFloats + (i % kMhcMixes) * kTcChunks);
#pragma unroll
          for (int k = 0; k < kTcChunks / 4; ++k) v[u][k] = src[k];
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int64_t i = i0 + u * kSmallThreads;
        if (i < items) {
          // The large body's accumulator: from zero, chunk order, each addition rounded.
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k < kTcChunks / 4; ++k) {
            acc = AddRn(acc, v[u][k].x);
            acc = AddRn(acc, v[u][k].y);
            acc = AddRn(acc, v[u][k].z);
            acc = AddRn(acc, v[u][k].w);
          }
          s_part[i / per_token][(i % per_token) / kMhcMixes][i % kMhcMixes] = acc;
        }
      }
    }
    for (int64_t i = threadIdx.x; i < halves * slices; i += kSmallThreads) {
      const int64_t t = 2 * pair + i / slices;
      s_part[i / slices][i % slices][kMhcMixes] = sq_ws[t * slices + i % slices];
    }
    __syncthreads();
    if (warp == 0) {
      const int half = lane / 16;
      const int src = half < halves ? half : 0;
      const int e = lane % 16;
      const bool two = e + 16 <= kMhcMixes;  // lanes 0..8 also sum value 16 + e
      float v0 = s_part[src][0][e];
      float v1 = two ? s_part[src][0][16 + e] : 0.0f;
      for (int64_t s = 1; s < slices; ++s) {
        v0 = AddRn(v0, s_part[src][s][e]);
        if (two) v1 = AddRn(v1, s_part[src][s][16 + e]);
      }
      s_dot[half][e] = v0;
      if (two) s_dot[half][16 + e] = v1;
      __syncwarp();
      const int64_t t = 2 * pair + half;
      FinishTokenLanes(p, s_dot[half], t, t < p.tokens, lane);
    }
    __syncthreads();  // s_part / s_dot are rewritten for the next pair
  }
}

}  // namespace flashserve::kernels::mhc_device
