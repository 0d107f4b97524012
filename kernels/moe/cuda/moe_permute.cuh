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
// token's top_k slot rows (token_slot must be complete), or with xg_by_token to row t only.
__device__ __forceinline__ void QuantGatherBlock(const MoePermuteParams& p, int64_t t,
                                                 int64_t blk) {
  const int64_t nb = p.dim / 32;
  const uint16_t* xrow = p.x + t * p.x_stride;
  uint32_t x[16];
  LoadBlock32(xrow + blk * 32, x);
  uint32_t sb, codes[8], qdq[16];
  QuantizeBlock32(x, &sb, codes, qdq);
  if (p.x_codes != nullptr) {
    uint4* dst = reinterpret_cast<uint4*>(p.x_codes + t * p.dim + blk * 32);
    dst[0] = make_uint4(codes[0], codes[1], codes[2], codes[3]);
    dst[1] = make_uint4(codes[4], codes[5], codes[6], codes[7]);
  }
  if (p.x_scales != nullptr) p.x_scales[t * nb + blk] = static_cast<uint8_t>(sb);
  const int64_t copies = p.xg_by_token ? 1 : p.top_k;
  for (int64_t j = 0; j < copies; ++j) {
    const int64_t row = p.xg_by_token ? t : p.token_slot[t * p.top_k + j];
    StoreQdqBlock(reinterpret_cast<uint4*>(p.xg + row * p.dim + blk * 32), qdq, p.wgmma_rs_order);
  }
}

// Tokens over blocks, 32-value blocks of the row over threads.
__global__ void __launch_bounds__(kGatherThreads) MoeQuantGatherKernel(MoePermuteParams p) {
  const int64_t nb = p.dim / 32;
  for (int64_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    for (int64_t blk = threadIdx.x; blk < nb; blk += kGatherThreads) QuantGatherBlock(p, t, blk);
  }
}

// ---- The counting sort's phases (shared by the one-block and the multi-block sort) -----------
// The slots are cut into contiguous ranges, one per warp ((token, rank) order). A slot's row is
// offsets[e] + (the number of slots of expert e before it), which both sorts compute as the sum of
// per-expert bases: the expert's offset, the slots of e in earlier blocks (multi-block only), in
// earlier warps of the block (a scan of per-warp histograms), and in earlier steps / lower lanes
// of the warp (a running count and __match_any_sync). So both write MoeCpu's stable order.

// The expert of slot i, or -1 past `end` or for an out-of-range id (dropped, never written
// through).
__device__ __forceinline__ int32_t SortExpertOf(const MoePermuteParams& p, int64_t i, int64_t end) {
  const int32_t e = i < end ? p.expert_ids[i] : -1;
  return e >= 0 && e < p.n_experts ? e : -1;
}

// (1) Counts the calling warp's slots [begin, end) per expert into `hist` (shared; atomics, so
// the counts do not depend on their order). Four loads in flight per lane before their atomics.
__device__ __forceinline__ void SortCountRange(const MoePermuteParams& p, int64_t begin,
                                               int64_t end, int32_t* hist) {
  const int lane = threadIdx.x % 32;
  for (int64_t i0 = begin; i0 < end; i0 += 4 * 32) {
    int32_t e[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) e[u] = SortExpertOf(p, i0 + u * 32 + lane, end);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (e[u] >= 0) atomicAdd(hist + e[u], 1);
    }
  }
}

// (2) Per expert, an exclusive scan of the kSortWarps histogram rows in place (row w becomes the
// count of the expert's slots in warps before w); returns nothing, `total[e]` gets the column sum.
__device__ __forceinline__ void SortScanWarps(int64_t n, int32_t* hist, int32_t* total) {
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    int32_t run = 0;
    for (int w = 0; w < kSortWarps; ++w) {
      const int32_t c = hist[w * n + e];
      hist[w * n + e] = run;
      run += c;
    }
    total[e] = run;
  }
}

// (3) From the per-expert counts in first[0, E): the offsets, the tile list and num_tiles; first[e]
// becomes expert e's offset. Thread t scans experts [t·per_t, (t + 1)·per_t). Contains barriers:
// every thread of a kSortThreads block calls it.
__device__ __forceinline__ void SortOffsetsAndTiles(const MoePermuteParams& p, int32_t* first,
                                                    int32_t* red) {
  const int64_t n = p.n_experts;
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
    if (p.ring_counters != nullptr) {
      for (int i = 0; i < 4; ++i) p.ring_counters[i] = 0;
    }
  }
  __syncthreads();
}

// (4) Stable scatter of the calling warp's slots [begin, end): slot i of expert e goes to row
// first[e] + my_hist[e] + (its rank among the lower lanes of its __match_any_sync group), and the
// group's last lane advances my_hist[e]. Ids and weights of 4 steps are loaded before their
// scatters (one memory round trip per 4 steps; the steps themselves must run in order).
__device__ __forceinline__ void SortScatterRange(const MoePermuteParams& p, int64_t begin,
                                                 int64_t end, const int32_t* first,
                                                 int32_t* my_hist) {
  const int lane = threadIdx.x % 32;
  const uint32_t lower = (1u << lane) - 1u;
  for (int64_t i0 = begin; i0 < end; i0 += 4 * 32) {
    int32_t eb[4];
    float wb[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * 32 + lane;
      eb[u] = SortExpertOf(p, i, end);
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
}

// Slots of each warp of a block owning `chunk` slots (a multiple of 32 when chunk is a multiple
// of kSortThreads).
__device__ __forceinline__ int64_t SortWarpSlots(int64_t chunk) {
  return (chunk + kSortWarps * 32 - 1) / (kSortWarps * 32) * 32;
}

// ---- The one-block sort (small m) ------------------------------------------------------------
// The whole counting sort in one block, O(m·k): warp w owns a contiguous range of the slots;
// phases (1) to (4) above with the expert offsets as the only base. The route's counts are not
// needed. With `gather` (small m: the launcher's choice), the block then also runs the quantise
// + gather (one launch fewer on the decode path).
__global__ void __launch_bounds__(kSortThreads) MoeSortKernel(MoePermuteParams p, bool gather) {
  extern __shared__ __align__(16) int32_t sort_smem[];
  __shared__ int32_t red[2 * kSortWarps];
  const int64_t n = p.n_experts;
  int32_t* hist = sort_smem;                    // [kSortWarps][E]
  int32_t* first = sort_smem + kSortWarps * n;  // [E]
  const int warp = threadIdx.x / 32;
  const int64_t slots = p.m * p.top_k;
  const int64_t per_warp = SortWarpSlots(slots);
  const int64_t begin = min(slots, warp * per_warp), end = min(slots, begin + per_warp);
  int32_t* my_hist = hist + warp * n;

  for (int64_t i = threadIdx.x; i < kSortWarps * n; i += kSortThreads) hist[i] = 0;
  __syncthreads();
  SortCountRange(p, begin, end, my_hist);
  __syncthreads();
  SortScanWarps(n, hist, first);  // first[e] = the count, until (3) makes it the offset
  __syncthreads();
  SortOffsetsAndTiles(p, first, red);
  SortScatterRange(p, begin, end, first, my_hist);
  if (!gather) return;
  __syncthreads();  // token_slot is complete (global writes of this block are visible after it)
  const int64_t nb = p.dim / 32;
  for (int64_t u = threadIdx.x; u < p.m * nb; u += kSortThreads)
    QuantGatherBlock(p, u / nb, u % nb);
}

// ---- The multi-block sort (large m): count, scan, scatter ----------------------------------
// Block b owns slots [b·chunk, (b + 1)·chunk) (MoeCudaPlanSort); `scratch` is [blocks][E] int32.

// Dynamic shared memory of MoeSortCountKernel: one histogram row of E counters.
__host__ __device__ inline size_t SortCountSmemBytes(int64_t n_experts) {
  return static_cast<size_t>(4 * n_experts);
}

// (1) per block: the block's count of each expert, scratch[b][e].
__global__ void __launch_bounds__(kSortThreads)
    MoeSortCountKernel(MoePermuteParams p, int64_t chunk) {
  extern __shared__ __align__(16) int32_t count_smem[];  // [E]
  const int64_t n = p.n_experts;
  const int64_t slots = p.m * p.top_k;
  const int64_t b = blockIdx.x;
  const int64_t cend = min(slots, (b + 1) * chunk);
  const int64_t per_warp = SortWarpSlots(chunk);
  const int64_t begin = min(cend, b * chunk + (threadIdx.x / 32) * per_warp);
  const int64_t end = min(cend, begin + per_warp);
  for (int64_t e = threadIdx.x; e < n; e += kSortThreads) count_smem[e] = 0;
  __syncthreads();
  SortCountRange(p, begin, end, count_smem);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < n; e += kSortThreads) p.sort_scratch[b * n + e] = count_smem[e];
}

// Dynamic shared memory of MoeSortScanKernel: the E counts.
__host__ __device__ inline size_t SortScanSmemBytes(int64_t n_experts) {
  return static_cast<size_t>(4 * n_experts);
}

// (2) + (3), one block: per expert an exclusive scan over the blocks in place (scratch[b][e]
// becomes the count of e's slots in blocks before b; 8 loads in flight per thread), then the
// offsets and the tile list from the totals, as the one-block sort.
__global__ void __launch_bounds__(kSortThreads)
    MoeSortScanKernel(MoePermuteParams p, int64_t blocks) {
  extern __shared__ __align__(16) int32_t scan_smem[];  // [E]
  __shared__ int32_t red[2 * kSortWarps];
  const int64_t n = p.n_experts;
  constexpr int kBatch = 8;
  for (int64_t e = threadIdx.x; e < n; e += kSortThreads) {
    int32_t run = 0;
    for (int64_t b0 = 0; b0 < blocks; b0 += kBatch) {
      int32_t c[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        c[u] = b0 + u < blocks ? p.sort_scratch[(b0 + u) * n + e] : 0;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (b0 + u < blocks) p.sort_scratch[(b0 + u) * n + e] = run;
        run += c[u];
      }
    }
    scan_smem[e] = run;
  }
  __syncthreads();
  SortOffsetsAndTiles(p, scan_smem, red);
}

// Dynamic shared memory of MoeSortScatterKernel: as the one-block sort's.
__host__ __device__ inline size_t SortScatterSmemBytes(int64_t n_experts) {
  return SortSmemBytes(n_experts);
}

// (1), (2), (4) per block: the per-warp histograms of its chunk and their scan, with the base
// offsets[e] + scratch[b][e] (the slots of e in all earlier blocks), then the stable scatter.
__global__ void __launch_bounds__(kSortThreads)
    MoeSortScatterKernel(MoePermuteParams p, int64_t chunk) {
  extern __shared__ __align__(16) int32_t scatter_smem[];
  const int64_t n = p.n_experts;
  int32_t* hist = scatter_smem;                    // [kSortWarps][E]
  int32_t* first = scatter_smem + kSortWarps * n;  // [E]
  const int warp = threadIdx.x / 32;
  const int64_t slots = p.m * p.top_k;
  const int64_t b = blockIdx.x;
  const int64_t cend = min(slots, (b + 1) * chunk);
  const int64_t per_warp = SortWarpSlots(chunk);
  const int64_t begin = min(cend, b * chunk + warp * per_warp);
  const int64_t end = min(cend, begin + per_warp);
  int32_t* my_hist = hist + warp * n;

  for (int64_t i = threadIdx.x; i < kSortWarps * n; i += kSortThreads) hist[i] = 0;
  __syncthreads();
  SortCountRange(p, begin, end, my_hist);
  __syncthreads();
  SortScanWarps(n, hist, first);  // first[e] = the block's count (unused)
  for (int64_t e = threadIdx.x; e < n; e += kSortThreads) {
    first[e] = p.offsets[e] + p.sort_scratch[b * n + e];  // same thread as its scan: no barrier
  }
  __syncthreads();
  SortScatterRange(p, begin, end, first, my_hist);
}

}  // namespace flashserve::kernels::moe_device
