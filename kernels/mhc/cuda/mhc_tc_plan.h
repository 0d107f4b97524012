// Work partition of the tensor-core mixes pass (mhc_tc_kernels.cuh), shared by the device code and
// the host (launcher, tests). Plain C++: no CUDA header, so the host tests can check it.
//
// Work is a list of units (slice s, token tile k), slice-major: unit u = s * tiles + k, with
// tiles of kMhcTcTileTokens tokens and slices of kMhcMixesSliceDims dims (of every stream). Block
// b of a grid of `blocks` takes the contiguous unit range [b * U / blocks, (b+1) * U / blocks),
// so blocks differ by at most one unit; the range is cut into segments at slice boundaries (one
// staging of that slice's weights each), and within a segment warp w of W takes units w, w + W, ...
// Which block computes a unit never changes its arithmetic: a token's result depends on D only.
#pragma once

#include <cstdint>

#include "kernels/mhc/mhc.h"

#ifdef __CUDACC__
#define FS_MHC_HD __host__ __device__
#else
#define FS_MHC_HD
#endif

namespace flashserve::kernels::mhc_tc {

// Tokens per unit: one mma.sync m16 tile, one warp.
inline constexpr int64_t kTileTokens = 16;
// Two block shapes (warps = units in flight per block): narrow, 8 warps with three X groups in
// registers each (255 registers), and wide, 16 warps with two groups (128 registers). Wide pays
// where every warp has units to walk (at least 16 per block: from ~1,700 tokens at D = 5120) and
// without the fused collapse, which spills ~500 bytes at 128 registers (README.md "CUDA"); the
// TMA body (no X ring in registers) takes the wide shape with or without the collapse.
inline constexpr int kWarpsNarrow = 8;
inline constexpr int kWarpsWide = 16;
FS_MHC_HD constexpr int WarpsOf(bool wide) { return wide ? kWarpsWide : kWarpsNarrow; }
inline bool WideFor(int64_t units, int64_t blocks, bool collapse) {
  return !collapse && units >= kWarpsWide * blocks;
}

FS_MHC_HD inline int64_t Slices(int64_t dim) {
  return (dim + kMhcMixesSliceDims - 1) / kMhcMixesSliceDims;
}
FS_MHC_HD inline int64_t Tiles(int64_t tokens) { return (tokens + kTileTokens - 1) / kTileTokens; }
FS_MHC_HD inline int64_t Units(int64_t tokens, int64_t dim) { return Slices(dim) * Tiles(tokens); }

// First unit of block b (b == blocks gives the end).
FS_MHC_HD inline int64_t BlockUnitBegin(int64_t units, int64_t blocks, int64_t b) {
  return b * units / blocks;
}

// Blocks for a launch: one per SM at most (each holds ~144 KB of shared memory), never more than
// units (so no block is empty).
inline int64_t BlocksFor(int64_t units, int sm_count) {
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  return units < sms ? units : sms;
}

// Where blocks have few units (fewer than kWarpsWide each) and there are at least as many blocks
// as slices, a multiple of the slice count (BlocksFor's count rounded down): with units in
// slice-major order, block b = s · (blocks / slices) + k then takes tiles [k · tiles / n, (k + 1)
// · tiles / n) of slice s (n = blocks / slices) and stages one slice's weights, where an even
// split over all blocks made most blocks straddle two slices and stage twice (256 tokens at D =
// 5120: 320 units on 132 blocks). Blocks with many units keep every SM (the staging is amortised).
inline int64_t SliceAlignedBlocks(int64_t units, int64_t slices, int64_t blocks) {
  if (units >= kWarpsWide * blocks || blocks < slices || slices < 1) return blocks;
  return blocks / slices * slices;
}

// The wgmma body (mhc_wg_kernel.cuh): units of kWgTileTokens tokens (one warpgroup's m64, its 4
// warps each holding one 16-token tile as above), the same slice-major order and block ranges;
// within a segment warpgroup g of a block's G takes units g, g + G, ... (WarpUnits).
inline constexpr int64_t kWgTileTokens = 64;
FS_MHC_HD inline int64_t WgTiles(int64_t tokens) {
  return (tokens + kWgTileTokens - 1) / kWgTileTokens;
}
FS_MHC_HD inline int64_t WgUnits(int64_t tokens, int64_t dim) {
  return Slices(dim) * WgTiles(tokens);
}

// Units of a segment [begin, end) that warp w of `warps` takes: w, w + warps, ...
FS_MHC_HD inline int64_t WarpUnits(int64_t begin, int64_t end, int w, int warps) {
  const int64_t n = end - begin;
  return n > w ? (n - w + warps - 1) / warps : 0;
}

}  // namespace flashserve::kernels::mhc_tc
