// The weight-streaming FP8 Linear fed by a TMA ring (LinearCudaParams::stream_tma, opt-in; the
// stream kernel's plan, numerics and split-K fix-up; kernels/gemm/stream_kernel.md "Next: a TMA
// ring", with its measurements: faster than the stream kernel only on unsplit plans so far).
// Device code of cuda/linear_fp8_launch.cu only.
//
// One CTA per SM, persistent: work items are (128-row weight tile t, K split s) of the stream
// plan (item = t · splits + s), CTA c taking items c, c + gridDim.x, … . Warp 8's lane 0 streams
// the items' weights through a ring of kTmaStages shared-memory stages, one 2-D TMA box of 128
// K-bytes × 128 weight rows per 128-K unit (128-byte swizzle: the 16-byte chunk c of box row r
// sits at chunk c ^ (r % 8), so the consumers' 8-byte reads of 8 rows hit distinct banks), with
// its `full` mbarrier; rows past N arrive zero-filled. Warps 0..7 are the stream kernel's warps
// (warp w: the m16 tile of rows 16w .. 16w + 15 of the item's tile): per unit they read their
// codes from the stage into StreamUnitRegs, release the stage (`empty`, one arrival per warp)
// and run ComputeUnit — the same f16 mma on the raw codes and the same per-block scaling, so
// every output is the stream kernel's fp32 sum of the same products in the same order per
// split. x is quantised once per CTA over the whole K (QuantizeSlab, the stream kernel's codes
// and scales) after PdlWaitPrerequisites; the producer never reads x. An item's result is stored
// directly (one split) or as its split's partials, the tile's last-arriving CTA summing the
// partials in ascending split order (the stream kernel's Arrive and order; counter t of the
// call's tag).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/gemm/cuda/linear_fp8_stream.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"

namespace flashserve::kernels::gemm_device {

inline constexpr int kTmaStages = 8;
inline constexpr int kTmaStageBytes = 128 * 128;              // one unit of 128 weight rows
inline constexpr int kTmaConsumerThreads = kStreamThreads;    // warps 0..7
inline constexpr int kTmaThreads = kTmaConsumerThreads + 32;  // + the producer warp
inline constexpr uint32_t kTmaConsumerBarrier = 1;            // named barrier of warps 0..7

// Shared memory: the ring (1024-byte aligned for the swizzle), then x's slab over the whole K
// (one n8 tile: M <= 8), then 2 · kTmaStages mbarriers; plus the alignment slack.
__host__ __device__ constexpr int StreamTmaSlabOffset() { return kTmaStages * kTmaStageBytes; }
__host__ __device__ constexpr int StreamTmaBarOffset(int k_units) {
  return StreamTmaSlabOffset() + (StreamSmemBytes(k_units, 1) + 15) / 16 * 16;
}
__host__ __device__ constexpr int StreamTmaSmemBytes(int k_units) {
  return StreamTmaBarOffset(k_units) + 2 * kTmaStages * 8 + 1024;
}

struct StreamTmaArgs {
  StreamArgs s;            // the stream kernel's arguments (steps_per_split, partials, counters)
  wgmma_ws::TmaOperand w;  // the weight codes [n rows][k bytes], boxes of 128 × 128
  int splits = 1;          // the plan's K splits
  int64_t items = 0;       // ceil(n / 128) · splits
};

__device__ __forceinline__ void TmaConsumerSync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kTmaConsumerBarrier), "n"(kTmaConsumerThreads)
               : "memory");
}

// The thread's codes of one unit from the stage at `st` (generic): rows lr0 and lr0 + 8 of the
// box, 32-blocks b = 0..3, bytes 8·tig .. + 7 of each (chunk 2b + tig/2, swizzled by the row).
__device__ __forceinline__ void ReadStage(const unsigned char* st, int lr0, int tig,
                                          StreamUnitRegs& r) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = lr0 + 8 * h;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int chunk = (2 * b + tig / 2) ^ (row & 7);
      r.q[h][b] = *reinterpret_cast<const uint2*>(st + row * 128 + chunk * 16 + 8 * (tig & 1));
    }
  }
}

// The 4 scale bytes of unit u of the scale row (127 for blocks past K: LoadUnit's rule).
__device__ __forceinline__ uint32_t UnitScales(const uint8_t* scale_row, int64_t k_blocks,
                                               int64_t u) {
  uint32_t s = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int64_t kb = 4 * u + b;
    s |= (kb < k_blocks ? static_cast<uint32_t>(__ldg(scale_row + kb)) : 127u) << (8 * b);
  }
  return s;
}

template <bool kVec>
__global__ void __launch_bounds__(kTmaThreads, 1)
    LinearFp8StreamTmaKernel(const __grid_constant__ StreamTmaArgs a) {
  const StreamArgs& g = a.s;
  extern __shared__ unsigned char stream_tma_raw[];
  __shared__ int is_last;
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(stream_tma_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = stream_tma_raw + (base - raw);
  const int64_t k_units = (g.k + kStreamUnitK - 1) / kStreamUnitK;
  const int64_t k_blocks = g.k / 32;
  const uint32_t full_bars = base + StreamTmaBarOffset(static_cast<int>(k_units));
  const uint32_t empty_bars = full_bars + kTmaStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kTmaStages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, 1);
      wgmma_ws::BarInit(empty_bars + s * 8, kTmaConsumerThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;

  if (warp == kTmaConsumerThreads / 32) {  // the producer: weights only (nothing writes them)
    if (lane == 0) {
      int64_t j = 0;  // units issued by this CTA: stage j % kTmaStages
      for (int64_t item = blockIdx.x; item < a.items; item += gridDim.x) {
        const int64_t t = item / a.splits, sp = item % a.splits;
        const int64_t u0 = sp * g.steps_per_split;
        const int64_t count = min(int64_t{g.steps_per_split}, k_units - u0);
        for (int64_t u = 0; u < count; ++u, ++j) {
          const uint32_t s = static_cast<uint32_t>(j % kTmaStages);
          if (j >= kTmaStages) {
            wgmma_ws::BarWait(empty_bars + s * 8,
                              static_cast<uint32_t>(((j - kTmaStages) / kTmaStages) & 1));
          }
          wgmma_ws::BarArriveExpectTx(full_bars + s * 8, kTmaStageBytes);
          wgmma_ws::TmaLoad(a.w, base + s * kTmaStageBytes, full_bars + s * 8,
                            (u0 + u) * kStreamUnitK, t * 128, 0);
        }
      }
    }
    return;
  }

  // Consumers. x (and y, the partials, the counters) only after the kernels before this one.
  cuda_common::PdlWaitPrerequisites();
  const int grp = lane / 4, tig = lane % 4;
  const int units_all = static_cast<int>(k_units);
  const int pitch = StreamPitch(units_all);
  unsigned char* slab = smem + StreamTmaSlabOffset();
  float* xscale = reinterpret_cast<float*>(slab + StreamScaleOffset(units_all, 1));
  const int rows = static_cast<int>(min(g.m, int64_t{8}));
  for (int i = threadIdx.x; i < (8 - rows) * (pitch / 16); i += kTmaConsumerThreads) {
    *reinterpret_cast<uint4*>(slab + rows * pitch + 16 * i) = make_uint4(0, 0, 0, 0);
  }
  for (int i = threadIdx.x; i < 4 * units_all * 8; i += kTmaConsumerThreads) {
    if (i % 8 >= rows) xscale[i] = 1.f;
  }
  QuantizeSlab<kVec>(g, slab, xscale, pitch, 8, 0, rows, 0, units_all);
  TmaConsumerSync();
  const unsigned char* xrow = slab + grp * pitch;

  // The scale bytes of an item's first unit (a cold line: requested one item ahead, so that the
  // item's first unit does not wait for it; the later units' bytes share its line).
  auto first_scales = [&](int64_t it) -> uint32_t {
    if (it >= a.items) return 0u;
    const int64_t wr = (it / a.splits) * 128 + 16 * warp;
    if (wr >= g.n) return 0u;
    return UnitScales(g.w_scale + (wr / 32) * k_blocks, k_blocks,
                      (it % a.splits) * g.steps_per_split);
  };
  uint32_t item_scales = first_scales(blockIdx.x);
  int64_t j = 0;
  for (int64_t item = blockIdx.x; item < a.items; item += gridDim.x) {
    const int64_t t = item / a.splits, sp = item % a.splits;
    const int64_t u0 = sp * g.steps_per_split;
    const int64_t count = min(int64_t{g.steps_per_split}, k_units - u0);
    const int64_t wrow = t * 128 + 16 * warp;
    const bool warp_active = wrow < g.n;  // warp-uniform
    const uint8_t* scale_row = g.w_scale + (min(wrow, g.n - 1) / 32) * k_blocks;
    float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
    uint32_t next_scales = item_scales;
    item_scales = first_scales(item + gridDim.x);
    for (int64_t u = 0; u < count; ++u, ++j) {
      const uint32_t s = static_cast<uint32_t>(j % kTmaStages);
      wgmma_ws::BarWait(full_bars + s * 8, static_cast<uint32_t>((j / kTmaStages) & 1));
      StreamUnitRegs r;
      ReadStage(smem + s * kTmaStageBytes, 16 * warp + grp, tig, r);
      __syncwarp();
      if (lane == 0) wgmma_ws::BarArrive(empty_bars + s * 8);
      r.scales = next_scales;
      if (warp_active && u + 1 < count) next_scales = UnitScales(scale_row, k_blocks, u0 + u + 1);
      if (warp_active) {
        ComputeUnit<1>(r, xrow, xscale, pitch, static_cast<int>(u0 + u), tig, acc);
      }
    }
    // acc[0][q]: (x row 2tig + (q & 1), weight row wrow + grp + 8 (q >> 1)).
    if (a.splits == 1) {
      if (warp_active) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int64_t m = 2 * tig + (q & 1), n = wrow + grp + 8 * (q >> 1);
          if (m < g.m && n < g.n) StoreOutput(g, m, n, acc[0][q]);
        }
      }
      continue;
    }
    if (warp_active) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t m = 2 * tig + (q & 1), n = wrow + grp + 8 * (q >> 1);
        if (m < g.m && n < g.n) g.partial[(sp * g.m + m) * g.n + n] = acc[0][q];
      }
    }
    // Release the partials, then arrive; the tile's last CTA reduces (the stream kernel's
    // order: ascending splits from +0).
    __threadfence();
    TmaConsumerSync();
    unsigned long long* counter = g.counters + t;
    if (threadIdx.x == 0) is_last = Arrive(counter, g.tag) == static_cast<uint32_t>(a.splits);
    TmaConsumerSync();
    const bool last = is_last != 0;
    TmaConsumerSync();  // every thread has read is_last before the next item may write it
    if (!last) continue;
    __threadfence();
    if (threadIdx.x == 0) *counter = 0ull;
    if (!warp_active) continue;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t m = 2 * tig + (q & 1), n = wrow + grp + 8 * (q >> 1);
      if (m >= g.m || n >= g.n) continue;
      float sum = 0.f;
      for (int sp2 = 0; sp2 < a.splits; ++sp2) {
        sum = exact::AddRn(sum, __ldcg(g.partial + (int64_t{sp2} * g.m + m) * g.n + n));
      }
      StoreOutput(g, m, n, sum);
    }
  }
}

}  // namespace flashserve::kernels::gemm_device
