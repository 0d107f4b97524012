// Counting sort of the (token, rank) slots by expert and the FP8 quantise + gather of x. Device
// code of cuda/moe_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kSortThreads = 512;  // 16 warps: no spills in the fused gather
inline constexpr int kSortWarps = kSortThreads / 32;
inline constexpr int kGatherThreads = 256;  // D / 32 <= 256: one pass over a row

// Dynamic shared memory of MoeSortKernel: a histogram row of E counters per warp, then the E
// expert offsets.
__host__ __device__ inline size_t SortSmemBytes(int64_t n_experts) {
  return static_cast<size_t>(4 * n_experts * (kSortWarps + 1));
}

// Block-wide exclusive scan of a pair of int32 values (thread order); `tot` gets the totals.
// `red` holds 2 × kSortWarps values. Contains barriers: every thread must call it.
__device__ __forceinline__ void BlockExclusiveScan2(int32_t& a, int32_t& b, int32_t* red,
                                                    int32_t& tot_a, int32_t& tot_b) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int32_t ia = a, ib = b;  // inclusive within the warp
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int32_t ua = __shfl_up_sync(0xFFFFFFFFu, ia, off);
    const int32_t ub = __shfl_up_sync(0xFFFFFFFFu, ib, off);
    if (lane >= off) {
      ia += ua;
      ib += ub;
    }
  }
  if (lane == 31) {
    red[2 * warp] = ia;
    red[2 * warp + 1] = ib;
  }
  __syncthreads();
  int32_t wa = 0, wb = 0;
  tot_a = 0;
  tot_b = 0;
  for (int w = 0; w < kSortWarps; ++w) {
    if (w == warp) {
      wa = tot_a;
      wb = tot_b;
    }
    tot_a += red[2 * w];
    tot_b += red[2 * w + 1];
  }
  a = wa + ia - a;
  b = wb + ib - b;
  __syncthreads();  // red may be reused
}

// Quantises 32-value block `blk` of token t's x row once and writes its QDQ values to the
// token's top_k slot rows (token_slot must be complete).
__device__ __forceinline__ void QuantGatherBlock(const MoePermuteParams& p, int64_t t,
                                                 int64_t blk) {
  const int64_t nb = p.dim / 32;
  const uint16_t* xrow = p.x + t * p.x_stride;
  uint32_t x[16];
  const uint4* src = reinterpret_cast<const uint4*>(xrow + blk * 32);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint4 v = src[q];
    x[4 * q] = v.x;
    x[4 * q + 1] = v.y;
    x[4 * q + 2] = v.z;
    x[4 * q + 3] = v.w;
  }
  uint32_t sb, codes[8], qdq[16];
  QuantizeBlock32(x, &sb, codes, qdq);
  if (p.x_codes != nullptr) {
    uint4* dst = reinterpret_cast<uint4*>(p.x_codes + t * p.dim + blk * 32);
    dst[0] = make_uint4(codes[0], codes[1], codes[2], codes[3]);
    dst[1] = make_uint4(codes[4], codes[5], codes[6], codes[7]);
  }
  if (p.x_scales != nullptr) p.x_scales[t * nb + blk] = static_cast<uint8_t>(sb);
  for (int64_t j = 0; j < p.top_k; ++j) {
    const int64_t row = p.token_slot[t * p.top_k + j];
    uint4* dst = reinterpret_cast<uint4*>(p.xg + row * p.dim + blk * 32);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      dst[q] = make_uint4(qdq[4 * q], qdq[4 * q + 1], qdq[4 * q + 2], qdq[4 * q + 3]);
    }
  }
}

// Tokens over blocks, 32-value blocks of the row over threads.
__global__ void __launch_bounds__(kGatherThreads) MoeQuantGatherKernel(MoePermuteParams p) {
  const int64_t nb = p.dim / 32;
  for (int64_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    for (int64_t blk = threadIdx.x; blk < nb; blk += kGatherThreads) QuantGatherBlock(p, t, blk);
  }
}

// The whole counting sort in one block, O(m·k): warp w owns a contiguous range of the slots
// ((token, rank) order). (1) Each warp counts its range per expert into its own histogram row
// (shared atomics: counts do not depend on their order). (2) Per expert, an exclusive scan of
// the rows over the warps gives each warp its first position among the expert's slots; the
// totals are the counts. (3) A block scan of the counts gives the offsets and the tile list.
// (4) Each warp walks its range 32 slots at a time: __match_any_sync groups the lanes by
// expert, a slot's position is offset + its warp's running count + its rank among the lower
// lanes of its group, and the group's last lane advances the running count. Slots therefore
// keep (token, rank) order inside an expert: MoeCpu's stable order. The route's counts are not
// needed. With `gather` (small m: the launcher's choice), the block then also runs the quantise
// + gather (one launch fewer on the decode path).
__global__ void __launch_bounds__(kSortThreads) MoeSortKernel(MoePermuteParams p, bool gather) {
  extern __shared__ __align__(16) int32_t sort_smem[];
  __shared__ int32_t red[2 * kSortWarps];
  const int64_t n = p.n_experts;
  int32_t* hist = sort_smem;                    // [kSortWarps][E]
  int32_t* first = sort_smem + kSortWarps * n;  // [E]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t slots = p.m * p.top_k;
  const int64_t per_warp = (slots + kSortWarps * 32 - 1) / (kSortWarps * 32) * 32;
  const int64_t begin = min(slots, warp * per_warp), end = min(slots, begin + per_warp);
  int32_t* my_hist = hist + warp * n;
  auto expert_of = [&](int64_t i) -> int32_t {
    const int32_t e = i < end ? p.expert_ids[i] : -1;
    return e >= 0 && e < n ? e : -1;  // out-of-range ids are dropped, never written through
  };

  for (int64_t i = threadIdx.x; i < kSortWarps * n; i += kSortThreads) hist[i] = 0;
  __syncthreads();
  // (1) Four loads in flight per lane before their atomics.
  for (int64_t i0 = begin; i0 < end; i0 += 4 * 32) {
    int32_t e[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) e[u] = expert_of(i0 + u * 32 + lane);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (e[u] >= 0) atomicAdd(my_hist + e[u], 1);
    }
  }
  __syncthreads();
  // (2)
  for (int64_t e = threadIdx.x; e < n; e += kSortThreads) {
    int32_t run = 0;
    for (int w = 0; w < kSortWarps; ++w) {
      const int32_t c = hist[w * n + e];
      hist[w * n + e] = run;
      run += c;
    }
    first[e] = run;  // the count, until (3) replaces it by the offset
  }
  __syncthreads();
  // (3) Thread t scans experts [t·per_t, (t + 1)·per_t).
  const int64_t tr = p.tile_rows;
  const int64_t per_t = (n + kSortThreads - 1) / kSortThreads;
  const int64_t e0 = min(n, threadIdx.x * per_t), e1 = min(n, e0 + per_t);
  int32_t rows = 0, tiles = 0;
  for (int64_t e = e0; e < e1; ++e) {
    rows += first[e];
    tiles += static_cast<int32_t>((first[e] + tr - 1) / tr);
  }
  int32_t total_rows = 0, total_tiles = 0;
  BlockExclusiveScan2(rows, tiles, red, total_rows, total_tiles);
  for (int64_t e = e0; e < e1; ++e) {
    const int32_t c = first[e];
    const int32_t my_tiles = static_cast<int32_t>((c + tr - 1) / tr);
    p.offsets[e] = rows;
    for (int32_t i = 0; i < my_tiles; ++i) {
      p.tiles[2 * (tiles + i)] = static_cast<int32_t>(e);
      p.tiles[2 * (tiles + i) + 1] = static_cast<int32_t>(rows + i * tr);
    }
    first[e] = rows;
    rows += c;
    tiles += my_tiles;
  }
  if (threadIdx.x == 0) {
    p.offsets[n] = total_rows;
    *p.num_tiles = total_tiles;
  }
  __syncthreads();
  // (4) Ids and weights of 4 steps are loaded before their scatters (one memory round trip per
  // 4 steps; the steps themselves must run in order).
  const uint32_t lower = (1u << lane) - 1u;
  for (int64_t i0 = begin; i0 < end; i0 += 4 * 32) {
    int32_t eb[4];
    float wb[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * 32 + lane;
      eb[u] = expert_of(i);
      wb[u] = i < end ? p.expert_weights[i] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (i0 + u * 32 >= end) break;  // warp-uniform
      const int64_t i = i0 + u * 32 + lane;
      const int32_t e = eb[u];
      const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
      if (e >= 0) {
        const int32_t pos = first[e] + my_hist[e] + __popc(peers & lower);
        p.slot_token[pos] = static_cast<int32_t>(i / p.top_k);
        p.slot_weight[pos] = wb[u];
        p.token_slot[i] = pos;
      }
      __syncwarp();  // every lane has read my_hist before the group's last lane advances it
      if (e >= 0 && (peers >> lane) == 1u) my_hist[e] += __popc(peers);
      __syncwarp();
    }
  }
  if (!gather) return;
  __syncthreads();  // token_slot is complete (global writes of this block are visible after it)
  const int64_t nb = p.dim / 32;
  for (int64_t u = threadIdx.x; u < p.m * nb; u += kSortThreads)
    QuantGatherBlock(p, u / nb, u % nb);
}

}  // namespace flashserve::kernels::moe_device
