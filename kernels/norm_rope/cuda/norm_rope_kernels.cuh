// Device bodies of RMSNorm (optionally fused with the text RoPE of each row's tail) and of the text
// RoPE (launchers in norm_rope_launch.cu; per-value arithmetic in norm_rope_math.cuh). Each kernel
// performs the CPU body's fp32 operations in the CPU body's order; only sums of squares are
// reordered, and they are accumulated in double exactly as the CPU does (see README.md "CUDA").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/norm_rope/cuda/norm_rope_math.cuh"
#include "kernels/norm_rope/cuda/norm_rope_rows.cuh"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/cuda/quant_kernels.cuh"

namespace flashserve::kernels::norm_rope_device {

inline constexpr int kRopeThreads = 128;
// The per-launch RoPE constants, passed by value (2 KB of kernel parameters; no device table).
struct RopeArgs {
  static constexpr bool kRope = true;
  const int64_t* positions = nullptr;  // device, [tokens]
  int pairs = 0;                       // rd / 2
  bool inverse = false;
  float freqs[kMaxRopeDims / 2] = {};
};

// The plain RMSNorm's empty stand-in for RopeArgs.
struct NoRope {
  static constexpr bool kRope = false;
  int pairs = 0;
};

// StoreBf16<8>'s store of v at `out`, and the FP8 E4M3 × UE8M0/32 QDQ of those bf16 values at
// `qdq` (RmsNormParams::out_qdq; quant::device::QdqFp8UnitOfQuad: the 4 aligned lanes that hold a
// 32-value block, 4 consecutive chunks, must all call it).
__device__ __forceinline__ void StoreBf16AndQdq(uint16_t* out, uint16_t* qdq, const float (&v)[8]) {
  uint32_t w[4];
  F32x8ToBf16x8(v, w);
  *reinterpret_cast<uint4*>(out) = make_uint4(w[0], w[1], w[2], w[3]);
  uint32_t q[4];
  quant::device::QdqFp8UnitOfQuad(w, q);
  *reinterpret_cast<uint4*>(qdq) = make_uint4(q[0], q[1], q[2], q[3]);
}

// out = bf16(w * (x * r)) per row; with Tail = RopeArgs the last 2 * tail.pairs values of the row
// are then rotated (from their bf16-rounded normed values) instead of stored as they are. kGroup
// threads (4 / 8 / 16 aligned lanes, a warp, or the block) share a row; kW = 8 needs 16-byte
// aligned rows and weight and (cols - 2 * pairs) % 8 == 0. In place is safe: each thread reads x[c]
// before it writes out[c], and pass 2 starts after every thread's pass-1 reads (GroupSum
// synchronises). kCache (norm_rope_rows.cuh): kNormCacheNone re-reads the row in pass 2 (32-40
// registers); kNormCacheRow holds rows of at most kNormCache chunks per thread in registers between
// the passes, as fp32 values with their weights (few rows: latency; ~100-112 registers);
// kNormCacheRaw (kW = 8) holds rows of at most kRawSlots (<= kNormRawCache) chunks per thread as
// their raw 16-byte words and loads the weights in pass 2 (many rows: one read of each row at a
// footprint small enough for full occupancy). kPrefetch (kRaw only; the launcher's choice for wide
// rows on a grid of resident blocks): the group's next row's raw words are loaded before the
// current row's passes, so each group keeps a row's loads in flight through its reduction and
// stores. Same bits in every mode. kQdq (kRaw, no RoPE, cols % 32 == 0, kGroup a multiple of 4,
// 16-byte aligned out_qdq rows): pass 2 also writes out_qdq (StoreBf16AndQdq).
template <int kGroup, typename W, int kW, typename Tail, int kCache, int kRawSlots = 1,
          bool kPrefetch = false, bool kQdq = false>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(RmsNormParams p, const W* __restrict__ weight, Tail tail) {
  static_assert(kCache != kNormCacheRaw || kW == 8, "raw words are 16-byte chunks");
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  constexpr int kRowsPerBlock = kNormThreads / kGroup;
  __shared__ double warp_sums[kNormThreads / 32];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t chunks = p.cols / kW;
  const int64_t plain_chunks = (p.cols - 2 * int64_t{tail.pairs}) / kW;
  // kCache: rows of at most kNormCache chunks per thread (every row of the vectorised paths up to
  // 8192 columns) stay in registers between the passes, and their weights are loaded with them, so
  // a row costs one round trip to memory instead of one per chunk and pass.
  const bool cached = kCache == kNormCacheRow && chunks <= int64_t{kNormCache} * kGroup;
  // kRaw: the launcher guarantees chunks <= kRawSlots * kGroup.
  constexpr bool kRaw = kCache == kNormCacheRaw;
  static_assert(kRawSlots >= 1 && kRawSlots <= kNormRawCache, "raw slots");
  static_assert(!kPrefetch || kRaw, "prefetch keeps raw words");
  static_assert(!kQdq || (kRaw && !Tail::kRope && kGroup % 4 == 0), "the QDQ'd output");
  const float inv_n = DivRn(1.0f, Int64ToF32(p.cols));
  const int64_t row_step = int64_t{gridDim.x} * kRowsPerBlock;
  // The raw words of row `r` (r < p.rows) into `dst`.
  auto load_raw = [&](int64_t r, uint4(&dst)[kRawSlots]) {
    const uint16_t* xr = p.x + r * p.x_stride;
#pragma unroll
    for (int s = 0; s < kRawSlots; ++s) {
      const int64_t j = lane + int64_t{s} * kGroup;
      if (j < chunks) dst[s] = *reinterpret_cast<const uint4*>(xr + j * kW);
    }
  };
  uint4 raw[kRawSlots];
  const int64_t first_row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kGroup;
  if constexpr (kPrefetch) {
    if (first_row < p.rows) load_raw(first_row, raw);
  }
  for (int64_t row = first_row; row < p.rows; row += row_step) {
    const uint16_t* x = p.x + row * p.x_stride;
    uint16_t* out = p.out + row * p.out_stride;
    constexpr int kSlots = kCache == kNormCacheRow ? kNormCache : 1;
    float v[kSlots][kW];
    float w[kSlots][kW];
    uint4 next[kPrefetch ? kRawSlots : 1];
    if constexpr (kPrefetch) {
      // raw holds this row (loaded one row earlier); the next row's loads go out now. Another
      // row than this one's, so in place is still safe.
      if (row + row_step < p.rows) load_raw(row + row_step, next);
    } else if constexpr (kRaw) {
      load_raw(row, raw);
    }
    if (cached) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int64_t j = lane + int64_t{s} * kGroup;
        if (j < chunks) LoadBf16<kW>(x + j * kW, v[s]);
        if (j < plain_chunks) LoadWeight<kW>(weight + j * kW, w[s]);
      }
    }
    // kCache: the first rotated pair's cos/sin while the loads are in flight (RopeCosSinAt, as
    // below).
    float cs0 = 0.0f;
    float sn0 = 0.0f;
    if constexpr (Tail::kRope && kCache != kNormCacheNone) {
      if (lane < tail.pairs) RopeCosSinAt(tail.positions[row], tail.freqs[lane], &cs0, &sn0);
    }
    // Pass 1: sum of fp32 squares, in double, chunks in ascending order per thread.
    double sum = 0.0;
    if constexpr (kRaw) {
#pragma unroll
      for (int s = 0; s < kRawSlots; ++s) {
        if (lane + int64_t{s} * kGroup < chunks) {
          float u[kW];
          UnpackBf16x8(raw[s], u);
#pragma unroll
          for (int i = 0; i < kW; ++i) sum += static_cast<double>(MulRn(u[i], u[i]));
        }
      }
    } else if (cached) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (lane + int64_t{s} * kGroup < chunks) {
#pragma unroll
          for (int i = 0; i < kW; ++i) sum += static_cast<double>(MulRn(v[s][i], v[s][i]));
        }
      }
    } else {
      for (int64_t j = lane; j < chunks; j += kGroup) {
        float u[kW];
        LoadBf16<kW>(x + j * kW, u);
#pragma unroll
        for (int i = 0; i < kW; ++i) sum += static_cast<double>(MulRn(u[i], u[i]));
      }
    }
    sum = GroupSum<kGroup>(sum, warp_sums);
    const float r = InverseRmsFromSum(sum, inv_n, p.eps);
    // Pass 2: the unrotated values.
    if constexpr (kRaw) {
#pragma unroll
      for (int s = 0; s < kRawSlots; ++s) {
        const int64_t j = lane + int64_t{s} * kGroup;
        if (j < plain_chunks) {
          float u[kW];
          float wu[kW];
          UnpackBf16x8(raw[s], u);
          LoadWeight<kW>(weight + j * kW, wu);
#pragma unroll
          for (int i = 0; i < kW; ++i) u[i] = MulRn(wu[i], MulRn(u[i], r));
          if constexpr (kQdq) {
            StoreBf16AndQdq(out + j * kW, p.out_qdq + row * p.out_qdq_stride + j * kW, u);
          } else {
            StoreBf16<kW>(out + j * kW, u);
          }
        }
      }
    } else if (cached) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int64_t j = lane + int64_t{s} * kGroup;
        if (j < plain_chunks) {
          float o[kW];
#pragma unroll
          for (int i = 0; i < kW; ++i) o[i] = MulRn(w[s][i], MulRn(v[s][i], r));
          StoreBf16<kW>(out + j * kW, o);
        }
      }
    } else {
      for (int64_t j = lane; j < plain_chunks; j += kGroup) {
        float u[kW];
        float wu[kW];
        LoadBf16<kW>(x + j * kW, u);
        LoadWeight<kW>(weight + j * kW, wu);
#pragma unroll
        for (int i = 0; i < kW; ++i) u[i] = MulRn(wu[i], MulRn(u[i], r));
        StoreBf16<kW>(out + j * kW, u);
      }
    }
    if constexpr (Tail::kRope) {
      const int64_t nope = p.cols - 2 * int64_t{tail.pairs};
      const int64_t pos = tail.positions[row];
      for (int k = lane; k < tail.pairs; k += kGroup) {
        const int64_t c = nope + 2 * k;
        // The bf16 values RmsNormCpu would store are what RopeCpu reads. kW = 8: the pair is one
        // aligned 32-bit word of x and out (nope % 8 == 0, 16-byte aligned rows).
        uint32_t xw = 0;
        if constexpr (kW == 8) {
          xw = *reinterpret_cast<const uint32_t*>(x + c);
        } else {
          xw = x[c] | (uint32_t{x[c + 1]} << 16);
        }
        const uint32_t ab =
            F32x2ToBf16x2Fast(MulRn(WeightAt(weight, c), MulRn(Bf16ToF32(xw & 0xFFFFu), r)),
                              MulRn(WeightAt(weight, c + 1), MulRn(Bf16ToF32(xw >> 16), r)));
        float cs = cs0;
        float sn = sn0;
        if (kCache == kNormCacheNone || k != lane) RopeCosSinAt(pos, tail.freqs[k], &cs, &sn);
        if (tail.inverse) sn = -sn;
        float re = 0.0f;
        float im = 0.0f;
        RotatePair(Bf16ToF32(ab & 0xFFFFu), Bf16ToF32(ab >> 16), cs, sn, &re, &im);
        const uint32_t res = F32x2ToBf16x2Fast(re, im);
        if constexpr (kW == 8) {
          *reinterpret_cast<uint32_t*>(out + c) = res;
        } else {
          out[c] = static_cast<uint16_t>(res & 0xFFFFu);
          out[c + 1] = static_cast<uint16_t>(res >> 16);
        }
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int s = 0; s < kRawSlots; ++s) raw[s] = next[s];
    }
  }
}

// Text RoPE for 16-byte layouts (the model's q, kv and indexer shapes): a unit is 4 pairs (16
// bytes) of one head's tail or, out of place, 8 unrotated dims to copy; a block of 128 threads
// takes kUnits · 128 units of one token (thread i: units i, i + 128, ...), a token's units spread
// over ceil(units / (kUnits · 128)) blocks (so 1 token of q [64 x 512] in place is one block at
// kUnits = 4, each thread 4 loads and 4 stores). Every thread issues all its loads first; then the
// block computes its token's rd/2 cos/sin once into shared memory (RopeCosSinAt, as the generic
// kernel) while they are in flight. kUnits = 4 keeps 64 bytes per thread in flight (the launcher
// takes it where a token has >= 512 units): at 1 unit per thread the in-place q RoPE of 16,384
// tokens was bound by the bytes a resident grid keeps in flight. Needs pairs % 4 == 0, (head_dim -
// rd) % 8 == 0, x and out 16-byte aligned, every stride a multiple of 8 elements; heads * head_dim
// < 2^31.
template <int kUnits>
__global__ void __launch_bounds__(kRopeThreads) RopeVec16Kernel(RopeParams p, RopeArgs f) {
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  __shared__ float s_cos[kMaxRopeDims / 2];
  __shared__ float s_sin[kMaxRopeDims / 2];
  constexpr uint32_t kBlockUnits = kUnits * kRopeThreads;
  const uint32_t pairs = static_cast<uint32_t>(f.pairs);
  const uint32_t quads = pairs / 4;
  const uint32_t nope = static_cast<uint32_t>(p.head_dim) - 2 * pairs;
  const uint32_t rot_units = static_cast<uint32_t>(p.heads) * quads;
  const uint32_t copy_per_head = p.out != p.x ? nope / 8 : 0;
  const uint32_t units = rot_units + static_cast<uint32_t>(p.heads) * copy_per_head;
  const int64_t blocks_per_token = (units + kBlockUnits - 1) / kBlockUnits;
  for (int64_t b = blockIdx.x; b < p.tokens * blocks_per_token; b += gridDim.x) {
    const int64_t t = b / blocks_per_token;
    const uint32_t u0 = static_cast<uint32_t>(b - t * blocks_per_token) * kBlockUnits + threadIdx.x;
    const uint16_t* x_tok = p.x + t * p.x_stride;
    uint16_t* out_tok = p.out + t * p.out_stride;
    uint16_t* dst[kUnits];
    uint32_t k0[kUnits];  // first pair of a rotated unit
    uint4 v[kUnits];
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const uint32_t u = u0 + i * kRopeThreads;
      const uint16_t* src = nullptr;
      dst[i] = nullptr;
      k0[i] = 0;
      if (u < rot_units) {
        const uint32_t h = u / quads;
        k0[i] = 4 * (u - h * quads);
        src = x_tok + h * p.x_head_stride + nope + 2 * k0[i];
        dst[i] = out_tok + h * p.out_head_stride + nope + 2 * k0[i];
      } else if (u < units) {
        const uint32_t h = (u - rot_units) / copy_per_head;
        const uint32_t d = 8 * (u - rot_units - h * copy_per_head);
        src = x_tok + h * p.x_head_stride + d;
        dst[i] = out_tok + h * p.out_head_stride + d;
      }
      v[i] = src != nullptr ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
    }
    const int64_t pos = f.positions[t];
    for (uint32_t k = threadIdx.x; k < pairs; k += kRopeThreads) {
      float cs = 0.0f;
      float sn = 0.0f;
      RopeCosSinAt(pos, f.freqs[k], &cs, &sn);
      s_cos[k] = cs;
      s_sin[k] = f.inverse ? -sn : sn;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const uint32_t u = u0 + i * kRopeThreads;
      if (u < rot_units) {
        const uint32_t in[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
        uint32_t res[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float re = 0.0f;
          float im = 0.0f;
          RotatePair(Bf16ToF32(in[j] & 0xFFFFu), Bf16ToF32(in[j] >> 16), s_cos[k0[i] + j],
                     s_sin[k0[i] + j], &re, &im);
          res[j] = F32x2ToBf16x2Fast(re, im);
        }
        *reinterpret_cast<uint4*>(dst[i]) = make_uint4(res[0], res[1], res[2], res[3]);
      } else if (u < units) {
        *reinterpret_cast<uint4*>(dst[i]) = v[i];
      }
    }
    __syncthreads();  // s_cos / s_sin are rewritten for the next block's token
  }
}

// Text RoPE, one block per token (grid-stride): the block computes the token's rd/2 cos/sin once
// into shared memory, then rotates every head's tail pair by pair and, when out != x, copies the
// unrotated dims. kPairVec: every pair and every copied pair of values is one aligned 32-bit word
// (x, out 4-byte aligned; strides, head strides and head_dim - rd even). The launcher guarantees
// heads * head_dim < 2^31, so per-token indices fit 32 bits.
template <bool kPairVec>
__global__ void __launch_bounds__(kRopeThreads) RopeKernel(RopeParams p, RopeArgs f) {
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  __shared__ float s_cos[kMaxRopeDims / 2];
  __shared__ float s_sin[kMaxRopeDims / 2];
  const uint32_t pairs = static_cast<uint32_t>(f.pairs);
  const uint32_t nope = static_cast<uint32_t>(p.head_dim) - 2 * pairs;
  const uint32_t rotated = static_cast<uint32_t>(p.heads) * pairs;
  const bool copy_nope = p.out != p.x && nope > 0;
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const int64_t pos = f.positions[t];
    for (uint32_t k = threadIdx.x; k < pairs; k += blockDim.x) {
      float cs = 0.0f;
      float sn = 0.0f;
      RopeCosSinAt(pos, f.freqs[k], &cs, &sn);
      s_cos[k] = cs;
      s_sin[k] = f.inverse ? -sn : sn;
    }
    __syncthreads();
    const uint16_t* x_tok = p.x + t * p.x_stride;
    uint16_t* out_tok = p.out + t * p.out_stride;
    for (uint32_t i = threadIdx.x; i < rotated; i += blockDim.x) {
      const uint32_t h = i / pairs;
      const uint32_t k = i - h * pairs;
      const uint16_t* xp = x_tok + h * p.x_head_stride + nope + 2 * k;
      uint16_t* op = out_tok + h * p.out_head_stride + nope + 2 * k;
      uint32_t lo = 0;
      uint32_t hi = 0;
      if constexpr (kPairVec) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(xp);
        lo = word & 0xFFFFu;
        hi = word >> 16;
      } else {
        lo = xp[0];
        hi = xp[1];
      }
      float re = 0.0f;
      float im = 0.0f;
      RotatePair(Bf16ToF32(lo), Bf16ToF32(hi), s_cos[k], s_sin[k], &re, &im);
      if constexpr (kPairVec) {
        *reinterpret_cast<uint32_t*>(op) = F32x2ToBf16x2Fast(re, im);
      } else {
        op[0] = static_cast<uint16_t>(F32ToBf16(re));
        op[1] = static_cast<uint16_t>(F32ToBf16(im));
      }
    }
    if (copy_nope) {
      constexpr uint32_t kStep = kPairVec ? 2 : 1;  // values per copied unit
      const uint32_t units = nope / kStep;
      const uint32_t total = static_cast<uint32_t>(p.heads) * units;
      for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
        const uint32_t h = i / units;
        const uint32_t d = (i - h * units) * kStep;
        const uint16_t* xp = x_tok + h * p.x_head_stride + d;
        uint16_t* op = out_tok + h * p.out_head_stride + d;
        if constexpr (kPairVec) {
          *reinterpret_cast<uint32_t*>(op) = *reinterpret_cast<const uint32_t*>(xp);
        } else {
          op[0] = xp[0];
        }
      }
    }
    __syncthreads();  // s_cos / s_sin are rewritten for the next token
  }
}

// LaunchRopeCosSin: thread i (grid-stride) writes item i = (token i / pairs, pair i % pairs) of
// the table, out[2i] = cos, out[2i + 1] = sin (RopeCosSinAt: RopeCosSinCpu's bits).
__global__ void __launch_bounds__(256)
    RopeCosSinKernel(const RopeArgs a, int64_t tokens, float* out) {
  const int64_t items = tokens * a.pairs;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < items;
       i += int64_t{gridDim.x} * blockDim.x) {
    float cs = 0.0f, sn = 0.0f;
    RopeCosSinAt(a.positions[i / a.pairs], a.freqs[i % a.pairs], &cs, &sn);
    out[2 * i] = cs;
    out[2 * i + 1] = sn;
  }
}

}  // namespace flashserve::kernels::norm_rope_device
