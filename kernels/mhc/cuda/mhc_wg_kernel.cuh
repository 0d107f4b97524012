// The mixes body on warpgroup MMAs (wgmma), X by the TMA unit: the large-batch default for the
// mixes, alone (README.md "Session 72") and with the fused collapse on shape 2 ("Session 73"),
// where the TMA body (mhc_tc_tma_kernel.cuh) applies.
//
// Same products, same chains, same sums as the mma.sync bodies, so (the tests hold it) the same
// bits: X stays the A operand in registers, in the mma.sync A-fragment layout (XGroup: the permuted
// k order of a chunk), and each warp keeps its 16-token tile; a warpgroup's 4 warps run their 4
// tiles (64 consecutive tokens) of one group together through `wgmma.mma_async m64n24k16` with A
// from registers and B (the slice's fn pieces) from shared memory. Per chunk the chain is the
// mma.sync body's — lo, mid, hi pieces, halves 0 and 1, from zero — on all 24 mixes at once, then
// added to the fp32 accumulator in chunk order; Σx², the collapse and the stores are TcWarp's.
// With the fused collapse the 4-warpgroup shape gave the same bits but spilled ~100 bytes at 128
// registers and ran level to slower than the TMA body; shape 2 (the default) runs it at 0.75 of
// the copy against the TMA body's 0.57 (FS_MHC_WG_COLLAPSE, mhc_launch.cu).
//
// What changes against the TMA body: the tensor cores read fn from shared memory themselves (the
// TMA body's warps loaded 36 fragments of 16 bytes per group: ~45 % of the SM's shared-memory
// bandwidth), wgmma runs at the full Hopper tensor rate (mma.sync at ~60 %), asynchronously (a
// chunk's squares run under its wgmma), and X arrives in 64-token boxes: with WgShape<2> (the
// default, two warpgroups) 64 dims wide, i.e. 128-byte rows, where the TMA body's 1 KB boxes had
// 64-byte rows — its loads were the bound (ablations in the README).
//
// B layout: per (chunk, piece, half) a 24 × 16 K-major tile without swizzle, 768 bytes: core
// matrix (n-block nb = n-tile, k-block kb) at nb·256 + kb·128, row g at +16 g holding logical k
// 8 kb .. 8 kb + 7 — word q of it is lane (g, q)'s fragment word (half 0: x, y; half 1: z, w).
// Shared memory: those tiles (kTcSmemBytes, as the fragments), then a stage and an mbarrier per
// warpgroup (WgShape).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/mhc/cuda/mhc_tc_kernels.cuh"
#include "kernels/mhc/cuda/mhc_tc_plan.h"
#include "kernels/mhc/cuda/mhc_tc_tma_kernel.cuh"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels::mhc_device {

inline constexpr uint32_t kWgBTileBytes = kMhcMixes * 16 * 2;  // 24 × 16 bf16: 768
inline constexpr uint32_t kWgBLbo = 128;                       // k-block stride
inline constexpr uint32_t kWgBSbo = 256;                       // n-block stride

// The block's shape by kGpi, the groups (32 dims of each stream) a warpgroup's stage holds:
// 1 — four warpgroups (128 registers), boxes of 32 dims × 64 tokens (64-byte rows), 16 KB stages;
// 2 — two warpgroups (255 registers), boxes of 64 dims × 64 tokens (128-byte rows), 32 KB stages.
// Either way 64 KB of X per SM in flight beside the 144 KB of B tiles.
template <int kGpi>
struct WgShape {
  static_assert(kGpi == 1 || kGpi == 2, "one or two groups per stage");
  static constexpr int kWgs = kGpi == 1 ? 4 : 2;  // warpgroups per block
  static constexpr int kThreads = kWgs * 128;
  static constexpr int kBoxDims = kGpi * kTcChunkDims;
  static constexpr int kRowBytes = 2 * kBoxDims;
  static constexpr int kBoxBytes = static_cast<int>(mhc_tc::kWgTileTokens) * kRowBytes;
  static constexpr int kStageBytes = kMhcStreams * kBoxBytes;
  static constexpr int kItemsPerUnit = kTcGroups / kGpi;
  static constexpr size_t kStagesOffset = kTcSmemBytes;
  static constexpr size_t kBarsOffset = kStagesOffset + size_t{kWgs} * kStageBytes;
  static constexpr size_t kSmemBytes = kBarsOffset + size_t{kWgs} * 8;
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM");
};

static_assert(kWgBTileBytes * kTcChunks * kTcPieces * 2 == kTcSmemBytes, "B tiles = fragments");
static_assert(kMhcMixes == 24, "m64n24k16");

// Byte offset of the B tile of (chunk, piece, half h).
__device__ __forceinline__ uint32_t WgBTile(int chunk, int piece, int h) {
  return static_cast<uint32_t>(((chunk * kTcPieces + piece) * 2 + h)) * kWgBTileBytes;
}

// The slice's fn pieces into the B tiles: each thread takes fragments (FnFrag: the mma.sync
// bodies' fragments, prepared or split here) and scatters their words.
template <int kThreads, int kFn>
__device__ __forceinline__ void StageFnWg(const MhcMixesParams& p, int64_t d0,
                                          unsigned char* __restrict__ s_b) {
  static_assert(kTcFragEntries % kThreads == 0, "whole staging rounds");
#pragma unroll 2
  for (int it = 0; it < kTcFragEntries / kThreads; ++it) {
    const TcFragEntry f = TcFragEntryOf(static_cast<int>(threadIdx.x) + it * kThreads);
    uint4 frag[kTcPieces];
    FnFrag<kFn>(p, d0, f.chunk, f.nt, f.lane, frag);
    const uint32_t row = f.nt * kWgBSbo + (f.lane / 4) * 16 + (f.lane % 4) * 4;
#pragma unroll
    for (int pc = 0; pc < kTcPieces; ++pc) {
      unsigned char* t0 = s_b + WgBTile(f.chunk, pc, 0) + row;
      unsigned char* t1 = s_b + WgBTile(f.chunk, pc, 1) + row;
      *reinterpret_cast<uint32_t*>(t0) = frag[pc].x;
      *reinterpret_cast<uint32_t*>(t0 + kWgBLbo) = frag[pc].y;
      *reinterpret_cast<uint32_t*>(t1) = frag[pc].z;
      *reinterpret_cast<uint32_t*>(t1 + kWgBLbo) = frag[pc].w;
    }
  }
}

// Chunk c of group j: the mma.sync body's chain (pieces lo, mid, hi; halves 0, 1) from zero into
// t, issued and committed as one wgmma group.
__device__ __forceinline__ void WgChunk(const XGroup& x, int j, int c, uint32_t b_base,
                                        float (&t)[kMhcMixes / 2]) {
#pragma unroll
  for (int i = 0; i < kMhcMixes / 2; ++i) t[i] = 0.0f;
  wgmma::FenceOperands(t);  // the zeros are written before the fence orders them
  wgmma::Fence();
  const int chunk = kMhcStreams * j + c;
#pragma unroll
  for (int pc = kTcPieces - 1; pc >= 0; --pc) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint64_t desc =
          wgmma::MakeNoSwizzleDesc(b_base + WgBTile(chunk, pc, h), kWgBLbo, kWgBSbo);
      wgmma::WgmmaM64N24K16RS(t, x.q[c][h], desc, true);
    }
  }
  wgmma::CommitGroup();
}

// acc[n-tile][k] += t in the m16n8 fragment order (d[4 nt + k]), after the chunk's wait.
__device__ __forceinline__ void WgAdd(TcTileState& s, float (&t)[kMhcMixes / 2]) {
  wgmma::FenceOperands(t);
#pragma unroll
  for (int nt = 0; nt < kTcNTiles; ++nt) {
#pragma unroll
    for (int k = 0; k < 4; ++k) s.acc[nt][k] = AddRn(s.acc[nt][k], t[4 * nt + k]);
  }
}

// Issues stage `item` of the warpgroup's walk (one thread): four stream boxes of kGpi groups' dims
// × 64 tokens, zero-filled past the token count.
template <int kGpi>
__device__ __forceinline__ void WgIssueStage(const wgmma_ws::TmaOperand& x_map,
                                             const MhcMixesParams& p, int64_t d0, int64_t wg_tile,
                                             int64_t item, uint32_t stage, uint32_t bar) {
  using S = WgShape<kGpi>;
  const int64_t d = d0 + S::kBoxDims * (item % S::kItemsPerUnit);
  const int64_t tok0 = (wg_tile + S::kWgs * (item / S::kItemsPerUnit)) * mhc_tc::kWgTileTokens;
  wgmma::FenceProxyAsyncShared();  // this warpgroup's generic reads of the stage came first
  wgmma_ws::BarArriveExpectTx(bar, S::kStageBytes);
#pragma unroll
  for (int c = 0; c < kMhcStreams; ++c) {
    wgmma_ws::TmaLoad(x_map, stage + c * S::kBoxBytes, bar, c * p.dim + d, tok0, 0);
  }
}

__device__ __forceinline__ void WgNamedSync(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

// Grid: mhc_tc::BlocksFor(WgUnits) blocks of WgShape<kGpi>::kThreads threads, kSmemBytes of
// dynamic shared memory, one block per SM. x_map: X as (4·D columns, tokens rows), boxes of
// kBoxDims × 64. Requires D % kMhcMixesSliceDims == 0 and X rows 16-byte aligned (the TMA body's
// conditions).
template <int kFn, int kGpi, bool kCollapse>
__global__ void __launch_bounds__(WgShape<kGpi>::kThreads, 1)
    MixesPartialWgKernel(const __grid_constant__ wgmma_ws::TmaOperand x_map, MhcMixesParams p,
                         float* __restrict__ workspace, bool coll_vec) {
  using S = WgShape<kGpi>;
  extern __shared__ __align__(1024) uint4 s_dyn[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(s_dyn);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int wg = warp / 4;
  const int wl = warp % 4;  // this warp's 16-token tile inside the warpgroup's 64
  const bool elected = wl == 0 && lane == 0;
  const unsigned char* x_stage = smem + S::kStagesOffset + wg * S::kStageBytes;
  const uint32_t stage = SharedAddr(x_stage);
  const uint32_t bar = SharedAddr(smem + S::kBarsOffset + wg * 8);
  const uint32_t b_base = SharedAddr(smem);
  if (elected) {
    wgmma_ws::BarInit(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  uint32_t phase = 0;

  const int64_t tiles = mhc_tc::WgTiles(p.tokens);
  const int64_t units = mhc_tc::WgUnits(p.tokens, p.dim);
  const int64_t end = mhc_tc::BlockUnitBegin(units, gridDim.x, int64_t{blockIdx.x} + 1);
  // Lane (g, q) reads rows 16 wl + g and + 8 of each stream box, bytes 16q .. 16q + 15 of each
  // group's 64.
  const int row_off = (16 * wl + lane / 4) * S::kRowBytes + 16 * (lane % 4);
  for (int64_t u = mhc_tc::BlockUnitBegin(units, gridDim.x, blockIdx.x); u < end;) {
    const int64_t slice = u / tiles;
    const int64_t seg_end = (slice + 1) * tiles < end ? (slice + 1) * tiles : end;
    const int64_t d0 = slice * kMhcMixesSliceDims;
    __syncthreads();  // the previous segment's B tiles are no longer read
    StageFnWg<S::kThreads, kFn>(p, d0, smem);
    wgmma::FenceProxyAsyncShared();  // generic stores before the tensor cores' reads
    __syncthreads();
    const int64_t wg_tile = u - slice * tiles + wg;
    // TcWarp's walk over 16-token tiles: warp wl's tile of the warpgroup's unit k is 4 (wg_tile +
    // kWgs·k) + wl = tile_first + 4·kWgs·k, i.e. TileOf with 4·kWgs warps (per group index).
    const TcWarp<4 * S::kWgs, 1, true, kCollapse> w{
        p,        nullptr, workspace + slice * (kMhcMixes + 1) * p.tokens, d0, 4 * wg_tile + wl,
        coll_vec, lane};
    const int64_t items = mhc_tc::WarpUnits(u, seg_end, wg, S::kWgs) * S::kItemsPerUnit;
    TcTileState s;
    s.Clear();
    float pre[2][kMhcStreams] = {};
    float pre_next[2][kMhcStreams] = {};
    if (kCollapse && items > 0) w.LoadPre(w.TileOf(0), pre_next);
    if (items > 0 && elected) WgIssueStage<kGpi>(x_map, p, d0, wg_tile, 0, stage, bar);
#pragma unroll 1
    for (int64_t item = 0; item < items; ++item) {
      wgmma_ws::BarWait(bar, phase);
      phase ^= 1u;
      XGroup x[kGpi];
#pragma unroll
      for (int gi = 0; gi < kGpi; ++gi) {
#pragma unroll
        for (int c = 0; c < kMhcStreams; ++c) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint4 v = *reinterpret_cast<const uint4*>(
                x_stage + c * S::kBoxBytes + r * 8 * S::kRowBytes + gi * kTmaRowBytes + row_off);
            XWord(x[gi], c, r, 0) = v.x;
            XWord(x[gi], c, r, 1) = v.y;
            XWord(x[gi], c, r, 2) = v.z;
            XWord(x[gi], c, r, 3) = v.w;
          }
        }
      }
      // Every warp's reads of the stage are done before the TMA may overwrite it.
      WgNamedSync(1 + wg);
      if (item + 1 < items && elected) {
        WgIssueStage<kGpi>(x_map, p, d0, wg_tile, item + 1, stage, bar);
      }
#pragma unroll
      for (int gi = 0; gi < kGpi; ++gi) {
        const int64_t group = item * kGpi + gi;  // the warp's group index: 8 per unit
        const int j = static_cast<int>(group % kTcGroups);
        if constexpr (kCollapse) {
          if (j == 0) w.AdvancePre(group, items * kGpi, pre, pre_next);
        }
        // One chunk in flight per warpgroup (the other warpgroups keep the tensor cores busy):
        // with two, ptxas injected a wait of its own (C7517) to reuse the in-flight accumulators.
        // The chunk's squares run while its wgmma does.
#pragma unroll
        for (int c = 0; c < kMhcStreams; ++c) {
          float t[kMhcMixes / 2];
          WgChunk(x[gi], j, c, b_base, t);
          w.SumSquares(x[gi], c, s);
          wgmma::WaitGroup<0>();
          WgAdd(s, t);
        }
        if constexpr (kCollapse) w.Collapse(x[gi], j, w.TileOf(group), pre);
        if (j == kTcGroups - 1) w.Store(w.TileOf(group), s);
      }
    }
    u = seg_end;
  }
}

}  // namespace flashserve::kernels::mhc_device
