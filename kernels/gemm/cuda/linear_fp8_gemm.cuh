// Device code of the FP8 block-scaled Linear (gemm_cuda.h), included by cuda/linear_fp8_launch.cu
// only: E4M3 × UE8M0 weights expanded to bf16 in registers, bf16 QDQ activations, mma.sync
// m16n8k16 with fp32 accumulators, a cp.async ring; and the split-K reduction.
//
// Work split: a CTA of 4 warps owns kBM = 16·kMT rows (blockIdx.x), 128 output columns
// (blockIdx.y) and one K split (blockIdx.z). Warp w owns all kBM rows and the 32 columns
// 32w .. 32w+31: one row of 32×32 weight scale blocks, so a warp needs a single scale per
// 32-wide K block (warp-uniform: the rare two-multiply decode path is a uniform branch). K
// advances kBK = 128 at a time (128 contiguous bytes of every weight row: a whole line).
//
// Operand order: in every 32-wide K block, the thread with tig = lane % 4 covers the logical
// columns 8·tig .. 8·tig+7, for A (one 16-byte shared load of 8 bf16, rows grp and grp+8) and
// for B (one 8-byte load of 8 E4M3 codes, row grp of each n8 tile). The first m16n8k16 takes
// columns 8·tig+0..3 in its k slots (2tig, 2tig+1, 2tig+8, 2tig+9), the second 8·tig+4..7. The
// slots hold a permutation of the block's 32 columns, the same for A and B: the dot product is
// unchanged, and A stays in plain row-major order (no operand reordering anywhere).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cp_async_mma.cuh"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/cuda/e4m3_bf16_decode.cuh"
#include "kernels/gemm/cuda/output_pair.cuh"

namespace flashserve::kernels::gemm_device {

inline constexpr int kThreads = 128;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kWN = 4;                    // n8 tiles per warp
inline constexpr int kBN = 8 * kWN * kWarps;     // 128 output columns per CTA
inline constexpr int kBK = 128;                  // K per pipeline stage
inline constexpr int kBlocks = kBK / 32;         // 32-wide scale blocks per stage
inline constexpr int kMaxStripBytes = 4 * 2048;  // scale strip: 4 scale rows × K/32 <= 2048

template <int kMT>
struct Shape {
  static constexpr int kBM = 16 * kMT;
  static constexpr int kARow = 2 * kBK;   // bytes of one A row per stage
  static constexpr int kBRow = kBK + 32;  // bytes of one B row per stage + bank padding
  static constexpr int kAStage = kBM * kARow;
  static constexpr int kBStage = kBN * kBRow;
  static constexpr int kStageBytes = kAStage + kBStage;
  // Two CTAs per SM at every size (the plan aims for 2 per SM).
  static constexpr int kStages = kMT == 1 ? 4 : 3;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static_assert(kStageBytes % 128 == 0);
};

struct GemmArgs {
  const uint16_t* a = nullptr;  // QDQ activations bf16 [m, k], stride k, 16-byte aligned
  int64_t a_stride = 0;         // a's row stride: k, except a pre-QDQ'd x for the wgmma launchers
  const uint8_t* w = nullptr;   // E4M3 [n, k]
  const uint8_t* w_scale = nullptr;  // UE8M0 [ceil(n/32), k/32]
  const float* bias = nullptr;       // [n] or null
  int64_t m = 0, n = 0, k = 0;
  int64_t steps_per_split = 0;  // K steps of kBK per split (blockIdx.z)
  int strip_pitch = 0;          // scale bytes per strip row: steps_per_split · kBlocks
  uint16_t* y_bf16 = nullptr;   // final outputs (no split)
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
  bool y_pair = false;       // bf16 pairs may be stored as 32-bit words
  float* partial = nullptr;  // [splits, m, n] fp32 when gridDim.z > 1
};

// ---- cp.async / mma.sync ---------------------------------------------------------------------
// SmemAddr, CpAsync16 (zero-filled when !valid), CpAsyncCommit, CpAsyncWait<k>, MmaBf16
// (m16n8k16 bf16, fp32 accumulators): kernels/common/cp_async_mma.cuh.
using ::flashserve::kernels::cuda_common::CpAsync16;
using ::flashserve::kernels::cuda_common::CpAsyncCommit;
using ::flashserve::kernels::cuda_common::CpAsyncWait;
using ::flashserve::kernels::cuda_common::MmaBf16;
using ::flashserve::kernels::cuda_common::SmemAddr;

// ---- the GEMM --------------------------------------------------------------------------------
// Issues the cp.async copies of K step kt (absolute) into `stage`. Rows past m or n and columns
// past k are zero-filled without reading.
template <int kMT>
__device__ __forceinline__ void LoadStage(const GemmArgs& g, unsigned char* stage, int64_t kt,
                                          int64_t row0, int64_t n0) {
  using S = Shape<kMT>;
  constexpr int kAChunks = kBK / 8;   // 16-byte chunks of an A row (8 bf16)
  constexpr int kBChunks = kBK / 16;  // 16-byte chunks of a B row (16 codes)
  static_assert(S::kBM * kAChunks % kThreads == 0 && kBN * kBChunks % kThreads == 0);
#pragma unroll
  for (int it = 0; it < S::kBM * kAChunks / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / kAChunks, c = i % kAChunks;
    const int64_t row = row0 + r, col = kt * kBK + c * 8;
    const bool valid = row < g.m && col < g.k;
    // Odd rows store chunk c at c ^ 4: rows grp and grp + 1, read by one quarter-warp, then sit
    // in disjoint bank halves.
    CpAsync16(stage + r * S::kARow + ((c ^ ((r & 1) << 2)) * 16),
              valid ? g.a + row * g.k + col : g.a, valid);
  }
  // Consecutive threads take consecutive 16-byte chunks of a row: 128-byte lines per 8 threads.
#pragma unroll
  for (int it = 0; it < kBN * kBChunks / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / kBChunks, c = i % kBChunks;
    const int64_t nrow = n0 + r, col = kt * kBK + c * 16;
    const bool valid = nrow < g.n && col < g.k;
    CpAsync16(stage + S::kAStage + r * S::kBRow + c * 16, valid ? g.w + nrow * g.k + col : g.w,
              valid);
  }
}

// acc += the stage's first `blocks` 32-wide K blocks for the first `valid_mt` m16 sub-tiles
// (both uniform over the CTA). scales: this warp's strip row at the stage's first block.
template <int kMT>
__device__ __forceinline__ void ComputeStage(const unsigned char* stage,
                                             const unsigned char* scales, int blocks, int valid_mt,
                                             float (&acc)[kMT][kWN][4]) {
  using S = Shape<kMT>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
  const unsigned char* sa = stage;
  const unsigned char* sb = stage + S::kAStage + (warp * 32 + grp) * S::kBRow + tig * 8;
#pragma unroll
  for (int blk = 0; blk < kBlocks; ++blk) {
    if (blk >= blocks) break;
    const ScaleMul mul = MakeScaleMul(scales[blk]);
    uint32_t bq[kWN][4];
#pragma unroll
    for (int j = 0; j < kWN; ++j) {
      const uint2 w = *reinterpret_cast<const uint2*>(sb + j * 8 * S::kBRow + blk * 32);
      DecodeB(w, mul, bq[j]);
    }
    const int chunk = (blk * 4 + tig) ^ ((grp & 1) << 2);  // rows grp, grp + 8: parity of grp
    uint4 lo[kMT], hi[kMT];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      lo[mt] = make_uint4(0, 0, 0, 0);
      hi[mt] = lo[mt];
      if (mt >= valid_mt) continue;
      lo[mt] = *reinterpret_cast<const uint4*>(sa + (mt * 16 + grp) * S::kARow + chunk * 16);
      hi[mt] = *reinterpret_cast<const uint4*>(sa + (mt * 16 + grp + 8) * S::kARow + chunk * 16);
    }
    // All first halves, then all second halves: the two products into one accumulator sit
    // kMT·kWN instructions apart.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (mt >= valid_mt) break;
#pragma unroll
      for (int j = 0; j < kWN; ++j) {
        MmaBf16(acc[mt][j], lo[mt].x, hi[mt].x, lo[mt].y, hi[mt].y, bq[j][0], bq[j][1]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (mt >= valid_mt) break;
#pragma unroll
      for (int j = 0; j < kWN; ++j) {
        MmaBf16(acc[mt][j], lo[mt].z, hi[mt].z, lo[mt].w, hi[mt].w, bq[j][2], bq[j][3]);
      }
    }
  }
}

// Final outputs (+ bias, one rounding) or, for a split, the raw fp32 partials.
template <int kMT>
__device__ __forceinline__ void StoreTile(const GemmArgs& g, const float (&acc)[kMT][kWN][4],
                                          int64_t row0, int64_t n0, bool split) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
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
        if (split) {
          gemm_device::StorePartialPair(g.partial + (int64_t{blockIdx.z} * g.m + r) * g.n + col, v0,
                                        v1, two);
          continue;
        }
        gemm_device::StoreOutputPair(g, r * g.y_stride + col, col, v0, v1, two);
      }
    }
  }
}

template <int kMT>
__global__ void __launch_bounds__(kThreads) LinearFp8GemmKernel(GemmArgs g) {
  using S = Shape<kMT>;
  extern __shared__ __align__(128) unsigned char gemm_smem[];
  unsigned char* strip = gemm_smem + S::kPipeBytes;
  const int64_t row0 = int64_t{blockIdx.x} * S::kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  const int64_t k_steps = (g.k + kBK - 1) / kBK;
  const int64_t k_blocks = g.k / 32;
  const int64_t kt0 = int64_t{blockIdx.z} * g.steps_per_split;
  const int64_t kt_end = min(kt0 + g.steps_per_split, k_steps);
  const int64_t kt_count = kt_end - kt0;  // >= 1 (the plan leaves no split empty)
  const int64_t kb0 = kt0 * kBlocks;

  // This CTA's weight scales for its K range: strip[r][b] = scale block (n0/32 + r, kb0 + b).
  // Visible to every warp after the main loop's first barrier.
  const int64_t scale_rows = (g.n + 31) / 32;
  for (int i = threadIdx.x; i < 4 * g.strip_pitch; i += kThreads) {
    const int r = i / g.strip_pitch, b = i % g.strip_pitch;
    const int64_t sr = n0 / 32 + r, kb = kb0 + b;
    strip[i] = (sr < scale_rows && kb < k_blocks) ? g.w_scale[sr * k_blocks + kb] : uint8_t{127};
  }

  const int valid_mt = static_cast<int>((min(g.m - row0, int64_t{S::kBM}) + 15) / 16);
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
    if (s < kt_count) LoadStage<kMT>(g, gemm_smem + s * S::kStageBytes, kt0 + s, row0, n0);
    CpAsyncCommit();
  }
  const unsigned char* warp_scales = strip + (threadIdx.x / 32) * g.strip_pitch;
  for (int64_t i = 0; i < kt_count; ++i) {
    CpAsyncWait<S::kStages - 2>();
    __syncthreads();  // stage i is visible; everyone is done with the stage refilled below
    const int64_t next = i + S::kStages - 1;
    if (next < kt_count) {
      LoadStage<kMT>(g, gemm_smem + (next % S::kStages) * S::kStageBytes, kt0 + next, row0, n0);
    }
    CpAsyncCommit();
    const int64_t first_block = (kt0 + i) * kBlocks;
    const int blocks = static_cast<int>(min(int64_t{kBlocks}, k_blocks - first_block));
    ComputeStage<kMT>(gemm_smem + (i % S::kStages) * S::kStageBytes, warp_scales + i * kBlocks,
                      blocks, valid_mt, acc);
  }
  CpAsyncWait<0>();
  StoreTile<kMT>(g, acc, row0, n0, gridDim.z > 1);
}

// ---- split-K reduction -----------------------------------------------------------------------
struct ReduceArgs {
  const float* partial = nullptr;  // [splits, m, n]
  int64_t splits = 0, m = 0, n = 0;
  const float* bias = nullptr;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
};

inline constexpr int kReduceThreads = 256;

// The split-K sums (LinearFp8ReduceKernel, the stream kernel's fix-up): sum[o] = the `splits`
// partials at offset off[o] of each split's [m, n] block (split_stride apart), added from +0 in
// ascending split order (the bits do not depend on which thread or kernel reduces). The loads of
// kBatch splits of all kOut outputs are issued together (one L2 round trip per batch, not per
// split); only then are they added, in order.
template <int kOut, int kBatch>
__device__ __forceinline__ void SumSplitPartials(const float* partial, int64_t split_stride,
                                                 unsigned splits, const int64_t (&off)[kOut],
                                                 float (&sum)[kOut]) {
#pragma unroll
  for (int o = 0; o < kOut; ++o) sum[o] = 0.f;
  for (unsigned sp0 = 0; sp0 < splits; sp0 += kBatch) {
    float v[kOut][kBatch];
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const unsigned sp = min(sp0 + j, splits - 1);  // loaded, never added
        v[o][j] = __ldcg(partial + int64_t{sp} * split_stride + off[o]);
      }
    }
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (sp0 + j < splits) sum[o] = exact::AddRn(sum[o], v[o][j]);
      }
    }
  }
}

// y = (((+0 + p_0) + p_1) + ...) + bias, splits ascending; one rounding to bf16. May be launched
// as a programmatic dependent of the GEMM (LaunchPdl): it reads the partials only after
// PdlWaitPrerequisites. It lets its own dependent be scheduled at once (which waits for this
// kernel to complete before reading y), as the one-launch stream kernel does.
__global__ void __launch_bounds__(kReduceThreads) LinearFp8ReduceKernel(ReduceArgs r) {
  cuda_common::PdlLaunchDependents();
  cuda_common::PdlWaitPrerequisites();
  const int64_t total = r.m * r.n;
  for (int64_t i = int64_t{blockIdx.x} * kReduceThreads + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kReduceThreads) {
    const int64_t row = i / r.n, col = i % r.n;
    const int64_t off[1] = {i};
    float s[1];
    SumSplitPartials<1, 8>(r.partial, total, static_cast<unsigned>(r.splits), off, s);
    if (r.bias != nullptr) s[0] = exact::AddRn(s[0], r.bias[col]);
    if (r.y_f32 != nullptr) {
      r.y_f32[row * r.y_stride + col] = s[0];
    } else {
      r.y_bf16[row * r.y_stride + col] = static_cast<uint16_t>(exact::F32ToBf16(s[0]));
    }
  }
}

}  // namespace flashserve::kernels::gemm_device
