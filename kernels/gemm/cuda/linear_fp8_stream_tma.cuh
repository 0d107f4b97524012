// The weight-streaming FP8 Linear fed by a TMA ring (LinearCudaPlan::tma_ring: the automatic plan
// for M <= 8 on weights of at least 64 MiB, LinearCudaStreamTmaPays; forced by
// LinearCudaParams::stream_tma): the stream kernel's numerics and sum order, so the same bits for
// the same splits (kernels/gemm/stream_kernel.md "Session 31": engram.wkv at M = 1 61.7 -> 50.0
// µs, 0.74 of the roof). Device code of cuda/linear_fp8_launch.cu only.
//
// One CTA per SM, persistent: work items are (128-row weight tile t, K split s) of the plan
// (item = t · splits + s), CTA c taking items c, c + gridDim.x, … . Warp 8's lane 0 streams
// the items' weights through a ring of kTmaStages shared-memory stages, one 2-D TMA box of 128
// K-bytes × 128 weight rows per 128-K unit (128-byte swizzle: the 16-byte chunk c of box row r
// sits at chunk c ^ (r % 8), so the consumers' 8-byte reads of 8 rows hit distinct banks), with
// its `full` mbarrier; rows past N arrive zero-filled. Warps 0..7 are the stream kernel's warps
// (warp w: the m16 tile of rows 16w .. 16w + 15 of the item's tile): per unit they read their
// codes from the stage into StreamUnitRegs, release the stage (`empty`, one arrival per warp)
// and run ComputeUnit — the same f16 mma on the raw codes and the same per-block scaling, so
// every output is the stream kernel's fp32 sum of the same products in the same order per
// split; each unit's weight scale bytes come from shared memory (LoadItemScales fills them for
// all the CTA's items at the start: loaded per unit from global memory, every item's first units
// waited on a cold line). x is quantised once per CTA over the K ranges of its items' splits
// (QuantizeSlab, the stream kernel's codes and scales) after PdlWaitPrerequisites; the producer
// never reads x. An item's result is stored directly (one split) or as its split's partials, which
// LinearFp8ReduceKernel — launched right after as a programmatic dependent — sums in ascending
// split order (the stream kernel's fix-up order: the same bits). Not the stream kernel's in-kernel
// fix-up: a per-item one (fence, barriers, a counter round trip) stalled all 8 warps ~3-4 us per
// item, and deferred to each CTA's end it made the slowest CTA the last arrival — hence the reducer
// — of every one of its tiles (engram.wkv at 16 splits: +46 us).
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
// (one n8 tile: M <= 8), then 2 · kTmaStages mbarriers, then the weight scale bytes of the CTA's
// items (StreamTmaArgs::scale_pitch); plus the alignment slack.
__host__ __device__ constexpr int StreamTmaSlabOffset() { return kTmaStages * kTmaStageBytes; }
__host__ __device__ constexpr int StreamTmaBarOffset(int k_units) {
  return StreamTmaSlabOffset() + (StreamSmemBytes(k_units, 1) + 15) / 16 * 16;
}
__host__ __device__ constexpr int StreamTmaScaleOffset(int k_units) {
  return StreamTmaBarOffset(k_units) + 2 * kTmaStages * 8;
}
// scale_bytes: StreamTmaScaleBytes of the launch.
__host__ __device__ constexpr int StreamTmaSmemBytes(int k_units, int scale_bytes) {
  return StreamTmaScaleOffset(k_units) + scale_bytes + 1024;
}
// The scale region: per item of the CTA (at most items_per_cta), its tile's 4 scale rows (32
// weight rows each) × scale_pitch bytes (the split's 32-blocks).
__host__ __device__ constexpr int StreamTmaScaleBytes(int64_t items_per_cta, int scale_pitch) {
  return static_cast<int>(items_per_cta * 4 * scale_pitch);
}

struct StreamTmaArgs {
  StreamArgs s;  // the stream kernel's arguments (steps_per_split, partials; not counters)
  wgmma_ws::TmaOperand w;  // the weight codes [n rows][k bytes], boxes of 128 × 128
  int splits = 1;          // the plan's K splits
  int64_t items = 0;       // ceil(n / 128) · splits
  int scale_pitch = 0;     // 4 · steps_per_split: scale bytes of one scale row in one item
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

// The weight scale bytes of the CTA's items (item c + i · gridDim.x is local item i) into the
// scale region, all loads of a thread's bytes issued before any is stored: byte (i, r, b) is
// block 4 · u0 + b of scale row 4t + r (tile t, split's first unit u0), 127 for blocks past K
// (LoadUnit's rule; multiplied by the zero activations there) or rows past the weight. Weights
// only (no kernel writes them): may run before PdlWaitPrerequisites. Consumer threads only.
__device__ __forceinline__ void LoadItemScales(const StreamTmaArgs& a, uint8_t* dst) {
  constexpr int kBatch = 8;
  const StreamArgs& g = a.s;
  const int64_t k_blocks = g.k / 32, scale_rows = (g.n + 31) / 32;
  const int64_t mine = (a.items - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int per_item = 4 * a.scale_pitch;
  const int64_t total = mine * per_item;
  for (int64_t base = 0; base < total; base += kBatch * kTmaConsumerThreads) {
    uint32_t v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t idx = base + j * kTmaConsumerThreads + threadIdx.x;
      const int64_t i = idx / per_item;
      const int rem = static_cast<int>(idx % per_item);
      const int64_t item = blockIdx.x + i * gridDim.x;
      const int64_t srow = 4 * (item / a.splits) + rem / a.scale_pitch;
      const int64_t kb = 4 * (item % a.splits) * g.steps_per_split + rem % a.scale_pitch;
      v[j] = idx < total && srow < scale_rows && kb < k_blocks
                 ? static_cast<uint32_t>(__ldg(g.w_scale + srow * k_blocks + kb))
                 : 127u;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t idx = base + j * kTmaConsumerThreads + threadIdx.x;
      if (idx < total) dst[idx] = static_cast<uint8_t>(v[j]);
    }
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kTmaThreads, 1)
    LinearFp8StreamTmaKernel(const __grid_constant__ StreamTmaArgs a) {
  const StreamArgs& g = a.s;
  extern __shared__ unsigned char stream_tma_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(stream_tma_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = stream_tma_raw + (base - raw);
  const int64_t k_units = (g.k + kStreamUnitK - 1) / kStreamUnitK;
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
  // The next kernel (the split-K reduction, or the caller's next) may be scheduled now; it waits
  // for this one to complete before reading what it writes.
  cuda_common::PdlLaunchDependents();
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

  // Consumers. The scale bytes first (weights), then x (and y, the partials) only
  // after the kernels before this one.
  uint8_t* item_scales = smem + StreamTmaScaleOffset(static_cast<int>(k_units));
  LoadItemScales(a, item_scales);
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
  // x's codes of the K ranges of the CTA's splits only (CTA c's items c + i·gridDim.x take the
  // splits (c + i·gridDim.x) % splits: engram.wkv at 8 splits needs 2 of the 8), at their place
  // in the whole-K slab; the rest of the slab is never read.
  const uint32_t all = a.splits >= 32 ? 0xFFFFFFFFu : (1u << a.splits) - 1u;
  uint32_t needed = 0;
  for (int64_t item = blockIdx.x; item < a.items && needed != all; item += gridDim.x) {
    needed |= 1u << (item % a.splits);
  }
  for (; needed != 0u; needed &= needed - 1u) {
    const int64_t u0 = int64_t{__ffs(needed) - 1} * g.steps_per_split;
    const int count = static_cast<int>(min(int64_t{g.steps_per_split}, k_units - u0));
    QuantizeSlab<kVec, 8>(g, slab + u0 * kStreamUnitK, xscale + 4 * u0 * 8, pitch, 8, 0, rows,
                          u0 * kStreamUnitK, count);
  }
  TmaConsumerSync();  // the slab and the scale bytes
  const unsigned char* xrow = slab + grp * pitch;

  int64_t j = 0;
  int64_t local = 0;  // the item's index among the CTA's items
  for (int64_t item = blockIdx.x; item < a.items; item += gridDim.x, ++local) {
    const int64_t t = item / a.splits, sp = item % a.splits;
    const int64_t u0 = sp * g.steps_per_split;
    const int64_t count = min(int64_t{g.steps_per_split}, k_units - u0);
    const int64_t wrow = t * 128 + 16 * warp;
    const bool warp_active = wrow < g.n;  // warp-uniform
    // The warp's scale row (rows 16w .. 16w + 15 lie in the tile's scale row w / 2): unit u's 4
    // block bytes are one word.
    const uint32_t* unit_scales =
        reinterpret_cast<const uint32_t*>(item_scales + (local * 4 + warp / 2) * a.scale_pitch);
    float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
    for (int64_t u = 0; u < count; ++u, ++j) {
      const uint32_t s = static_cast<uint32_t>(j % kTmaStages);
      wgmma_ws::BarWait(full_bars + s * 8, static_cast<uint32_t>((j / kTmaStages) & 1));
      StreamUnitRegs r;
      ReadStage(smem + s * kTmaStageBytes, 16 * warp + grp, tig, r);
      __syncwarp();
      if (lane == 0) wgmma_ws::BarArrive(empty_bars + s * 8);
      r.scales = unit_scales[u];
      if (warp_active) {
        ComputeUnit<1>(r, xrow, xscale, pitch, static_cast<int>(u0 + u), tig, acc);
      }
    }
    // acc[0][q]: (x row 2tig + (q & 1), weight row wrow + grp + 8 (q >> 1)): stored, or stored as
    // the split's partials (summed by LinearFp8ReduceKernel, the next kernel).
    if (!warp_active) continue;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t m = 2 * tig + (q & 1), n = wrow + grp + 8 * (q >> 1);
      if (m >= g.m || n >= g.n) continue;
      if (a.splits == 1) {
        StoreOutput(g, m, n, acc[0][q]);
      } else {
        g.partial[(sp * g.m + m) * g.n + n] = acc[0][q];
      }
    }
  }
}

}  // namespace flashserve::kernels::gemm_device
