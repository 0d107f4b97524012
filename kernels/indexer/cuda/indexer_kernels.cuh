// Device code of the indexer launchers (indexer_launch.cu only; not a public header).
// Every fp32 operation is spelled with an explicit _rn intrinsic, so nvcc cannot contract or
// reorder it: the kernels perform exactly the CPU bodies' operations in the CPU bodies' order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/indexer/indexer.h"

namespace flashserve::kernels::indexer_device {

inline constexpr uint16_t kBf16NegInf = 0xFF80;
inline constexpr uint16_t kBf16PosInf = 0x7F80;

// Positions (threads) per score block, and heads whose fp32 accumulators one thread keeps live.
inline constexpr int kScoreThreads = 128;
inline constexpr int kHeadChunk = 32;
// Threads of a selection block (one block per row).
inline constexpr int kSelectThreads = 512;
inline constexpr int kSelectWarps = kSelectThreads / 32;

__device__ __forceinline__ float Bf16ToFloat(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// formats::FloatToBf16Bits: round to nearest even, NaN kept quiet.
__device__ __forceinline__ uint16_t FloatToBf16(float x) {
  const uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

__device__ __forceinline__ float RoundToBf16(float x) { return Bf16ToFloat(FloatToBf16(x)); }

// indexer_cpu::OrderKey: unsigned order = value order, −0 == +0.
__device__ __forceinline__ uint32_t OrderKey(uint16_t b) {
  if (b == 0x8000) b = 0;
  return (b & 0x8000) ? static_cast<uint32_t>(~b & 0xFFFF) : static_cast<uint32_t>(b | 0x8000);
}

__device__ __forceinline__ int64_t Reach(int64_t start_pos, int64_t ratio, int64_t row) {
  return (start_pos + row + 1) / ratio;
}

// Per-row extents of a batched decode call (indexer.h "Batched decode"), device arrays. The
// single-sequence kernels get an empty one. Out-of-contract values are clamped (a width to
// [0, max_width], a reach to [0, width]) so a bad row cannot write outside its scores row.
struct BatchRows {
  const int64_t* k_row_offsets = nullptr;
  const int32_t* widths = nullptr;
  const int32_t* reaches = nullptr;  // null: reach = width
  __device__ int64_t Width(int64_t row, int64_t max_width) const {
    const int64_t w = widths[row];
    return w < 0 ? 0 : (w > max_width ? max_width : w);
  }
  __device__ int64_t Reach(int64_t row, int64_t width) const {
    const int64_t r = reaches != nullptr ? reaches[row] : width;
    return r < 0 ? 0 : (r > width ? width : r);
  }
};

// ---- Scores, scalar path ----------------------------------------------------------------------
// For head_dim % 8 != 0 or key rows off 16 bytes (the tiled kernel, score_tile_kernel.cuh, takes
// every other case). grid.x walks rows (fastest, so the rows of one position tile run back to
// back and share the key tile through L2), grid.y walks tiles of kScoreThreads positions; a
// thread per position. Dynamic shared memory: the fp32 q of up to kHeadChunk heads of the row.
__global__ void __launch_bounds__(kScoreThreads) IndexerScoreKernel(IndexerScoreParams p) {
  extern __shared__ __align__(16) float q_s[];
  const int64_t dim = p.head_dim;
  const int64_t tiles = (p.width + kScoreThreads - 1) / kScoreThreads;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    for (int64_t row = blockIdx.x; row < p.tokens; row += gridDim.x) {
      const int64_t t = tile * kScoreThreads + threadIdx.x;
      const int64_t reach = Reach(p.start_pos, p.ratio, row);
      uint16_t* out = p.scores + row * p.scores_stride;
      if (tile * kScoreThreads >= reach) {  // uniform over the block: nothing visible
        if (t < p.width) out[t] = kBf16NegInf;
        continue;
      }
      bool visible = t < reach;
      if (visible && p.candidates != nullptr) {
        visible = p.candidates[row * p.candidates_stride + t] != 0;
      }
      const uint16_t* krow = p.k + (visible ? t : 0) * p.k_stride;
      const uint16_t* q = p.q + row * p.q_stride;
      const uint16_t* w = p.w + row * p.w_stride;
      float head_sum = 0.0f;
      for (int64_t h0 = 0; h0 < p.heads; h0 += kHeadChunk) {
        const int nh = static_cast<int>(p.heads - h0 < kHeadChunk ? p.heads - h0 : kHeadChunk);
        __syncthreads();  // the previous chunk's (or tile's) readers are done
        for (int64_t i = threadIdx.x; i < nh * dim; i += kScoreThreads) {
          q_s[i] = Bf16ToFloat(q[h0 * dim + i]);
        }
        __syncthreads();
        if (!visible) continue;
        float acc[kHeadChunk];
#pragma unroll
        for (int j = 0; j < kHeadChunk; ++j) acc[j] = 0.0f;
        for (int64_t d = 0; d < dim; ++d) {
          const float kv = Bf16ToFloat(krow[d]);
#pragma unroll
          for (int j = 0; j < kHeadChunk; ++j) {
            if (j < nh) acc[j] = __fadd_rn(acc[j], __fmul_rn(q_s[j * dim + d], kv));
          }
        }
#pragma unroll
        for (int j = 0; j < kHeadChunk; ++j) {
          if (j < nh) {
            const float qk = RoundToBf16(acc[j]);
            const float relu = qk > 0.0f ? qk : 0.0f;
            head_sum = __fadd_rn(head_sum, RoundToBf16(__fmul_rn(Bf16ToFloat(w[h0 + j]), relu)));
          }
        }
      }
      if (t < p.width) out[t] = visible ? FloatToBf16(head_sum) : kBf16NegInf;
    }
  }
}

// ---- Exact per-row selection (top-k and candidate blocks) ------------------------------------
// A Source describes one row's items: Count, K (how many to pick), Value(row, i) (the bf16 bits
// ranked by OrderKey) and Emit(row, i, value, picked, slot) (slot = rank of a picked item in
// index order). Picked = the K largest (key desc, index asc).

// Exclusive block scan of x (all kThreads threads call it); *total gets the block sum.
template <int kThreads = kSelectThreads>
__device__ __forceinline__ uint32_t BlockExclusiveScan(uint32_t x, uint32_t* total) {
  constexpr int kWarps = kThreads / 32;
  __shared__ uint32_t warp_sums[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t inc = x;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, inc, o);
    if (lane >= o) inc += y;
  }
  __syncthreads();  // warp_sums free (previous call done)
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  uint32_t before = 0, sum = 0;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) {
    if (i < warp) before += warp_sums[i];
    sum += warp_sums[i];
  }
  *total = sum;
  return before + inc - x;
}

template <typename Source>
__global__ void __launch_bounds__(kSelectThreads) SelectKernel(Source src, int64_t tokens) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_threshold, s_above;
  for (int64_t row = blockIdx.x; row < tokens; row += gridDim.x) {
    if constexpr (Source::kPadRows) src.Pad(row, static_cast<int>(threadIdx.x), kSelectThreads);
    const int64_t n = src.Count(row);
    const auto k = static_cast<uint32_t>(src.K(row));
    // Two radix passes (high byte, then low byte among the high byte's bin) find the k-th key.
    uint32_t hi = 0, cum = 0;
    for (int pass = 0; pass < 2; ++pass) {
      __syncthreads();
      for (int i = threadIdx.x; i < 256; i += kSelectThreads) hist[i] = 0;
      __syncthreads();
#pragma unroll 8
      for (int64_t i = threadIdx.x; i < n; i += kSelectThreads) {
        const uint32_t key = OrderKey(src.Value(row, i));
        if (pass == 0) {
          atomicAdd(&hist[key >> 8], 1u);
        } else if ((key >> 8) == hi) {
          atomicAdd(&hist[key & 0xFF], 1u);
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        uint32_t c = pass == 0 ? 0 : s_above;
        int b = 255;
        for (; b > 0; --b) {
          if (c + hist[b] >= k) break;
          c += hist[b];
        }
        s_above = c;
        s_threshold = pass == 0 ? static_cast<uint32_t>(b) : (hi << 8) | static_cast<uint32_t>(b);
      }
      __syncthreads();
      hi = s_threshold;
      cum = s_above;
    }
    const uint32_t threshold = hi;  // after pass 1: the full 16-bit key of the k-th item
    const uint32_t need = k - cum;  // items equal to the threshold that are picked (lowest first)
    // Ordered pass: picked = key > threshold, or key == threshold among the first `need`.
    uint32_t gt_carry = 0, eq_carry = 0;
    for (int64_t base = 0; base < n; base += kSelectThreads) {
      const int64_t i = base + threadIdx.x;
      uint16_t value = 0;
      uint32_t gt = 0, eq = 0;
      if (i < n) {
        value = src.Value(row, i);
        const uint32_t key = OrderKey(value);
        gt = key > threshold;
        eq = key == threshold;
      }
      uint32_t total = 0;
      const uint32_t excl = BlockExclusiveScan<kSelectThreads>((gt << 16) | eq, &total);
      const uint32_t gt_before = gt_carry + (excl >> 16);
      const uint32_t eq_before = eq_carry + (excl & 0xFFFF);
      if (i < n) {
        const bool picked = gt != 0 || (eq != 0 && eq_before < need);
        src.Emit(row, i, value, picked, gt_before + (eq_before < need ? eq_before : need));
      }
      gt_carry += total >> 16;
      eq_carry += total & 0xFFFF;
    }
  }
}

// Sources also serve the split kernels (select_split_kernels.cuh): kItemsPerThread consecutive
// items per thread and tile, Load(row, i0, v) for items i0.. (items >= Count() get −inf, never
// used), kEmitAll (every item must be emitted, not only the picked ones), kPadRows (Pad(row,
// thread, threads) fills the row's output slots past K; called once per row by one CTA).
struct TopkSource {
  static constexpr int kItemsPerThread = 8;
  static constexpr bool kEmitAll = false;
  static constexpr bool kPadRows = false;
  IndexerTopkParams p;
  bool vec;  // scores 16-byte aligned and scores_stride % 8 == 0: 16-byte loads
  __device__ int64_t Count(int64_t) const { return p.width; }
  __device__ int64_t K(int64_t) const { return p.index_topk < p.width ? p.index_topk : p.width; }
  __device__ uint16_t Value(int64_t row, int64_t i) const {
    return p.scores[row * p.scores_stride + i];
  }
  // i0 is a multiple of 8.
  __device__ void Load(int64_t row, int64_t i0, uint16_t (&v)[kItemsPerThread]) const {
    const uint16_t* s = p.scores + row * p.scores_stride;
    if (vec && i0 + 8 <= p.width) {
      const uint4 x = *reinterpret_cast<const uint4*>(s + i0);
      const uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[e] = static_cast<uint16_t>(e % 2 == 0 ? words[e / 2] : words[e / 2] >> 16);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = i0 + e < p.width ? s[i0 + e] : kBf16NegInf;
    }
  }
  __device__ void Emit(int64_t row, int64_t i, uint16_t, bool picked, uint32_t slot) const {
    if (!picked) return;
    const int64_t reach = Reach(p.start_pos, p.ratio, row);
    p.indices[row * p.indices_stride + slot] = i >= reach ? -1 : static_cast<int32_t>(i + p.offset);
  }
};

struct CandidateSource {
  static constexpr int kItemsPerThread = 2;
  static constexpr bool kEmitAll = true;
  static constexpr bool kPadRows = false;
  CandidateBlocksParams p;
  int64_t n_blocks;
  bool vec_scores;  // block_size 8, scores 16-byte aligned, scores_stride % 8 == 0
  bool vec_mask;    // block_size 8, candidates 8-byte aligned, candidates_stride % 8 == 0
  __device__ int64_t Count(int64_t) const { return n_blocks; }
  __device__ int64_t K(int64_t) const {
    return p.topk_blocks < n_blocks ? p.topk_blocks : n_blocks;
  }
  // The block maximum (bits of its first maximal element), +inf for the row's newest block.
  __device__ uint16_t Value(int64_t row, int64_t b) const {
    const int64_t pinned = (Reach(p.start_pos, p.ratio, row) - 1) / p.block_size;
    if (b == pinned) return kBf16PosInf;
    const uint16_t* s = p.scores + row * p.scores_stride;
    const int64_t end = (b + 1) * p.block_size < p.width ? (b + 1) * p.block_size : p.width;
    uint16_t best = kBf16NegInf;
    if (vec_scores && end == b * 8 + 8) {
      const uint4 x = *reinterpret_cast<const uint4*>(s + b * 8);
      const uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const auto v = static_cast<uint16_t>(e % 2 == 0 ? words[e / 2] : words[e / 2] >> 16);
        if (OrderKey(v) > OrderKey(best)) best = v;
      }
      return best;
    }
    for (int64_t t = b * p.block_size; t < end; ++t) {
      const uint16_t v = s[t];
      if (OrderKey(v) > OrderKey(best)) best = v;
    }
    return best;
  }
  __device__ void Load(int64_t row, int64_t i0, uint16_t (&v)[kItemsPerThread]) const {
#pragma unroll
    for (int e = 0; e < kItemsPerThread; ++e) {
      v[e] = i0 + e < n_blocks ? Value(row, i0 + e) : kBf16NegInf;
    }
  }
  __device__ void Emit(int64_t row, int64_t b, uint16_t value, bool picked, uint32_t) const {
    if (p.block_scores != nullptr) p.block_scores[row * p.block_scores_stride + b] = value;
    const uint8_t keep = picked && OrderKey(value) > OrderKey(kBf16NegInf) ? 1 : 0;
    uint8_t* mask = p.candidates + row * p.candidates_stride;
    const int64_t end = (b + 1) * p.block_size < p.width ? (b + 1) * p.block_size : p.width;
    if (vec_mask && end == b * 8 + 8) {
      *reinterpret_cast<uint64_t*>(mask + b * 8) = keep * 0x0101010101010101ull;
      return;
    }
    for (int64_t t = b * p.block_size; t < end; ++t) mask[t] = keep;
  }
};

// The batched decode top-k (LaunchIndexerTopkBatch): row b holds rows.Width(b) scores; the same
// picks and slots as TopkSource over that row alone, then −1 in slots K(b) .. k_max − 1.
struct TopkBatchSource {
  static constexpr int kItemsPerThread = 8;
  static constexpr bool kEmitAll = false;
  static constexpr bool kPadRows = true;
  IndexerTopkBatchParams p;
  BatchRows rows;
  int64_t k_max;  // IndexerTopkK(index_topk, max_width): the index rows' extent
  bool vec;       // scores 16-byte aligned and scores_stride % 8 == 0: 16-byte loads
  __device__ int64_t Count(int64_t row) const { return rows.Width(row, p.max_width); }
  __device__ int64_t K(int64_t row) const {
    const int64_t n = Count(row);
    return p.index_topk < n ? p.index_topk : n;
  }
  __device__ uint16_t Value(int64_t row, int64_t i) const {
    return p.scores[row * p.scores_stride + i];
  }
  __device__ void Load(int64_t row, int64_t i0, uint16_t (&v)[kItemsPerThread]) const {
    const uint16_t* s = p.scores + row * p.scores_stride;
    const int64_t n = Count(row);
    if (vec && i0 + 8 <= n) {
      const uint4 x = *reinterpret_cast<const uint4*>(s + i0);
      const uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[e] = static_cast<uint16_t>(e % 2 == 0 ? words[e / 2] : words[e / 2] >> 16);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = i0 + e < n ? s[i0 + e] : kBf16NegInf;
    }
  }
  __device__ void Emit(int64_t row, int64_t i, uint16_t, bool picked, uint32_t slot) const {
    if (!picked) return;
    const int64_t reach = rows.Reach(row, Count(row));
    p.indices[row * p.indices_stride + slot] = i >= reach ? -1 : static_cast<int32_t>(i + p.offset);
  }
  __device__ void Pad(int64_t row, int thread, int threads) const {
    for (int64_t i = K(row) + thread; i < k_max; i += threads) {
      p.indices[row * p.indices_stride + i] = -1;
    }
  }
};

}  // namespace flashserve::kernels::indexer_device
