// The swapped-role wgmma kernel on the FP8 form of a bf16 weight (FloatLinearCudaParams::w_fp8,
// tile_rows kFloatLinearCudaSwapFp8Rows; fp8_weight_form.md "The swapped-role kernel"): at 2 .. 8
// x rows the decode step's wo_a is a stream of its 33.6 MB of E4M3 codes, which this kernel
// decodes to bf16 in registers and multiplies as the wgmma A operand (RS form) against the x rows
// as the B operand (N = 8). Device code of cuda/float_linear_launch.cu only (sm_90a).
//
// CTA: kBN = 64 weight rows (blockIdx.x) of one group (blockIdx.y) over all of K — no K split,
// so one launch and no workspace (wo_a: 8 groups × 16 = 128 CTAs). 160 threads: warpgroup 0 (4
// warps, 16 weight rows each) decodes and issues the wgmmas; warp 4's lane 0 issues the TMA
// boxes of codes [64 rows][128 bytes] (128-byte swizzle, zero-filled past N) into a ring of
// `stages` 8 KB stages, the first ring before it waits for the kernel ahead (the codes are no
// earlier kernel's output), stage c + stages once the 4 consumer warps released stage c.
//
// x is resident: after the wait the consumers copy the group's x rows (up to kBM; rows past M are
// zero) into shared memory once, as bf16 K-major 128-byte-swizzled atoms (8 rows × 64 K), in the
// order that matches the A fragments ldmatrix gives: a thread's ldmatrix word of a k16 step holds
// codes 4t .. 4t + 3 (t = lane % 4) of its row, which the A fragment places at k 2t, 2t + 1
// (register 0 / 1) and 2t + 8, 2t + 9 (register 2 / 3). So within each k16 step, B's k slot 2t + h
// holds x element 4t + h and slot 8 + 2t + h holds element 4t + 2 + h: the k16 step's even 4-byte
// words, then its odd ones. Each product pairs a weight with its own x element; only the order
// of the 16 products inside one wgmma k16 step differs from the natural one.
//
// Decode (e4m3_bf16_decode.cuh's, exact): per k16 step and row, a word of 4 codes → two bf16x2
// (E4m3PairScaled: code × 2^-120) × 2^(scale byte - 7) (mul.rn.bf16x2; a second
// multiply for bytes above 134). A warp's 16 rows lie in one 32-row scale block, so its 4 scale
// bytes per 128-K stage (one 32-bit load) are warp-uniform. Two A sets: stage kt's 8 wgmmas run
// from set kt % 2 while stage kt + 1 is decoded into the other; the stage is released right after
// its ldmatrix reads.
//
// Forms (FloatLinearCudaParams::swap_fp8_warpgroups / swap_fp8_chains; template <kWgs,
// kChains>): by default one consumer warpgroup whose 8 wgmmas per stage form one dependent
// accumulator chain; kChains = 4 puts k16 step s into chain s % 4 (summed in order at the end),
// kWgs = 2 adds a second warpgroup taking the odd stages (its sums added to warpgroup 0's through
// shared memory). For A/B: at N = 8 a wgmma does little work, so a single chain may be bound by
// the wgmma's latency rather than by the decode or the bytes (session 81, not yet measured).
//
// Numerics: exact bf16 products (the weight values are the bf16 weight's, NarrowFloatLinear-
// WeightToFp8), fp32 sums in the tensor core's order over k16 steps in ascending K; + bias and
// one RNE rounding (bf16) or the fp32 sum, stored directly (swapped_epilogue.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/e4m3_bf16_decode.cuh"
#include "kernels/gemm/cuda/swapped_epilogue.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"

namespace flashserve::kernels::float_swap_fp8 {

// Consumer warpgroups (FloatLinearCudaParams::swap_fp8_warpgroups): 1, or 2 taking alternate
// stages (each its own accumulators, added in the epilogue).
template <int kWgs>
inline constexpr int kConsumerThreads = 128 * kWgs;  // warpgroups 0 (.. 1): decode and wgmma
template <int kWgs>
inline constexpr int kThreads = kConsumerThreads<kWgs> + 32;  // + the producer warp (TMA loads)
inline constexpr int kBN = 64;                                // weight rows per CTA
inline constexpr int kBK = 128;                     // K per stage: one 128-byte row of codes
inline constexpr int kBM = 8;                       // x rows (the wgmma N)
inline constexpr uint32_t kStageBytes = kBN * kBK;  // [64 rows][128 codes]
inline constexpr int kMaxStages = 16;
inline constexpr int kMinStages = 4;
inline constexpr uint32_t kXAtomBytes = kBM * 128;  // x [8 rows][64 bf16]: one swizzle atom
// Dynamic shared memory: x (K / 64 atoms), the ring, 2 · stages barriers, 1 KB for alignment.
inline constexpr int kSmemLimit = 227 * 1024;
inline constexpr int kSmemExtra = 1024 + 2 * kMaxStages * 8;

// x's bytes for K (the resident copy).
__host__ __device__ constexpr uint32_t XBytes(int64_t k) {
  return static_cast<uint32_t>(k / 64) * kXAtomBytes;
}
// Ring stages that fit beside x, an even number (two warpgroups take alternate stages, so each
// slot always serves the same one); 0 when fewer than kMinStages fit (the plan refuses K).
__host__ __device__ constexpr int StagesFor(int64_t k) {
  const int64_t left = int64_t{kSmemLimit} - kSmemExtra - int64_t{XBytes(k)};
  const int64_t s = left / kStageBytes / 2 * 2;
  return s < kMinStages ? 0 : static_cast<int>(s < kMaxStages ? s : kMaxStages);
}
__host__ __device__ constexpr int SmemBytes(int64_t k) {
  return static_cast<int>(XBytes(k) + StagesFor(k) * kStageBytes) + kSmemExtra;
}

struct Args {
  wgmma_ws::TmaOperand w;  // codes [groups][N][K] (bytes): box 128 × 64 rows, 128-byte swizzle
  const uint8_t* w_scales = nullptr;  // UE8M0 [groups][N / 32][K / 32], 4-byte aligned rows
  int64_t w_scale_group_stride = 0;   // 0: shared by the groups
  const uint16_t* x = nullptr;        // bf16 rows, 16-byte aligned (validated)
  int64_t x_stride = 0, x_group_stride = 0;
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;  // M <= kBM, K % kBK == 0 (plan)
  int stages = 0;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0, y_group_stride = 0;
  bool launch_dependents = false;  // FloatLinearCudaParams::programmatic / trigger_dependents
};

template <int kWgs>
__device__ __forceinline__ void ConsumerBarrier() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads<kWgs>) : "memory");
}

// The scale words (4 bytes = one 128-K stage) of the 32-row block holding a warp's 16 rows from
// n0 + 16 · wwarp (rows past N read the last block: their codes are zero-filled).
__device__ __forceinline__ const uint32_t* ScaleRow(const uint8_t* w_scales, int64_t group_stride,
                                                    int64_t group, int64_t n, int64_t k, int64_t n0,
                                                    int wwarp) {
  const int64_t scale_rows = n / 32, k_blocks = k / 32;
  const int64_t srow = min((n0 + 16 * wwarp) / 32, scale_rows - 1);
  return reinterpret_cast<const uint32_t*>(w_scales + group * group_stride + srow * k_blocks);
}

// Warpgroups 1 .. kWgs - 1 hand their kAcc sums to warpgroup 0 through shared memory at `part`
// ((kWgs - 1) · 128 · kAcc floats, free: every stage has been read and no load is pending), which
// adds them in warpgroup order. False for the threads that are then done (warpgroups above 0).
template <int kWgs, int kAcc>
__device__ __forceinline__ bool SumWarpgroups(float (&acc)[kAcc], float4* part, int wg) {
  static_assert(kAcc % 4 == 0, "float4 pieces");
  if constexpr (kWgs > 1) {
    // (With two warpgroups the tests read wg == 1, as the first form of this code did: the same
    // machine code as that form, which the device tests ran.)
    const bool helper = kWgs == 2 ? wg == 1 : wg > 0;
    const int at = kWgs == 2 ? 0 : (wg - 1) * (kAcc / 4);
    ConsumerBarrier<kWgs>();
    float4* mine = part + static_cast<int>(threadIdx.x) % 128;
    if (helper) {
#pragma unroll
      for (int q = 0; q < kAcc / 4; ++q) {
        mine[(at + q) * 128] =
            make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
      }
    }
    ConsumerBarrier<kWgs>();
    if (helper) return false;
#pragma unroll
    for (int w = 1; w < kWgs; ++w) {
#pragma unroll
      for (int q = 0; q < kAcc / 4; ++q) {
        const float4 o = mine[((w - 1) * (kAcc / 4) + q) * 128];
        acc[4 * q] = exact::AddRn(acc[4 * q], o.x);
        acc[4 * q + 1] = exact::AddRn(acc[4 * q + 1], o.y);
        acc[4 * q + 2] = exact::AddRn(acc[4 * q + 2], o.z);
        acc[4 * q + 3] = exact::AddRn(acc[4 * q + 3], o.w);
      }
    }
  }
  return true;
}

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                           uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ uint64_t DescAdvance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | (static_cast<uint32_t>(desc) + (bytes >> 4));
}

// Stage `st`'s 16 rows of this warp into A set `a` ([k16 step][register]): four ldmatrix.x4
// (lane l addresses row 16·warp + 8·((l / 8) & 1) + l % 8 at 16-byte chunk 2i + l / 16; matrix
// order (rows 0-7, chunk 2i), (rows 8-15, 2i), (0-7, 2i + 1), (8-15, 2i + 1)), then the decode
// with the stage's 4 scale bytes `sw` (byte q for k16 steps 2q, 2q + 1).
__device__ __forceinline__ void LoadAndDecode(uint32_t st, int warp, int lane, uint32_t sw,
                                              uint32_t (&a)[8][4]) {
  using gemm_device::E4m3PairScaled;
  using gemm_device::MulBf16x2;
  const uint32_t row = static_cast<uint32_t>(16 * warp + 8 * ((lane / 8) & 1) + lane % 8);
  uint32_t v[8][2];  // [k16 step][fragment row half]
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t chunk = static_cast<uint32_t>(2 * i + lane / 16);
    LdMatrixX4(st + wgmma::Sw128Offset(row, chunk), v[2 * i][0], v[2 * i][1], v[2 * i + 1][0],
               v[2 * i + 1][1]);
  }
  const bool wide = __vcmpgtu4(sw, 0x86868686u) != 0u;  // a byte above 134
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const gemm_device::ScaleMul mul = gemm_device::ScaleMulOfByte(sw, q, wide);
#pragma unroll
    for (int s = 2 * q; s < 2 * q + 2; ++s) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        a[s][h] = MulBf16x2(E4m3PairScaled<0x1404u>(v[s][h]), mul.m1);
        a[s][h + 2] = MulBf16x2(E4m3PairScaled<0x3424u>(v[s][h]), mul.m1);
      }
      if (wide && mul.wide) {  // warp-uniform
#pragma unroll
        for (int r = 0; r < 4; ++r) a[s][r] = MulBf16x2(a[s][r], mul.m2);
      }
    }
  }
}

// D (64 x 8 fp32) += A·B, A (64 x 16 bf16) from registers (kernels/common/wgmma.cuh's fragment
// layout), B (8 x 16 bf16) K-major from shared memory: one 8-row group, so the descriptor's
// stride offset is unused. (Here rather than in wgmma.cuh, which every kernel includes.)
__device__ __forceinline__ void WgmmaM64N8K16RS(float (&d)[4], const uint32_t (&a)[4],
                                                uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, %8, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// The stage's 8 k16 steps, step s into accumulator chain s % kChains
// (FloatLinearCudaParams::swap_fp8_chains: 1 = one dependent chain of 8 wgmmas per stage; 4 =
// four independent chains of 2).
template <int kChains>
__device__ __forceinline__ void Wgmma8(float (&acc)[kChains][4], const uint32_t (&a)[8][4],
                                       uint64_t x_desc) {
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    // Step s of the stage: x atom s / 4 (1 KB apart), 32 bytes per k16 step inside it.
    WgmmaM64N8K16RS(acc[s % kChains], a[s],
                    DescAdvance(x_desc, (s / 4) * kXAtomBytes + (s % 4) * 32u));
  }
}

template <int kChains>
__device__ __forceinline__ void FenceChains(float (&acc)[kChains][4]) {
#pragma unroll
  for (int c = 0; c < kChains; ++c) wgmma::FenceOperands(acc[c]);
}

// kWgs consumer warpgroups (1 or 2), kChains accumulator chains each (1 or 4). <1, 1> is the
// default and gives the bf16 swapped-role kernel's bits; the others sum the same exact products
// in another fixed order (chains in order, then warpgroup 0 + warpgroup 1).
template <int kWgs, int kChains>
__global__ void __launch_bounds__(kThreads<kWgs>, 1)
    FloatLinearSwapFp8Kernel(const __grid_constant__ Args g) {
  static_assert(kWgs >= 1 && kWgs <= 3, "1, 2 or 3 consumer warpgroups");
  static_assert(kChains == 1 || kChains == 2 || kChains == 4 || kChains == 8, "chains divide 8");
  constexpr int kConsumers = kConsumerThreads<kWgs>;
  if (g.launch_dependents) cuda_common::PdlLaunchDependents();
  extern __shared__ uint8_t float_swap_fp8_smem_raw[];
  const uint32_t raw_addr =
      static_cast<uint32_t>(__cvta_generic_to_shared(float_swap_fp8_smem_raw));
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  const uint32_t x_base = base;
  const uint32_t ring = base + XBytes(g.k);
  const int stages = g.stages;
  const uint32_t full_bars = ring + static_cast<uint32_t>(stages) * kStageBytes;
  const uint32_t empty_bars = full_bars + static_cast<uint32_t>(stages) * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, 1);
      wgmma_ws::BarInit(empty_bars + s * 8, 4);  // the consuming warpgroup's warps
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int steps = static_cast<int>(g.k / kBK);  // >= 1 (plan)
  const int64_t group = blockIdx.y;
  const int64_t n0 = int64_t{blockIdx.x} * kBN;
  const int warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (warp == kConsumers / 32) {  // the producer warp
    if (lane == 0) {
      int s = 0;
      uint32_t parity = 0;  // of the use c - stages of slot s, for c >= stages
      for (int c = 0; c < steps; ++c) {
        if (c >= stages) {  // use c - stages of slot s released by its warpgroup's 4 warps
          wgmma_ws::BarWait(empty_bars + s * 8, parity);
        }
        const uint32_t full = full_bars + s * 8;
        wgmma_ws::BarArriveExpectTx(full, kStageBytes);
        wgmma_ws::TmaLoad(g.w, ring + static_cast<uint32_t>(s) * kStageBytes, full,
                          int64_t{c} * kBK, n0, group);
        if (++s == stages) {
          s = 0;
          if (c >= stages) parity ^= 1u;
        }
      }
    }
    return;
  }

  const int wg = warp / 4, wwarp = warp % 4;  // warpgroup; warp in it: rows 16·wwarp ..
  const uint32_t* sw_row = ScaleRow(g.w_scales, g.w_scale_group_stride, group, g.n, g.k, n0, wwarp);
  // Warpgroup wg takes stages wg, wg + kWgs, ...: my_steps of them (0 for the second warpgroup
  // when K is one stage).
  const int my_steps = (steps - wg + kWgs - 1) / kWgs;
  uint32_t sw = my_steps > 0 ? __ldg(sw_row + wg) : 0u;

  // x after the kernel ahead (which writes it) has finished: the group's rows into the resident
  // B tile in the fragment order above, 32 bytes (one k16 step of one row) per thread and step.
  cuda_common::PdlWaitPrerequisites();
  {
    const int segs_per_row = static_cast<int>(g.k / 16);    // <= 768 (plan)
    const int live = static_cast<int>(g.m) * segs_per_row;  // rows < M copied; M .. kBM - 1 zero
    const uint16_t* xg = g.x + group * g.x_group_stride;
    // The shared address of (row r, k16 step j)'s two 16-byte halves of B: its even words, then
    // its odd words.
    auto put = [&](int i, uint4 p0, uint4 p1) {
      const uint32_t r = static_cast<uint32_t>(i / segs_per_row);
      const int j = i % segs_per_row;
      const uint32_t atom = x_base + static_cast<uint32_t>(j / 4) * kXAtomBytes;
      const uint32_t c0 = static_cast<uint32_t>(2 * (j % 4));
      asm volatile(
          "st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(atom + wgmma::Sw128Offset(r, c0)),
          "r"(p0.x), "r"(p0.z), "r"(p1.x), "r"(p1.z)
          : "memory");
      asm volatile(
          "st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(atom + wgmma::Sw128Offset(r, c0 + 1)),
          "r"(p0.y), "r"(p0.w), "r"(p1.y), "r"(p1.w)
          : "memory");
    };
    // kXBatch segments' loads in flight per thread before their stores.
    constexpr int kXBatch = 8;
    for (int i0 = static_cast<int>(threadIdx.x); i0 < live; i0 += kXBatch * kConsumers) {
      uint4 p[kXBatch][2];
#pragma unroll
      for (int u = 0; u < kXBatch; ++u) {
        const int i = i0 + u * kConsumers;
        if (i < live) {
          const uint4* src = reinterpret_cast<const uint4*>(xg + (i / segs_per_row) * g.x_stride +
                                                            16 * (i % segs_per_row));
          p[u][0] = __ldg(src);
          p[u][1] = __ldg(src + 1);
        }
      }
#pragma unroll
      for (int u = 0; u < kXBatch; ++u) {
        const int i = i0 + u * kConsumers;
        if (i < live) put(i, p[u][0], p[u][1]);
      }
    }
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int i = live + static_cast<int>(threadIdx.x); i < kBM * segs_per_row; i += kConsumers) {
      put(i, zero, zero);
    }
  }
  wgmma::FenceProxyAsyncShared();
  ConsumerBarrier<kWgs>();

  float acc[kChains][4];
#pragma unroll
  for (int c = 0; c < kChains; ++c) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[c][e] = 0.f;
  }
  uint32_t a[2][8][4];  // [set][k16 step][register]
  // The warpgroup's next stage: its slot and the parity of its use (no runtime division).
  int slot = wg;
  uint32_t parity = 0;
  // Waits for it, reads and decodes it into `set`, releases it and moves on. The wait and the
  // arrive reconverge the warp for the .aligned ldmatrix / wgmma after them.
  auto take = [&](uint32_t(&set)[8][4]) {
    wgmma_ws::BarWait(full_bars + static_cast<uint32_t>(slot) * 8, parity);
    __syncwarp();
    LoadAndDecode(ring + static_cast<uint32_t>(slot) * kStageBytes, wwarp, lane, sw, set);
    __syncwarp();
    if (lane == 0) wgmma_ws::BarArrive(empty_bars + static_cast<uint32_t>(slot) * 8);
    __syncwarp();
    slot += kWgs;
    if (slot >= stages) {
      slot -= stages;
      parity ^= 1u;
    }
  };
  const uint64_t x_desc0 = wgmma::MakeSw128Desc(x_base, 16u, 1024u);
  // The warpgroup's step i (stage kt = wg + i · kWgs): its wgmmas from set kSet, then (the
  // previous group done) the next stage's decode into the other set.
  auto step = [&](int i, auto set_tag) {
    constexpr int kSet = decltype(set_tag)::value;
    const int kt = wg + i * kWgs;
    FenceChains(acc);
    wgmma::Fence();
    Wgmma8(acc, a[kSet], DescAdvance(x_desc0, static_cast<uint32_t>(kt) * 2u * kXAtomBytes));
    wgmma::CommitGroup();
    FenceChains(acc);
    wgmma::WaitGroup<1>();  // step i - 1's group: set 1 - kSet is free
    if (i + 1 < my_steps) {
      const uint32_t sw_next = i + 2 < my_steps ? __ldg(sw_row + kt + 2 * kWgs) : 0u;
      take(a[1 - kSet]);
      sw = sw_next;
    }
  };
  if (my_steps > 0) {
    const uint32_t sw_next = my_steps > 1 ? __ldg(sw_row + wg + kWgs) : 0u;
    take(a[0]);
    sw = sw_next;
  }
  for (int i = 0; i < my_steps; i += 2) {
    step(i, std::integral_constant<int, 0>{});
    if (i + 1 < my_steps) step(i + 1, std::integral_constant<int, 1>{});
  }
  // Unconditional: on every path to the epilogue the accumulators are complete (C7517).
  wgmma::WaitGroup<0>();
  FenceChains(acc);
  float sum[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    sum[e] = acc[0][e];
#pragma unroll
    for (int c = 1; c < kChains; ++c) sum[e] = exact::AddRn(sum[e], acc[c][e]);
  }
  // The other warpgroups' sums through the ring's first bytes, added to warpgroup 0's, which
  // stores.
  if (!SumWarpgroups<kWgs>(
          sum, reinterpret_cast<float4*>(float_swap_fp8_smem_raw + (ring - raw_addr)), wg)) {
    return;
  }

  // Epilogue: accumulator (weight row 16·wwarp + grp (+ 8), x row 2·tig (+ 1)) -> y[x row][row].
  const int grp = lane / 4, tig = lane % 4;
  const int64_t nq = n0 + 16 * wwarp + grp;
  gemm_device::StoreSwappedOutput<kBM>(sum, g.y_bf16, g.y_f32,
                                       group * g.y_group_stride + 2 * tig * g.y_stride, g.y_stride,
                                       nq, g.n, g.m - 2 * tig, g.bias);
}

}  // namespace flashserve::kernels::float_swap_fp8
