// The swapped-role wgmma bf16 Linear for decode batches (FloatLinearCudaParams::tile_rows =
// kFloatLinearCudaSwapRows): the bf16 weights are the wgmma A operand (m64 blocks of weight rows),
// the x rows the B operand (N = 64 or 128 x rows per CTA), both read by TMA into the 128-byte
// swizzle and multiplied straight from shared memory (SS form). So the tensor cores see no padded
// weight rows at small M, and one pass over each weight byte serves every x row of the tile.
// Device code of cuda/float_linear_launch.cu only (sm_90a). README.md "CUDA: the swapped-role
// bf16 kernel" documents the design and the figures.
//
// CTA: kBN = 128 weight rows (blockIdx.y) × up to kBM x rows (blockIdx.x: the m tiles of one
// weight block run side by side, so the second reads the weights from L2) × one (group, K split)
// pair (blockIdx.z = group · splits + split). 288 threads: warpgroups 0 and 1 own one m64 block
// of weight rows each and only issue wgmmas; warp 8's lane 0 issues the loads: per 64-K stage one
// TMA box of weights [128 rows][64 bf16] and one of x [rows][64 bf16] (rows = min(kBM, M rounded
// up to 8): only rows that exist; the wgmma's other B rows hold stale shared memory, which
// reaches only accumulator columns that are never stored), zero-filled outside the tensors
// (ragged N, M, K need no code), one expect_tx on full[s]; a ring of kStages stages (~192 KB),
// stage c + kStages issued once all 8 consumer warps released stage c. Per stage each warpgroup
// issues 4 k16 wgmmas, commits, and waits for the previous stage's group (one group in flight
// while the next stage's wait runs). (Thread 0 of warpgroup 0 as the producer, as in
// linear_fp8_rs.cuh, made ptxas serialise the wgmmas here: C7518, a divergent refill branch on
// the loop's back edge.)
//
// Numerics: the mma.sync and wgmma kernels' — exact bf16 products, fp32 sums in another order;
// bias added and rounded once in the epilogue (no split) or by FloatLinearReduceKernel (split).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/swapped_epilogue.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"

namespace flashserve::kernels::float_swap {

inline constexpr int kConsumerThreads = 256;            // warpgroups 0, 1: the MMAs
inline constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp (TMA loads)
inline constexpr int kBN = 128;                         // weight rows (output columns) per CTA
inline constexpr int kBK = 64;      // K per stage: one 128-byte swizzled bf16 row
inline constexpr int kMaxBM = 128;  // x rows per CTA (the wgmma N)
inline constexpr uint32_t kWBoxBytes = kBN * kBK * 2;  // one stage's weights: [128 rows][64 bf16]
inline constexpr uint32_t kRingBytes = 192 * 1024;
inline constexpr uint32_t kKMajorLbo = 16;    // unused by K-major swizzled layouts (encodes 1)
inline constexpr uint32_t kKMajorSbo = 1024;  // 8 rows of 128 bytes

template <int kBM>
struct Layout {
  static constexpr uint32_t kWBytes = kWBoxBytes;
  static constexpr uint32_t kXBytes = kBM * 128;  // x [kBM rows][64 bf16]
  static constexpr uint32_t kStageBytes = kWBytes + kXBytes;
  static constexpr int kStages = static_cast<int>(kRingBytes / kStageBytes);  // 8 / 6
  static constexpr uint32_t kBarOff = kStages * kStageBytes;
  static constexpr int kSmemBytes = static_cast<int>(kBarOff) + 2 * kStages * 8 + 1024;
  static_assert(kStageBytes % 1024 == 0, "stages start on swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024);
};

struct Args {
  wgmma_ws::TmaOperand w;  // bf16 [groups][N][K]: box 64 × kBN rows, 128-byte swizzle
  wgmma_ws::TmaOperand x;  // bf16 [groups][M][K]: box 64 × min(kBM, M rounded up to 8) rows
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t steps_per_split = 0;
  int splits = 1;
  uint32_t stage_tx = 0;  // bytes of one stage's two boxes
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0, y_group_stride = 0;
  float* partial = nullptr;  // [groups, splits, m, n] fp32 when splits > 1
  // FloatLinearCudaParams::programmatic: let the next LaunchPdl kernel be scheduled at the top.
  bool launch_dependents = false;
};

__device__ __forceinline__ uint64_t DescAdvance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | (static_cast<uint32_t>(desc) + (bytes >> 4));
}

template <int kBM>
__device__ __forceinline__ void Wgmma(float (&d)[kBM / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kBM == 128) {
    wgmma::WgmmaM64N128K16SS(d, desc_a, desc_b, true);
  } else {
    static_assert(kBM == 64);
    wgmma::WgmmaM64N64K16SS(d, desc_a, desc_b, true);
  }
}

// The 256 consumer threads (the producer warp returns after its loads).
__device__ __forceinline__ void ConsumerBarrier() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
}

template <int kBM>
__global__ void __launch_bounds__(kThreads, 1)
    FloatLinearSwapKernel(const __grid_constant__ Args g) {
  // With `programmatic`: a LaunchPdl kernel after this one (wo_b's FP8 stream Linear after wo_a)
  // may take the SMs this grid leaves idle and start on its weights; it waits for this grid
  // before it reads y. (Off, the plain launch keeps the session-75 schedule for the A/B.)
  if (g.launch_dependents) cuda_common::PdlLaunchDependents();
  using L = Layout<kBM>;
  extern __shared__ uint8_t float_swap_smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(float_swap_smem_raw));
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  const uint32_t full_bars = base + L::kBarOff;
  const uint32_t empty_bars = full_bars + L::kStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, 1);
      wgmma_ws::BarInit(empty_bars + s * 8, kConsumerThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int64_t k_steps = (g.k + kBK - 1) / kBK;
  const int group = static_cast<int>(blockIdx.z) / g.splits;
  const int split = static_cast<int>(blockIdx.z) % g.splits;
  const int64_t kt0 = int64_t{split} * g.steps_per_split;
  const int64_t kt_count = min(kt0 + g.steps_per_split, k_steps) - kt0;  // >= 1 (plan)
  const int64_t m0 = int64_t{blockIdx.x} * kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  // Broadcast from lane 0 so that ptxas sees a warp-uniform value (C7518).
  const int warp_id = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (warp_id == kConsumerThreads / 32) {  // the producer warp: lane 0 issues every stage
    if (lane == 0) {
      // The first ring's weight boxes before the wait (a LaunchPdl launch: the kernel ahead, the
      // attention that writes x, may still run), then their x boxes; each stage's barrier
      // expects both boxes' bytes from the start, so it completes only when x has landed too.
      const int64_t early = min(kt_count, static_cast<int64_t>(L::kStages));
      for (int64_t c = 0; c < early; ++c) {
        const uint32_t full = full_bars + static_cast<int>(c) * 8;
        wgmma_ws::BarArriveExpectTx(full, g.stage_tx);
        wgmma_ws::TmaLoad(g.w, base + static_cast<int>(c) * L::kStageBytes, full, (kt0 + c) * kBK,
                          n0, group);
      }
      cuda_common::PdlWaitPrerequisites();
      for (int64_t c = 0; c < early; ++c) {
        wgmma_ws::TmaLoad(g.x, base + static_cast<int>(c) * L::kStageBytes + L::kWBytes,
                          full_bars + static_cast<int>(c) * 8, (kt0 + c) * kBK, m0, group);
      }
      for (int64_t c = early; c < kt_count; ++c) {
        const int s = static_cast<int>(c % L::kStages);
        // use c - kStages of stage s released by all 8 consumer warps
        wgmma_ws::BarWait(empty_bars + s * 8,
                          static_cast<uint32_t>(((c - L::kStages) / L::kStages) & 1));
        const uint32_t st = base + s * L::kStageBytes;
        const uint32_t full = full_bars + s * 8;
        const int64_t k0 = (kt0 + c) * kBK;
        wgmma_ws::BarArriveExpectTx(full, g.stage_tx);
        wgmma_ws::TmaLoad(g.w, st, full, k0, n0, group);
        wgmma_ws::TmaLoad(g.x, st + L::kWBytes, full, k0, m0, group);
      }
    }
    return;
  }

  const int wg = warp_id / 4;
  // kt_count >= 1 always (plan); the condition keeps the accumulators out of ptxas's spill path
  // (see linear_fp8_rs.cuh).
  if (kt_count > 0) {
    float acc[kBM / 2];
#pragma unroll
    for (int i = 0; i < kBM / 2; ++i) acc[i] = 0.f;
    const int steps = static_cast<int>(kt_count);
    for (int kt = 0; kt < steps; ++kt) {
      const int s = kt % L::kStages;
      wgmma_ws::BarWait(full_bars + s * 8, static_cast<uint32_t>((kt / L::kStages) & 1));
      __syncwarp();  // converged for the .aligned wgmma instructions
      const uint32_t st = base + s * L::kStageBytes;
      const uint64_t a_desc = wgmma::MakeSw128Desc(st + wg * 64 * 128, kKMajorLbo, kKMajorSbo);
      const uint64_t b_desc = wgmma::MakeSw128Desc(st + L::kWBytes, kKMajorLbo, kKMajorSbo);
      wgmma::FenceOperands(acc);
      wgmma::Fence();
#pragma unroll
      for (int k16 = 0; k16 < kBK / 16; ++k16) {
        Wgmma<kBM>(acc, DescAdvance(a_desc, 32u * k16), DescAdvance(b_desc, 32u * k16));
      }
      wgmma::CommitGroup();
      wgmma::FenceOperands(acc);
      // The previous stage's group has finished: release its stage to the producer.
      wgmma::WaitGroup<1>();
      if (kt > 0) {
        __syncwarp();
        if (lane == 0) wgmma_ws::BarArrive(empty_bars + ((kt - 1) % L::kStages) * 8);
        __syncwarp();
      }
    }
    // Unconditional: on every path to the epilogue the accumulators are complete (C7517).
    wgmma::WaitGroup<0>();
    wgmma::FenceOperands(acc);
    // Passed long ago (x arrived after the producer's wait); pdl.cuh's rule for global stores.
    cuda_common::PdlWaitPrerequisites();

    // Epilogue: accumulator (weight row, x row) -> y[x row][weight row]; rows and columns outside
    // M and N are not stored; unsplit bf16 outputs are staged (swapped_epilogue.cuh). Lane l holds
    // weight rows 16·warp + l/4 (+ 8) and x rows 8j + 2(l % 4) (+ 1).
    const int grp = lane / 4, tig = lane % 4;
    const int64_t mq = m0 + 2 * tig;
    const int64_t nq = n0 + 16 * warp_id + grp;
    const int64_t rows_left = g.m - mq;
    if (g.splits > 1) {
      gemm_device::StoreSwappedPartial<kBM>(
          acc, g.partial + ((int64_t{group} * g.splits + split) * g.m + mq) * g.n + nq, g.n, nq,
          g.n, rows_left);
      return;
    }
    if (gemm_device::SwappedStagedOk(g.y_bf16, g.y_stride, g.y_group_stride, g.n)) {
      // bf16 through shared memory (swapped_epilogue.cuh), the ring's first bytes as staging:
      // after the consumers' barrier none of them reads the ring and every TMA box has landed
      // (the producer warp has returned; named barrier 1 counts the 256 consumer threads).
      static_assert(gemm_device::SwapStage<kBN>::Bytes(kBM) <= L::kBarOff);
      const bool has_bias = g.bias != nullptr;
      const float b_lo = has_bias && nq < g.n ? __ldg(g.bias + nq) : 0.f;
      const float b_hi = has_bias && nq + 8 < g.n ? __ldg(g.bias + nq + 8) : 0.f;
      ConsumerBarrier();
      gemm_device::StageSwappedBf16<kBM, kBN>(acc, base + 32u * warp_id, lane, has_bias, b_lo,
                                              b_hi);
      ConsumerBarrier();
      gemm_device::StoreSwappedStage<kBM, kBN, kConsumerThreads, /*kPairRows=*/false>(
          base, g.y_bf16 + int64_t{group} * g.y_group_stride + m0 * g.y_stride + n0, g.y_stride,
          g.m - m0, g.n - n0, static_cast<int>(threadIdx.x));
      return;
    }
    gemm_device::StoreSwappedOutput<kBM>(acc, g.y_bf16, g.y_f32,
                                         int64_t{group} * g.y_group_stride + mq * g.y_stride,
                                         g.y_stride, nq, g.n, rows_left, g.bias);
  }
}

}  // namespace flashserve::kernels::float_swap
