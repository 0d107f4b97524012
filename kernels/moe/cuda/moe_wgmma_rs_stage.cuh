// The register-sourced wgmma expert GEMM's shared-memory plan (ring stages, barriers, the item
// queue's place), its constants, and its producer: the per-tile weight rows and the copies of one
// K stage (slot rows, FP4 codes, scale words). Split out of
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

inline constexpr int kRsBM = 128;  // slot rows per tile (kMoeCudaWgmmaTileRows) by default
inline constexpr int kRsNB = 256;  // weight rows per CTA
inline constexpr int kRsBK = 128;  // K per stage
inline constexpr uint32_t kRsKMajorLbo = 16;    // unused by K-major swizzled layouts (encodes 1)
inline constexpr uint32_t kRsKMajorSbo = 1024;  // 8 rows of 128 bytes
inline constexpr uint32_t kRsCodeBytes = kRsNB * kRsBK / 2;
inline constexpr uint32_t kRsScaleBytes = kRsNB * 4;

// The shared-memory plan of a kernel whose tiles hold up to kBM slot rows (the permute's
// tile_rows: 32 for the {16, 32} kernels / 64 for the {32, 64} ones where MoeCudaRsTileRows
// gives them (by default at <= 20 / 40 slot rows per expert; session 57, the default since 59),
// 96 for the {64, 96} ones (at <= 80; session 59, the default since 60), else 128): kStages ring
// stages of [kBM slot rows][128 bf16] (two 64-K column blocks), the codes and the scale words; a
// smaller kBM leaves room for more stages, i.e. more of the weights' bytes in flight per SM (4
// stages at 128 rows, 5 at 96, 6 at 64, 8 at 32).
// Consumer warpgroups of the tile kernels below 128 rows (FS_MOE_RS_NARROW_WGS; 4 by default
// since session 59, 2 as the 128-row kernels always for A/B): 2 own 128 of the CTA's 256 weight
// rows each as two m64 blocks (two accumulator sets); 4 own 64 each as one, i.e. twice the consumer
// warps per scheduler for the same work (Nsight at 1,280 tokens: 3.0 warps active and 0.75
// eligible per scheduler, 0.49 issued per cycle: latency-bound chains) at half the accumulators
// and A fragments a thread. Measured on an H100 (session 59): 2.2–3.7 % faster layers at 32-row
// tiles (1,280 tokens) and 64-row tiles (2,048). The 128-row kernels' n128 path (64 accumulators
// a thread) does not fit four warpgroups' registers (ptxas serialises its wgmmas, C7512).
#ifndef FS_MOE_RS_NARROW_WGS
#define FS_MOE_RS_NARROW_WGS 4
#endif
static_assert(FS_MOE_RS_NARROW_WGS == 2 || FS_MOE_RS_NARROW_WGS == 4);

template <int kBM>
struct RsPlan {
  static_assert(kBM == 128 || kBM == 96 || kBM == 80 || kBM == 64 || kBM == 48 || kBM == 32);
  static constexpr int kWgs = kBM == 128 ? 2 : FS_MOE_RS_NARROW_WGS;  // consumer warpgroups
  static constexpr int kMb = 4 / kWgs;  // m64 blocks (accumulator sets) per consumer warpgroup
  static constexpr int kConsumerThreads = 128 * kWgs;
  static constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
  // setmaxnreg redistributes the CTA's registers at launch (__launch_bounds__(kThreads, 1): the
  // largest multiple of 8 a thread within 65,536): 384 · 168 = 256 · 224 + 128 · 56; with four
  // consumer warpgroups 640 · 96 = 512 · 104 + 128 · 64. The sum may not exceed the launch's, or
  // setmaxnreg.inc would wait for registers no warp gives back.
  static constexpr uint32_t kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr uint32_t kConsumerRegs = kWgs == 2 ? 224 : 104;
  static constexpr uint32_t kProducerRegs = kWgs == 2 ? 56 : 64;
  static_assert(kConsumerThreads * kConsumerRegs + 128 * kProducerRegs <= kThreads * kLaunchRegs);
  // As many 128-K stages as fit the shared memory: 29 KB at 48 rows (7), 37 KB at 80 (6).
  static constexpr int kStages =
      kBM == 128 ? 4 : (kBM == 96 ? 5 : (kBM == 80 || kBM == 64 ? 6 : (kBM == 48 ? 7 : 8)));
  static constexpr uint32_t kXBlock = kBM * 128;  // one 64-K column block of the slot rows
  static constexpr uint32_t kXBytes = 2 * kXBlock;
  static constexpr uint32_t kStageBytes = kXBytes + kRsCodeBytes + kRsScaleBytes;
  // The producer's per-tile table where the up GEMM gathers its slot rows: the A row of each
  // slot row (null: not loaded). Its other rows are in registers (RsRows).
  static constexpr uint32_t kARowOff = kStages * kStageBytes;
  static constexpr uint32_t kBarOff = kARowOff + kBM * 8;
  // The item queue: kItemSlots mbarriers (1 arrival: the producer's thread 0 wrote the entry),
  // then the entries (int32 item, -1: no more). The producer runs at most kStages steps, i.e.
  // kStages / 2 items, ahead of the consumers (every item has a K step and an epilogue step), so
  // with kStages entries it rewrites entry i % kStages only after the consumers have read it.
  static constexpr int kItemSlots = kStages;
  static constexpr uint32_t kItemBarOff = kBarOff + 2 * kStages * 8;
  static constexpr uint32_t kItemOff = kItemBarOff + kItemSlots * 8;
  static constexpr uint32_t kEnd = kItemOff + kItemSlots * 4;
  static constexpr int kSmemBytes = static_cast<int>(kEnd) + 1024;  // + alignment slack
  static_assert(kStageBytes % 1024 == 0, "stages start on swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024);
  // RsConsumeTile advances a stage's B descriptor by adding to its 14-bit start-address field
  // (shared address / 16): every operand's address, inside the CTA's window (+ 1 KB reserved),
  // stays below the field's 256 KB, so the add never carries out of it.
  static_assert(kSmemBytes + 1024 < (1 << 18));
  // More than half an SM's shared memory: one CTA per SM (the launcher sizes its persistent grid
  // by it).
  static_assert(2 * kSmemBytes > 228 * 1024);
};
// The default plan's stage count (MoeCudaGemmPlan::stages).
inline constexpr int kRsStages = RsPlan<kRsBM>::kStages;
// The tile widths (slot rows a consumer's wgmmas cover: m64nWk16) a kernel may pick per tile, as
// bits: the smallest width of its set that holds the tile's rows, 128 (always in a set)
// otherwise. A tile pays its width's tensor work whatever its rows, so narrower widths where
// experts have ~20–90 rows (E 384 top-6: 1,280–4,096 tokens) cut the padding: kRsN16 / kRsN32
// (m64n16k16 / m64n32k16), kRsN96 (m64n96k16).
inline constexpr uint32_t kRsN16 = moe_cuda_internal::kMoeRsN16;
inline constexpr uint32_t kRsN32 = moe_cuda_internal::kMoeRsN32;
inline constexpr uint32_t kRsN64 = moe_cuda_internal::kMoeRsN64;
inline constexpr uint32_t kRsN96 = moe_cuda_internal::kMoeRsN96;
inline constexpr uint32_t kRsN48 = moe_cuda_internal::kMoeRsN48;  // session 60's 48-row tiles
inline constexpr uint32_t kRsN80 = moe_cuda_internal::kMoeRsN80;  // and 80-row tiles
// {64, 128}: the up GEMM's set above a mean of 20 rows per expert, one accumulator and one
// epilogue for both widths (MoeExpertWgmmaRsKernel). Every other set runs each width's item
// whole (RsItem). The launcher picks a set per launch (RsWidthSetFor: session 54 measured the
// sets on the H200, kernels/moe/wgmma_rs_gemm_sessions.md "Session 54"). A kernel holds at most two
// narrow widths: with three (every width's item whole, no spills) ptxas serialises the wgmmas for
// lack of registers (C7512); one accumulator shared by the narrow widths spilled (session 52: 3 KB
// in the down kernel) or serialised them (session 54: C7511 in every up set).
inline constexpr uint32_t kRsLandedWidths = kRsN64;
// The set of the kernels of kBM-row tiles below 128 (MoeCudaRsTileRows): the two widths up to
// kBM, both projections. The 128-row kernels take RsWidthSetFor's set per launch.
template <int kBM>
inline constexpr uint32_t kRsNarrowTileWidths =
    kBM == 32 ? (kRsN16 | kRsN32)
              : (kBM == 48 ? (kRsN32 | kRsN48)
                           : (kBM == 64 ? (kRsN32 | kRsN64)
                                        : (kBM == 80 ? (kRsN64 | kRsN80) : (kRsN64 | kRsN96))));

// moe_cuda_internal.h (host-tested): the width of a tile, the set of a launch.
__host__ __device__ constexpr int RsTileWidth(uint32_t widths, int rows) {
  return moe_cuda_internal::MoeRsTileWidth(widths, rows);
}
constexpr uint32_t RsWidthSetFor(int64_t slots, int64_t experts, bool up) {
  return moe_cuda_internal::MoeRsWidthSetFor(slots, experts, up);
}
// The up stage's rows: w1's 128 columns, then w3's (MoeWgmmaRsUpRowOf; two TMA boxes of 128 rows,
// session 55), so a consumer thread's two rows of a slab (lane / 4 and lane / 4 + 8 of the m16 A
// fragment: the gate and the up of one column) are 128 stage rows apart; down, 8 (rows 16s + q,
// + 8). Stage rows between them:
template <bool kUp>
inline constexpr int kRsHalfRows = kUp ? kRsNB / 2 : 8;
// The stage row of row q (lane / 4) of 16-row slab s (of the CTA's 256 weight rows).
template <bool kUp>
__host__ __device__ constexpr int RsConsumerRow(int s, int q) {
  return kUp ? 8 * s + q : 16 * s + q;
}
// The weight row (relative to the CTA's n0) and projection of stage row r.
template <bool kUp>
__host__ __device__ constexpr moe_cuda_internal::MoeWgmmaRsUpRow RsWeightRow(uint32_t r) {
  if constexpr (kUp) return moe_cuda_internal::MoeWgmmaRsUpRowOf(r);
  return {r, false};
}
// A consumer's two rows of slab s hold the gate and the up (down: rows 16s + q, + 8) of one
// column: the SwiGLU pairs of the epilogue (session 54's slabs of 8 + 8 rows had the same pairs).
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

template <bool kUp, int kBM = kRsBM>
struct RsShape {
  static constexpr int kBN = kUp ? kRsNB / 2 : kRsNB;      // output columns per CTA
  static constexpr int kWgCols = kBN / RsPlan<kBM>::kWgs;  // output columns per consumer warpgroup
  static constexpr int kPitch = kWgCols + 8;  // bf16 per slot row of a warpgroup's tile
  // Slot rows per epilogue round: the whole tile where every warpgroup's tile fits one ring slot
  // (up; down at 32 rows), else half of it (down at 128 / 96 / 64 rows: two rounds of 64 / 48 /
  // 32).
  static constexpr int kRoundSlots =
      RsPlan<kBM>::kWgs * kBM * kPitch * 2 <= static_cast<int>(RsPlan<kBM>::kStageBytes) ? kBM
                                                                                         : kBM / 2;
  static constexpr uint32_t kWgTileBytes = kRoundSlots * kPitch * 2;
  static_assert(RsPlan<kBM>::kWgs * kWgTileBytes <= RsPlan<kBM>::kStageBytes,
                "every warpgroup's tile fits one ring slot");
  static_assert(kWgTileBytes % 16 == 0 && (kPitch * 2) % 16 == 0, "16-byte row pieces");
  static_assert(!kUp || kRoundSlots == kBM, "RsStoreUp stores the whole tile in one round");
  // FP4 codes + scale bytes of one 128-K stage of one CTA.
  static constexpr int kWeightStageBytes = static_cast<int>(kRsCodeBytes + kRsScaleBytes);
};
static_assert(RsShape<true>::kRoundSlots == 128 && RsShape<false>::kRoundSlots == 64,
              "the 128-row plan's epilogue rounds (session 44)");

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

// ---- producer ----------------------------------------------------------------------------------

// The producer thread's rows of a tile, held in registers (session 43: a shared-memory table of
// them cost a load, and its latency, ahead of every copy; only the up GEMM's gathered slot rows
// keep a table). Scale rows it = 0, 1 (RsMakeRows) start at element scale_off of the
// [E·N][K/32] scales (down: + it · 128 rows; up: w1's, then w3's) and are inside N for it <
// scale_rows. The codes' and (slot rows by TMA) the slot rows' first rows for the TMA boxes.
struct RsRows {
  int64_t scale_off;
  int scale_rows;
  int32_t code_row0;  // row e·N + n0 of the [E·N][K/2] codes
  int32_t a_row0;     // the tile's first slot row (RsSlotRowsByTma)
  int a_count;        // its slot rows inside the expert (row_end - row0): the table's non-null
};

// The tensor maps of the stage's TMA boxes (session 54 / 55), made per launch by the launcher
// (wgmma_ws::MakeTmaRows):
// - the codes: one box of 64 bytes (the stage's K) × 256 rows (down: w2) or two of 128 rows (up:
//   w1's columns, then w3's) a stage, with the 64-byte swizzle, which puts 16-byte chunk c of the
//   box's row i at c ^ ((i >> 1) & 3): RsCodeChunk's place (the boxes land on 1024-byte
//   boundaries). Against 1,024 16-byte cp.async from 128 threads: the down GEMM 5–14 % faster,
//   the up GEMM 7–11 % (kernels/moe/wgmma_rs_gemm_sessions.md "Session 54", "Session 55");
// - down, the slot rows (ag is in slot order, so a tile's 128 rows are contiguous): two boxes a
//   stage, one per 64-K column block (128 bytes × 128 rows, the 128-byte swizzle =
//   wgmma::Sw128Offset), instead of 16 cp.async per producer thread (1.5–4 % off the down
//   GEMM). Rows past the tile's expert load the next slots (or zeros past the last), which reach
//   only output columns that are never stored. The up GEMM gathers its rows per token (the
//   kRsARowOff table) with cp.async, also where they are in slot order (gather_slot_rows: TMA
//   boxes there with the permute's top_k row copies measured level, session 60).
struct RsTmaMaps {
  CUtensorMap w;     // w2 (down), w1 (up)
  CUtensorMap w_up;  // w3 (up)
  CUtensorMap a;     // the slot rows (down: ag)
};
template <bool kUp>
inline constexpr uint32_t kRsCodeBoxRows = kUp ? kRsNB / 2 : kRsNB;
// Whether this launch's slot rows come by TMA (RsTmaMaps::a; uniform over the launch).
template <bool kUp>
__host__ __device__ constexpr bool RsSlotRowsByTma(const GemmArgs&) {
  return !kUp;
}

// Where 16-byte chunk `chunk` (32-wide K block) of code row `row` sits in the stage's [256][64
// bytes]: XOR-swizzled by row bits 1, 2 (session 44). A consumer warp reads block b of 8 rows
// (lane / 4) at once; unswizzled, rows 2 apart (128 bytes) hit the same banks (Nsight: 39 % of the
// shared wavefronts were replays); swizzled, the 8 rows' 16 bytes cover all 32 banks.
__host__ __device__ constexpr int RsCodeChunk(int row, int chunk) {
  return chunk ^ ((row >> 1) & 3);
}

// RsCodeChunk: every 8 consecutive rows (a consumer warp's lane / 4 rows) put block b's 16 bytes
// on 8 distinct 16-byte bank groups, a row's 4 chunks take its 4 places, and the XOR is the same
// for a thread's rows (down: row, + 8, + 64, + 72; up: row, + 32, + 128, + 160; the consumer
// computes it once).
constexpr bool RsCodeChunksSpreadBanks() {
  for (int base = 0; base < kRsNB; base += 8) {
    for (int b = 0; b < 4; ++b) {
      uint32_t groups = 0, places = 0;
      for (int q = 0; q < 8; ++q) {
        const int row = base + q;
        groups |= 1u << ((row * 64 + RsCodeChunk(row, b) * 16) / 16 % 8);
        if (RsCodeChunk(row, b) != (b ^ RsCodeChunk(row, 0))) return false;
        for (const int d : {8, 32, 64, 72, 128, 160}) {
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
// box of `box_rows` rows, at its destination row, is RsCodeChunk's place for that stage row.
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
  return (RsPlan<kRsBM>::kXBytes % 1024 == 0) && (RsPlan<96>::kXBytes % 1024 == 0) &&
         (RsPlan<80>::kXBytes % 1024 == 0) && (RsPlan<64>::kXBytes % 1024 == 0) &&
         (RsPlan<48>::kXBytes % 1024 == 0) && (RsPlan<32>::kXBytes % 1024 == 0) &&
         (box_rows * 64) % 512 == 0;
}
static_assert(RsCodeBoxesLandAsTheStage(kRsCodeBoxRows<false>) &&
              RsCodeBoxesLandAsTheStage(kRsCodeBoxRows<true>));
// mbarrier.expect_tx without an arrival: the stage's TMA boxes' bytes join its `full` phase,
// whose arrivals stay the producer threads' cp.async ones.
__device__ __forceinline__ void RsExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
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

// Producer thread p's rows of the tile at slot rows [row0, row_end) of expert e, CTA columns n0
// ..: scale rows p and p + 128 (down: w2 rows n0 + p, + 128; up: column n0 + p of w1, then of
// w3).
template <bool kUp, int kBM>
__device__ __forceinline__ RsRows RsMakeRows(const GemmArgs& g, int p, int64_t e, int64_t n0,
                                             int64_t row0, int64_t row_end) {
  RsRows rows;
  rows.a_row0 = static_cast<int32_t>(row0);
  rows.a_count = static_cast<int>(row_end - row0);
  rows.code_row0 = static_cast<int32_t>(e * g.n + n0);
  const int64_t col = n0 + p;
  rows.scale_off = (e * g.n + col) * (g.k / 32);
  if constexpr (kUp) {
    rows.scale_rows = col < g.n ? 2 : 0;
  } else {
    rows.scale_rows = col < g.n ? static_cast<int>((g.n - col + 127) / 128) : 0;
  }
  return rows;
}

// The up tile's slot-row table where the rows are gathered (producer thread p = 0 .. 127): the A
// row of slot row p (null: past the expert's rows).
template <int kBM>
__device__ __forceinline__ void RsWriteTables(const GemmArgs& g, uint8_t* smem, int p, int64_t row0,
                                              int64_t row_end) {
  auto** a_rows = reinterpret_cast<const uint16_t**>(smem + RsPlan<kBM>::kARowOff);
  if (kBM == 128 || p < kBM) a_rows[p] = row0 + p < row_end ? ARow(g, row0 + p) : nullptr;
}

// Issues the copies of K step kt into stage slot `st` (producer thread p) and arrives on `full`
// when they have landed. Rows outside the expert / N are not copied, or (the TMA boxes) hold the
// next rows or zeros: either way they reach only accumulator rows or columns never stored.
template <bool kUp, int kBM>
__device__ __forceinline__ void RsLoadStage(const GemmArgs& g, const RsTmaMaps& maps,
                                            const uint8_t* smem, const RsRows& rows, uint8_t* st,
                                            int p, int64_t kt, uint32_t full) {
  if (!RsSlotRowsByTma<kUp>(g)) {
    // Slot rows p / 8 + 16·it, 16-byte chunk p % 8 of both 64-K column blocks: 8 threads read
    // 128 contiguous bytes of a row. Rows past the expert (null in the table) are known from
    // the count, so their table loads are skipped too (session 56: a tile of 20 rows read all
    // 8 pointers per thread and stage, 64-bit null tests behind each load's latency).
    const auto* const* a_rows =
        reinterpret_cast<const uint16_t* const*>(smem + RsPlan<kBM>::kARowOff);
#pragma unroll
    for (int it = 0; it < kBM / 16; ++it) {
      const int r = p / 8 + 16 * it;
      if (r >= rows.a_count) break;
      const uint16_t* a = a_rows[r];
#pragma unroll
      for (int cb = 0; cb < 2; ++cb) {
        CpAsync16(st + cb * RsPlan<kBM>::kXBlock + wgmma::Sw128Offset(r, p % 8),
                  a + kt * kRsBK + cb * 64 + (p % 8) * 8, true);
      }
    }
  } else if (p == 32) {
    // The tile's slot rows (RsTmaMaps::a): the second producer warp's lane 0 adds their bytes
    // to the phase (before its own cp.async arrival, so the phase cannot complete without them)
    // and issues the boxes of both column blocks.
    constexpr uint32_t kBoxBytes = kBM * 128;
    RsExpectTx(full, 2 * kBoxBytes);
#pragma unroll
    for (int cb = 0; cb < 2; ++cb) {
      RsTmaRows(&maps.a, SmemAddr(st) + cb * RsPlan<kBM>::kXBlock, full,
                static_cast<int32_t>((kt * kRsBK + cb * 64) * 2), rows.a_row0);
    }
  }
  if (p < 32) {
    // The codes (RsTmaMaps), issued by the producer's first warp: thread 0 adds the stage's
    // code bytes to the phase first (before its own cp.async arrival), then the boxes (up:
    // thread 1 w3's).
    if (p == 0) RsExpectTx(full, kRsCodeBytes);
    __syncwarp();
    const uint32_t codes = SmemAddr(st) + RsPlan<kBM>::kXBytes;
    const int32_t k0 = static_cast<int32_t>(kt * (kRsBK / 2));
    if (p == 0) RsTmaRows(&maps.w, codes, full, k0, rows.code_row0);
    if constexpr (kUp) {
      if (p == 1) RsTmaRows(&maps.w_up, codes + kRsNB / 2 * 64, full, k0, rows.code_row0);
    }
  }
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    if (it < rows.scale_rows) {
      const uint8_t* src = kUp ? (it == 0 ? g.w_scale : g.w_up_scale) + rows.scale_off
                               : g.w_scale + rows.scale_off + it * 128 * (g.k / 32);
      CpAsync4(st + RsPlan<kBM>::kXBytes + kRsCodeBytes + (p + 128 * it) * 4,
               src + kt * (kRsBK / 32));
    }
  }
  CpAsyncMbarrierArriveNoinc(full);
}

}  // namespace flashserve::kernels::moe_device
