// The tensor-core mixes body with X brought in by the TMA unit (the default of the large-batch
// body for the mixes alone when D is a multiple of the slice width and X / fn are 16-byte aligned;
// README.md "CUDA").
//
// Same units, same partition, same fn staging and the same per-warp arithmetic as
// MixesPartialTcKernel's wide shape (16 warps; TcWarp::Group and TcWarp::Store run unchanged), so
// every output bit is that kernel's. What differs is how a group of X (16 tokens × 32 dims × 4
// streams, 4 KB) reaches a warp's registers: instead of 32 four-byte global loads per lane, lane 0
// of each warp issues four TMA boxes (32 dims × 16 tokens of one stream, 1 KB each, zero-filled
// past the token count) into the warp's own 4 KB stage, completing on the warp's mbarrier; the warp
// waits, reads its quads with eight 16-byte shared loads per lane (a quarter warp reads tokens g, g
// + 1 at 64-byte row pitch: 128 contiguous bytes, conflict-free), and lane 0 issues the next
// group's boxes before the warp runs this group's mma chains. Measured (ablation, H200): with X's
// global loads removed the wide kernel's arithmetic takes ~190 µs at 16,384 tokens, with them 384 —
// the word loads (216 LDG per lane and unit, 8 cache lines per instruction) were the bound.
//
// Shared memory: the fn fragments (kTcSmemBytes) then 16 stages of 4 KB then 16 mbarriers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/mhc/cuda/mhc_tc_kernels.cuh"
#include "kernels/mhc/cuda/mhc_tc_plan.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels::mhc_device {

inline constexpr int kTmaWarps = mhc_tc::kWarpsWide;
inline constexpr int kTmaThreads = kTmaWarps * 32;
// One stream's box: 16 tokens × 32 dims of bf16, rows of 64 bytes.
inline constexpr int kTmaRowBytes = kTcChunkDims * 2;
inline constexpr int kTmaStreamBytes = static_cast<int>(mhc_tc::kTileTokens) * kTmaRowBytes;
inline constexpr int kTmaStageBytes = kMhcStreams * kTmaStreamBytes;  // 4 KB per warp
inline constexpr size_t kTmaStagesOffset = kTcSmemBytes;
inline constexpr size_t kTmaBarsOffset = kTmaStagesOffset + size_t{kTmaWarps} * kTmaStageBytes;
inline constexpr size_t kTmaSmemBytes = kTmaBarsOffset + size_t{kTmaWarps} * 8;

static_assert(kTcSmemBytes % 1024 == 0 && kTmaStageBytes % 1024 == 0, "TMA boxes 128-aligned");
static_assert(kTmaSmemBytes <= 227 * 1024, "fits one SM");

__device__ __forceinline__ uint32_t SharedAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Issues group `item`'s four stream boxes of the warp's walk `w` (lane 0 only).
template <class Warp>
__device__ __forceinline__ void TmaIssueGroup(const wgmma_ws::TmaOperand& x_map, const Warp& w,
                                              int64_t item, uint32_t stage, uint32_t bar) {
  const int64_t d = w.d0 + kTcChunkDims * (item % kTcGroups);
  const int64_t tok0 = w.TileOf(item) * mhc_tc::kTileTokens;
  wgmma_ws::BarArriveExpectTx(bar, kTmaStageBytes);
#pragma unroll
  for (int c = 0; c < kMhcStreams; ++c) {
    wgmma_ws::TmaLoad(x_map, stage + c * kTmaStreamBytes, bar, c * w.p.dim + d, tok0, 0);
  }
}

// Grid: mhc_tc::BlocksFor(units) blocks of kTmaThreads threads, kTmaSmemBytes of dynamic shared
// memory, one block per SM. x_map: X as (4·D columns, tokens rows), boxes of 32 × 16
// (LaunchMixesTc). Requires D % kMhcMixesSliceDims == 0 (a box never crosses into the next
// stream), X rows 16-byte aligned. kCollapse: also HcPre's collapse of each group by p.pre_in
// into p.collapsed (TcWarp::Group, as the tensor-core body; coll_vec: 16-byte stores), the
// tile's pre weights loaded one tile ahead.
template <int kFn, bool kCollapse>
__global__ void __launch_bounds__(kTmaThreads, 1)
    MixesPartialTmaKernel(const __grid_constant__ wgmma_ws::TmaOperand x_map, MhcMixesParams p,
                          float* __restrict__ workspace, bool coll_vec) {
  extern __shared__ __align__(1024) uint4 s_frag[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(s_frag);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const unsigned char* x_stage = smem + kTmaStagesOffset + warp * kTmaStageBytes;
  const uint32_t stage = SharedAddr(x_stage);
  const uint32_t bar = SharedAddr(smem + kTmaBarsOffset + warp * 8);
  if (lane == 0) {
    wgmma_ws::BarInit(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncwarp();
  uint32_t phase = 0;

  const int64_t tiles = mhc_tc::Tiles(p.tokens);
  const int64_t units = mhc_tc::Units(p.tokens, p.dim);
  const int64_t end = mhc_tc::BlockUnitBegin(units, gridDim.x, int64_t{blockIdx.x} + 1);
  // Lane (g, q) reads rows g and g + 8 of each stream box, bytes 16q .. 16q + 15 (dims 8q ..).
  const int row_off = (lane / 4) * kTmaRowBytes + 16 * (lane % 4);
  for (int64_t u = mhc_tc::BlockUnitBegin(units, gridDim.x, blockIdx.x); u < end;) {
    const int64_t slice = u / tiles;
    const int64_t seg_end = (slice + 1) * tiles < end ? (slice + 1) * tiles : end;
    const int64_t d0 = slice * kMhcMixesSliceDims;
    __syncthreads();  // the previous segment's fragments are no longer read
    StageFn<kTmaThreads, kFn>(p, d0, s_frag);
    __syncthreads();
    float* const slice_ws = workspace + slice * (kMhcMixes + 1) * p.tokens;
    const TcWarp<kTmaWarps, 1, true, kCollapse> w{
        p, s_frag, slice_ws, d0, u - slice * tiles + warp, coll_vec, lane};
    const int64_t items = mhc_tc::WarpUnits(u, seg_end, warp, kTmaWarps) * kTcGroups;
    TcTileState s;
    s.Clear();
    float pre[2][kMhcStreams] = {};
    float pre_next[2][kMhcStreams] = {};
    if (kCollapse && items > 0) w.LoadPre(w.TileOf(0), pre_next);
    if (items > 0 && lane == 0) TmaIssueGroup(x_map, w, 0, stage, bar);
#pragma unroll 1
    for (int64_t item = 0; item < items; ++item) {
      wgmma_ws::BarWait(bar, phase);
      phase ^= 1u;
      XGroup x;
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint4 v = *reinterpret_cast<const uint4*>(x_stage + c * kTmaStreamBytes +
                                                          r * 8 * kTmaRowBytes + row_off);
          XWord(x, c, r, 0) = v.x;
          XWord(x, c, r, 1) = v.y;
          XWord(x, c, r, 2) = v.z;
          XWord(x, c, r, 3) = v.w;
        }
      }
      // Every lane's reads of the stage are done before lane 0 lets the TMA overwrite it.
      __syncwarp();
      if (item + 1 < items && lane == 0) {
        wgmma::FenceProxyAsyncShared();
        TmaIssueGroup(x_map, w, item + 1, stage, bar);
      }
      const int j = static_cast<int>(item % kTcGroups);
      const int64_t tile = w.TileOf(item);
      if constexpr (kCollapse) {
        if (j == 0) w.AdvancePre(item, items, pre, pre_next);
      }
      w.Group(x, j, s, tile, pre);
      if (j == kTcGroups - 1) w.Store(tile, s);
    }
    u = seg_end;
  }
}

}  // namespace flashserve::kernels::mhc_device
