// The register-sourced wgmma expert GEMM's shared-memory plan (ring stages, barriers, the item
// queue's place), its constants and switches, and its producer: the per-tile weight rows and the
// copies of one K stage (slot rows, FP4 codes or their stage chunks, scale words). Split out of
// cuda/moe_wgmma_rs_gemm.cuh (which includes it and documents the design) by responsibility;
// device code of cuda/moe_wgmma_rs_launch.cu only (sm_90a).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kRsThreads = 384;
inline constexpr int kRsConsumerThreads = 256;
inline constexpr int kRsBM = 128;  // slot rows per tile (kMoeCudaWgmmaTileRows)
inline constexpr int kRsNB = 256;  // weight rows per CTA
inline constexpr int kRsBK = 128;  // K per stage
inline constexpr int kRsStages = 4;
inline constexpr uint32_t kRsKMajorLbo = 16;    // unused by K-major swizzled layouts (encodes 1)
inline constexpr uint32_t kRsKMajorSbo = 1024;  // 8 rows of 128 bytes
// setmaxnreg: 256 · 224 + 128 · 56 = 64512 <= 65536 registers per SM (one CTA).
inline constexpr uint32_t kRsConsumerRegs = 224;
inline constexpr uint32_t kRsProducerRegs = 56;
static_assert(kRsConsumerThreads * kRsConsumerRegs + 128 * kRsProducerRegs <= 65536);
inline constexpr uint32_t kRsXBlock = kRsBM * 128;  // one 64-K column block of the slot rows
inline constexpr uint32_t kRsXBytes = 2 * kRsXBlock;
inline constexpr uint32_t kRsCodeBytes = kRsNB * kRsBK / 2;
inline constexpr uint32_t kRsScaleBytes = kRsNB * 4;
inline constexpr uint32_t kRsStageBytes = kRsXBytes + kRsCodeBytes + kRsScaleBytes;
// The producer's per-tile table: the A row of each slot row (null: not loaded). Its weight rows
// are in registers (RsRows).
inline constexpr uint32_t kRsARowOff = kRsStages * kRsStageBytes;
inline constexpr uint32_t kRsBarOff = kRsARowOff + kRsBM * 8;
// The item queue: kRsItemSlots mbarriers (1 arrival: the producer's thread 0 wrote the entry),
// then the entries (int32 item, -1: no more). The producer runs at most 4 steps, i.e. 2 items,
// ahead of the consumers (every item has a K step and an epilogue step), so it rewrites entry i %
// 4 only after the consumers have read it.
inline constexpr int kRsItemSlots = 4;
inline constexpr uint32_t kRsItemBarOff = kRsBarOff + 2 * kRsStages * 8;
inline constexpr uint32_t kRsItemOff = kRsItemBarOff + kRsItemSlots * 8;
inline constexpr uint32_t kRsEnd = kRsItemOff + kRsItemSlots * 4;
inline constexpr int kRsSmemBytes = static_cast<int>(kRsEnd) + 1024;  // + alignment slack
static_assert(kRsStageBytes % 1024 == 0, "stages start on swizzle atoms");
static_assert(kRsSmemBytes <= 227 * 1024);
// RsConsumeTile advances a stage's B descriptor by adding to its 14-bit start-address field
// (shared address / 16): every operand's address, inside the CTA's window (+ 1 KB reserved),
// stays below the field's 256 KB, so the add never carries out of it.
static_assert(kRsSmemBytes + 1024 < (1 << 18));
// More than half an SM's shared memory: one CTA per SM (the launcher sizes its persistent grid
// by it).
static_assert(2 * kRsSmemBytes > 228 * 1024);
// The tile widths (slot rows a consumer's wgmmas cover: m64nWk16) a kernel may pick per tile, as
// bits: the smallest width of its set that holds the tile's rows, 128 (always in a set)
// otherwise. A tile pays its width's tensor work whatever its rows, so narrower widths where
// experts have ~20–90 rows (E 384 top-6: 1,280–4,096 tokens) cut the padding: kRsN16 / kRsN32
// (m64n16k16 / m64n32k16), kRsN96 (m64n96k16).
inline constexpr uint32_t kRsN16 = moe_cuda_internal::kMoeRsN16;
inline constexpr uint32_t kRsN32 = moe_cuda_internal::kMoeRsN32;
inline constexpr uint32_t kRsN64 = moe_cuda_internal::kMoeRsN64;
inline constexpr uint32_t kRsN96 = moe_cuda_internal::kMoeRsN96;
// {64, 128}: the up GEMM's set above a mean of 20 rows per expert, one accumulator and one
// epilogue for both widths (MoeExpertWgmmaRsKernel). Every other set runs each width's item
// whole (RsItem). The launcher picks a set per launch (RsWidthSetFor: session 54 measured the
// sets on the H200, kernels/moe/wgmma_rs_gemm.md "Session 54"). A kernel holds at most two narrow
// widths: with three (every width's item whole, no spills) ptxas serialises the wgmmas for lack
// of registers (C7512); one accumulator shared by the narrow widths spilled (session 52: 3 KB in
// the down kernel) or serialised them (session 54: C7511 in every up set).
inline constexpr uint32_t kRsLandedWidths = kRsN64;

// moe_cuda_internal.h (host-tested): the width of a tile, the set of a launch.
__host__ __device__ constexpr int RsTileWidth(uint32_t widths, int rows) {
  return moe_cuda_internal::MoeRsTileWidth(widths, rows);
}
constexpr uint32_t RsWidthSetFor(int64_t slots, int64_t experts, bool up) {
  return moe_cuda_internal::MoeRsWidthSetFor(slots, experts, up);
}
// The up GEMM's codes by TMA too (session 54 experiment, off: not yet run on the H200). Its
// stage rows then hold w1's 128 columns, then w3's (two boxes of 128 rows, RsTmaMaps), instead
// of MoeWgmmaRsUpRowOf's slabs of 8 + 8 (32 boxes of 8 rows measured 44 % slower than the
// cp.async copies). The consumers read a slab row's up at + 128 stage rows instead of + 8, so
// the A fragments' M rows, and the epilogue's SwiGLU pairs, are unchanged; the scales move with
// the codes. The stage chunks keep the slab layout, so the up launcher ignores them.
#ifndef FS_MOE_RS_UP_TMA
#define FS_MOE_RS_UP_TMA 0
#endif
inline constexpr bool kRsUpTma = FS_MOE_RS_UP_TMA != 0;
// The down GEMM's slot rows by TMA too (session 54 experiment, off: not yet run on the H200). Its
// A operand (ag) is in slot order, so a tile's 128 slot rows are contiguous: two boxes a stage
// (one per 64-K column block: 128 bytes × 128 rows, the 128-byte swizzle = wgmma::Sw128Offset)
// from one producer thread, instead of 16 cp.async per producer thread. Rows past the tile's
// expert load the next slots (or zeros past the last), which reach only output columns that are
// never stored. The up GEMM gathers its rows per token (a_row) and keeps its copies.
#ifndef FS_MOE_RS_DOWN_A_TMA
#define FS_MOE_RS_DOWN_A_TMA 0
#endif
inline constexpr bool kRsDownATma = FS_MOE_RS_DOWN_A_TMA != 0;
// Stage rows between a consumer thread's two rows of a slab (lane / 4 and lane / 4 + 8 of the
// m16 A fragment; up: the gate and the up of one column).
template <bool kUp>
inline constexpr int kRsHalfRows = kUp&& kRsUpTma ? 128 : 8;
// The stage row of row q (lane / 4) of 16-row slab s (of the CTA's 256 weight rows).
template <bool kUp>
__host__ __device__ constexpr int RsConsumerRow(int s, int q) {
  return kUp && kRsUpTma ? 8 * s + q : 16 * s + q;
}
// The weight row (relative to the CTA's n0) and projection of stage row r.
template <bool kUp>
__host__ __device__ constexpr moe_cuda_internal::MoeWgmmaRsUpRow RsWeightRow(uint32_t r) {
  if constexpr (kUp && kRsUpTma) return {r % 128, r >= 128};
  if constexpr (kUp) return moe_cuda_internal::MoeWgmmaRsUpRowOf(r);
  return {r, false};
}
// A consumer's two rows of slab s hold the gate and the up (down: rows 16s + q, + 8) of one
// column, on either up layout.
template <bool kUp>
constexpr bool RsConsumerRowsPairTheColumn() {
  for (int s = 0; s < kRsNB / 16; ++s) {
    for (int q = 0; q < 8; ++q) {
      const auto g = RsWeightRow<kUp>(static_cast<uint32_t>(RsConsumerRow<kUp>(s, q)));
      const auto u =
          RsWeightRow<kUp>(static_cast<uint32_t>(RsConsumerRow<kUp>(s, q) + kRsHalfRows<kUp>));
      if (kUp && (g.up || !u.up || g.column != u.column || g.column != uint32_t(8 * s + q)))
        return false;
      if (!kUp && (g.column != uint32_t(16 * s + q) || u.column != g.column + 8)) return false;
    }
  }
  return true;
}
static_assert(RsConsumerRowsPairTheColumn<true>() && RsConsumerRowsPairTheColumn<false>());

// Named barriers (0 is __syncthreads): the producer warpgroup; consumer warpgroup cw's epilogue
// (kRsEpilogueBarrier + cw).
inline constexpr uint32_t kRsProducerBarrier = 1;
inline constexpr uint32_t kRsEpilogueBarrier = 2;

template <bool kUp>
struct RsShape {
  static constexpr int kBN = kUp ? kRsNB / 2 : kRsNB;  // output columns per CTA
  static constexpr int kWgCols = kBN / 2;              // output columns per consumer warpgroup
  static constexpr int kPitch = kWgCols + 8;           // bf16 per slot row of a warpgroup's tile
  static constexpr int kRoundSlots = kUp ? kRsBM : kRsBM / 2;  // slot rows per epilogue round
  static constexpr uint32_t kWgTileBytes = kRoundSlots * kPitch * 2;
  static_assert(2 * kWgTileBytes <= kRsStageBytes, "both warpgroups' tiles fit one ring slot");
  static_assert(kWgTileBytes % 16 == 0 && (kPitch * 2) % 16 == 0, "16-byte row pieces");
  // FP4 codes + scale bytes of one 128-K stage of one CTA.
  static constexpr int kWeightStageBytes = static_cast<int>(kRsCodeBytes + kRsScaleBytes);
};

// Barrier kId over kCount threads; not .aligned (reached from the producer's and the consumers'
// branches).
template <uint32_t kId, uint32_t kCount>
__device__ __forceinline__ void RsBarrier() {
  asm volatile("barrier.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}

// Consumer warpgroup cw's 128 threads (its epilogue).
__device__ __forceinline__ void RsWgBarrier(int cw) {
  asm volatile("barrier.sync %0, 128;\n" ::"r"(kRsEpilogueBarrier + cw) : "memory");
}

// Arrives on `bar` once all of this thread's earlier cp.async copies have landed; the arrival
// is one of the barrier's expected count (.noinc).
__device__ __forceinline__ void CpAsyncArriveNoinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// ---- producer ----------------------------------------------------------------------------------

// The producer thread's weight rows of a tile, held in registers (session 43: a shared-memory
// table of them cost a load, and its latency, ahead of every copy; only the gathered slot rows
// keep a table). Code rows it = 0 .. 7 (up) start at code + it · kRsCodeRowStep · K/2 bytes
// (inside N for it < code_rows), scale rows it = 0, 1 at scale + it · kRsScaleRowStep · K/32
// (inside N for it < scale_rows). The steps are recomputed from g.k (constant bank): the producer
// has 56 registers. Down, the codes' first row for the TMA box; with the stage chunks, their
// start and count.
struct RsRows {
  const uint8_t* code;  // up, or the stage chunks
  const uint8_t* scale;
  int code_rows;  // up, or the stage chunks
  int scale_rows;
  int32_t code_row0;  // down: row e·N + n0 of the [E·N][K/2] codes (the TMA box)
  int32_t a_row0;     // the tile's first slot row (kRsDownATma)
};

// The down GEMM's codes of a stage by TMA from their [E·N][K/2] rows (session 54; the stage
// chunks' bulk copy without their second copy of the codes): a 2-D tensor map made per launch by
// the launcher (wgmma_ws::MakeTmaRows), one box of 64 bytes (the stage's K) × the CTA's 256 rows
// with the 64-byte swizzle, which puts 16-byte chunk c of the box's row i at c ^ ((i >> 1) & 3):
// RsCodeChunk's place (the box lands on the stage's 1024-byte boundary). The down GEMM 5–14 %
// faster than with the producer's cp.async. The up GEMM's rows interleave w1 and w3 per 8
// (MoeWgmmaRsUpRowOf), i.e. 32 boxes of 8 rows a stage: measured 44 % slower than its cp.async
// copies (small boxes), so it keeps them (kernels/moe/wgmma_rs_gemm.md "Session 54").
struct RsTmaMaps {
  CUtensorMap w;     // w2 (down), w1 (up with kRsUpTma); unused with the stage chunks
  CUtensorMap w_up;  // w3 (up with kRsUpTma)
  CUtensorMap a;     // the down GEMM's slot rows (ag) with kRsDownATma
};
template <bool kUp>
inline constexpr uint32_t kRsCodeBoxRows = kUp ? kRsNB / 2 : kRsNB;

// A producer thread copies CTA weight rows p / 4 + 32·it (up codes, it = 0 .. 7) and p + 128·it
// (scales, it = 0, 1). Down, those are rows n0 + r. Up, MoeWgmmaRsUpRowOf's slabs give rows r and
// r + step (a multiple of 16) the same w1 / w3 and columns step / 2 apart (checked below), so
// either way a thread's rows are a base and a stride.
constexpr bool RsUpRowsAreStrided(uint32_t step) {
  for (uint32_t r = 0; r + step < kRsNB; ++r) {
    const moe_cuda_internal::MoeWgmmaRsUpRow a = moe_cuda_internal::MoeWgmmaRsUpRowOf(r);
    const moe_cuda_internal::MoeWgmmaRsUpRow b = moe_cuda_internal::MoeWgmmaRsUpRowOf(r + step);
    if (b.up != a.up || b.column != a.column + step / 2) return false;
  }
  return true;
}
static_assert(RsUpRowsAreStrided(16) && RsUpRowsAreStrided(32) && RsUpRowsAreStrided(128));

// Where 16-byte chunk `chunk` (32-wide K block) of code row `row` sits in the stage's [256][64
// bytes]: XOR-swizzled by row bits 1, 2 (session 44). A consumer warp reads block b of 8 rows
// (lane / 4) at once; unswizzled, rows 2 apart (128 bytes) hit the same banks (Nsight: 39 % of the
// shared wavefronts were replays); swizzled, the 8 rows' 16 bytes cover all 32 banks.
__host__ __device__ constexpr int RsCodeChunk(int row, int chunk) {
  return chunk ^ ((row >> 1) & 3);
}

// RsCodeChunk: every 8 consecutive rows (a consumer warp's lane / 4 rows) put block b's 16 bytes
// on 8 distinct 16-byte bank groups, a row's 4 chunks take its 4 places, and the XOR is the same
// for a thread's rows (row, row + 8, row + 64, row + 72: the consumer computes it once).
constexpr bool RsCodeChunksSpreadBanks() {
  for (int base = 0; base < kRsNB; base += 8) {
    for (int b = 0; b < 4; ++b) {
      uint32_t groups = 0, places = 0;
      for (int q = 0; q < 8; ++q) {
        const int row = base + q;
        groups |= 1u << ((row * 64 + RsCodeChunk(row, b) * 16) / 16 % 8);
        if (RsCodeChunk(row, b) != (b ^ RsCodeChunk(row, 0))) return false;
        for (const int d : {8, 64, 72}) {
          if (RsCodeChunk(row + d, 0) != RsCodeChunk(row, 0)) return false;
        }
      }
      if (groups != 0xFFu) return false;
      for (int c = 0; c < 4; ++c) places |= 1u << RsCodeChunk(base, c);
      if (places != 0xFu) return false;
    }
  }
  return true;
}
static_assert(RsCodeChunksSpreadBanks());
// The 64-byte TMA swizzle (chunk bits 4, 5 of the shared address XOR its bits 7, 8) of every
// box of `box_rows` rows, at its destination row, is RsCodeChunk's place for that stage row
// (boxes of 8 rows, the up GEMM's, land right too; measured slower, see RsTmaMaps).
constexpr bool RsCodeBoxesLandAsTheStage(uint32_t box_rows) {
  for (uint32_t row0 = 0; row0 < kRsNB; row0 += box_rows) {
    for (uint32_t i = 0; i < box_rows; ++i) {
      for (int c = 0; c < 4; ++c) {
        const uint32_t at = (row0 + i) * 64 + 16 * c;  // the stage's codes are 1024-aligned
        const uint32_t swizzled = (at & ~0x30u) | ((((at >> 4) & 3) ^ ((at >> 7) & 3)) << 4);
        if (swizzled != (row0 + i) * 64 + 16 * RsCodeChunk(static_cast<int>(row0 + i), c))
          return false;
      }
    }
  }
  return (kRsXBytes % 1024 == 0) && (box_rows * 64) % 512 == 0;
}
static_assert(RsCodeBoxesLandAsTheStage(kRsCodeBoxRows<false>) &&
              RsCodeBoxesLandAsTheStage(kRsCodeBoxRows<true>));
// MoeRsChunkSourceOf (the optional stage chunks' layout) is the stage's: the 16 bytes at place
// RsCodeChunk(r, c) of CTA weight row r of column block 0 come from piece c of r's row (the
// chunks of a column block cover its rows in order).
constexpr bool RsChunksAreTheStage(bool up) {
  const int64_t rows = moe_cuda_internal::MoeRsChunkRows(up);
  for (int r = 0; r < kRsNB; ++r) {
    for (int c = 0; c < 4; ++c) {
      const moe_cuda_internal::MoeRsChunkSource src = moe_cuda_internal::MoeRsChunkSourceOf(
          up, r / rows, static_cast<int>(r % rows), RsCodeChunk(r, c));
      const moe_cuda_internal::MoeWgmmaRsUpRow want =
          up ? moe_cuda_internal::MoeWgmmaRsUpRowOf(static_cast<uint32_t>(r))
             : moe_cuda_internal::MoeWgmmaRsUpRow{static_cast<uint32_t>(r), false};
      if (src.piece != c || src.up != want.up || src.column != want.column) return false;
    }
  }
  return moe_cuda_internal::MoeRsChunkBytes(up) * (kRsNB / rows) == kRsCodeBytes;
}
static_assert(RsChunksAreTheStage(true) && RsChunksAreTheStage(false));
// mbarrier.expect_tx without an arrival: the stage's bulk copies' bytes join its `full` phase,
// whose arrivals stay the producer threads' cp.async ones.
__device__ __forceinline__ void RsExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One bulk copy global -> shared, completion counted in `bar`'s transaction bytes.
__device__ __forceinline__ void RsBulkCopy(uint32_t dst, const void* src, uint32_t bytes,
                                           uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// One box of a 2-D tensor map (RsTmaMaps) at (byte k0, row row0) into shared `dst`; its bytes
// complete on `bar`.
__device__ __forceinline__ void RsTmaRows(const CUtensorMap* map, uint32_t dst, uint32_t bar,
                                          int32_t k0, int32_t row0) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(row0), "r"(bar)
      : "memory");
}

template <bool kUp>
inline constexpr int64_t kRsCodeRowStep = kUp ? 32 / 2 : 32;  // output rows between it, it + 1
template <bool kUp>
inline constexpr int64_t kRsScaleRowStep = kUp ? 128 / 2 : 128;

template <bool kUp>
__device__ __forceinline__ RsRows RsMakeRows(const GemmArgs& g, int p, int64_t e, int64_t n0,
                                             int64_t row0) {
  RsRows rows;
  rows.a_row0 = static_cast<int32_t>(row0);
  if (g.code_chunks != nullptr) {
    // The stage chunks: the CTA's first column block's chunk of stage 0, and how many of its
    // chunks lie inside N (N is a multiple of 128, so every chunk is whole).
    constexpr int64_t kChunk = moe_cuda_internal::MoeRsChunkBytes(kUp);
    rows.code = g.code_chunks + (e * (g.n / 64) + n0 / 64) * (g.k / kRsBK) * kChunk;
    constexpr int64_t kChunks = kRsNB / moe_cuda_internal::MoeRsChunkRows(kUp);
    rows.code_rows = static_cast<int>(min(kChunks, (g.n - n0) / 64));
  } else if constexpr (kUp && !kRsUpTma) {
    // Code rows p / 4 + 32·it.
    const moe_cuda_internal::MoeWgmmaRsUpRow c = RsWeightRow<kUp>(static_cast<uint32_t>(p / 4));
    const int64_t col = n0 + c.column;
    constexpr int64_t kStep = kRsCodeRowStep<kUp>;
    rows.code = (c.up ? g.w_up : g.w) + (e * g.n + col) * (g.k / 2);
    rows.code_rows = col < g.n ? static_cast<int>((g.n - col + kStep - 1) / kStep) : 0;
  } else {
    rows.code_row0 = static_cast<int32_t>(e * g.n + n0);
  }
  const moe_cuda_internal::MoeWgmmaRsUpRow s = RsWeightRow<kUp>(static_cast<uint32_t>(p));
  const int64_t scol = n0 + s.column;
  constexpr int64_t kSStep = kRsScaleRowStep<kUp>;
  rows.scale = (s.up ? g.w_up_scale : g.w_scale) + (e * g.n + scol) * (g.k / 32);
  rows.scale_rows = scol < g.n ? static_cast<int>((g.n - scol + kSStep - 1) / kSStep) : 0;
  if constexpr (kUp && kRsUpTma) rows.scale_rows = scol < g.n ? 2 : 0;  // w1's, then w3's
  return rows;
}

// The tile's slot-row table (producer thread p = 0 .. 127): the A row of slot row p (null: past
// the expert's rows).
__device__ __forceinline__ void RsWriteTables(const GemmArgs& g, uint8_t* smem, int p, int64_t row0,
                                              int64_t row_end) {
  auto** a_rows = reinterpret_cast<const uint16_t**>(smem + kRsARowOff);
  a_rows[p] = row0 + p < row_end ? ARow(g, row0 + p) : nullptr;
}

// Issues the copies of K step kt into stage slot `st` (producer thread p) and arrives on `full`
// when they have landed. Rows outside the expert / N are not copied, or (the TMA boxes) hold the
// next rows or zeros: either way they reach only accumulator rows or columns never stored.
template <bool kUp>
__device__ __forceinline__ void RsLoadStage(const GemmArgs& g, const RsTmaMaps& maps,
                                            const uint8_t* smem, const RsRows& rows, uint8_t* st,
                                            int p, int64_t kt, uint32_t full) {
  const auto* const* a_rows = reinterpret_cast<const uint16_t* const*>(smem + kRsARowOff);
  if constexpr (!kUp && kRsDownATma) {
    // The tile's slot rows (RsTmaMaps::a): the second producer warp's lane 0 adds their bytes
    // to the phase (before its own cp.async arrival) and issues both boxes.
    if (p == 32) {
      RsExpectTx(full, kRsXBytes);
#pragma unroll
      for (int cb = 0; cb < 2; ++cb) {
        RsTmaRows(&maps.a, SmemAddr(st) + cb * kRsXBlock, full,
                  static_cast<int32_t>((kt * kRsBK + cb * 64) * 2), rows.a_row0);
      }
    }
  } else {
    // Slot rows p / 8 + 16·it, 16-byte chunk p % 8 of both 64-K column blocks: 8 threads read
    // 128 contiguous bytes of a row.
#pragma unroll
    for (int it = 0; it < kRsBM / 16; ++it) {
      const int r = p / 8 + 16 * it;
      const uint16_t* a = a_rows[r];
      if (a != nullptr) {
#pragma unroll
        for (int cb = 0; cb < 2; ++cb) {
          CpAsync16(st + cb * kRsXBlock + wgmma::Sw128Offset(r, p % 8),
                    a + kt * kRsBK + cb * 64 + (p % 8) * 8, true);
        }
      }
    }
  }
  if (g.code_chunks != nullptr) {
    // The stage chunks: thread 0 adds their bytes to the phase (before its own cp.async arrival,
    // so the phase cannot complete without them) and issues one bulk copy per chunk.
    if (p == 0) {
      constexpr uint32_t kChunk = moe_cuda_internal::MoeRsChunkBytes(kUp);
      RsExpectTx(full, static_cast<uint32_t>(rows.code_rows) * kChunk);
      const int64_t chunk_step = (g.k / kRsBK) * kChunk;
#pragma unroll
      for (int j = 0; j < kRsNB / moe_cuda_internal::MoeRsChunkRows(kUp); ++j) {
        if (j < rows.code_rows) {
          RsBulkCopy(SmemAddr(st) + kRsXBytes + j * kChunk,
                     rows.code + j * chunk_step + kt * kChunk, kChunk, full);
        }
      }
    }
  } else if constexpr (kUp && !kRsUpTma) {
    // Code rows p / 4 + 32·it, chunk p % 4: 4 threads read a row's 64 bytes of the stage; the
    // chunk lands at RsCodeChunk (rows p / 4 + 32·it share bits 1, 2).
    const int64_t code_step = kRsCodeRowStep<kUp> * (g.k / 2);
    const int code_at = RsCodeChunk(p / 4, p % 4) * 16;
#pragma unroll
    for (int it = 0; it < kRsNB / 32; ++it) {
      const int r = p / 4 + 32 * it;
      if (it < rows.code_rows) {
        CpAsync16(st + kRsXBytes + r * 64 + code_at,
                  rows.code + it * code_step + kt * (kRsBK / 2) + (p % 4) * 16, true);
      }
    }
  } else if (p < 32) {
    // The TMA box (RsTmaMaps), issued by the producer's first warp: thread 0 adds the stage's
    // code bytes to the phase first (before its own cp.async arrival, so the phase cannot
    // complete without them), then the box.
    if (p == 0) RsExpectTx(full, kRsCodeBytes);
    __syncwarp();
    const uint32_t codes = SmemAddr(st) + kRsXBytes;
    const int32_t k0 = static_cast<int32_t>(kt * (kRsBK / 2));
    if (p == 0) RsTmaRows(&maps.w, codes, full, k0, rows.code_row0);
    if constexpr (kUp) {
      if (p == 1) RsTmaRows(&maps.w_up, codes + kRsNB / 2 * 64, full, k0, rows.code_row0);
    }
  }
  const int64_t scale_step = kRsScaleRowStep<kUp> * (g.k / 32);
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    const int r = p + 128 * it;
    if (it < rows.scale_rows) {
      const uint8_t* src = rows.scale + it * scale_step;
      // kRsUpTma: stage row p + 128 is w3's row of the same column (RsWeightRow).
      if constexpr (kUp && kRsUpTma)
        src = it == 0 ? rows.scale : g.w_up_scale + (rows.scale - g.w_scale);
      CpAsync4(st + kRsXBytes + kRsCodeBytes + r * 4, src + kt * (kRsBK / 32));
    }
  }
  CpAsyncArriveNoinc(full);
}

}  // namespace flashserve::kernels::moe_device
