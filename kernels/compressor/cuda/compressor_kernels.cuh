// Device code of the compressor launchers (compressor_launch.cu only; not a public header).
// Every fp32 operation is spelled with an exact PTX helper (kernels/common/cuda_exact_math.cuh,
// kernels/quant/cuda/quant_math.h), so nvcc cannot contract or reorder it: the kernels perform
// the CPU bodies' operations in the CPU bodies' order (README.md "CUDA" has the argument).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/compressor/compressor_params.h"
#include "kernels/compressor/exp_rn.h"
#include "kernels/norm_rope/cuda/norm_rope_math.cuh"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/cuda/quant_math.h"

namespace flashserve::kernels::compressor_device {

namespace ex = ::flashserve::kernels::exact;
namespace qm = ::flashserve::kernels::quant::math;

inline constexpr int kThreads = 256;

// ---- CompressProjected ------------------------------------------------------------------------

// What pass 1 turns into the bf16 pre-norm latent.
enum class Input {
  kPool,     // ratio >= 2: softmax-gated pooling of fp32 kv by fp32 score, then one cast
  kCastF32,  // ratio 1, fp32 kv: one cast
  kBf16,     // ratio 1, bf16 kv: as it is
};

struct CompressArgs {
  CompressProjectedParams p;  // device pointers (groups_emitted unused on the device)
  float* state_kv = nullptr;  // [(ratio − 1)·C]: read for group 0, then rewritten
  float* state_score = nullptr;
  int64_t pending = 0;      // state rows holding tokens before this call's row 0
  int64_t groups = 0;       // completed groups = (pending + tokens) / ratio
  int64_t first_group = 0;  // group index of latent row 0
  int sum_bits = 0;         // ceil(log2(channels)): extra bits a sum of C terms needs
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

// The pooled fp32 value of one channel: PoolGroup of cpu/compress_projected_cpu.cc, operation for
// operation. kv_rows / z_rows: the r token rows of the group.
template <int kRatio>
__device__ __forceinline__ float PoolChannel(const float* const* kv_rows,
                                             const float* const* z_rows, int r, int64_t c) {
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

// A group of kGroup threads per latent row (grid-stride over rows); pass 1 writes the bf16
// pre-norm latent and sums its fp32 squares in double, pass 2 normalises it in place (each thread
// rewrites the channels it wrote). The double sum equals RmsInverse's sequential one when it is
// exact (checked per row from the terms' exponents, see README.md); otherwise the group's first
// thread redoes it sequentially in the CPU's order. Block 0 then writes the new open group into
// the state: only group 0 reads the old state rows, and it belongs to block 0.
// `block` / `blocks`: this block's index among the blocks that share the call (blockIdx.x /
// gridDim.x; the batched kernel runs one such set of blocks per sequence).
template <int kGroup, Input kInput, int kRatio>
__device__ __forceinline__ void CompressBody(const CompressArgs& a, int64_t block, int64_t blocks) {
  constexpr int kRowsPerBlock = kThreads / kGroup;
  __shared__ double dscratch[kThreads / 32];
  __shared__ int iscratch[kThreads / 32];
  const CompressProjectedParams& p = a.p;
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t c_n = p.channels;
  const int r = static_cast<int>(p.ratio);
  const float inv_n = ex::DivRn(1.0f, ex::Int64ToF32(c_n));
  for (int64_t g = block * kRowsPerBlock + threadIdx.x / kGroup; g < a.groups;
       g += blocks * kRowsPerBlock) {
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
    // Pass 1.
    double sum = 0.0;
    int top = -1000, low = 1000;
    bool finite = true;
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
      const float v = ex::Bf16ToF32(b);
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
    const float mean = ex::MulRn(ex::DoubleToF32(sum), inv_n);
    const float rs = ex::DivRn(1.0f, ex::SqrtRn(ex::AddRn(mean, p.norm_eps)));
    // Pass 2: the same channels as pass 1, so each thread reads back what it wrote.
    for (int64_t c = lane; c < c_n; c += kGroup) {
      const float x = ex::Bf16ToF32(lat[c]);
      const float w = ex::Bf16ToF32(p.norm_weight[c]);
      lat[c] = static_cast<uint16_t>(ex::F32ToBf16(ex::MulRn(w, ex::MulRn(x, rs))));
    }
    if (lane == 0) p.group_index[g] = a.first_group + g;
  }
  if constexpr (kInput == Input::kPool) {
    if (block != 0) return;
    __syncthreads();                    // block 0's reads of the old state rows (group 0) are done
    const int64_t base = a.groups * r;  // first token of the new open group
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

template <int kGroup, Input kInput, int kRatio>
__global__ void __launch_bounds__(kThreads) CompressKernel(CompressArgs a) {
  CompressBody<kGroup, kInput, kRatio>(a, blockIdx.x, gridDim.x);
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
  CompressBody<kGroup, kInput, kRatio>(a, blockIdx.x, gridDim.x);
}

// ---- FinalizeCompressedKv ---------------------------------------------------------------------

inline constexpr int kFinalizeThreads = 128;
inline constexpr int kBlock = 16;  // values per FP4 block (formats::kFp4E4m3Block)

struct FinalizeArgs {
  FinalizeCompressedKvParams p;  // device pointers; p.table unused on the device
  int pairs = 0;                 // rd / 2
  float freqs[kMaxRopeDims / 2] = {};
};

// A warp per row (grid-stride), a lane per 16-value block (and every 32nd after). The rotated
// pairs never straddle a block (channels − rd is even). Per block, as FinalizeRow on the CPU:
// RoPE (bf16 out), the block amax of the rotated values, the E4M3 scale, the E2M1 codes (true
// division), the dequantised values, and the serving row's bytes when asked.
__global__ void __launch_bounds__(kFinalizeThreads) FinalizeKernel(FinalizeArgs a) {
  constexpr int kWarps = kFinalizeThreads / 32;
  const FinalizeCompressedKvParams& p = a.p;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t blocks = p.channels / kBlock;
  const int64_t nope = p.channels - 2 * int64_t{a.pairs};
  for (int64_t row = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; row < p.rows;
       row += int64_t{gridDim.x} * kWarps) {
    const int64_t pos = p.group_index[row] * p.ratio;
    const uint16_t* x = p.latent + row * p.latent_stride;
    uint16_t* out = p.kv + row * p.kv_stride;
    uint8_t* cache = p.cache_rows != nullptr ? p.cache_rows + row * p.cache_row_stride : nullptr;
    for (int64_t b = lane; b < blocks; b += 32) {
      const int64_t c0 = b * kBlock;
      uint32_t v[kBlock];
#pragma unroll
      for (int i = 0; i < kBlock; ++i) v[i] = x[c0 + i];
#pragma unroll
      for (int k = 0; k < kBlock / 2; ++k) {
        const int64_t c = c0 + 2 * k;
        if (c < nope) continue;
        float cs = 0.0f;
        float sn = 0.0f;
        norm_rope_device::RopeCosSinAt(pos, a.freqs[(c - nope) / 2], &cs, &sn);
        float re = 0.0f;
        float im = 0.0f;
        norm_rope_device::RotatePair(ex::Bf16ToF32(v[2 * k]), ex::Bf16ToF32(v[2 * k + 1]), cs, sn,
                                     &re, &im);
        v[2 * k] = ex::F32ToBf16(re);
        v[2 * k + 1] = ex::F32ToBf16(im);
      }
      uint32_t amax = 0;
#pragma unroll
      for (int k = 0; k < kBlock / 2; ++k) {
        amax = qm::AmaxOfPair(v[2 * k] | (v[2 * k + 1] << 16), amax);
      }
      const uint32_t scale_byte = qm::Fp4E4m3ScaleByte(amax);
      const float scale = qm::E4m3ToF32(scale_byte);
      uint32_t packed[kBlock / 8] = {0, 0};
#pragma unroll
      for (int i = 0; i < kBlock; ++i) {
        // E2M1(x / scale) with the sign of x (formats keeps a NaN x's sign; the scale is > 0).
        const float q = qm::DivRn(ex::Bf16ToF32(v[i] & 0x7FFFu), scale);
        const uint32_t code = ((v[i] >> 12) & 0x8u) | qm::E2m1Magnitude(__float_as_uint(q));
        packed[i / 8] |= code << (4 * (i % 8));
        v[i] = qm::F32ToBf16(qm::MulRn(qm::E2m1ToF32(code), scale));
      }
#pragma unroll
      for (int i = 0; i < kBlock; ++i) out[c0 + i] = static_cast<uint16_t>(v[i]);
      if (cache != nullptr) {
#pragma unroll
        for (int j = 0; j < kBlock / 2; ++j) {
          cache[c0 / 2 + j] = static_cast<uint8_t>(packed[j / 4] >> (8 * (j % 4)));
        }
        cache[p.channels / 2 + b] = static_cast<uint8_t>(scale_byte);
      }
    }
  }
}

}  // namespace flashserve::kernels::compressor_device
