// Device code of the compressor launchers (compressor_launch.cu only; not a public header).
// Every fp32 operation is spelled with an exact PTX helper (kernels/common/cuda_exact_math.cuh,
// kernels/quant/cuda/quant_math.h), so nvcc cannot contract or reorder it: the kernels perform
// the CPU bodies' operations in the CPU bodies' order (README.md "CUDA" has the argument).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/compressor/compressor_params.h"
#include "kernels/compressor/cuda/compress_vec.cuh"
#include "kernels/compressor/exp_rn.h"
#include "kernels/norm_rope/cuda/norm_rope_math.cuh"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/cuda/quant_kernels.cuh"
#include "kernels/quant/cuda/quant_math.h"

namespace flashserve::kernels::compressor_device {

namespace ex = ::flashserve::kernels::exact;
namespace qm = ::flashserve::kernels::quant::math;

inline constexpr int kThreads = 256;
// Block size of the single launcher's warp-per-row kernels (CompressKernel<32, ...>,
// CompressRatio2Kernel), with the same register caps as at kThreads; the batched kernel and the
// block-per-row kernels keep kThreads. A block retires when its slowest row does, so smaller
// blocks keep more rows in flight (session 49, [16384, 512], 256 / 128 / 64 threads: ratio 1 fp32
// 27.4–27.6 / 26.1–26.4 / 26.1–26.2 µs, bf16 23.7–23.9 / 22.8–23.4 / 23.2–23.7, ratio 2 level).
inline constexpr int kWarpRowThreads = 128;
// Threads per block of the single launcher's kernel for kGroup threads per row.
__host__ __device__ constexpr int SingleBlockThreads(int group) {
  return group == 32 ? kWarpRowThreads : kThreads;
}

// ---- CompressProjected ------------------------------------------------------------------------

struct CompressArgs {
  CompressProjectedParams p;  // device pointers (groups_emitted unused on the device)
  float* state_kv = nullptr;  // [(ratio − 1)·C]: read for group 0, then rewritten
  float* state_score = nullptr;
  int64_t pending = 0;      // state rows holding tokens before this call's row 0
  int64_t groups = 0;       // completed groups = (pending + tokens) / ratio
  int64_t first_group = 0;  // group index of latent row 0
  int sum_bits = 0;         // ceil(log2(channels)): extra bits a sum of C terms needs
  // A warp per row by 4-channel chunks (PassOneVec), ratios 2 and 1: C == 128·kVecChunks,
  // the fp32 inputs and state rows 16-byte aligned (bf16 kv rows 8-byte), latent rows and the
  // norm weight 8-byte aligned.
  bool vec = false;
};

// Sum / max / min of a value over a group of kGroup threads (a warp, or the whole block), the
// same result in every thread of the group. `scratch` holds kThreads / 32 slots of 8 bytes.
template <int kGroup, typename T, typename Op>
__device__ __forceinline__ T GroupReduce(T v, Op op, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  if constexpr (kGroup == 32) {
    return v;
  } else {
    static_assert(kGroup == kThreads);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    T total = scratch[0];
#pragma unroll
    for (int w = 1; w < kGroup / 32; ++w) total = op(total, scratch[w]);
    __syncthreads();  // scratch is rewritten by the next reduction
    return total;
  }
}

// Exponent of the top bit and of the lowest set bit of a positive finite fp32 value (subnormals
// included), used to decide whether a double sum of such terms is exact.
__device__ __forceinline__ int TopExponent(uint32_t u) {
  return u >= 0x00800000u ? static_cast<int>(u >> 23) - 127
                          : (31 - __clz(static_cast<int>(u))) - 149;
}
__device__ __forceinline__ int LowExponent(uint32_t u) {
  if (u >= 0x00800000u) {
    return static_cast<int>(u >> 23) - 150 +
           (__ffs(static_cast<int>((u & 0x7FFFFFu) | 0x800000u)) - 1);
  }
  return -149 + (__ffs(static_cast<int>(u)) - 1);
}

// Ratio 2's pooled value of one channel from its two tokens' gate logits z0, z1 and values k0, k1
// (PoolChannel's operations): of the two exps one is exp(m - m) = exp(0) = 1 exactly when the max
// m is finite (a token equal to m, NaN excepted: fmaxf returns the other operand), so one ExpRn
// instead of two; a non-finite m (an Inf or two NaNs) takes both, as the CPU does.
__device__ __forceinline__ float PoolPair(float z0, float z1, float k0, float k1) {
  const float mx = fmaxf(z0, z1);
  float e0 = 1.0f;
  float e1 = 1.0f;
  if (isfinite(mx)) {
    const bool first = z0 == mx;  // then exp(z0 - mx) = 1
    const float e = compressor_math::ExpRn(ex::SubRn(first ? z1 : z0, mx));
    (first ? e1 : e0) = e;
  } else {
    e0 = compressor_math::ExpRn(ex::SubRn(z0, mx));
    e1 = compressor_math::ExpRn(ex::SubRn(z1, mx));
  }
  const float sum = ex::AddRn(ex::AddRn(0.0f, e0), e1);
  const float acc = ex::AddRn(0.0f, ex::MulRn(ex::DivRn(e0, sum), k0));
  return ex::AddRn(acc, ex::MulRn(ex::DivRn(e1, sum), k1));
}

// The pooled fp32 value of one channel: PoolGroup of cpu/compress_projected_cpu.cc, operation for
// operation (ratio 2 through PoolPair). kv_rows / z_rows: the r token rows of the group.
template <int kRatio>
__device__ __forceinline__ float PoolChannel(const float* const* kv_rows,
                                             const float* const* z_rows, int r, int64_t c) {
  if constexpr (kRatio == 2) {
    return PoolPair(z_rows[0][c], z_rows[1][c], kv_rows[0][c], kv_rows[1][c]);
  } else {
    constexpr int kMax = kRatio > 0 ? kRatio : static_cast<int>(kMaxCompressRatio);
    const int n = kRatio > 0 ? kRatio : r;
    float e[kMax];
    float mx = z_rows[0][c];
#pragma unroll
    for (int i = 1; i < kMax; ++i) {
      if (i < n) mx = fmaxf(mx, z_rows[i][c]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kMax; ++i) {
      if (i < n) {
        e[i] = compressor_math::ExpRn(ex::SubRn(z_rows[i][c], mx));
        sum = ex::AddRn(sum, e[i]);
      }
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMax; ++i) {
      if (i < n) acc = ex::AddRn(acc, ex::MulRn(ex::DivRn(e[i], sum), kv_rows[i][c]));
    }
    return acc;
  }
}

// Per-term statistics of a row's fp32 squares for the exactness check of their double sum.
struct SquareStats {
  double sum = 0.0;
  int top = -1000;
  int low = 1000;
  bool finite = true;
  __device__ __forceinline__ void Add(float v) {
    const float sq = ex::MulRn(v, v);
    const uint32_t u = __float_as_uint(sq);
    if (u >= 0x7F800000u) {
      finite = false;
    } else if (u != 0u) {
      top = max(top, TopExponent(u));
      low = min(low, LowExponent(u));
    }
    sum += static_cast<double>(sq);
  }
};

// The chunk's four bf16 words by PoolPair (where PoolQuadFast declined), one channel at a time
// in a loop that is not unrolled, so that its general exps and divisions take few registers
// from the fast path around it.
__device__ __forceinline__ uint2 PoolChunkSlow(const float4& z0, const float4& z1, const float4& k0,
                                               const float4& k1) {
  auto pick = [](const float4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
  };
  uint2 w = make_uint2(0u, 0u);
#pragma unroll 1
  for (int i = 0; i < 4; ++i) {
    const uint32_t b = ex::F32ToBf16(PoolPair(pick(z0, i), pick(z1, i), pick(k0, i), pick(k1, i)))
                       << (16 * (i & 1));
    w.x |= i < 2 ? b : 0u;
    w.y |= i < 2 ? 0u : b;
  }
  return w;
}

// Ratio 1's bf16 words of one chunk (the cast of fp32 kv: F32ToBf16's bits; cvt where no lane of
// the warp holds a NaN, whose bits cvt would not reproduce).
__device__ __forceinline__ void CastChunk(const VecChunkIn<Input::kCastF32>& in, uint32_t* w0,
                                          uint32_t* w1) {
  const float4 x = in.x;
  const bool nan = isnan(x.x) | isnan(x.y) | isnan(x.z) | isnan(x.w);
  if (!__any_sync(0xFFFFFFFFu, nan)) {
    *w0 = ex::F32x2ToBf16x2NoNan(x.x, x.y);
    *w1 = ex::F32x2ToBf16x2NoNan(x.z, x.w);
  } else {
    *w0 = ex::F32x2ToBf16x2(x.x, x.y);
    *w1 = ex::F32x2ToBf16x2(x.z, x.w);
  }
}
__device__ __forceinline__ void CastChunk(const VecChunkIn<Input::kBf16>& in, uint32_t* w0,
                                          uint32_t* w1) {
  *w0 = in.x.x;
  *w1 = in.x.y;
}

// Pass 1 on the vector path (CompressArgs::vec, compress_vec.cuh): lane l takes channels
// 128 j + 4 l .. + 3 of every chunk j (ratio 2: both tokens' kv and z, PoolQuadFast or PoolPair;
// ratio 1: the kv values, the cast), keeps the bf16 words for pass 2 and adds them to `st`.
// Ratio 1 loads the whole row's inputs first; ratio 2 (16 registers a chunk, 64 in all) each
// chunk as it goes (loading one chunk ahead needed 128 registers: 43 against 36 µs).
// Nothing is stored yet: pass 2 writes the normalised words (the sequential-sum fallback stores
// these first).
template <Input kInput>
__device__ __forceinline__ void PassOneVec(const CompressProjectedParams& p,
                                           const float* const* kv_rows, const float* const* z_rows,
                                           int64_t g, int lane, uint32_t (&words)[kVecChunks][2],
                                           VecStats* st) {
  constexpr int kAhead = kInput == Input::kPool ? 0 : kVecChunks;
  VecChunkIn<kInput> in[kVecChunks];
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    in[j] = LoadVecChunk<kInput>(p, kv_rows, z_rows, g, j, lane);
  }
#pragma unroll
  for (int j = 0; j < kVecChunks; ++j) {
    if (j + kAhead < kVecChunks) {
      in[j + kAhead] = LoadVecChunk<kInput>(p, kv_rows, z_rows, g, j + kAhead, lane);
    }
    uint32_t w0 = 0;
    uint32_t w1 = 0;
    if constexpr (kInput == Input::kPool) {
      const VecChunkIn<kInput>& c = in[j];
      float v[4];
      if (PoolQuadFast(c.z0, c.z1, c.k0, c.k1, v)) {  // warp-uniform
        w0 = ex::F32x2ToBf16x2NoNan(v[0], v[1]);
        w1 = ex::F32x2ToBf16x2NoNan(v[2], v[3]);
      } else {
        const uint2 w = PoolChunkSlow(c.z0, c.z1, c.k0, c.k1);
        w0 = w.x;
        w1 = w.y;
      }
    } else {
      CastChunk(in[j], &w0, &w1);
    }
    words[j][0] = w0;
    words[j][1] = w1;
    st->Add(w0);
    st->Add(w1);
  }
}

// Vector path: the lane's norm weight words (channels 128 j + 4 lane .. + 3), the same for every
// row — loaded once per thread at ratio 1, per row at ratio 2 (whose 64 registers they would
// crowd) — and whether they hold no inf / NaN.
__host__ __device__ constexpr bool HoistNormWeights(Input input) { return input != Input::kPool; }
__device__ __forceinline__ void LoadNormWeights(const CompressProjectedParams& p, int lane,
                                                uint2 (&wt)[kVecChunks], bool* wt_finite) {
  *wt_finite = true;
#pragma unroll
  for (int j = 0; j < kVecChunks; ++j) {
    wt[j] = *reinterpret_cast<const uint2*>(p.norm_weight + 128 * j + 4 * lane);
    *wt_finite = *wt_finite && Bf16x2Finite(wt[j].x) && Bf16x2Finite(wt[j].y);
  }
}

// Latent row g by a group of kGroup threads (`lane` within it): pass 1 writes the bf16 pre-norm
// latent and sums its fp32 squares in double, pass 2 normalises it in place (each thread
// rewrites the channels it wrote). The double sum equals RmsInverse's sequential one when it is
// exact (checked per row from the terms' exponents, see README.md); otherwise the group's first
// thread redoes it sequentially in the CPU's order. `wt` / `wt_finite`: the vector path's norm
// weights (LoadNormWeights; loaded here at ratio 2); `dscratch` / `iscratch`: kThreads / 32 slots.
template <int kGroup, Input kInput, int kRatio>
__device__ __forceinline__ void CompressRow(const CompressArgs& a, int64_t g, int lane, float inv_n,
                                            uint2 (&wt)[kVecChunks], bool* wt_finite,
                                            double* dscratch, int* iscratch) {
  const CompressProjectedParams& p = a.p;
  const int64_t c_n = p.channels;
  const int r = static_cast<int>(p.ratio);
  constexpr bool kVecPath = kGroup == 32 && (kInput != Input::kPool || kRatio == 2);
  uint16_t* lat = p.latent + g * p.latent_stride;
  constexpr int kMaxRows = kRatio > 0 ? kRatio : static_cast<int>(kMaxCompressRatio);
  const float* kv_rows[kMaxRows];
  const float* z_rows[kMaxRows];
  if constexpr (kInput == Input::kPool) {
#pragma unroll
    for (int i = 0; i < kMaxRows; ++i) {
      if (i >= r) break;
      const int64_t t = g * r + i - a.pending;  // < 0: a state row
      kv_rows[i] = t < 0 ? a.state_kv + (t + a.pending) * c_n : p.kv + t * p.kv_stride;
      z_rows[i] = t < 0 ? a.state_score + (t + a.pending) * c_n : p.score + t * p.score_stride;
    }
  }
  // Pass 1. The vector path keeps the row's bf16 words in registers and vouches for the
  // exactness of its double sum from the row's largest and smallest magnitudes (VecSumExact);
  // rows it cannot vouch for take the scalar path's per-term check on the same values.
  SquareStats st;
  double sum = 0.0;
  uint32_t words[kVecChunks][2];
  bool vec = false;
  bool vouched = false;      // warp-uniform
  uint32_t row_max_mag = 0;  // vector path: the row's largest bf16 magnitude bits
  if constexpr (kVecPath) vec = a.vec;
  if constexpr (kVecPath) {
    if (vec) {
      VecStats vs;
      PassOneVec<kInput>(p, kv_rows, z_rows, g, lane, words, &vs);
      const uint32_t mx = __reduce_max_sync(0xFFFFFFFFu, max(vs.mx2 & 0xFFFFu, vs.mx2 >> 16));
      row_max_mag = mx;
      const uint32_t mn = __reduce_min_sync(0xFFFFFFFFu, min(vs.mn2 & 0xFFFFu, vs.mn2 >> 16));
      vouched = VecSumExact(mx, mn, a.sum_bits);
      if (vouched || VecSquaresExact(mx, mn)) {
        sum = GroupReduce<kGroup>(
            vs.sum, [](double x, double y) { return x + y; }, dscratch);
        // Not exact in every order, but within 2·C units of its last place of the sequential
        // sum: where no fp32 tie lies that close, both round to the same fp32 (all the norm
        // uses). Warp-uniform (every lane holds the same sum).
        vouched = vouched || SumRoundsAsAnyOrder(sum, c_n);
      }
      if (!vouched) {  // the pre-norm row in memory for the sequential fallback, the per-term check
#pragma unroll
        for (int j = 0; j < kVecChunks; ++j) {
          *reinterpret_cast<uint2*>(lat + 128 * j + 4 * lane) =
              make_uint2(words[j][0], words[j][1]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            st.Add(ex::Bf16ToF32(words[j][h] & 0xFFFFu));
            st.Add(ex::Bf16ToF32(words[j][h] >> 16));
          }
        }
      }
    }
  }
  if (!vec) {
    for (int64_t c = lane; c < c_n; c += kGroup) {
      uint32_t b = 0;
      if constexpr (kInput == Input::kPool) {
        b = ex::F32ToBf16(PoolChannel<kRatio>(kv_rows, z_rows, r, c));
      } else if constexpr (kInput == Input::kCastF32) {
        b = ex::F32ToBf16(p.kv[g * p.kv_stride + c]);
      } else {
        b = p.kv_bf16[g * p.kv_stride + c];
      }
      lat[c] = static_cast<uint16_t>(b);
      st.Add(ex::Bf16ToF32(b));
    }
  }
  if (!vouched) {
    sum = st.sum;
    int top = st.top;
    int low = st.low;
    const bool finite = st.finite;
    sum = GroupReduce<kGroup>(
        sum, [](double x, double y) { return x + y; }, dscratch);
    top = GroupReduce<kGroup>(
        top, [](int x, int y) { return max(x, y); }, iscratch);
    low = GroupReduce<kGroup>(
        low, [](int x, int y) { return min(x, y); }, iscratch);
    const int all_finite = GroupReduce<kGroup>(
        finite ? 1 : 0, [](int x, int y) { return min(x, y); }, iscratch);
    // Every partial sum is a multiple of 2^low below 2^(top + 1 + sum_bits): exact in double
    // when that spans at most 53 bits, whatever the order.
    const bool exact = all_finite == 1 && (top < low || top + 1 + a.sum_bits - low <= 53);
    if (!exact) {  // uniform over the group
      if constexpr (kGroup == 32) {
        __syncwarp();
      } else {
        __syncthreads();
      }
      double seq = 0.0;
      if (lane == 0) {
        for (int64_t c = 0; c < c_n; ++c) {
          const float v = ex::Bf16ToF32(lat[c]);
          seq += static_cast<double>(ex::MulRn(v, v));
        }
      }
      if constexpr (kGroup == 32) {
        sum = __shfl_sync(0xFFFFFFFFu, seq, 0);
      } else {
        if (lane == 0) dscratch[0] = seq;
        __syncthreads();
        sum = dscratch[0];
        __syncthreads();
      }
    }
  }
  const float mean = ex::MulRn(ex::DoubleToF32(sum), inv_n);
  const float rs = ex::DivRn(1.0f, ex::SqrtRn(ex::AddRn(mean, p.norm_eps)));
  // Pass 2: the same channels as pass 1, so each thread reads back what it wrote (or, on the
  // vector path, normalises the words it kept).
  if constexpr (kVecPath) {
    if (vec) {
      if constexpr (!HoistNormWeights(kInput)) LoadNormWeights(p, lane, wt, wt_finite);
      const bool finite =
          __all_sync(0xFFFFFFFFu, *wt_finite) && row_max_mag < 0x7F80u && isfinite(rs);
      if (finite) {  // warp-uniform
        NormRowVec<true>(words, wt, lane, rs, lat);
      } else {
        NormRowVec<false>(words, wt, lane, rs, lat);
      }
    }
  }
  if (!vec) {
    for (int64_t c = lane; c < c_n; c += kGroup) {
      const float x = ex::Bf16ToF32(lat[c]);
      const float w = ex::Bf16ToF32(p.norm_weight[c]);
      lat[c] = static_cast<uint16_t>(ex::F32ToBf16(ex::MulRn(w, ex::MulRn(x, rs))));
    }
  }
  if (lane == 0) p.group_index[g] = a.first_group + g;
}

// A group of kGroup threads per latent row (grid-stride over rows, CompressRow each). Block 0 then
// writes the new open group into the state: only group 0 reads the old state rows, and it
// belongs to block 0.
// `block` / `blocks`: this block's index among the blocks that share the call (blockIdx.x /
// gridDim.x; the batched kernel runs one such set of blocks per sequence).
template <int kGroup, Input kInput, int kRatio, int kBlockThreads>
__device__ __forceinline__ void CompressBody(const CompressArgs& a, int64_t block, int64_t blocks) {
  constexpr int kRowsPerBlock = kBlockThreads / kGroup;
  __shared__ double dscratch[kThreads / 32];
  __shared__ int iscratch[kThreads / 32];
  const CompressProjectedParams& p = a.p;
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t c_n = p.channels;
  const float inv_n = ex::DivRn(1.0f, ex::Int64ToF32(c_n));
  constexpr bool kVecPath = kGroup == 32 && (kInput != Input::kPool || kRatio == 2);
  uint2 wt[kVecChunks];
  bool wt_finite = true;
  if constexpr (kVecPath && HoistNormWeights(kInput)) {
    if (a.vec) LoadNormWeights(p, lane, wt, &wt_finite);
  }
  for (int64_t g = block * kRowsPerBlock + threadIdx.x / kGroup; g < a.groups;
       g += blocks * kRowsPerBlock) {
    CompressRow<kGroup, kInput, kRatio>(a, g, lane, inv_n, wt, &wt_finite, dscratch, iscratch);
  }
  if constexpr (kInput == Input::kPool) {
    if (block != 0) return;
    __syncthreads();  // block 0's reads of the old state rows (group 0) are done
    const int64_t base = a.groups * p.ratio;  // first token of the new open group
    const int64_t total = a.pending + p.tokens;
    for (int64_t k = threadIdx.x; k < (total - base) * c_n; k += blockDim.x) {
      const int64_t i = base + k / c_n;
      const int64_t c = k - (k / c_n) * c_n;
      if (i < a.pending) continue;  // groups == 0: the row is already in place
      const int64_t t = i - a.pending;
      a.state_kv[(i - base) * c_n + c] = p.kv[t * p.kv_stride + c];
      a.state_score[(i - base) * c_n + c] = p.score[t * p.score_stride + c];
    }
  }
}

// Ratio 1 (fp32 or bf16 kv) is held to 3 blocks per SM (72 registers; session 48, with a runtime
// chunk count: unbounded 91 registers and 2 blocks, 33.3 against 31.4 µs at [16384, 512]; 4
// blocks, 64 registers with spills, 33.0). The generic-ratio instantiations keep ptxas's choice.
template <int kGroup, Input kInput, int kRatio>
__global__ void __launch_bounds__(SingleBlockThreads(kGroup),
                                  (kInput == Input::kPool ? 1 : 3) * kThreads /
                                      SingleBlockThreads(kGroup)) CompressKernel(CompressArgs a) {
  CompressBody<kGroup, kInput, kRatio, SingleBlockThreads(kGroup)>(a, blockIdx.x, gridDim.x);
}

// Ratio 2 on a warp per row (the released layers' call): CompressKernel's body held to 64
// registers, 4 blocks per SM (session 38: 74 registers and 3 blocks unbounded; [16384 tokens,
// 512]: 51.8 -> 46.7 us on an H200; session 48's vector path: 3 blocks (80 registers) 36.4–36.8
// against 36.0–36.3 µs, 2 blocks with the next chunk loaded ahead 43.1–43.3).
__global__ void __launch_bounds__(kWarpRowThreads, 4 * kThreads / kWarpRowThreads)
    CompressRatio2Kernel(CompressArgs a) {
  CompressBody<32, Input::kPool, 2, kWarpRowThreads>(a, blockIdx.x, gridDim.x);
}

// ---- CompressProjected, batched ----------------------------------------------------------------

// One sequence of a batched launch: what CompressArgs holds per call, minus the shared fields.
struct CompressBatchSequence {
  const void* kv = nullptr;  // fp32 kv, or bf16 kv_bf16 (ratio 1, Input::kBf16)
  const float* score = nullptr;
  uint16_t* latent = nullptr;
  int64_t* group_index = nullptr;
  float* state_kv = nullptr;
  float* state_score = nullptr;
  int64_t tokens = 0;
  int64_t pending = 0;
  int64_t groups = 0;
  int64_t first_group = 0;
};

// Everything a batched launch needs, by value in the kernel parameters (kCapacity descriptors;
// the 384-sequence instantiation is ~31 KB, under the 32,764-byte limit of CUDA 12.1+).
template <int kCapacity>
struct CompressBatchArgs {
  int64_t ratio = 0;
  int64_t channels = 0;
  int64_t kv_stride = 0;
  int64_t score_stride = 0;
  int64_t latent_stride = 0;
  const uint16_t* norm_weight = nullptr;
  float norm_eps = 0.0f;
  int sum_bits = 0;
  bool vec = false;  // every sequence of the launch meets CompressArgs::vec's conditions
  CompressBatchSequence seq[kCapacity];
};

// Grid (blocks per sequence, sequences): blockIdx.y picks the descriptor, then the single
// kernel's body runs over that sequence's groups with blockIdx.x / gridDim.x.
template <int kGroup, Input kInput, int kRatio, int kCapacity>
__global__ void __launch_bounds__(kThreads)
    CompressBatchKernel(const __grid_constant__ CompressBatchArgs<kCapacity> b) {
  const CompressBatchSequence& s = b.seq[blockIdx.y];
  CompressArgs a;
  a.p.ratio = b.ratio;
  a.p.channels = b.channels;
  a.p.tokens = s.tokens;
  if constexpr (kInput == Input::kBf16) {
    a.p.kv_bf16 = static_cast<const uint16_t*>(s.kv);
  } else {
    a.p.kv = static_cast<const float*>(s.kv);
  }
  a.p.kv_stride = b.kv_stride;
  a.p.score = s.score;
  a.p.score_stride = b.score_stride;
  a.p.norm_weight = b.norm_weight;
  a.p.norm_eps = b.norm_eps;
  a.p.latent = s.latent;
  a.p.latent_stride = b.latent_stride;
  a.p.group_index = s.group_index;
  a.state_kv = s.state_kv;
  a.state_score = s.state_score;
  a.pending = s.pending;
  a.groups = s.groups;
  a.first_group = s.first_group;
  a.sum_bits = b.sum_bits;
  a.vec = b.vec;
  CompressBody<kGroup, kInput, kRatio, kThreads>(a, blockIdx.x, gridDim.x);
}

// ---- FinalizeCompressedKv ---------------------------------------------------------------------

inline constexpr int kFinalizeThreads = 128;
inline constexpr int kBlock = 16;  // values per FP4 block (formats::kFp4E4m3Block)

struct FinalizeArgs {
  FinalizeCompressedKvParams p;  // device pointers; p.table unused on the device
  int pairs = 0;                 // rd / 2
  float freqs[kMaxRopeDims / 2] = {};
};

inline constexpr int kFinalizeWarps = kFinalizeThreads / 32;

// kFinalizeLanes lanes per row (grid-stride), a lane per 16-value block (and every kLanes-th
// after). The rotated pairs never straddle a block (channels − rd is even). Per row the lanes
// first rotate the row's RoPE pairs, a pair per lane (and every kLanes-th after): the pair's
// cos / sin at the row's position, its two bf16 values rotated and rounded as RotateInterleaved
// on the CPU, the rotated pair into the row's shared slot — so the few blocks holding rotated
// pairs take them from there instead of their owners rotating 8 pairs each while the warp's
// other lanes wait. Per block, as FinalizeRow on the CPU: the block's values (rotated pairs from
// the slots), the block amax, the E4M3 scale and the E2M1 codes of quant's FP4 quantiser (bit
// for bit formats' QdqFp4E4m3B16, kernels/quant/README.md: one reciprocal per block, no division
// per value), the dequantised values by quant's byte-table decode (Fp4x8ToBf16: E2M1 × E4M3 has
// at most 6 significant bits, so the bf16 product is exact — the encoder's scale is positive and
// finite and E2M1 has no NaN, so no NaN can arise), and the serving row's bytes when asked. kVec:
// latent / kv rows 16-byte aligned and serving rows 8-byte aligned (one 16-byte access per 8
// values, one 8-byte store of a block's codes); else value by value, the same arithmetic.
// Lanes per row: 16 on the vector variant (two rows per warp, two FP4 blocks per lane at C = 512:
// 8,192 rows then fit one wave of resident warps instead of 1.29), 32 otherwise.
template <bool kVec>
inline constexpr int kFinalizeLanes = kVec ? 16 : 32;

// Rows per block, and the dynamic shared memory of a launch: one rotated pair per RoPE pair and
// row (the launch's pairs; 1 KB per block at 32 pairs).
template <bool kVec>
inline constexpr int kFinalizeRows = kFinalizeThreads / kFinalizeLanes<kVec>;
template <bool kVec>
inline size_t FinalizeSmemBytes(int pairs) {
  return static_cast<size_t>(kFinalizeRows<kVec>) * static_cast<size_t>(pairs > 0 ? pairs : 1) *
         sizeof(uint32_t);
}

// The bf16 pair at element c of a latent row (c even): one 4-byte load where rows are 16-byte
// aligned (kVec), two 2-byte loads otherwise.
template <bool kVec>
__device__ __forceinline__ uint32_t LoadBf16Pair(const uint16_t* x) {
  if constexpr (kVec) {
    return *reinterpret_cast<const uint32_t*>(x);
  } else {
    return x[0] | (static_cast<uint32_t>(x[1]) << 16);
  }
}

// Block b of a row (values 16 b .. + 15, as quant's two 8-value units u[h][j]: values 8h + 2j
// (low) and 8h + 2j + 1, loaded by the caller): the rotated pairs from the row's slots where the
// block holds any, the block amax, the E4M3 scale and E2M1 codes, the dequantised values into
// `out` and, when `cache` is set, the codes and scale byte into the serving row.
template <bool kVec>
__device__ __forceinline__ void FinalizeBlock(uint32_t (&u)[2][4], int64_t b, int64_t channels,
                                              int64_t nope, const uint32_t* rotated, uint16_t* out,
                                              uint8_t* cache) {
  using Fp4 = quant::device::Fmt<quant::BlockFormat::kFp4E2m1E4m3B16>;
  const int64_t c0 = b * kBlock;
  if (c0 + kBlock > nope) {
    // The rotated pair at value 0 (c0 − nope is even; 32-bit: a 64-bit index per pair cost ~150
    // instructions of the warp's divergent rope iteration; channels <= 2^24 by
    // ValidateFinalizeCompressedKvLayout).
    const int pair0 = static_cast<int>(c0 - nope) / 2;
#pragma unroll
    for (int k = 0; k < kBlock / 2; ++k) {
      if (pair0 + k >= 0) u[k / 4][k % 4] = rotated[pair0 + k];
    }
  }
  bool nan0 = false;
  bool nan1 = false;
  const uint32_t amax0 = quant::device::UnitAmax(u[0], &nan0);
  const uint32_t amax1 = quant::device::UnitAmax(u[1], &nan1);
  const uint32_t scale_byte = Fp4::ScaleByte(amax0 > amax1 ? amax0 : amax1);
  const float scale = qm::E4m3ToF32ByShift(scale_byte);
  const float r14 = qm::Fp4E4m3Reciprocal14(scale);
  const uint32_t codes0 = quant::device::EncodeFp4Unit(u[0], r14);
  const uint32_t codes1 = quant::device::EncodeFp4Unit(u[1], r14);
  // The scale as a bf16 pair: its fp32 bits' top half (an E4M3 value is a bf16 normal).
  const uint32_t s2 = (__float_as_uint(scale) >> 16) * 0x10001u;
  uint32_t q[2][4];
  quant::device::Fp4x8ToBf16(codes0, s2, q[0]);
  quant::device::Fp4x8ToBf16(codes1, s2, q[1]);
  quant::device::StoreBf16<kVec>(out + c0, q[0]);
  quant::device::StoreBf16<kVec>(out + c0 + 8, q[1]);
  if (cache != nullptr) {
    if constexpr (kVec) {
      *reinterpret_cast<uint2*>(cache + c0 / 2) = make_uint2(codes0, codes1);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        cache[c0 / 2 + j] = static_cast<uint8_t>(codes0 >> (8 * j));
        cache[c0 / 2 + 4 + j] = static_cast<uint8_t>(codes1 >> (8 * j));
      }
    }
    cache[channels / 2 + b] = static_cast<uint8_t>(scale_byte);
  }
}

// A lane's first blocks and RoPE pairs of a row are loaded before its cos / sin are computed, so
// that their latency runs under the double sincos instead of after it (two blocks and two pairs
// per lane cover C = 512, rd = 64 on 16 lanes; further ones load as they go).
inline constexpr int kFinalizeAhead = 2;

template <bool kVec>
__global__ void __launch_bounds__(kFinalizeThreads) FinalizeKernel(FinalizeArgs a) {
  constexpr int kLanes = kFinalizeLanes<kVec>;
  constexpr int kRowsPerWarp = 32 / kLanes;
  static_assert(kFinalizeWarps * kRowsPerWarp == kFinalizeRows<kVec>);
  extern __shared__ uint32_t s_rotated[];  // [kFinalizeRows(kVec)][pairs]: FinalizeSmemBytes
  const FinalizeCompressedKvParams& p = a.p;
  const int lane = static_cast<int>(threadIdx.x % kLanes);  // within the row's lanes
  const int slot = static_cast<int>(threadIdx.x / kLanes);  // the row's place in the block
  uint32_t* rotated = s_rotated + slot * a.pairs;
  // Keep these 64-bit: with an int block index nvcc split the 16-byte kv stores into 4-byte ones.
  const int64_t blocks = p.channels / kBlock;
  const int64_t nope = p.channels - 2 * int64_t{a.pairs};
  constexpr int64_t kRowsPerBlock = kFinalizeWarps * kRowsPerWarp;
  // Warp-uniform trip count (the __syncwarp below): the warp's first row decides, a lane whose
  // own row is past the end skips the work.
  for (int64_t first = int64_t{blockIdx.x} * kRowsPerBlock + (threadIdx.x / 32) * kRowsPerWarp;
       first < p.rows; first += int64_t{gridDim.x} * kRowsPerBlock) {
    const int64_t row = first + (threadIdx.x % 32) / kLanes;
    const bool live = row < p.rows;
    const uint16_t* x = p.latent + row * p.latent_stride;
    uint16_t* out = p.kv + row * p.kv_stride;
    uint8_t* cache = p.cache_rows != nullptr ? p.cache_rows + row * p.cache_row_stride : nullptr;
    uint32_t u_ahead[kFinalizeAhead][2][4] = {};
    uint32_t w_ahead[kFinalizeAhead] = {};
    if (live) {
#pragma unroll
      for (int i = 0; i < kFinalizeAhead; ++i) {
        const int64_t b = lane + int64_t{kLanes} * i;
        if (b < blocks) {
          quant::device::LoadBf16<kVec>(x + b * kBlock, u_ahead[i][0]);
          quant::device::LoadBf16<kVec>(x + b * kBlock + 8, u_ahead[i][1]);
        }
        const int k = lane + kLanes * i;
        if (k < a.pairs) w_ahead[i] = LoadBf16Pair<kVec>(x + nope + 2 * k);
      }
    }
    __syncwarp();  // the previous row's rotated pairs are read
    if (live) {
      const int64_t pos = p.group_index[row] * p.ratio;
      for (int k = lane, i = 0; k < a.pairs; k += kLanes, ++i) {
        float cs = 0.0f;
        float sn = 0.0f;
        norm_rope_device::RopeCosSinAt(pos, a.freqs[k], &cs, &sn);
        const uint32_t w = i == 0   ? w_ahead[0]
                           : i == 1 ? w_ahead[1]
                                    : LoadBf16Pair<kVec>(x + nope + 2 * k);
        float re = 0.0f;
        float im = 0.0f;
        norm_rope_device::RotatePair(ex::Bf16ToF32(w & 0xFFFFu), ex::Bf16ToF32(w >> 16), cs, sn,
                                     &re, &im);
        rotated[k] = ex::F32x2ToBf16x2Fast(re, im);  // F32ToBf16's bits
      }
    }
    __syncwarp();
    if (!live) continue;
#pragma unroll
    for (int i = 0; i < kFinalizeAhead; ++i) {
      const int64_t b = lane + int64_t{kLanes} * i;
      if (b < blocks) FinalizeBlock<kVec>(u_ahead[i], b, p.channels, nope, rotated, out, cache);
    }
    for (int64_t b = lane + int64_t{kLanes} * kFinalizeAhead; b < blocks; b += kLanes) {
      uint32_t u[2][4];
      quant::device::LoadBf16<kVec>(x + b * kBlock, u[0]);
      quant::device::LoadBf16<kVec>(x + b * kBlock + 8, u[1]);
      FinalizeBlock<kVec>(u, b, p.channels, nope, rotated, out, cache);
    }
  }
}

}  // namespace flashserve::kernels::compressor_device
