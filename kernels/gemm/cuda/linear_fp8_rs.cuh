// The register-sourced wgmma FP8 Linear for decode batches (LinearCudaKernel::kWgmmaRs, forced
// by tile_rows = kLinearCudaRsRows): the weights are the wgmma A operand, decoded from E4M3 ×
// UE8M0 straight into the consumer threads' A fragments (wgmma.mma_async RS form), the x rows the
// B operand (N = up to 128 x rows per CTA), so one pass over each weight byte serves every x row
// of the tile and no MMA row is padding. Device code of cuda/linear_fp8_launch.cu only (sm_90a).
// README.md "CUDA: the register-sourced wgmma kernel (decode batches)" documents the design and
// the figures.
//
// Two kernels per call (three with split-K: LinearFp8ReduceKernel sums the partials), the GEMM
// launched as a programmatic dependent of the first (kernels/common/pdl.cuh: its set-up, scale
// strip and first weight boxes overlap the activation pass; thread 0 waits before loading x):
// 1. LinearFp8RsQdqKernel: x (bf16) quantised per 32 along K with kernels/quant's device code
//    (Fmt<kFp8E4m3Ue8m0B32> Encode / Decode: the same codes, scales and QDQ values as LaunchQdq
//    and formats::QuantizeFp8Ue8m0B32), written as bf16 QDQ values [M, K] in the RS operand
//    order: within each 32-block, slot 16s + 8hi + 2t + h holds logical column 8t + 4s + 2hi + h
//    (s = k16 step, t = quad lane). So a quad lane's 8 contiguous weight codes 8t .. 8t + 7 of a
//    block are exactly its A registers of the block's two k16 steps (codes 4s, 4s + 1 at k
//    2t, 2t + 1; codes 4s + 2, 4s + 3 at k 2t + 8, 2t + 9), and x stays a plain K-major B tile.
// 2. LinearFp8RsKernel: CTA = 256 weight rows (blockIdx.y) × up to kBM x rows (blockIdx.x: the m
//    tiles of one column block run side by side, so the second reads the weights from L2) × one
//    K split (blockIdx.z), 512 threads. Thread 0 also issues the loads: per 128-K stage one TMA
//    box of codes [256 rows][128 bytes] and two of x [kBM rows][64 bf16], all in the 128-byte
//    swizzle, zero-filled outside the tensors (ragged N, M and K need no code), one expect_tx on
//    full[s]; the first kStages stages up front, then stage c + kStages once all 16 warps have
//    released stage c. Warpgroups 0 .. 3 own one m64 block of weight rows each (64 × kBM fp32
//    accumulators per warpgroup: at most 64 registers per thread, so 512 threads fit in 128
//    registers and each scheduler has 4 warps to hide the decode's latency chains; the first
//    form, two m64 blocks per warpgroup of a 384-thread CTA, ran 2 warps per scheduler at 0.44
//    issued instructions per cycle). Per 32-wide block q of the stage: fence, 2 k16 wgmmas from
//    A set q % 2, commit, wait_group 1 (block q - 1 done; at a stage's first block the previous
//    stage is released on empty[s]: 16 warp arrivals), then decode block q + 1 into set
//    (q + 1) % 2 — the decode overlaps the tensor cores.
//
// Fragment rows and the swizzle: the TMA's 128-byte swizzle puts 16-byte chunk c of row r at
// c ^ (r % 8). A thread reads its row's 8 codes of block b (chunk 2b + t/2, half t % 2) with one
// 8-byte ld.shared; a half warp (quad rows g = 0..3 or 4..7) is conflict-free when its 4 rows
// have distinct r % 8 of one parity, so fragment row g of a warp's 16-row slab is weight row
// P(g) = 2·(g % 4) + g / 4 (and g + 8 is 8 + P(g)): {0, 2, 4, 6} and {1, 3, 5, 7}.
//
// Numerics: as every FP8 Linear kernel — exact bf16 products (code × scale, QDQ x), fp32 sums in
// another order than LinearCpu; bias added and rounded once in the epilogue (no split) or by the
// reduction (split). Scales: a warp's 16-row slab lies in one 32-row scale row, so its scale per
// block is warp-uniform (one strip of 8 scale rows × the split's blocks in shared memory, 127 =
// 1.0 outside N or K, where the zero-filled codes make the product 0 anyway); bytes above 134
// take e4m3_bf16_decode.cuh's second multiply, 255 gives NaN.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/e4m3_bf16_decode.cuh"
#include "kernels/gemm/cuda/swapped_epilogue.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/quant/cuda/quant_kernels.cuh"

namespace flashserve::kernels::linear_rs {

inline constexpr int kThreads = 512;  // warpgroups 0 .. 3; thread 0 also issues the TMA loads
inline constexpr int kBN = 256;       // weight rows (output columns) per CTA
inline constexpr int kBK = 128;       // K per stage
inline constexpr int kMaxBM = 128;    // x rows per CTA (the wgmma N)
inline constexpr uint32_t kWBoxBytes = kBN * kBK;  // one stage's codes: [256 rows][128 bytes]
inline constexpr uint32_t kKMajorLbo = 16;         // unused by K-major swizzled layouts (encodes 1)
inline constexpr uint32_t kKMajorSbo = 1024;       // 8 rows of 128 bytes
// The scale strip: 8 scale rows × at most kLinearCudaMaxK / 32 blocks.
inline constexpr uint32_t kMaxStripPitch = 2048;

template <int kBM>
struct Layout {
  static constexpr uint32_t kWBytes = kWBoxBytes;
  static constexpr uint32_t kXBlock = kBM * 128;  // one 64-K column block of x (bf16)
  static constexpr uint32_t kStageBytes = kWBytes + 2 * kXBlock;
  static constexpr int kStages = kBM == 128 ? 3 : 4;
  static constexpr uint32_t kBarOff = kStages * kStageBytes;
  static constexpr uint32_t kStripOff = kBarOff + 2 * kStages * 8;
  static constexpr int SmemBytes(int pitch) {
    return static_cast<int>(kStripOff) + 8 * pitch + 1024;  // + alignment slack
  }
  static_assert(kStageBytes % 1024 == 0, "stages start on swizzle atoms");
  static_assert(static_cast<int>(kStripOff) + 8 * kMaxStripPitch + 1024 <= 227 * 1024);
};

struct Args {
  wgmma_ws::TmaOperand w;  // E4M3 codes [N, K] bytes: box 128 × 256 rows, 128-byte swizzle
  wgmma_ws::TmaOperand x;  // RS-order QDQ x [M, K] bf16: box 64 × kBM rows, 128-byte swizzle
  const uint8_t* w_scale = nullptr;  // UE8M0 [ceil(N/32), K/32]
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t steps_per_split = 0;
  int strip_pitch = 0;  // steps_per_split · 4
  // Bytes of one stage's boxes: the codes, then 2 x boxes of min(kBM, M rounded up to 8) rows
  // (the x box covers only the rows that exist: the wgmma's other B rows hold stale shared
  // memory, which reaches only accumulator columns that are never stored).
  uint32_t stage_tx = 0;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
  float* partial = nullptr;  // [splits, m, n] fp32 when gridDim.z > 1
};

// ---- 1. the activation quantiser in RS operand order ------------------------------------------
struct QdqArgs {
  const uint16_t* x = nullptr;
  int64_t x_stride = 0;
  int64_t m = 0, k = 0;
  uint16_t* out = nullptr;  // [m, k], 16-byte aligned
};
inline constexpr int kQdqThreads = 256;

// Lane l of a warp step takes 8-value unit base + l (4 adjacent lanes = one 32-block, as
// K % 32 == 0 and base % 32 == 0), so BlockAmax's shuffles see the block; whole warps iterate.
template <bool kVec>
__global__ void __launch_bounds__(kQdqThreads) LinearFp8RsQdqKernel(const QdqArgs a) {
  using F = quant::device::Fmt<quant::BlockFormat::kFp8E4m3Ue8m0B32>;
  // The GEMM (a programmatic dependent) may start now: its set-up and first weight loads overlap
  // this pass; it waits for this kernel before loading x.
  cuda_common::PdlLaunchDependents();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t units_per_row = a.k / 8;
  const int64_t total = a.m * units_per_row;
  const int64_t warp0 = (int64_t{blockIdx.x} * kQdqThreads + (threadIdx.x & ~31u));
  const int64_t stride = int64_t{gridDim.x} * kQdqThreads;
  for (int64_t base = warp0; base < total; base += stride) {
    const int64_t u = base + lane;
    const bool active = u < total;
    const int64_t row = active ? u / units_per_row : 0;
    const int64_t c = active ? u - row * units_per_row : 0;
    uint32_t x[4] = {0, 0, 0, 0};
    if (active) quant::device::LoadBf16<kVec>(a.x + row * a.x_stride + 8 * c, x);
    bool has_nan = false;
    const uint32_t sb = F::ScaleByte(quant::device::BlockAmax<F::kLanes>(x, &has_nan));
    if (!active) continue;
    uint32_t codes[F::kCodeWords];
    F::Encode(x, sb, has_nan, /*tables=*/nullptr, codes);
    uint32_t out[4];
    F::Decode(codes, sb, out);  // out[j]: logical columns 8t + 2j, 8t + 2j + 1
    // Pair j goes to slot 16·(j / 2) + 8·(j % 2) + 2t: word 8·(j / 2) + 4·(j % 2) + t.
    uint32_t* dst = reinterpret_cast<uint32_t*>(a.out + row * a.k + 32 * (c / 4));
    const int t = static_cast<int>(c % 4);
    dst[t] = out[0];
    dst[4 + t] = out[1];
    dst[8 + t] = out[2];
    dst[12 + t] = out[3];
  }
}

// ---- 2. the GEMM -------------------------------------------------------------------------------

// The consumer thread's rows, as shared-memory byte addresses relative to a stage: `off`, its
// row's 8 codes of block 0 (fragment row g of its warp's 16-row slab; its 8-byte half of the
// chunk), the other row (g + 8) at + 1024. The swizzle: chunk 2b + t/2 of a row with r % 8 =
// key lies at (2b + t/2) ^ key = (2b ^ (key & 6)) | ((t/2) ^ (key & 1)); the second part is folded
// into `off`, the first is `(32b) ^ x6` bytes with x6 = (key & 6) << 4. `strip`: the shared
// address of the slab's scale-strip row.
struct Thread {
  uint32_t off;
  uint32_t x6;
  uint32_t strip;
};

__device__ __forceinline__ uint2 LoadShared8(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t LoadShared4(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// The slab's 4 scale bytes of one stage (one aligned word of the strip: its pitch and the stage's
// offset are multiples of 4) and whether any is above 134 (warp-uniform: the slab's scale row).
struct StageScales {
  uint32_t word;
  bool wide;
};
__device__ __forceinline__ StageScales LoadStageScales(const Thread& t, int kt) {
  StageScales sc;
  sc.word = LoadShared4(t.strip + 4u * kt);
  sc.wide = __vcmpgtu4(sc.word, 0x86868686u) != 0u;
  return sc;
}

// Decodes 32-wide block b of the stage at shared address `st` into A set a[k16 step][register].
// The common case (every scale byte of the stage <= 134) multiplies once by 2^(sb - 7), built
// from the scale word in three instructions ((sb + 120) << 7 in both halves: prmt, shift, add);
// else e4m3_bf16_decode.cuh's two multiplies (ScaleMul).
// (Measured: a per-stage uniform branch between two whole decode bodies — a __shfl_sync'd flag
// — was 0.4-0.8 µs slower on the short-K shapes than this per-block test.)
__device__ __forceinline__ void DecodeBlock(uint32_t st, const Thread& t, const StageScales& sc,
                                            int b, uint32_t (&a)[2][4]) {
  using gemm_device::E4m3PairScaled;
  using gemm_device::MulBf16x2;
  const uint32_t row0 = st + t.off + ((32u * b) ^ t.x6);
  const gemm_device::ScaleMul mul = gemm_device::ScaleMulOfByte(sc.word, b, sc.wide);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint2 v = LoadShared8(row0 + 1024u * h);
    a[0][h] = MulBf16x2(E4m3PairScaled<0x1404u>(v.x), mul.m1);
    a[0][h + 2] = MulBf16x2(E4m3PairScaled<0x3424u>(v.x), mul.m1);
    a[1][h] = MulBf16x2(E4m3PairScaled<0x1404u>(v.y), mul.m1);
    a[1][h + 2] = MulBf16x2(E4m3PairScaled<0x3424u>(v.y), mul.m1);
  }
  if (sc.wide && mul.wide) {  // warp-uniform
#pragma unroll
    for (int s = 0; s < 2; ++s) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[s][r] = MulBf16x2(a[s][r], mul.m2);
    }
  }
}

// A K-major descriptor `bytes` further into its tile: the start address field (bits 0..13, address
// >> 4) has room (shared memory < 256 KB), so only the low word changes.
__device__ __forceinline__ uint64_t DescAdvance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | (static_cast<uint32_t>(desc) + (bytes >> 4));
}

template <int kBM>
__device__ __forceinline__ void Wgmma(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kBM == 128) {
    wgmma::WgmmaM64N128K16RS(d, a, desc_b, true);
  } else {
    wgmma::WgmmaM64N64K16RS(d, a, desc_b, true);
  }
}

template <int kBM>
__device__ __forceinline__ void FenceAcc(float (&acc)[kBM / 2]) {
#pragma unroll
  for (int i = 0; i < kBM / 2; ++i) wgmma::FenceOperand(acc[i]);
}

template <int kBM>
__device__ __forceinline__ void WaitFull(uint32_t full_bars, int64_t c) {
  using L = Layout<kBM>;
  wgmma_ws::BarWait(full_bars + static_cast<uint32_t>(c % L::kStages) * 8,
                    static_cast<uint32_t>((c / L::kStages) & 1));
}

// This warp's wgmmas and decode reads of stage c have finished: release it to the producer.
template <int kBM>
__device__ __forceinline__ void Release(uint32_t empty_bars, int64_t c, int lane) {
  using L = Layout<kBM>;
  __syncwarp();
  if (lane == 0) wgmma_ws::BarArrive(empty_bars + static_cast<uint32_t>(c % L::kStages) * 8);
}

template <int kBM>
__global__ void __launch_bounds__(kThreads, 1) LinearFp8RsKernel(const __grid_constant__ Args g) {
  using L = Layout<kBM>;
  extern __shared__ uint8_t linear_rs_smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(linear_rs_smem_raw));
  uint8_t* smem = linear_rs_smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full_bars = base + L::kBarOff;
  const uint32_t empty_bars = full_bars + L::kStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, 1);
      wgmma_ws::BarInit(empty_bars + s * 8, kThreads / 32);  // every warp releases
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int64_t k_steps = (g.k + kBK - 1) / kBK;
  const int64_t kt0 = int64_t{blockIdx.z} * g.steps_per_split;
  const int64_t kt_count = min(kt0 + g.steps_per_split, k_steps) - kt0;  // >= 1 (plan)
  // Broadcast from lane 0 so that ptxas sees a warp-uniform value (C7518).
  const int warp_id = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 32, 0);

  // Thread 0 is also the producer: it fills stages 0 .. kStages - 1 here and refills a stage
  // once all 16 warps have released it (below, one block after the release).
  const int64_t m0 = int64_t{blockIdx.x} * kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  auto issue_w = [&](int64_t c) {  // the stage's expect_tx and its weight box
    const int s = static_cast<int>(c % L::kStages);
    const uint32_t full = full_bars + s * 8;
    wgmma_ws::BarArriveExpectTx(full, g.stage_tx);
    wgmma_ws::TmaLoad(g.w, base + s * L::kStageBytes, full, (kt0 + c) * kBK, n0, 0);
  };
  auto issue_x = [&](int64_t c) {  // its two x boxes
    const int s = static_cast<int>(c % L::kStages);
    const uint32_t st = base + s * L::kStageBytes;
    const uint32_t full = full_bars + s * 8;
    const int64_t k0 = (kt0 + c) * kBK;
    wgmma_ws::TmaLoad(g.x, st + L::kWBytes, full, k0, m0, 0);
    wgmma_ws::TmaLoad(g.x, st + L::kWBytes + L::kXBlock, full, k0 + 64, m0, 0);
  };
  auto issue = [&](int64_t c) {
    issue_w(c);
    issue_x(c);
  };
  if (threadIdx.x == 0) {
    // A programmatic dependent of the activation pass (kernels/common/pdl.cuh): the weights are
    // no earlier kernel's output, so their first boxes are requested before waiting for x.
    const int64_t first = min(kt_count, int64_t{L::kStages});
    for (int64_t c = 0; c < first; ++c) issue_w(c);
    cuda_common::PdlWaitPrerequisites();
    for (int64_t c = 0; c < first; ++c) issue_x(c);
  }

  // The scale strip of the CTA's 8 scale rows over the split's blocks (127 = 1.0 outside).
  {
    uint8_t* strip = smem + L::kStripOff;
    const int64_t scale_rows = (g.n + 31) / 32, k_blocks = g.k / 32;
    // Four loads in flight per thread and round (one round for K up to 32768 unsplit).
    constexpr int kBatch = 4;
    const int total = 8 * g.strip_pitch;
    for (int i0 = static_cast<int>(threadIdx.x); i0 < total; i0 += kBatch * kThreads) {
      uint8_t v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kThreads;
        const int64_t sr = n0 / 32 + i / g.strip_pitch;
        const int64_t kb = kt0 * (kBK / 32) + i % g.strip_pitch;
        v[u] = (i < total && sr < scale_rows && kb < k_blocks)
                   ? __ldg(g.w_scale + sr * k_blocks + kb)
                   : uint8_t{127};
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (i0 + u * kThreads < total) strip[i0 + u * kThreads] = v[u];
      }
    }
  }
  __syncthreads();  // the scale strip is complete

  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int grp = lane / 4, tig = lane % 4;
  const uint32_t p = 2u * (grp % 4) + grp / 4;  // P(grp)
  const int slab = warp_id;  // warpgroup warp_id / 4 = m64 block, warp warp_id % 4 its 16 rows
  Thread t;
  t.off =
      (16u * slab + p) * 128u + ((static_cast<uint32_t>(tig / 2) ^ (p & 1u)) << 4) + 8u * (tig % 2);
  t.x6 = (p & 6u) << 4;
  t.strip = base + L::kStripOff + static_cast<uint32_t>((slab / 2) * g.strip_pitch);

  // kt_count >= 1 always (plan). The runtime condition is for ptxas: without it the first form of
  // this kernel (two m64 blocks per warpgroup, 168 registers) had its accumulators spilled and
  // the wgmmas serialised (C7512); kernels/moe's RS kernel, whose tile loop has such a
  // condition, did not (found by bisection). Kept as cheap insurance.
  if (kt_count > 0) {
    float acc[kBM / 2];
#pragma unroll
    for (int i = 0; i < kBM / 2; ++i) acc[i] = 0.f;
    uint32_t a[2][2][4];  // [set][k16 step][register]
    WaitFull<kBM>(full_bars, 0);
    uint32_t st = base;  // stage kt's codes; its x tile is at + kWBytes
    StageScales sc = LoadStageScales(t, 0);
    DecodeBlock(st, t, sc, 0, a[0]);
    const int steps = static_cast<int>(kt_count);
    const bool producer = threadIdx.x == 0;
    for (int kt = 0; kt < steps; ++kt) {
      const uint64_t x_desc = wgmma::MakeSw128Desc(st + L::kWBytes, kKMajorLbo, kKMajorSbo);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        FenceAcc<kBM>(acc);
        wgmma::Fence();
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          Wgmma<kBM>(acc, a[b % 2][s],
                     DescAdvance(x_desc, (b / 2) * L::kXBlock + (b % 2) * 64 + s * 32));
        }
        wgmma::CommitGroup();
        FenceAcc<kBM>(acc);
        // The group of the previous block (A set (b + 1) % 2) has finished.
        wgmma::WaitGroup<1>();
        if (b == 0 && kt > 0) Release<kBM>(empty_bars, kt - 1, lane);
        if (b == 1 && kt > 0 && producer && kt - 1 + L::kStages < steps) {
          // Stage kt - 1 is free once every warp has released it (each at its block 0 of kt).
          const int c = kt - 1;
          wgmma_ws::BarWait(empty_bars + static_cast<uint32_t>(c % L::kStages) * 8,
                            static_cast<uint32_t>((c / L::kStages) & 1));
          issue(c + L::kStages);
        }
        if (b < 3) {
          DecodeBlock(st, t, sc, b + 1, a[(b + 1) % 2]);
        } else if (kt + 1 < steps) {
          WaitFull<kBM>(full_bars, kt + 1);
          st = (kt + 1) % L::kStages == 0 ? base : st + L::kStageBytes;
          sc = LoadStageScales(t, kt + 1);
          DecodeBlock(st, t, sc, 0, a[0]);
        }
      }
    }
    // Unconditional: on every path to the epilogue the accumulators are complete (C7517).
    wgmma::WaitGroup<0>();
    FenceAcc<kBM>(acc);
    Release<kBM>(empty_bars, steps - 1, lane);

    // Epilogue: accumulator (fragment row, x row) -> y[x row][weight row]; rows and columns
    // outside M and N are not stored. Unsplit bf16 outputs are staged (swapped_epilogue.cuh).
    const int64_t mq = int64_t{blockIdx.x} * kBM + 2 * tig;  // x row of j = 0, h = 0
    const int64_t nq = int64_t{blockIdx.y} * kBN + 16 * slab + p;
    const int64_t rows_left = g.m - mq;
    if (gridDim.z > 1) {
      gemm_device::StoreSwappedPartial<kBM>(
          acc, g.partial + (int64_t{blockIdx.z} * g.m + mq) * g.n + nq, g.n, nq, g.n, rows_left);
      return;
    }
    if (gemm_device::SwappedStagedOk(g.y_bf16, g.y_stride, 0, g.n)) {
      // bf16 through shared memory (swapped_epilogue.cuh), the ring's first bytes as staging:
      // after this barrier no warp reads the ring and every TMA box of it has landed.
      static_assert(gemm_device::SwapStage<kBN>::Bytes(kBM) <= L::kBarOff);
      const bool has_bias = g.bias != nullptr;
      const float b_lo = has_bias && nq < g.n ? __ldg(g.bias + nq) : 0.f;
      const float b_hi = has_bias && nq + 8 < g.n ? __ldg(g.bias + nq + 8) : 0.f;
      __syncthreads();
      gemm_device::StageSwappedBf16<kBM, kBN>(acc, base + 32u * slab, lane, has_bias, b_lo, b_hi);
      __syncthreads();
      gemm_device::StoreSwappedStage<kBM, kBN, kThreads, /*kPairRows=*/true>(
          base, g.y_bf16 + m0 * g.y_stride + n0, g.y_stride, g.m - m0, g.n - n0,
          static_cast<int>(threadIdx.x));
      return;
    }
    gemm_device::StoreSwappedOutput<kBM>(acc, g.y_bf16, g.y_f32, mq * g.y_stride, g.y_stride, nq,
                                         g.n, rows_left, g.bias);
  }
}

}  // namespace flashserve::kernels::linear_rs
