// Device code of the bf16 / fp32 Linear (gemm_float_cuda.h), included by
// cuda/float_linear_launch.cu only: a cp.async ring of x and W tiles in their own dtype, fp32
// values split exactly into three bf16 pieces in registers, mma.sync m16n8k16 bf16 with fp32
// accumulators; and the split-K reduction.
//
// Work split: a CTA of 4 warps owns kBM = 16·kMT rows (blockIdx.x), 128 output columns
// (blockIdx.y) and one (group, K split) pair (blockIdx.z = group · splits + split). Warp w owns
// all kBM rows and the 32 columns 32w .. 32w+31 (four n8 tiles). K advances kBK = 64 elements
// per stage (128 bytes of a bf16 row, 256 of an fp32 row).
//
// Operand order (as in linear_fp8_gemm.cuh): in every 32-wide K block the thread with
// tig = lane % 4 covers the logical columns 8·tig .. 8·tig+7 for both A and B (one 16-byte
// shared load per bf16 row, two per fp32 row). The first m16n8k16 takes columns 8·tig+0..3 in
// its k slots (2tig, 2tig+1, 2tig+8, 2tig+9), the second 8·tig+4..7: the same permutation of the
// block's columns for A and B, so the dot product is unchanged.
//
// Shared-memory rows are unpadded; 16-byte chunk c of row r sits at c ^ (r odd ? s : 0) with
// s = 4 for 128-byte (bf16) rows and 1 for 256-byte (fp32) rows: the rows grp and grp + 1 that one
// quarter-warp reads then hit disjoint banks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cp_async_mma.cuh"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/cuda/output_pair.cuh"

namespace flashserve::kernels::float_gemm_device {

inline constexpr int kThreads = 128;
inline constexpr int kWN = 4;                   // n8 tiles per warp
inline constexpr int kBN = 8 * kWN * 4;         // 128 output columns per CTA
inline constexpr int kBK = 64;                  // K elements per pipeline stage
inline constexpr int kSmemBudget = 110 * 1024;  // per CTA: two CTAs per SM

// bf16 operands are one piece, fp32 operands three (hi, mid, lo).
template <typename T>
inline constexpr int kPieces = sizeof(T) == 2 ? 1 : 3;

template <int kMT, typename TX, typename TW>
struct Tile {
  static constexpr int kBM = 16 * kMT;
  static constexpr int kARow = kBK * static_cast<int>(sizeof(TX));
  static constexpr int kBRow = kBK * static_cast<int>(sizeof(TW));
  static constexpr int kAStage = kBM * kARow;
  static constexpr int kBStage = kBN * kBRow;
  static constexpr int kStageBytes = kAStage + kBStage;
  static constexpr int kStages = kSmemBudget / kStageBytes < 4 ? kSmemBudget / kStageBytes : 4;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kStages >= 2);
  static_assert(kStageBytes % 128 == 0);
};

struct GemmArgs {
  const void* x = nullptr;  // uint16_t (bf16) or float, per the kernel's TX
  const void* w = nullptr;  // uint16_t (bf16) or float, per TW; 16-byte aligned rows
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t x_stride = 0, x_group_stride = 0;
  int64_t w_group_stride = 0;
  // The CUDA-core kernel's FP8 weight form (TW = float_gemv::Fp8Weight; FloatLinearCudaParams::
  // w_fp8): w holds the E4M3 codes, w_scales the UE8M0 byte of each 32 × 32 block.
  const uint8_t* w_scales = nullptr;
  int64_t w_scale_group_stride = 0;
  int64_t y_stride = 0, y_group_stride = 0;
  int64_t steps_per_split = 0;
  int splits = 1;
  bool x_vec = false;   // x rows 16-byte aligned: cp.async
  bool y_pair = false;  // bf16 output pairs may be stored as 32-bit words
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  float* partial = nullptr;  // [groups, splits, m, n] fp32 when splits > 1
};

// ---- primitives --------------------------------------------------------------------------------
// SmemAddr, CpAsync16 (zero-filled when !valid), CpAsyncCommit, CpAsyncWait<k>, MmaBf16
// (m16n8k16 bf16, fp32 accumulators): kernels/common/cp_async_mma.cuh.
using ::flashserve::kernels::cuda_common::CpAsync16;
using ::flashserve::kernels::cuda_common::CpAsyncCommit;
using ::flashserve::kernels::cuda_common::CpAsyncWait;
using ::flashserve::kernels::cuda_common::MmaBf16;
using ::flashserve::kernels::cuda_common::SmemAddr;

// bf16x2 of (lo_val, hi_val): lo_val in the low half. RNE, subnormals kept.
__device__ __forceinline__ uint32_t CvtBf16x2(float lo_val, float hi_val) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi_val), "f"(lo_val));
  return d;
}

// Two fp32 values (f0 -> low half) as three bf16x2 pieces with f = hi + mid + lo exactly: hi =
// RN(f); f - hi has at most 16 significant bits and is exact in fp32; mid = RN(f - hi); the rest
// has at most 8 bits, so lo = f - hi - mid is exact in bf16.
__device__ __forceinline__ void SplitPair(float f0, float f1, uint32_t& hi, uint32_t& mid,
                                          uint32_t& lo) {
  hi = CvtBf16x2(f0, f1);
  const float r0 = exact::SubRn(f0, __uint_as_float(hi << 16));
  const float r1 = exact::SubRn(f1, __uint_as_float(hi & 0xFFFF0000u));
  mid = CvtBf16x2(r0, r1);
  const float s0 = exact::SubRn(r0, __uint_as_float(mid << 16));
  const float s1 = exact::SubRn(r1, __uint_as_float(mid & 0xFFFF0000u));
  lo = CvtBf16x2(s0, s1);
}

// Physical 16-byte chunk of logical chunk c in row r (see the file comment).
template <typename T>
__device__ __forceinline__ int Swizzle(int c, int r) {
  return c ^ ((r & 1) * (sizeof(T) == 2 ? 4 : 1));
}

// The 8 logical columns 8·q .. 8·q+7 of a shared row as bf16x2 registers per piece:
// out[p][i] holds columns 8q+2i, 8q+2i+1 of piece p (0 = hi).
template <typename T>
__device__ __forceinline__ void LoadEight(const unsigned char* row, int r, int q,
                                          uint32_t (&out)[kPieces<T>][4]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + Swizzle<T>(q, r) * 16);
    out[0][0] = v.x;
    out[0][1] = v.y;
    out[0][2] = v.z;
    out[0][3] = v.w;
  } else {
    const float4 a = *reinterpret_cast<const float4*>(row + Swizzle<T>(2 * q, r) * 16);
    const float4 b = *reinterpret_cast<const float4*>(row + Swizzle<T>(2 * q + 1, r) * 16);
    SplitPair(a.x, a.y, out[0][0], out[1][0], out[2][0]);
    SplitPair(a.z, a.w, out[0][1], out[1][1], out[2][1]);
    SplitPair(b.x, b.y, out[0][2], out[1][2], out[2][2]);
    SplitPair(b.z, b.w, out[0][3], out[1][3], out[2][3]);
  }
}

// ---- the GEMM ----------------------------------------------------------------------------------
// Issues the copies of K step kt (absolute) into `stage`. Rows past m or n and columns past k are
// zero-filled without reading (K % 8 == 0: a chunk is wholly inside or outside K).
template <int kMT, typename TX, typename TW>
__device__ __forceinline__ void LoadStage(const GemmArgs& g, const TX* x, const TW* w,
                                          unsigned char* stage, int64_t kt, int64_t row0,
                                          int64_t n0) {
  using S = Tile<kMT, TX, TW>;
  constexpr int kXPer = 16 / static_cast<int>(sizeof(TX));  // elements per 16-byte chunk
  constexpr int kWPer = 16 / static_cast<int>(sizeof(TW));
  constexpr int kAChunks = kBK / kXPer;
  constexpr int kBChunks = kBK / kWPer;
  static_assert(S::kBM * kAChunks % kThreads == 0 && kBN * kBChunks % kThreads == 0);
#pragma unroll
  for (int it = 0; it < S::kBM * kAChunks / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / kAChunks, c = i % kAChunks;
    const int64_t row = row0 + r, col = kt * kBK + c * kXPer;
    const bool valid = row < g.m && col < g.k;
    unsigned char* dst = stage + r * S::kARow + Swizzle<TX>(c, r) * 16;
    if (g.x_vec) {
      CpAsync16(dst, valid ? x + row * g.x_stride + col : x, valid);
    } else {
      // Unaligned rows: element loads, then one 16-byte shared store (visible after the
      // barrier that precedes this stage's use, like the cp.async data).
      uint32_t words[4] = {0u, 0u, 0u, 0u};
      if (valid) {
        const TX* src = x + row * g.x_stride + col;
#pragma unroll
        for (int e = 0; e < kXPer; ++e) {
          if constexpr (sizeof(TX) == 2) {
            words[e / 2] |= static_cast<uint32_t>(src[e]) << (16 * (e % 2));
          } else {
            words[e] = __float_as_uint(src[e]);
          }
        }
      }
      *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
    }
  }
  // Consecutive threads take consecutive 16-byte chunks of a weight row.
#pragma unroll
  for (int it = 0; it < kBN * kBChunks / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / kBChunks, c = i % kBChunks;
    const int64_t nrow = n0 + r, col = kt * kBK + c * kWPer;
    const bool valid = nrow < g.n && col < g.k;
    CpAsync16(stage + S::kAStage + r * S::kBRow + Swizzle<TW>(c, r) * 16,
              valid ? w + nrow * g.k + col : w, valid);
  }
}

// acc += the stage for the first `valid_mt` m16 sub-tiles (uniform over the CTA). Piece
// products are issued smallest first (rank sum 2, then 1, then hi · hi), and only those with
// rank sum <= 2.
template <int kMT, typename TX, typename TW>
__device__ __forceinline__ void ComputeStage(const unsigned char* stage, int valid_mt,
                                             float (&acc)[kMT][kWN][4]) {
  using S = Tile<kMT, TX, TW>;
  constexpr int kPA = kPieces<TX>, kPW = kPieces<TW>;
  constexpr int kTop = kPA + kPW - 2 < 2 ? kPA + kPW - 2 : 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
#pragma unroll
  for (int blk = 0; blk < kBK / 32; ++blk) {
    const int q = blk * 4 + tig;
    uint32_t b[kWN][kPW][4];
#pragma unroll
    for (int j = 0; j < kWN; ++j) {
      const int r = warp * 32 + j * 8 + grp;
      LoadEight<TW>(stage + S::kAStage + r * S::kBRow, r, q, b[j]);
    }
    uint32_t a[kMT][2][kPA][4];  // [sub-tile][row grp / grp + 8][piece][column pair]
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int p = 0; p < kPA; ++p) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mt][h][p][i] = 0;
        }
        if (mt < valid_mt) {
          const int r = mt * 16 + grp + 8 * h;
          LoadEight<TX>(stage + r * S::kARow, r, q, a[mt][h]);
        }
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int s = kTop; s >= 0; --s) {
#pragma unroll
        for (int pa = 0; pa < kPA; ++pa) {
          const int pw = s - pa;
          if (pw < 0 || pw >= kPW) continue;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if (mt >= valid_mt) break;
#pragma unroll
            for (int j = 0; j < kWN; ++j) {
              MmaBf16(acc[mt][j], a[mt][0][pa][2 * half], a[mt][1][pa][2 * half],
                      a[mt][0][pa][2 * half + 1], a[mt][1][pa][2 * half + 1], b[j][pw][2 * half],
                      b[j][pw][2 * half + 1]);
            }
          }
        }
      }
    }
  }
}

// Final outputs (+ bias, one rounding) or, for a split, the raw fp32 partials.
template <int kMT>
__device__ __forceinline__ void StoreTile(const GemmArgs& g, const float (&acc)[kMT][kWN][4],
                                          int64_t group, int64_t split, int64_t row0, int64_t n0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
  const bool partial = g.splits > 1;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < kWN; ++j) {
      const int64_t col = n0 + warp * 32 + j * 8 + 2 * tig;
      if (col >= g.n) continue;
      const bool two = col + 1 < g.n;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = row0 + mt * 16 + grp + 8 * h;
        if (r >= g.m) continue;
        float v0 = acc[mt][j][2 * h], v1 = acc[mt][j][2 * h + 1];
        if (partial) {
          gemm_device::StorePartialPair(
              g.partial + ((group * g.splits + split) * g.m + r) * g.n + col, v0, v1, two);
          continue;
        }
        gemm_device::StoreOutputPair(g, group * g.y_group_stride + r * g.y_stride + col, col, v0,
                                     v1, two);
      }
    }
  }
}

template <int kMT, typename TX, typename TW>
__global__ void __launch_bounds__(kThreads) FloatLinearGemmKernel(GemmArgs g) {
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  using S = Tile<kMT, TX, TW>;
  extern __shared__ __align__(128) unsigned char float_gemm_smem[];
  const int64_t group = blockIdx.z / g.splits, split = blockIdx.z % g.splits;
  const TX* x = static_cast<const TX*>(g.x) + group * g.x_group_stride;
  const TW* w = static_cast<const TW*>(g.w) + group * g.w_group_stride;
  const int64_t row0 = int64_t{blockIdx.x} * S::kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  const int64_t k_steps = (g.k + kBK - 1) / kBK;
  const int64_t kt0 = split * g.steps_per_split;
  const int64_t kt_count = min(kt0 + g.steps_per_split, k_steps) - kt0;  // >= 1 (plan)
  const int valid_mt = static_cast<int>((min(g.m - row0, int64_t{S::kBM}) + 15) / 16);
  // Warps whose 32 columns lie wholly past N (N < 128: indexer weights_proj) skip the math.
  const bool warp_active = n0 + (threadIdx.x / 32) * 32 < g.n;

  float acc[kMT][kWN][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < kWN; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mt][j][q] = 0.f;
    }
  }
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < kt_count) {
      LoadStage<kMT, TX, TW>(g, x, w, float_gemm_smem + s * S::kStageBytes, kt0 + s, row0, n0);
    }
    CpAsyncCommit();
  }
  for (int64_t i = 0; i < kt_count; ++i) {
    CpAsyncWait<S::kStages - 2>();
    __syncthreads();  // stage i is visible; everyone is done with the stage refilled below
    const int64_t next = i + S::kStages - 1;
    if (next < kt_count) {
      LoadStage<kMT, TX, TW>(g, x, w, float_gemm_smem + (next % S::kStages) * S::kStageBytes,
                             kt0 + next, row0, n0);
    }
    CpAsyncCommit();
    if (warp_active) {
      ComputeStage<kMT, TX, TW>(float_gemm_smem + (i % S::kStages) * S::kStageBytes, valid_mt, acc);
    }
  }
  CpAsyncWait<0>();
  StoreTile<kMT>(g, acc, group, split, row0, n0);
}

// ---- split-K reduction -------------------------------------------------------------------------
struct ReduceArgs {
  const float* partial = nullptr;  // [groups, splits, m, n]
  int64_t groups = 1, splits = 0, m = 0, n = 0;
  const float* bias = nullptr;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0, y_group_stride = 0;
};

inline constexpr int kReduceThreads = 256;

// y = (((+0 + p_0) + p_1) + ...) + bias, splits ascending; one rounding to bf16.
__global__ void __launch_bounds__(kReduceThreads) FloatLinearReduceKernel(ReduceArgs r) {
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  const int64_t per_group = r.m * r.n;
  const int64_t total = r.groups * per_group;
  for (int64_t i = int64_t{blockIdx.x} * kReduceThreads + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kReduceThreads) {
    const int64_t group = i / per_group, e = i % per_group;
    const int64_t row = e / r.n, col = e % r.n;
    const float* src = r.partial + group * r.splits * per_group + e;
    float s = 0.f;
    for (int64_t sp = 0; sp < r.splits; ++sp) s = exact::AddRn(s, src[sp * per_group]);
    if (r.bias != nullptr) s = exact::AddRn(s, r.bias[col]);
    const int64_t off = group * r.y_group_stride + row * r.y_stride + col;
    if (r.y_f32 != nullptr) {
      r.y_f32[off] = s;
    } else {
      r.y_bf16[off] = static_cast<uint16_t>(exact::F32ToBf16(s));
    }
  }
}

}  // namespace flashserve::kernels::float_gemm_device
