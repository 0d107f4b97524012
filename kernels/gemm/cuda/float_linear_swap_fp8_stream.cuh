// The FP8 form's swapped-role kernel with x streamed (FloatLinearCudaParams::w_fp8, tile_rows
// kFloatLinearCudaSwapFp8Rows, M > kFloatLinearCudaSwapFp8MaxM; fp8_weight_form.md "x streamed"):
// float_linear_swap_fp8.cuh's kernel for decode batches, where x no longer fits in shared memory
// beside the ring. Device code of cuda/float_linear_launch.cu only (sm_90a).
//
// Two kernels per call:
// 1. FloatLinearFp8PermuteXKernel writes x into the workspace as xp [G][M][K] bf16 in the order
//    the A fragments need (float_linear_swap_fp8.cuh: within each k16 step the even 4-byte words,
//    then the odd ones), so that TMA can stream it as a plain K-major B tile. It triggers its
//    dependent at its start.
// 2. FloatLinearSwapFp8StreamKernel<kBM, kWgs>, a programmatic dependent of (1): CTA = 64 weight
//    rows (blockIdx.x) of group blockIdx.y over all of K × kBM x rows (blockIdx.z: the m tile;
//    kBM 16 / 32 / 64 / 128, the smallest that holds M; 128 has room for one warpgroup's ring).
//    Each ring stage holds the codes [64 rows][128 bytes] and x [kBM rows][128 K] as two
//    [kBM][64] boxes, all 128-byte swizzled; the producer warp requests the first ring's codes
//    before its PDL wait, their x boxes after it. The consumer warpgroups decode the codes as the
//    resident kernel does (LoadAndDecode) and issue 8 register-sourced wgmma m64nkBMk16 per stage;
//    a stage is released once the wgmmas that read its x have finished (one step later), so each
//    warpgroup needs at least 3 slots of its own (StreamStagesFor). kWgs = 2 takes alternate
//    stages and adds the two warpgroups' sums through shared memory at the end.
//
// Numerics: those of the resident kernel — exact bf16 products (the weight's own values), fp32
// sums by the tensor cores over k16 steps in ascending K (kWgs = 1: the same bits as the bf16
// swapped-role kernel, which also sums k16 steps in order), + bias, one RNE rounding.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/float_linear_swap_fp8.cuh"
#include "kernels/gemm/cuda/swapped_epilogue.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"

namespace flashserve::kernels::float_swap_fp8 {

// ---- 1. x into the fragment order ------------------------------------------------------------
struct PermuteArgs {
  const uint16_t* x = nullptr;  // bf16 rows, 16-byte aligned (validated)
  int64_t x_stride = 0, x_group_stride = 0;
  int64_t m = 0, k = 0, groups = 1;
  int64_t m_pad = 0;       // rows of xp per group (>= m: FloatLinearCudaSwapFp8StreamPaddedRows)
  uint16_t* xp = nullptr;  // [groups][m_pad][k], 16-byte aligned (the workspace); rows >= m: 0
  bool wait = false;       // a programmatic dependent itself (FloatLinearCudaParams::programmatic)
};
inline constexpr int kPermuteThreads = 256;

// One thread per (group, row, k16 step): 32 bytes in, the even words then the odd ones out; the
// rows from m to m_pad are written as zeros (so that the GEMM's TMA boxes stay inside the map).
__global__ void __launch_bounds__(kPermuteThreads)
    FloatLinearFp8PermuteXKernel(const PermuteArgs a) {
  cuda_common::PdlLaunchDependents();  // the GEMM's set-up and first codes overlap this pass
  if (a.wait) cuda_common::PdlWaitPrerequisites();
  const int64_t segs = a.k / 16;
  const int64_t total = a.groups * a.m_pad * segs;
  for (int64_t i = int64_t{blockIdx.x} * kPermuteThreads + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kPermuteThreads) {
    const int64_t row = i / segs;  // g · m_pad + r
    const int64_t j = i - row * segs;
    const int64_t g = row / a.m_pad, r = row - g * a.m_pad;
    uint4* dst = reinterpret_cast<uint4*>(a.xp + row * a.k + 16 * j);
    if (r >= a.m) {
      dst[0] = dst[1] = make_uint4(0u, 0u, 0u, 0u);
      continue;
    }
    const uint4* src =
        reinterpret_cast<const uint4*>(a.x + g * a.x_group_stride + r * a.x_stride + 16 * j);
    const uint4 p0 = __ldg(src), p1 = __ldg(src + 1);
    dst[0] = make_uint4(p0.x, p0.z, p1.x, p1.z);
    dst[1] = make_uint4(p0.y, p0.w, p1.y, p1.w);
  }
}

// ---- 2. the GEMM ----------------------------------------------------------------------------
template <int kBM>
struct StreamLayout {
  static_assert(kBM == 16 || kBM == 32 || kBM == 64 || kBM == 128 || kBM == 256,
                "x rows per CTA (wgmma N; 256: the FS_FP8_STREAM_BM256 A/B build)");
  static constexpr uint32_t kXBox = kBM * 128;  // [kBM rows][64 bf16]
  static constexpr uint32_t kStage = kStageBytes + 2 * kXBox;
  static_assert(kStage % 1024 == 0, "stages start on swizzle atoms");
};

// Ring stages: as many as fit up to kMaxStages, a multiple of kWgs, at least 3 per warpgroup;
// 0 when that does not fit.
template <int kBM, int kWgs>
__host__ __device__ constexpr int StreamStagesFor() {
  const int64_t left = int64_t{kSmemLimit} - kSmemExtra;
  int64_t s = left / StreamLayout<kBM>::kStage;
  s = (s < kMaxStages ? s : kMaxStages) / kWgs * kWgs;
  return s < 3 * kWgs ? 0 : static_cast<int>(s);
}
template <int kBM, int kWgs>
__host__ __device__ constexpr int StreamSmemBytes() {
  return StreamStagesFor<kBM, kWgs>() * static_cast<int>(StreamLayout<kBM>::kStage) + kSmemExtra;
}

struct StreamArgs {
  wgmma_ws::TmaOperand w;   // codes [groups][N][K] (bytes): box 128 × 64 rows, 128-byte swizzle
  wgmma_ws::TmaOperand xp;  // xp [groups][M][K] bf16: box 64 × kBM rows, 128-byte swizzle
  const uint8_t* w_scales = nullptr;  // UE8M0 [groups][N / 32][K / 32], 4-byte aligned rows
  int64_t w_scale_group_stride = 0;   // 0: shared by the groups
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;  // K % kBK == 0 (plan)
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0, y_group_stride = 0;
  bool launch_dependents = false;  // FloatLinearCudaParams::programmatic / trigger_dependents
};

// D (64 x 256 fp32) (+)= A·B: A (64 x 16 bf16) from registers in the m16n8k16 A layout per warp,
// B (256 x 16 bf16) from shared memory, K-major (imm-trans-b = 0). Only the 256-row x tile of the
// FS_FP8_STREAM_BM256 A/B build uses it (kept here until that form lands: wgmma.cuh is included
// by every CUDA object).
__device__ __forceinline__ void WgmmaM64N256K16RS(float* d, const uint32_t (&a)[4], uint64_t desc_b,
                                                  bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "
      "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, "
      "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "
      "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "{%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

template <int kBM>
__device__ __forceinline__ void WgmmaN(float (&d)[kBM / 2], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (kBM == 256) {
    WgmmaM64N256K16RS(d, a, desc, true);
  } else if constexpr (kBM == 128) {
    wgmma::WgmmaM64N128K16RS(d, a, desc, true);
  } else if constexpr (kBM == 64) {
    wgmma::WgmmaM64N64K16RS(d, a, desc, true);
  } else if constexpr (kBM == 32) {
    wgmma::WgmmaM64N32K16RS(d, a, desc, true);
  } else {
    wgmma::WgmmaM64N16K16RS(d, a, desc, true);
  }
}

template <int kBM, int kWgs>
__global__ void __launch_bounds__(kThreads<kWgs>, 1)
    FloatLinearSwapFp8StreamKernel(const __grid_constant__ StreamArgs g) {
  static_assert(kWgs >= 1 && kWgs <= 3, "1, 2 or 3 consumer warpgroups");
  using L = StreamLayout<kBM>;
  constexpr int kStages = StreamStagesFor<kBM, kWgs>();
  static_assert(kStages > 0, "the ring fits");
  constexpr int kConsumers = kConsumerThreads<kWgs>;
  if (g.launch_dependents) cuda_common::PdlLaunchDependents();
  extern __shared__ uint8_t float_swap_fp8_stream_smem_raw[];
  const uint32_t raw_addr =
      static_cast<uint32_t>(__cvta_generic_to_shared(float_swap_fp8_stream_smem_raw));
  const uint32_t ring = (raw_addr + 1023u) & ~1023u;
  const uint32_t full_bars = ring + kStages * L::kStage;
  const uint32_t empty_bars = full_bars + kStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, 1);
      wgmma_ws::BarInit(empty_bars + s * 8, 4);  // the consuming warpgroup's warps
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int steps = static_cast<int>(g.k / kBK);  // >= 1 (plan)
  const int64_t group = blockIdx.y;
  const int64_t n0 = int64_t{blockIdx.x} * kBN;
  const int64_t m0 = int64_t{blockIdx.z} * kBM;
  const int warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (warp == kConsumers / 32) {  // the producer warp
    if (lane == 0) {
      auto slot_of = [&](int c) { return ring + static_cast<uint32_t>(c % kStages) * L::kStage; };
      auto issue_x = [&](int c) {
        const uint32_t st = slot_of(c), full = full_bars + (c % kStages) * 8;
        wgmma_ws::TmaLoad(g.xp, st + kStageBytes, full, int64_t{c} * kBK, m0, group);
        wgmma_ws::TmaLoad(g.xp, st + kStageBytes + L::kXBox, full, int64_t{c} * kBK + 64, m0,
                          group);
      };
      // The first ring's codes (no earlier kernel's output) before the wait for x's writer.
      const int first = steps < kStages ? steps : kStages;
      for (int c = 0; c < first; ++c) {
        const uint32_t full = full_bars + c * 8;
        wgmma_ws::BarArriveExpectTx(full, L::kStage);
        wgmma_ws::TmaLoad(g.w, slot_of(c), full, int64_t{c} * kBK, n0, group);
      }
      cuda_common::PdlWaitPrerequisites();
      for (int c = 0; c < first; ++c) issue_x(c);
      int s = 0;
      uint32_t parity = 0;  // of use c - kStages of slot s
      for (int c = kStages; c < steps; ++c) {
        wgmma_ws::BarWait(empty_bars + s * 8, parity);
        const uint32_t full = full_bars + s * 8;
        wgmma_ws::BarArriveExpectTx(full, L::kStage);
        wgmma_ws::TmaLoad(g.w, slot_of(c), full, int64_t{c} * kBK, n0, group);
        issue_x(c);
        if (++s == kStages) {
          s = 0;
          parity ^= 1u;
        }
      }
    }
    return;
  }

  const int wg = warp / 4, wwarp = warp % 4;
  const uint32_t* sw_row = ScaleRow(g.w_scales, g.w_scale_group_stride, group, g.n, g.k, n0, wwarp);
  const int my_steps = (steps - wg + kWgs - 1) / kWgs;
  uint32_t sw = my_steps > 0 ? __ldg(sw_row + wg) : 0u;

  float acc[kBM / 2];
#pragma unroll
  for (int i = 0; i < kBM / 2; ++i) acc[i] = 0.f;
  uint32_t a[2][8][4];  // [set][k16 step][register]
  // The warpgroup's next stage to decode, and the one whose wgmmas are pending (to release).
  int slot = wg;
  uint32_t parity = 0;
  auto take = [&](uint32_t(&set)[8][4]) {
    wgmma_ws::BarWait(full_bars + static_cast<uint32_t>(slot) * 8, parity);
    __syncwarp();
    LoadAndDecode(ring + static_cast<uint32_t>(slot) * L::kStage, wwarp, lane, sw, set);
  };
  auto advance = [&]() {
    slot += kWgs;
    if (slot >= kStages) {
      slot -= kStages;
      parity ^= 1u;
    }
  };
  auto release = [&](int s) {
    __syncwarp();
    if (lane == 0) wgmma_ws::BarArrive(empty_bars + static_cast<uint32_t>(s) * 8);
    __syncwarp();
  };
  // Step i: the wgmmas of the stage decoded into set kSet (its slot `cur`), then, once step
  // i - 1's group has finished, its slot released and the next stage decoded into the other set.
  int prev_slot = -1;
  auto step = [&](int i, auto set_tag) {
    constexpr int kSet = decltype(set_tag)::value;
    const int cur = slot;
    const uint64_t x_desc = wgmma::MakeSw128Desc(
        ring + static_cast<uint32_t>(cur) * L::kStage + kStageBytes, 16u, 1024u);
#pragma unroll
    for (int i2 = 0; i2 < kBM / 2; ++i2) wgmma::FenceOperand(acc[i2]);
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      WgmmaN<kBM>(acc, a[kSet][s], DescAdvance(x_desc, (s / 4) * L::kXBox + (s % 4) * 32u));
    }
    wgmma::CommitGroup();
#pragma unroll
    for (int i2 = 0; i2 < kBM / 2; ++i2) wgmma::FenceOperand(acc[i2]);
    wgmma::WaitGroup<1>();  // step i - 1's group: its stage and set 1 - kSet are free
    if (prev_slot >= 0) release(prev_slot);
    prev_slot = cur;
    advance();
    if (i + 1 < my_steps) {
      const uint32_t sw_next = i + 2 < my_steps ? __ldg(sw_row + wg + (i + 2) * kWgs) : 0u;
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
#pragma unroll
  for (int i2 = 0; i2 < kBM / 2; ++i2) wgmma::FenceOperand(acc[i2]);
  // (The last stage needs no release: the producer has issued every load.)
  // The other warpgroups' sums through the ring, added to warpgroup 0's, which stores.
  if (!SumWarpgroups<kWgs>(
          acc, reinterpret_cast<float4*>(float_swap_fp8_stream_smem_raw + (ring - raw_addr)), wg)) {
    return;
  }

  // Epilogue: accumulator (weight row 16·wwarp + grp (+ 8), x row m0 + 8j + 2·tig (+ 1)).
  const int grp = lane / 4, tig = lane % 4;
  const int64_t nq = n0 + 16 * wwarp + grp;
  gemm_device::StoreSwappedOutput<kBM>(acc, g.y_bf16, g.y_f32,
                                       group * g.y_group_stride + (m0 + 2 * tig) * g.y_stride,
                                       g.y_stride, nq, g.n, g.m - m0 - 2 * tig, g.bias);
}

}  // namespace flashserve::kernels::float_swap_fp8
