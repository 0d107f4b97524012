// Device code of the split selection (indexer_launch.cu only; not a public header): one row over
// many CTAs, for rows longer than select_plan.h's thresholds. Four passes (README.md "CUDA"):
//   SplitHistPass<0>    every CTA: shared histogram of the high byte of the order key over its
//                       chunk, added into the row's global histogram (atomics)
//   SplitHistPass<1>    every CTA: finds the high byte's bin of the k-th key from that histogram,
//                       then the same over the low byte of the keys in that bin
//   SplitCountPass      every CTA: the full 16-bit threshold K and `need` from both histograms;
//                       its chunk's (# keys > K, # keys == K)
//   SplitWritePass      every CTA: the exclusive prefix of the earlier CTAs' counts, then the
//                       ordered pass over its chunk (the one-block kernel's, with that carry in)
// run either as ONE cooperative launch (SplitFusedKernel: the histograms zeroed in the kernel,
// grid.sync() between the passes; the launcher's choice whenever the whole grid is resident) or
// as a memset and four kernels in stream order (SplitHistKernel<0> to SplitWriteKernel; passes
// 1-3 programmatic dependents of the pass before, kernels/common/pdl.cuh: scheduled while it
// drains, they read nothing before their griddepcontrol.wait). The workspace written by one pass
// and read by the next is read from L2 (ld.global.cg: never an L1 line of this SM, nor the
// non-coherent path).
// Picked items and output slots are exactly the one-block kernel's, hence the CPU's.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/pdl.cuh"
#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/select_plan.h"

namespace flashserve::kernels::indexer_device {

inline constexpr int kSplitThreads = static_cast<int>(indexer_plan::kSplitThreads);
inline constexpr int kHistWords = static_cast<int>(indexer_plan::kHistWords);

// The workspace of one call (select_plan.h layout) and the split's shape.
struct SplitWorkspace {
  uint32_t* hist;    // [tokens][512]: 256 high-byte bins, then 256 low-byte bins; zeroed
  uint32_t* counts;  // [tokens][ctas][2]: (> K, == K) per CTA
  int64_t chunk;     // items per CTA
  int64_t ctas;      // CTAs per row (gridDim.x)
  int64_t tokens;
};

// For a complete 256-bin histogram (global; Σ >= k >= 1): the bin b holding the k-th largest key
// and the number of keys in bins above b. All kSplitThreads threads call it; thread t reads bin
// 255 − t, so the exclusive scan over threads is the count above that bin.
__device__ __forceinline__ void FindBin(const uint32_t* hist, uint32_t k, uint32_t* bin,
                                        uint32_t* above) {
  __shared__ uint32_t s_bin, s_above;
  const int t = static_cast<int>(threadIdx.x);
  const uint32_t h = __ldcg(hist + 255 - t);  // L2: written by other CTAs of this launch
  uint32_t total = 0;
  const uint32_t excl = BlockExclusiveScan<kSplitThreads>(h, &total);
  if (excl < k && excl + h >= k) {  // exactly one thread: the counts above grow with t
    s_bin = static_cast<uint32_t>(255 - t);
    s_above = excl;
  }
  __syncthreads();
  *bin = s_bin;
  *above = s_above;
}

struct SplitThreshold {
  uint32_t key;   // the 16-bit order key of the k-th item
  uint32_t need;  // items equal to `key` that are picked (the lowest ones), >= 1
};

__device__ __forceinline__ SplitThreshold FindThreshold(const uint32_t* row_hist, uint32_t k) {
  uint32_t hi = 0, above_hi = 0, lo = 0, above_lo = 0;
  FindBin(row_hist, k, &hi, &above_hi);
  FindBin(row_hist + 256, k - above_hi, &lo, &above_lo);
  return {(hi << 8) | lo, k - above_hi - above_lo};
}

// The per-item bodies of the passes, shared by the four-launch form (items loaded per pass) and
// the fused kernel's one-row form (items loaded once, kept in registers). A thread's batch is
// kPer consecutive items from i0; those at or past c1 do not count.

// Histogram pass 0 (high byte of every key) or 1 (low byte of the keys whose high byte is hi)
// over one batch. Scores of neighbouring positions mostly share the high byte (sign and exponent),
// so a thread counts runs of one bin over its consecutive items and adds each run once: far fewer
// same-address shared atomics than one per item.
template <int kPass, int kPer>
__device__ __forceinline__ void HistBatch(const uint16_t (&v)[kPer], int64_t i0, int64_t c1,
                                          uint32_t hi, uint32_t* hist, uint32_t& run_bin,
                                          uint32_t& run) {
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const uint32_t key = OrderKey(v[e]);
    if (i0 + e < c1 && (kPass == 0 || (key >> 8) == hi)) {
      const uint32_t bin = kPass == 0 ? key >> 8 : key & 0xFF;
      if (bin != run_bin) {
        if (run != 0) atomicAdd(&hist[run_bin], run);
        run_bin = bin;
        run = 0;
      }
      ++run;
    }
  }
}

// The CTA's shared histogram (zeroed by the caller) into the row's global one.
template <int kPass>
__device__ __forceinline__ void FlushHist(uint32_t* hist, uint32_t* row_hist, uint32_t run_bin,
                                          uint32_t run) {
  if (run != 0) atomicAdd(&hist[run_bin], run);
  __syncthreads();
  const uint32_t c = hist[threadIdx.x];
  if (c != 0) atomicAdd(&row_hist[kPass * 256 + threadIdx.x], c);
}

// (# keys > K, # keys == K) of one batch, added to gt, eq.
template <int kPer>
__device__ __forceinline__ void CountBatch(const uint16_t (&v)[kPer], int64_t i0, int64_t c1,
                                           uint32_t key_k, uint32_t& gt, uint32_t& eq) {
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    if (i0 + e < c1) {
      const uint32_t key = OrderKey(v[e]);
      gt += key > key_k;
      eq += key == key_k;
    }
  }
}

// The CTA's chunk counts, packed into one block scan (a chunk holds < 2^16 items), to the
// workspace.
__device__ __forceinline__ void StoreCounts(const SplitWorkspace& ws, int64_t row, uint32_t gt,
                                            uint32_t eq) {
  uint32_t total = 0;
  BlockExclusiveScan<kSplitThreads>((gt << 16) | eq, &total);
  if (threadIdx.x == 0) {
    uint32_t* c = ws.counts + (row * ws.ctas + blockIdx.x) * 2;
    c[0] = total >> 16;
    c[1] = total & 0xFFFF;
  }
}

// The write pass's start: the carry (items > K, items == K) of the earlier CTAs of the row, the
// row's padding by its CTA 0; false when this CTA picks nothing and need not write (uniform).
template <typename Source>
__device__ __forceinline__ bool WriteCarry(const Source& src, const SplitWorkspace& ws, int64_t row,
                                           const SplitThreshold& th, uint32_t& gt_carry,
                                           uint32_t& eq_carry) {
  const uint32_t* counts = ws.counts + row * ws.ctas * 2;
  uint32_t gt_part = 0, eq_part = 0;
  for (int64_t c = threadIdx.x; c < blockIdx.x; c += kSplitThreads) {
    gt_part += __ldcg(counts + 2 * c);
    eq_part += __ldcg(counts + 2 * c + 1);
  }
  BlockExclusiveScan<kSplitThreads>(gt_part, &gt_carry);
  BlockExclusiveScan<kSplitThreads>(eq_part, &eq_carry);
  if constexpr (Source::kPadRows) {
    if (blockIdx.x == 0) src.Pad(row, static_cast<int>(threadIdx.x), kSplitThreads);
  }
  if (!Source::kEmitAll) {
    const uint32_t my_gt = __ldcg(counts + 2 * blockIdx.x);
    const uint32_t my_eq = __ldcg(counts + 2 * blockIdx.x + 1);
    if (my_gt == 0 && (my_eq == 0 || eq_carry >= th.need)) return false;
  }
  return true;
}

// The ordered pass over one tile of the chunk (every thread of the CTA calls it; items from i0,
// none where i0 >= c1): each item's slot from the carry and the block scan of the tile.
template <typename Source>
__device__ __forceinline__ void WriteBatch(const Source& src, int64_t row,
                                           const uint16_t (&v)[Source::kItemsPerThread], int64_t i0,
                                           int64_t c1, const SplitThreshold& th, uint32_t& gt_carry,
                                           uint32_t& eq_carry) {
  constexpr int kPer = Source::kItemsPerThread;
  uint32_t gt = 0, eq = 0;
  if (i0 < c1) CountBatch(v, i0, c1, th.key, gt, eq);
  uint32_t total = 0;
  const uint32_t excl = BlockExclusiveScan<kSplitThreads>((gt << 16) | eq, &total);
  uint32_t gt_before = gt_carry + (excl >> 16);
  uint32_t eq_before = eq_carry + (excl & 0xFFFF);
  if (i0 < c1) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      if (i0 + e < c1) {
        const uint32_t key = OrderKey(v[e]);
        const bool is_gt = key > th.key, is_eq = key == th.key;
        const bool picked = is_gt || (is_eq && eq_before < th.need);
        src.Emit(row, i0 + e, v[e], picked,
                 gt_before + (eq_before < th.need ? eq_before : th.need));
        gt_before += is_gt;
        eq_before += is_eq;
      }
    }
  }
  gt_carry += total >> 16;
  eq_carry += total & 0xFFFF;
}

// Pass 0: high byte of every key. Pass 1: low byte of the keys whose high byte is the k-th key's.
template <typename Source, int kPass>
__device__ __forceinline__ void SplitHistPass(const Source& src, const SplitWorkspace& ws) {
  constexpr int kPer = Source::kItemsPerThread;
  __shared__ uint32_t hist[256];
  for (int64_t row = blockIdx.y; row < ws.tokens; row += gridDim.y) {
    const int64_t n = src.Count(row);
    uint32_t* row_hist = ws.hist + row * kHistWords;
    uint32_t hi = 0;
    if constexpr (kPass == 1) {
      uint32_t above = 0;
      FindBin(row_hist, static_cast<uint32_t>(src.K(row)), &hi, &above);
    }
    __syncthreads();  // hist free (previous row's flush done)
    hist[threadIdx.x] = 0;
    __syncthreads();
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * ws.chunk;
    const int64_t c1 = c0 + ws.chunk < n ? c0 + ws.chunk : n;
    uint32_t run_bin = 0, run = 0;
    for (int64_t i0 = c0 + static_cast<int64_t>(threadIdx.x) * kPer; i0 < c1;
         i0 += kSplitThreads * kPer) {
      uint16_t v[kPer];
      src.Load(row, i0, v);
      HistBatch<kPass>(v, i0, c1, hi, hist, run_bin, run);
    }
    FlushHist<kPass>(hist, row_hist, run_bin, run);
  }
}

// Per CTA: (# keys > K, # keys == K) in its chunk.
template <typename Source>
__device__ __forceinline__ void SplitCountPass(const Source& src, const SplitWorkspace& ws) {
  constexpr int kPer = Source::kItemsPerThread;
  for (int64_t row = blockIdx.y; row < ws.tokens; row += gridDim.y) {
    const int64_t n = src.Count(row);
    const SplitThreshold th =
        FindThreshold(ws.hist + row * kHistWords, static_cast<uint32_t>(src.K(row)));
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * ws.chunk;
    const int64_t c1 = c0 + ws.chunk < n ? c0 + ws.chunk : n;
    uint32_t gt = 0, eq = 0;
    for (int64_t i0 = c0 + static_cast<int64_t>(threadIdx.x) * kPer; i0 < c1;
         i0 += kSplitThreads * kPer) {
      uint16_t v[kPer];
      src.Load(row, i0, v);
      CountBatch(v, i0, c1, th.key, gt, eq);
    }
    StoreCounts(ws, row, gt, eq);
  }
}

// Per CTA: the carry of the earlier CTAs, then the ordered pass over its chunk.
template <typename Source>
__device__ __forceinline__ void SplitWritePass(const Source& src, const SplitWorkspace& ws) {
  constexpr int kPer = Source::kItemsPerThread;
  for (int64_t row = blockIdx.y; row < ws.tokens; row += gridDim.y) {
    const int64_t n = src.Count(row);
    const SplitThreshold th =
        FindThreshold(ws.hist + row * kHistWords, static_cast<uint32_t>(src.K(row)));
    uint32_t gt_carry = 0, eq_carry = 0;
    if (!WriteCarry(src, ws, row, th, gt_carry, eq_carry)) continue;  // uniform
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * ws.chunk;
    const int64_t c1 = c0 + ws.chunk < n ? c0 + ws.chunk : n;
    for (int64_t base = c0; base < c1; base += kSplitThreads * kPer) {  // uniform
      const int64_t i0 = base + static_cast<int64_t>(threadIdx.x) * kPer;
      uint16_t v[kPer];
      if (i0 < c1) src.Load(row, i0, v);
      WriteBatch(src, row, v, i0, c1, th, gt_carry, eq_carry);
    }
  }
}

// ---- the four-launch form ----------------------------------------------------------------------

template <typename Source, int kPass>
__global__ void __launch_bounds__(kSplitThreads) SplitHistKernel(Source src, SplitWorkspace ws) {
  cuda_common::PdlLaunchDependents();  // the next pass may be scheduled; it waits for this one
  if constexpr (kPass == 1) cuda_common::PdlWaitPrerequisites();  // pass 0's histogram
  SplitHistPass<Source, kPass>(src, ws);
}

template <typename Source>
__global__ void __launch_bounds__(kSplitThreads) SplitCountKernel(Source src, SplitWorkspace ws) {
  cuda_common::PdlLaunchDependents();
  cuda_common::PdlWaitPrerequisites();  // the previous pass's histograms
  SplitCountPass(src, ws);
}

template <typename Source>
__global__ void __launch_bounds__(kSplitThreads) SplitWriteKernel(Source src, SplitWorkspace ws) {
  cuda_common::PdlLaunchDependents();
  cuda_common::PdlWaitPrerequisites();  // the previous pass's histograms / counts
  SplitWritePass(src, ws);
}

// ---- the one-launch form ---------------------------------------------------------------------

// The fused kernel's passes for a CTA with one row (blockIdx.y): the chunk's items (at most
// kTilesPerCta tiles) are loaded once into registers and the bins found once, where the four
// launches reload the items and find the bins again in every pass (session 45). Same items, same
// order, same slots.
template <typename Source>
__device__ __forceinline__ void SplitFusedOneRow(const Source& src, const SplitWorkspace& ws,
                                                 cooperative_groups::grid_group& grid) {
  constexpr int kPer = Source::kItemsPerThread;
  constexpr int kTiles = static_cast<int>(indexer_plan::kTilesPerCta);
  constexpr int64_t kTile = int64_t{kSplitThreads} * kPer;
  __shared__ uint32_t hist[256];
  const int64_t row = blockIdx.y;
  const int64_t n = src.Count(row);
  const uint32_t k = static_cast<uint32_t>(src.K(row));
  uint32_t* row_hist = ws.hist + row * kHistWords;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * ws.chunk;
  const int64_t c1 = c0 + ws.chunk < n ? c0 + ws.chunk : n;
  const int64_t t0 = c0 + static_cast<int64_t>(threadIdx.x) * kPer;  // this thread's first item
  uint16_t v[kTiles][kPer];
#pragma unroll
  for (int it = 0; it < kTiles; ++it) {
    if (t0 + it * kTile < c1) src.Load(row, t0 + it * kTile, v[it]);
  }
  auto hist_pass = [&](auto pass, uint32_t hi) {
    constexpr int kPass = decltype(pass)::value;
    __syncthreads();  // hist free (the previous pass's flush done)
    hist[threadIdx.x] = 0;
    __syncthreads();
    uint32_t run_bin = 0, run = 0;
#pragma unroll
    for (int it = 0; it < kTiles; ++it) {
      if (t0 + it * kTile < c1)
        HistBatch<kPass>(v[it], t0 + it * kTile, c1, hi, hist, run_bin, run);
    }
    FlushHist<kPass>(hist, row_hist, run_bin, run);
    grid.sync();
  };
  hist_pass(std::integral_constant<int, 0>{}, 0u);
  uint32_t hi = 0, above_hi = 0;
  FindBin(row_hist, k, &hi, &above_hi);
  hist_pass(std::integral_constant<int, 1>{}, hi);
  uint32_t lo = 0, above_lo = 0;
  FindBin(row_hist + 256, k - above_hi, &lo, &above_lo);
  const SplitThreshold th{(hi << 8) | lo, k - above_hi - above_lo};
  uint32_t gt = 0, eq = 0;
#pragma unroll
  for (int it = 0; it < kTiles; ++it) {
    if (t0 + it * kTile < c1) CountBatch(v[it], t0 + it * kTile, c1, th.key, gt, eq);
  }
  StoreCounts(ws, row, gt, eq);
  grid.sync();
  uint32_t gt_carry = 0, eq_carry = 0;
  if (!WriteCarry(src, ws, row, th, gt_carry, eq_carry)) return;  // uniform
#pragma unroll
  for (int it = 0; it < kTiles; ++it) {
    if (c0 + it * kTile < c1) {  // uniform
      WriteBatch(src, row, v[it], t0 + it * kTile, c1, th, gt_carry, eq_carry);
    }
  }
}

// Cooperative launch only, with every CTA of the grid resident (grid.sync): zeroes the histograms
// of all rows, then runs the four passes with a grid-wide barrier (which orders memory) after each.
template <typename Source>
__global__ void __launch_bounds__(kSplitThreads) SplitFusedKernel(Source src, SplitWorkspace ws) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  const int64_t words = ws.tokens * kHistWords;
  const int64_t stride = int64_t{gridDim.x} * gridDim.y * kSplitThreads;
  for (int64_t i = (int64_t{blockIdx.y} * gridDim.x + blockIdx.x) * kSplitThreads + threadIdx.x;
       i < words; i += stride) {
    ws.hist[i] = 0;
  }
  grid.sync();
  // One row per CTA (every resident launch below 65,536 rows), a chunk of at most kTilesPerCta
  // tiles (the plan's): the register-resident form.
  if (gridDim.y >= ws.tokens &&
      ws.chunk <= indexer_plan::kTilesPerCta * kSplitThreads * Source::kItemsPerThread) {
    SplitFusedOneRow(src, ws, grid);
    return;
  }
  SplitHistPass<Source, 0>(src, ws);
  grid.sync();
  SplitHistPass<Source, 1>(src, ws);
  grid.sync();
  SplitCountPass(src, ws);
  grid.sync();
  SplitWritePass(src, ws);
}

}  // namespace flashserve::kernels::indexer_device
