// Device code of the tiled scorer (indexer_launch.cu only; not a public header): a CTA stages a
// tile of kScoreThreads key rows in shared memory once and scores it for up to kScoreRows rows of
// the call, a thread per position. Used when head_dim % 8 == 0 and key rows are 16-byte aligned
// (the released dims), and for every k_rows call (rows decoded to bf16 while staging, exactly as
// formats::DecodeIndexKRow); IndexerScoreKernel keeps the scalar path.
//
// Exactness (README.md "CUDA"): the CPU computes acc = acc + q·k (fp32 mul, then fp32 add) over d
// ascending. A bf16·bf16 product has at most 16 significant bits, so it is exact in fp32 whenever
// its magnitude lies in [2^-126, FLT_MAX] (or it is zero); then fma(q, k, acc) = RN(q·k + acc) =
// RN(RN(q·k) + acc), i.e. the FMA rounds exactly like the CPU's mul + add at every step. The kernel
// checks this per (row, head chunk, key row) from the range of nonzero magnitudes (all finite,
// min exponents summing to >= −126, max exponents to <= 125) and otherwise runs the mul + add
// sequence itself. Either way the per-score fp32 operation results equal the CPU's bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels::indexer_device {

// Rows of the call scored per key tile (each tile is read from memory once per kScoreRows rows).
inline constexpr int kScoreRows = 8;

// Range of |x| over a set of bf16 values as bit patterns (|x| bits order like |x| for non-NaN):
// lo = min over nonzero |x| of (|x| − 1) (0xFFFF: none nonzero), hi = max |x| (0: all zero).
struct MagRange {
  uint32_t lo = 0xFFFFu;
  uint32_t hi = 0;
};

__device__ __forceinline__ void AddPair(uint32_t word, uint32_t& lo2, uint32_t& hi2) {
  const uint32_t mag = word & 0x7FFF7FFFu;
  lo2 = __vminu2(lo2, __vsub2(mag, 0x00010001u));  // a zero half wraps to 0xFFFF: ignored
  hi2 = __vmaxu2(hi2, mag);
}

__device__ __forceinline__ MagRange FinishPairs(uint32_t lo2, uint32_t hi2) {
  MagRange r;
  r.lo = min(lo2 & 0xFFFFu, lo2 >> 16);
  r.hi = max(hi2 & 0xFFFFu, hi2 >> 16);
  return r;
}

// Lower bound of log2 |x| over the nonzero values (subnormal bf16 >= 2^-133).
__device__ __forceinline__ int ExpLow(const MagRange& r) {
  const int field = static_cast<int>((r.lo + 1) >> 7);
  return field == 0 ? -133 : field - 127;
}

// True iff every product q·k of the two sets is exact in fp32 (zero, or normal and finite).
__device__ __forceinline__ bool ProductsExact(const MagRange& q, const MagRange& k) {
  if ((q.hi >> 7) == 0xFF || (k.hi >> 7) == 0xFF) return false;  // inf or NaN
  if (q.hi == 0 || k.hi == 0) return true;                       // every product is ±0
  const int high = static_cast<int>(q.hi >> 7) - 127 + static_cast<int>(k.hi >> 7) - 127;
  return ExpLow(q) + ExpLow(k) >= -126 && high <= 125;  // |q·k| in [2^-126, 2^127)
}

// acc[j] += q[j, d] · k[d] over d ascending for the nh <= kHeadChunk heads staged in q_s.
template <bool kFma, int kDim>
__device__ __forceinline__ void DotHeads(const uint4* krow, const float* q_s, int dim, int nh,
                                         float (&acc)[kHeadChunk]) {
  const int d8n = (kDim > 0 ? kDim : dim) / 8;
#pragma unroll 1
  for (int d8 = 0; d8 < d8n; ++d8) {
    const uint4 v = krow[d8];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    float kv[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      kv[e] = Bf16ToFloat(static_cast<uint16_t>(e % 2 == 0 ? words[e / 2] : words[e / 2] >> 16));
    }
#pragma unroll
    for (int j = 0; j < kHeadChunk; ++j) {
      if (j < nh) {
        const float4* q4 =
            reinterpret_cast<const float4*>(q_s + j * (kDim > 0 ? kDim : dim) + d8 * 8);
        const float4 qa = q4[0], qb = q4[1];
        const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if constexpr (kFma) {
            acc[j] = __fmaf_rn(qv[e], kv[e], acc[j]);
          } else {
            acc[j] = __fadd_rn(acc[j], __fmul_rn(qv[e], kv[e]));
          }
        }
      }
    }
  }
}

// formats::Ue8m0ToFloat: 2^(b − 127) (byte 0: the fp32 subnormal 2^-127), NaN for 0xFF.
__device__ __forceinline__ float Ue8m0ToFloatDevice(uint32_t b) {
  return b == 0xFFu ? __uint_as_float(0x7FC00000u)
                    : __uint_as_float(b == 0 ? 0x00400000u : b << 23);
}

// formats::E2m1ToFloat of the low 4 bits of `code`.
__device__ __forceinline__ float E2m1ToFloatDevice(uint32_t code) {
  // Magnitudes ×2 as bytes: {0, 1, 2, 3, 4, 6, 8, 12}.
  const uint32_t twice = __byte_perm(0x03020100u, 0x0C080604u, code & 7u) & 0xFFu;
  const float mag = __fmul_rn(static_cast<float>(twice), 0.5f);
  return (code & 8u) != 0 ? -mag : mag;
}

// The bf16 decode (formats::DecodeIndexKRow: bf16(E2M1 · scale), fp32 product) of elements
// 8c .. 8c + 7 of a k_rows row, packed as 8 bf16 in element order.
__device__ __forceinline__ uint4 DecodeIndexK8(const uint8_t* row, int dim, int c) {
  const uint32_t codes = static_cast<uint32_t>(__ldg(row + 4 * c)) |
                         static_cast<uint32_t>(__ldg(row + 4 * c + 1)) << 8 |
                         static_cast<uint32_t>(__ldg(row + 4 * c + 2)) << 16 |
                         static_cast<uint32_t>(__ldg(row + 4 * c + 3)) << 24;
  const float scale = Ue8m0ToFloatDevice(__ldg(row + dim / 2 + c / 4));
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = FloatToBf16(__fmul_rn(E2m1ToFloatDevice(codes >> (8 * i)), scale));
    const uint32_t hi = FloatToBf16(__fmul_rn(E2m1ToFloatDevice(codes >> (8 * i + 4)), scale));
    words[i] = lo | hi << 16;
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Dynamic shared memory (ScoreTileSmemBytes): the key tile, kScoreThreads rows of dim/8 + 1
// uint4 (one uint4 of padding: a thread's 16-byte reads of its own row are bank-conflict free),
// then the fp32 q of up to kHeadChunk heads of the current row.
inline size_t ScoreTileSmemBytes(int64_t heads, int64_t head_dim) {
  const int64_t chunk = heads < kHeadChunk ? heads : kHeadChunk;
  return static_cast<size_t>(kScoreThreads * (head_dim / 8 + 1)) * 16 +
         static_cast<size_t>(chunk * head_dim) * sizeof(float);
}

// grid.x walks position tiles, grid.y groups of kScoreRows rows. kDim: head_dim as a compile-time
// constant (0: read p.head_dim); head_dim % 8 == 0 and 16-byte aligned key rows.
// kBatch: each group is one row of a batched decode call with its own keys (k_rows), width and
// reach from `rows` (p.tokens = batch, p.width = max_width, p.k_rows = the pool).
template <int kDim, bool kBatch>
__global__ void __launch_bounds__(kScoreThreads)
    IndexerScoreTileKernel(IndexerScoreParams p, BatchRows rows) {
  constexpr int kRows = kBatch ? 1 : kScoreRows;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ uint32_t warp_lo[kScoreThreads / 32], warp_hi[kScoreThreads / 32];
  const int dim = kDim > 0 ? kDim : static_cast<int>(p.head_dim);
  const int d8n = dim / 8;
  const int ks_stride = d8n + 1;
  uint4* k_s = reinterpret_cast<uint4*>(smem);
  float* q_s = reinterpret_cast<float*>(k_s + kScoreThreads * ks_stride);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int64_t groups = (p.tokens + kRows - 1) / kRows;
  for (int64_t group = blockIdx.y; group < groups; group += gridDim.y) {
    const int64_t row0 = group * kRows;
    const int64_t row1 = row0 + kRows < p.tokens ? row0 + kRows : p.tokens;
    const uint8_t* keys = p.k_rows;
    int64_t width = p.width;
    if constexpr (kBatch) {
      width = rows.Width(row0, p.width);
      keys += rows.k_row_offsets[row0] * p.k_row_stride;
    }
    auto reach_of = [&](int64_t row) {
      if constexpr (kBatch) {
        return rows.Reach(row, width);
      } else {
        return Reach(p.start_pos, p.ratio, row);
      }
    };
    const int64_t tiles = (width + kScoreThreads - 1) / kScoreThreads;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int64_t t0 = tile * kScoreThreads, t = t0 + tid;
      if (t0 >= reach_of(row1 - 1)) {  // uniform: no row sees this tile
        for (int64_t row = row0; row < row1; ++row) {
          if (t < width) p.scores[row * p.scores_stride + t] = kBf16NegInf;
        }
        continue;
      }
      __syncthreads();  // the previous tile's readers of k_s and q_s are done
      for (int i = tid; i < kScoreThreads * d8n; i += kScoreThreads) {
        const int r = i / d8n, c = i % d8n;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (t0 + r < width) {
          v = keys != nullptr
                  ? DecodeIndexK8(keys + (t0 + r) * p.k_row_stride, dim, c)
                  : __ldg(reinterpret_cast<const uint4*>(p.k + (t0 + r) * p.k_stride) + c);
        }
        k_s[r * ks_stride + c] = v;
      }
      __syncthreads();
      const uint4* krow = k_s + tid * ks_stride;
      MagRange k_range;
      {
        uint32_t lo2 = 0xFFFFFFFFu, hi2 = 0;
        for (int c = 0; c < d8n; ++c) {
          const uint4 v = krow[c];
          AddPair(v.x, lo2, hi2);
          AddPair(v.y, lo2, hi2);
          AddPair(v.z, lo2, hi2);
          AddPair(v.w, lo2, hi2);
        }
        k_range = FinishPairs(lo2, hi2);
      }
      for (int64_t row = row0; row < row1; ++row) {
        const int64_t reach = reach_of(row);
        uint16_t* out = p.scores + row * p.scores_stride;
        if (t0 >= reach) {  // uniform over the block
          if (t < width) out[t] = kBf16NegInf;
          continue;
        }
        bool visible = t < reach;
        if (visible && p.candidates != nullptr) {
          visible = p.candidates[row * p.candidates_stride + t] != 0;
        }
        const uint16_t* q = p.q + row * p.q_stride;
        const uint16_t* w = p.w + row * p.w_stride;
        float head_sum = 0.0f;
        for (int64_t h0 = 0; h0 < p.heads; h0 += kHeadChunk) {
          const int nh = static_cast<int>(p.heads - h0 < kHeadChunk ? p.heads - h0 : kHeadChunk);
          __syncthreads();  // the previous chunk's (or row's) readers of q_s are done
          uint32_t lo2 = 0xFFFFFFFFu, hi2 = 0;
          for (int i = tid; i < nh * dim; i += kScoreThreads) {
            const uint16_t b = q[h0 * dim + i];
            q_s[i] = Bf16ToFloat(b);
            AddPair(b, lo2, hi2);  // the upper half is 0: ignored by lo, harmless for hi
          }
          MagRange part = FinishPairs(lo2, hi2);
          part.lo = __reduce_min_sync(0xFFFFFFFFu, part.lo);
          part.hi = __reduce_max_sync(0xFFFFFFFFu, part.hi);
          if (lane == 0) {
            warp_lo[warp] = part.lo;
            warp_hi[warp] = part.hi;
          }
          __syncthreads();
          if (!visible) continue;
          MagRange q_range;
#pragma unroll
          for (int i = 0; i < kScoreThreads / 32; ++i) {
            q_range.lo = min(q_range.lo, warp_lo[i]);
            q_range.hi = max(q_range.hi, warp_hi[i]);
          }
          float acc[kHeadChunk];
#pragma unroll
          for (int j = 0; j < kHeadChunk; ++j) acc[j] = 0.0f;
          if (ProductsExact(q_range, k_range)) {
            DotHeads<true, kDim>(krow, q_s, dim, nh, acc);
          } else {
            DotHeads<false, kDim>(krow, q_s, dim, nh, acc);
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
        if (t < width) out[t] = visible ? FloatToBf16(head_sum) : kBf16NegInf;
      }
    }
  }
}

}  // namespace flashserve::kernels::indexer_device
