// The register-sourced wgmma expert GEMM (tile_rows 128, 96, 64 or 32: MoeCudaRsTileRows;
// MoeCudaGemm::kWgmmaRs): the weights are
// the wgmma A operand, decoded from FP4 by the consumer threads straight into their A fragments
// (wgmma.mma_async ... RS form), so decoded weights never touch shared memory. Device code of
// cuda/moe_wgmma_rs_launch.cu only (sm_90a). README.md "CUDA: the register-sourced wgmma GEMM"
// documents the design. This file holds the consumers, the item queue and the kernel; its
// shared-memory plan, constants and producer are in cuda/moe_wgmma_rs_stage.cuh.
//
// Roles (swapped against cuda/moe_wgmma_gemm.cuh): M = weight rows (m64 per wgmma), N = the tile's
// slot rows (the activations, B, K-major 128-byte swizzle in shared memory), K = D (up) or I
// (down). A work item is one tile of up to kBM slot rows of one expert (the permute stage's tile
// list) × 256 weight rows (a column block); persistent CTAs (one per SM) take the items
// (tile-major, column block fastest): CTA b first item b, then the next free one from
// g.work_counters (items differ in length: tiles of <= 64 rows run half the tensor work), or
// without counters grid-stride. The producer's thread 0 takes it and passes it to the consumers
// through a kStages-entry queue in shared memory (item_full mbarriers). Per item: up, the w1 rows
// of 128 output columns, then the same columns' w3 rows (MoeWgmmaRsUpRowOf); a consumer thread
// reads its slab row lane/4 from row 8s + lane/4 and row lane/4 + 8 from 128 rows further
// (RsConsumerRow, kRsHalfRows), so its accumulator rows lane/4 and lane/4 + 8 are one column's
// gate and up; down, 256 w2 rows (the last column block may be partial: rows past N are never
// stored).
//
// Threads (RsPlan<kBM>: kWgs, kMb): consumer warpgroups 0, 1 (threads 0 .. 255; setmaxnreg up)
// each own 128 weight rows = two m64 blocks, i.e. two accumulator sets of m64 × (128 or 64) fp32;
// producer warpgroup 2 (threads 256 .. 383; setmaxnreg down) only issues copies. The 32- / 64-row
// tile kernels run four consumer warpgroups of one m64 block (64 weight rows) each and the
// producer as warpgroup 4 (FS_MOE_RS_NARROW_WGS, default 4 since session 59; 2 = the 128-row
// kernels' layout, for A/B).
// Ring: RsPlan<kBM>::kStages stages of 128 K (4 at 128 tile rows, 5 at 96, 6 at 80 / 64, 7 at 48, 8
// at 32), each [kBM slot rows][128 bf16] as two 64-K column blocks in the 128-byte swizzle (up:
// cp.async 16-byte chunks, gathered by slot -> A row as the other GEMMs; down, where the rows are
// in slot order: TMA boxes), [256 weight rows][64 bytes] of raw FP4 codes (TMA boxes with the
// 64-byte swizzle, RsTmaMaps) and [256 rows][4 bytes] of UE8M0 scale words (cp.async; the stage's 4
// scale bytes of a row are one aligned word since K / 32 is a multiple of 4). mbarriers: full[s]
// (128 arrivals: each producer thread's cp.async.mbarrier.arrive.noinc, triggered when its copies
// of the stage have landed, plus the boxes' transaction bytes), empty[s] (one arrival per consumer
// warp: its lane 0 once its warpgroup's wgmmas reading the stage have finished). Step counter c
// (per CTA over all its tiles): slot c % kStages, parity (c / kStages) & 1; a 10 s watchdog traps a
// wait that never completes.
//
// Consumer K loop, per 32-wide block q of K (4 per stage), A fragments double-buffered in
// registers (set q % 2: kMb m64 blocks × 2 k16 steps × 4 registers):
//   wgmma.fence; kMb × 2 wgmma (m-block, k16 step) from set q % 2; commit; wait_group 1 (the group
//   of block q - 1, which read set (q + 1) % 2, has finished; at a stage's first block the
//   previous stage is released); decode block q + 1 into set (q + 1) % 2 (at a stage boundary
//   after waiting for its full barrier and fence.proxy.async: the cp.async writes are generic-
//   proxy writes read by wgmma through the async proxy).
// So the decode of block q + 1 overlaps the tensor cores' work on block q.
//
// A fragments (moe_cuda_internal.h, MoeWgmmaRsFragmentColumn, host-tested): the slot rows are
// stored in the RS operand order (MoeRsOperandColumn: MoeOperandColumn's 32-bit words transposed
// 4 × 4 in every 32-column block; written so by the permute's quantiser with wgmma_rs_order and
// by this GEMM's up epilogue), so quad lane tig holds in register a[h + 2·hh] of k16 step s (row
// lane/4 + 8h) pair 2s + hh of code word tig of the row's block: logical columns 8·tig + 2s + hh
// + 4e. Each lane reads its own word (4 bytes) and decodes all four of its pairs with
// DecodeFp4x8 (12 instructions per word). In MoeOperandColumn order each lane needed pair tig of
// all four words: 4 × (rotate, mask, multiply, mask, HMUL2) = 20 instructions for the same 4
// registers. Scales
// above 2 (bytes > 128) take DecodeFp4x8Wide's second multiply (a warp-uniform branch per stage;
// 1.0 for the warp's other rows), byte 255 gives NaN. Bit-identical weights to the other GEMMs.
//
// N per tile: 128 slot rows (m64n128k16), or m64n64k16 when the tile has <= 64 rows inside the
// expert (a branch on a __shfl_sync-broadcast flag, so ptxas sees it warp-uniform and does not
// serialise the wgmmas); the launcher picks per launch a kernel whose set (kWidths) has two of
// m64n16k16, m64n32k16, m64n64k16 and m64n96k16 for the narrow tiles (RsWidthSetFor; the up GEMM
// keeps {64, 128} above a mean of 20 rows per expert, session 54).
//
// Epilogue (session 44): one step of the ring's sequence. After an item's K steps the producer
// takes one more step without copies (it waits for the slot's `empty` and arrives on its `full`)
// and goes on to the next item's loads; the consumers wait for that step's `full`, use its slot
// as bf16 tiles [slots][columns], one per consumer warpgroup (each warpgroup owns its own
// output columns, so it synchronises only itself: named barrier kRsEpilogueBarrier + cw), and
// release it on `empty` as any other step. So the next item's first stages load while the
// epilogue runs. Up, SwiGLU × slot weight (SwiGluBf16) per (column, slot) into the tile, then
// QuantizeBlock32 per 32 columns of each slot row, ag in operand order (as WgStoreUp); down,
// bf16(acc) into the tile, then 16-byte coalesced stores of ye rows, in two rounds of 64 slots
// where the warpgroups' tiles of the whole tile would not fit one stage (RsShape::kRoundSlots).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/cuda/moe_wgmma_rs_stage.cuh"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels::moe_device {

// ---- consumers ---------------------------------------------------------------------------------

// The thread's part of a consumer warpgroup: rows of its kMb m64 blocks, quad lane.
template <int kMb>  // m64 blocks of the warpgroup (RsPlan::kMb)
struct RsThread {
  int row[kMb];  // stage row of m-block mb's slab row lane/4 (RsConsumerRow; the other + kHalf)
  int tig;       // quad lane: decodes code word tig of every 32-wide block of its rows
  int lane;
  int code_swz;  // RsCodeChunk's XOR for the thread's rows (row bits 1, 2 = lane bits 3, 4)
};

// The scale words of the thread's 2 · kMb weight rows for the stage at `st`, and whether any byte
// of the warp's rows is 128 or above (warp-uniform): those stages take the wide decode, exact for
// every byte. Byte 128 (scale 2) would fit the narrow one, but testing the top bits of the OR of
// the words is 3 instructions where HasWideScale's exact test of each word was ~13 (session 56),
// and FP4 weight blocks with scales of 2 or more (values up to 12) are as rare as the wider ones.
// Otherwise sw / so come back as each word's MoeFp4ScaleMultiplierPairs (even / odd blocks'
// multipliers); in the wide case sw holds the raw words.
template <int kHalf, int kBM>
__device__ __forceinline__ bool RsLoadScales(const uint8_t* st, const RsThread<RsPlan<kBM>::kMb>& t,
                                             uint32_t (&sw)[RsPlan<kBM>::kMb][2],
                                             uint32_t (&so)[RsPlan<kBM>::kMb][2]) {
  uint32_t any = 0;
#pragma unroll
  for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sw[mb][h] =
          LoadShared4(st + RsPlan<kBM>::kXBytes + kRsCodeBytes + (t.row[mb] + kHalf * h) * 4);
      any |= sw[mb][h];
    }
  }
  const bool wide = __any_sync(0xFFFFFFFFu, (any & 0x80808080u) != 0u);
  if (!wide) {
#pragma unroll
    for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const MoeFp4ScalePairs p = MoeFp4ScaleMultiplierPairs(sw[mb][h]);
        sw[mb][h] = p.even;
        so[mb][h] = p.odd;
      }
    }
  }
  return wide;
}

// Decodes 32-wide block b of the stage at `st` into the A set a[mb][k16 step][register]; `sw`,
// `so` as RsLoadScales left them.
template <bool kWide, int kHalf, int kBM>
__device__ __forceinline__ void RsDecodeBlockAs(const uint8_t* st,
                                                const RsThread<RsPlan<kBM>::kMb>& t,
                                                const uint32_t (&sw)[RsPlan<kBM>::kMb][2],
                                                const uint32_t (&so)[RsPlan<kBM>::kMb][2], int b,
                                                uint32_t (&a)[RsPlan<kBM>::kMb][2][4]) {
#pragma unroll
  for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Word tig of the row's block: its pair j is element pair (8·tig + j, 8·tig + j + 4), which
      // the B rows (MoeRsOperandColumn order) hold at k 8j + 2·tig + {0, 1}: k16 step j / 2,
      // register half j % 2.
      const uint32_t w = LoadShared4(st + RsPlan<kBM>::kXBytes + (t.row[mb] + kHalf * h) * 64 +
                                     16 * (b ^ t.code_swz) + 4 * t.tig);
      uint32_t p[4];
      if constexpr (kWide) {
        const uint32_t sb = (sw[mb][h] >> (8 * b)) & 0xFFu;
        DecodeFp4x8(w, sb <= 128u ? ((sb + 126u) << 7) * 0x10001u : 0x7E807E80u, p);
      } else {
        // The multiplier is half b / 2 of the block parity's pair word, an operand of the HMUL2s
        // (session 56: a byte_perm and a shift per row and block before; b is a constant here).
        const uint32_t m = b % 2 == 0 ? sw[mb][h] : so[mb][h];
        if (b < 2) {
          DecodeFp4x8ByHalf<0>(w, m, p);
        } else {
          DecodeFp4x8ByHalf<1>(w, m, p);
        }
      }
      a[mb][0][h] = p[0];
      a[mb][0][h + 2] = p[1];
      a[mb][1][h] = p[2];
      a[mb][1][h + 2] = p[3];
    }
  }
  if constexpr (kWide) {
#pragma unroll
    for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t sb = (sw[mb][h] >> (8 * b)) & 0xFFu;
        // 2^(sb - 127) after the 2^126 of m1; 1.0 (exact) for this warp's rows at <= 2.
        const uint32_t m2 =
            sb <= 128u ? 0x3F803F80u : (sb == 255u ? 0x7FC07FC0u : (sb << 7) * 0x10001u);
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          a[mb][s][h] = MulBf16x2(a[mb][s][h], m2);
          a[mb][s][h + 2] = MulBf16x2(a[mb][s][h + 2], m2);
        }
      }
    }
  }
}

// RsDecodeBlockAs for the stage's `wide` (warp-uniform: RsLoadScales).
template <int kHalf, int kBM>
__device__ __forceinline__ void RsDecodeBlock(const uint8_t* st,
                                              const RsThread<RsPlan<kBM>::kMb>& t,
                                              const uint32_t (&sw)[RsPlan<kBM>::kMb][2],
                                              const uint32_t (&so)[RsPlan<kBM>::kMb][2], bool wide,
                                              int b, uint32_t (&a)[RsPlan<kBM>::kMb][2][4]) {
  if (wide) {
    RsDecodeBlockAs<true, kHalf, kBM>(st, t, sw, so, b, a);
  } else {
    RsDecodeBlockAs<false, kHalf, kBM>(st, t, sw, so, b, a);
  }
}

template <int kN>
__device__ __forceinline__ void RsWgmma(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kN == 128) {
    wgmma::WgmmaM64N128K16RS(d, a, desc_b, true);
  } else if constexpr (kN == 16) {
    wgmma::WgmmaM64N16K16RS(d, a, desc_b, true);
  } else if constexpr (kN == 96) {
    wgmma::WgmmaM64N96K16RS(d, a, desc_b, true);
  } else if constexpr (kN == 80) {
    wgmma::WgmmaM64N80K16RS(d, a, desc_b, true);
  } else if constexpr (kN == 48) {
    wgmma::WgmmaM64N48K16RS(d, a, desc_b, true);
  } else if constexpr (kN == 64) {
    wgmma::WgmmaM64N64K16RS(d, a, desc_b, true);
  } else {
    static_assert(kN == 32);
    wgmma::WgmmaM64N32K16RS(d, a, desc_b, true);
  }
}

template <int kN, int kMb>
__device__ __forceinline__ void RsFenceAcc(float (&acc)[kMb][64]) {
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) wgmma::FenceOperand(acc[mb][i]);
  }
}

// Waits for stage c's copies and makes them visible to the async proxy: the up GEMM's cp.async
// slot rows are generic-proxy writes that wgmma reads through the async proxy. (The down GEMM's
// slot rows come by TMA, so it would need no fence; without it the down GEMM measured level,
// session 60, so both projections keep it.)
template <int kBM>
__device__ __forceinline__ void RsWaitFull(uint32_t full_bars, uint32_t c) {
  constexpr uint32_t kStages = RsPlan<kBM>::kStages;
  wgmma_ws::BarWait(full_bars + (c % kStages) * 8, (c / kStages) & 1);
  wgmma::FenceProxyAsyncShared();
}

// This warp's wgmmas reading stage c have finished (and its decode reads are done): release it.
template <int kBM>
__device__ __forceinline__ void RsRelease(uint32_t empty_bars, uint32_t c, int lane) {
  __syncwarp();
  if (lane == 0) wgmma_ws::BarArrive(empty_bars + (c % uint32_t{RsPlan<kBM>::kStages}) * 8);
}

// The K loop of one tile (steps c .. c + kt_count - 1) for N = kN slot rows.
// kHalf: the stage rows between a thread's two rows of a slab (kRsHalfRows).
template <int kN, int kHalf, int kBM>
__device__ __forceinline__ void RsConsumeTile(uint8_t* smem, uint32_t base,
                                              const RsThread<RsPlan<kBM>::kMb>& t,
                                              uint32_t kt_count, uint32_t c,
                                              float (&acc)[RsPlan<kBM>::kMb][64]) {
  using P = RsPlan<kBM>;
  constexpr uint32_t kStages = P::kStages;
  const uint32_t full_bars = base + P::kBarOff;
  const uint32_t empty_bars = full_bars + kStages * 8;
  uint32_t a[2][RsPlan<kBM>::kMb][2]
            [4];  // [set][m-block][k16 step][register]: block b of a stage in set b % 2
  uint32_t sw[RsPlan<kBM>::kMb][2], so[RsPlan<kBM>::kMb][2];
  RsWaitFull<kBM>(full_bars, c);
  const uint8_t* st = smem + (c % kStages) * P::kStageBytes;
  bool wide = RsLoadScales<kHalf, kBM>(st, t, sw, so);
  RsDecodeBlock<kHalf, kBM>(st, t, sw, so, wide, 0, a[0]);
  for (uint32_t kt = 0; kt < kt_count; ++kt) {
    const uint32_t cs = c + kt;
    const uint32_t x_addr = base + (cs % kStages) * P::kStageBytes;
    // The stage's B descriptor, advanced per (block, k16 step) by adding the offset's 16-byte
    // units to its start-address field (no carry out of it: RsPlan's static_assert).
    const uint64_t x_desc = wgmma::MakeSw128Desc(x_addr, kRsKMajorLbo, kRsKMajorSbo);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      RsFenceAcc<kN, RsPlan<kBM>::kMb>(acc);
      wgmma::Fence();
#pragma unroll
      for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint32_t offset = (b / 2) * P::kXBlock + (b % 2) * 64 + s * 32;
          RsWgmma<kN>(acc[mb], a[b % 2][mb][s], x_desc + (offset >> 4));
        }
      }
      wgmma::CommitGroup();
      RsFenceAcc<kN, RsPlan<kBM>::kMb>(acc);
      // The group of block 4kt + b - 1 (A set (b + 1) % 2) has finished.
      wgmma::WaitGroup<1>();
      if (b == 0 && kt > 0) RsRelease<kBM>(empty_bars, cs - 1, t.lane);
      if (b < 3) {
        RsDecodeBlock<kHalf, kBM>(st, t, sw, so, wide, b + 1, a[(b + 1) % 2]);
      } else if (kt + 1 < kt_count) {
        RsWaitFull<kBM>(full_bars, cs + 1);
        st = smem + ((cs + 1) % kStages) * P::kStageBytes;
        wide = RsLoadScales<kHalf, kBM>(st, t, sw, so);
        RsDecodeBlock<kHalf, kBM>(st, t, sw, so, wide, 0, a[0]);
      }
    }
  }
  // Unconditional: on every path to the epilogue the accumulators are complete, so ptxas
  // injects no wait of its own (C7517).
  wgmma::WaitGroup<0>();
  RsFenceAcc<kN, RsPlan<kBM>::kMb>(acc);
  RsRelease<kBM>(empty_bars, c + kt_count - 1, t.lane);
}

// Up epilogue of consumer warpgroup cw into its tile `tile` [slot][kWgCols + 8]: SwiGLU of
// (gate, up) = accumulator rows lane/4, lane/4 + 8 of each slab, × the slot's weight; then the FP8
// quantiser per 32 columns of each slot row (the tiled GEMM's StoreUp numerics). The warpgroup's
// columns are n0 + S::kWgCols·cw ..
// kN: the tile width (accumulator columns past it are never read); kBM: the tile's rows.
template <int kN, int kBM>
__device__ __forceinline__ void RsStoreUp(const GemmArgs& g,
                                          const float (&acc)[RsPlan<kBM>::kMb][64], uint16_t* tile,
                                          int cw, int64_t n0, int64_t row0, int rows) {
  using S = RsShape<true, kBM>;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, tig = lane % 4;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    if (8 * j >= rows) break;  // uniform: n8 tiles past the expert's end
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int slot = 8 * j + 2 * tig + h;
      const float w = slot < rows ? g.slot_weight[row0 + slot] : 0.f;
#pragma unroll
      for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
        const int col = 8 * (4 * mb + warp) + lane / 4;
        const uint32_t v =
            SwiGluBf16(acc[mb][4 * j + h], acc[mb][4 * j + 2 + h], g.swiglu_limit, w, true);
        tile[slot * S::kPitch + col] = static_cast<uint16_t>(v);
      }
    }
  }
  RsWgBarrier(cw);
  constexpr int kBlocks = S::kWgCols / 32;
  for (int u = threadIdx.x % 128; u < rows * kBlocks; u += 128) {
    const int rl = u / kBlocks, cb = u % kBlocks;
    StoreQuantizedBlock32(tile + rl * S::kPitch + cb * 32, g.act, g.out,
                          (row0 + rl) * g.n + n0 + S::kWgCols * cw + cb * 32, /*rs_order=*/true);
  }
}

// Down epilogue of consumer warpgroup cw (columns n0 + kWgCols·cw ..) in rounds of kRoundSlots:
// bf16(acc) into its tile [slot][kWgCols + 8] (accumulator rows are output columns), then
// 16-byte stores of each slot row's columns (a warp writes 512 or 256 contiguous bytes).
// kN: the tile width (accumulator columns past it are never read); kBM: the tile's rows.
template <int kN, int kBM>
__device__ __forceinline__ void RsStoreDown(const GemmArgs& g,
                                            const float (&acc)[RsPlan<kBM>::kMb][64],
                                            uint16_t* tile, int cw, int64_t n0, int64_t row0,
                                            int rows) {
  using S = RsShape<false, kBM>;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, tig = lane % 4;
  const int64_t c0 = n0 + S::kWgCols * cw;
#pragma unroll
  for (int round = 0; round < kBM / S::kRoundSlots; ++round) {
    const int s0 = round * S::kRoundSlots;
    if (s0 >= rows) break;           // uniform
    if (round > 0) RsWgBarrier(cw);  // the previous round's stores have read the tile
#pragma unroll
    for (int jj = 0; jj < S::kRoundSlots / 8; ++jj) {
      const int j = s0 / 8 + jj;
      if (j >= kN / 8 || 8 * j >= rows) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int slot = 8 * jj + 2 * tig + h;  // in the round
#pragma unroll
        for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int col = 16 * (4 * mb + warp) + lane / 4 + 8 * hr;
            tile[slot * S::kPitch + col] =
                static_cast<uint16_t>(exact::F32ToBf16(acc[mb][4 * j + 2 * hr + h]));
          }
        }
      }
    }
    RsWgBarrier(cw);
    constexpr int kChunks = S::kWgCols / 8;
    const int n_rows = min(S::kRoundSlots, rows - s0);
    if (c0 >= g.n) continue;  // N is a multiple of 128: the warpgroup's columns are all outside
    for (int u = threadIdx.x % 128; u < n_rows * kChunks; u += 128) {
      const int rl = u / kChunks, ch = u % kChunks;
      *reinterpret_cast<uint4*>(g.out + (row0 + s0 + rl) * g.n + c0 + 8 * ch) =
          *reinterpret_cast<const uint4*>(tile + rl * S::kPitch + 8 * ch);
    }
  }
}

// The epilogue step c of consumer warpgroup cw (its item's K steps are done): wait for the step's
// slot, store the accumulators through it (kN: the tile width, RsStoreUp / RsStoreDown) and release
// it. The slot holds every warpgroup's tile (no proxy fence before: generic accesses only; the
// slot's last wgmma reads finished before its release).
template <bool kUp, int kN, int kBM>
__device__ __forceinline__ void RsEpilogueStep(const GemmArgs& g, uint8_t* smem, uint32_t base,
                                               const RsThread<RsPlan<kBM>::kMb>& t, uint32_t c,
                                               int cw, int64_t n0, int64_t row0, int rows,
                                               const float (&acc)[RsPlan<kBM>::kMb][64]) {
  using S = RsShape<kUp, kBM>;
  using P = RsPlan<kBM>;
  const uint32_t full_bars = base + P::kBarOff;
  const uint32_t slot = c % uint32_t{P::kStages};
  wgmma_ws::BarWait(full_bars + slot * 8, (c / uint32_t{P::kStages}) & 1);
  uint16_t* tile_smem =
      reinterpret_cast<uint16_t*>(smem + slot * P::kStageBytes + cw * S::kWgTileBytes);
  if constexpr (kUp) {
    RsStoreUp<kN, kBM>(g, acc, tile_smem, cw, n0, row0, rows);
  } else {
    RsStoreDown<kN, kBM>(g, acc, tile_smem, cw, n0, row0, rows);
  }
  // The slot's next TMA boxes write through the async proxy over these generic accesses (session
  // 54's TMA codes, unfenced, ran bit-exact but relied on timing for it).
  wgmma::FenceProxyAsyncShared();
  RsRelease<kBM>(full_bars + P::kStages * 8, c, t.lane);
}

// One item of the consumer warpgroup cw at tile width kN: its K steps from step c, then the
// epilogue step (c + kt_count). Its own accumulators, so that nothing but c is live where the
// widths' paths meet (with three widths and the accumulators shared, the down kernel spilled
// ~3 KB).
template <bool kUp, int kN, int kBM>
__device__ __forceinline__ void RsItemOfWidth(const GemmArgs& g, uint8_t* smem, uint32_t base,
                                              const RsThread<RsPlan<kBM>::kMb>& t,
                                              uint32_t kt_count, uint32_t c, int cw, int64_t n0,
                                              int64_t row0, int rows) {
  float acc[RsPlan<kBM>::kMb][64];
#pragma unroll
  for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
    for (int j = 0; j < kN / 2; ++j) acc[mb][j] = 0.f;
  }
  RsConsumeTile<kN, kRsHalfRows<kUp>, kBM>(smem, base, t, kt_count, c, acc);
  RsEpilogueStep<kUp, kN, kBM>(g, smem, base, t, c + kt_count, cw, n0, row0, rows, acc);
}

// RsItemOfWidth at `width` (RsTileWidth of the set kWidths; warp-uniform, from a shuffle), with
// code only for the set's widths below kBM and for kBM itself, the widest a tile of kBM rows needs
// (128; 32 / 48 / 64 / 80 / 96 for the {16, 32} / {32, 48} / {32, 64} / {64, 80} / {64, 96}
// kernels of 32- / 48- / 64- / 80- / 96-row tiles).
template <bool kUp, uint32_t kWidths, int kBM>
__device__ __forceinline__ void RsItem(int width, const GemmArgs& g, uint8_t* smem, uint32_t base,
                                       const RsThread<RsPlan<kBM>::kMb>& t, uint32_t kt_count,
                                       uint32_t c, int cw, int64_t n0, int64_t row0, int rows) {
  if constexpr ((kWidths & kRsN16) != 0 && 16 < kBM) {
    if (width == 16)
      return RsItemOfWidth<kUp, 16, kBM>(g, smem, base, t, kt_count, c, cw, n0, row0, rows);
  }
  if constexpr ((kWidths & kRsN32) != 0 && 32 < kBM) {
    if (width == 32)
      return RsItemOfWidth<kUp, 32, kBM>(g, smem, base, t, kt_count, c, cw, n0, row0, rows);
  }
  if constexpr ((kWidths & kRsN48) != 0 && 48 < kBM) {
    if (width == 48)
      return RsItemOfWidth<kUp, 48, kBM>(g, smem, base, t, kt_count, c, cw, n0, row0, rows);
  }
  if constexpr ((kWidths & kRsN64) != 0 && 64 < kBM) {
    if (width == 64)
      return RsItemOfWidth<kUp, 64, kBM>(g, smem, base, t, kt_count, c, cw, n0, row0, rows);
  }
  if constexpr ((kWidths & kRsN80) != 0 && 80 < kBM) {
    if (width == 80)
      return RsItemOfWidth<kUp, 80, kBM>(g, smem, base, t, kt_count, c, cw, n0, row0, rows);
  }
  if constexpr ((kWidths & kRsN96) != 0 && 96 < kBM) {
    if (width == 96)
      return RsItemOfWidth<kUp, 96, kBM>(g, smem, base, t, kt_count, c, cw, n0, row0, rows);
  }
  RsItemOfWidth<kUp, kBM, kBM>(g, smem, base, t, kt_count, c, cw, n0, row0, rows);
}

// ---- the item queue ----------------------------------------------------------------------------

// The producer's thread 0: the CTA's item i (the first: blockIdx.x; then the next free one from
// g.work_counters[0], or grid-stride) into queue entry i % kSlots (RsPlan::kItemSlots), -1 past
// the last, and
// the entry's arrival. Once a CTA has drawn past the end it counts itself in work_counters[1]; the
// last CTA to do so (every draw of the launch is then done) zeroes both words for the next
// launch.
template <uint32_t kSlots>
__device__ __forceinline__ void RsNextItem(const GemmArgs& g, int items, uint32_t i,
                                           int32_t* item_q, uint32_t item_bars) {
  int item = static_cast<int>(blockIdx.x);
  if (i > 0) {
    item = g.work_counters != nullptr ? static_cast<int>(gridDim.x) + atomicAdd(g.work_counters, 1)
                                      : static_cast<int>(blockIdx.x + i * gridDim.x);
  }
  if (item >= items) {
    item = -1;
    if (g.work_counters != nullptr) {
      __threadfence();  // this CTA's draws before its count
      if (atomicAdd(g.work_counters + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        g.work_counters[0] = 0;
        g.work_counters[1] = 0;
      }
    }
  }
  item_q[i % kSlots] = item;
  wgmma_ws::BarArrive(item_bars + (i % kSlots) * 8);
}

// ---- the kernel --------------------------------------------------------------------------------
// kWidths: the tile widths' set (RsWidthSetFor's); kBM: the tile list's rows per tile (128, or 32
// / 48 / 64 / 80 / 96 for the kRsNarrowTileWidths set: RsPlan).
// maps: the TMA boxes' tensor maps (RsTmaMaps).
template <bool kUp, uint32_t kWidths = kRsLandedWidths, int kBM = kRsBM>
__global__ void __launch_bounds__(RsPlan<kBM>::kThreads, 1)
    MoeExpertWgmmaRsKernel(const __grid_constant__ GemmArgs g,
                           const __grid_constant__ RsTmaMaps maps) {
  static_assert(kBM == kRsBM || kWidths == kRsNarrowTileWidths<kBM>,
                "tiles below 128 rows: their kRsNarrowTileWidths set");
  using S = RsShape<kUp, kBM>;
  using P = RsPlan<kBM>;
  constexpr uint32_t kStages = P::kStages;
  constexpr uint32_t kSlots = P::kItemSlots;
  extern __shared__ uint8_t moe_wgmma_rs_smem_raw[];
  const uint32_t raw_addr = SmemAddr(moe_wgmma_rs_smem_raw);
  uint8_t* smem = moe_wgmma_rs_smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t base = SmemAddr(smem);
  const uint32_t full_bars = base + P::kBarOff;
  const uint32_t empty_bars = full_bars + kStages * 8;
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < kStages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, 128);
      wgmma_ws::BarInit(empty_bars + s * 8, P::kConsumerThreads / 32);
    }
    for (uint32_t s = 0; s < kSlots; ++s) wgmma_ws::BarInit(base + P::kItemBarOff + s * 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int n_blocks = static_cast<int>((g.n + S::kBN - 1) / S::kBN);
  const int items = n_blocks * *g.num_tiles;
  const uint32_t kt_count = static_cast<uint32_t>(g.k / kRsBK);  // K is a multiple of 128
  const uint32_t item_bars = base + P::kItemBarOff;
  auto* item_q = reinterpret_cast<int32_t*>(smem + P::kItemOff);
  // Broadcast from lane 0 so that ptxas sees a warp-uniform value (a wgmma under a condition it
  // cannot prove uniform is serialised: C7518).
  const int wg = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  uint32_t c = 0;  // step counter over the CTA's items, K steps and epilogue steps alike

  if (wg == P::kWgs) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(P::kProducerRegs));
    const int p = static_cast<int>(threadIdx.x) - P::kConsumerThreads;
    for (uint32_t i = 0;; ++i) {
      // Every producer thread has issued the previous item's copies (read the table and entry).
      RsBarrier<kRsProducerBarrier, 128>();
      if (p == 0) RsNextItem<kSlots>(g, items, i, item_q, item_bars);
      RsBarrier<kRsProducerBarrier, 128>();
      const int item = item_q[i % kSlots];
      if (item < 0) break;
      const int tile = item / n_blocks;
      const int64_t n0 = int64_t{item % n_blocks} * S::kBN;
      const int64_t e = g.tiles[2 * tile];
      const int64_t row0 = g.tiles[2 * tile + 1];
      const int64_t row_end = min(row0 + kBM, int64_t{g.offsets[e + 1]});
      if (!RsSlotRowsByTma<kUp>(g)) RsWriteTables<kBM>(g, smem, p, row0, row_end);
      const RsRows rows = RsMakeRows<kUp, kBM>(g, p, e, n0, row0, row_end);
      RsBarrier<kRsProducerBarrier, 128>();
      for (uint32_t kt = 0; kt < kt_count; ++kt, ++c) {
        const uint32_t slot = c % kStages;
        wgmma_ws::BarWait(empty_bars + slot * 8, ((c / kStages) & 1) ^ 1);
        RsLoadStage<kUp, kBM>(g, maps, smem, rows, smem + slot * P::kStageBytes, p, kt,
                              full_bars + slot * 8);
      }
      // The epilogue step: no copies; its `full` phase hands the free slot to the consumers.
      const uint32_t slot = c % kStages;
      wgmma_ws::BarWait(empty_bars + slot * 8, ((c / kStages) & 1) ^ 1);
      wgmma_ws::BarArrive(full_bars + slot * 8);
      ++c;
    }
    // Stay until the consumers have released every slot: all copies landed (each one's
    // cp.async arrival done) before the producer's threads exit.
    for (uint32_t i = 0; i < kStages; ++i, ++c) {
      const uint32_t slot = c % kStages;
      wgmma_ws::BarWait(empty_bars + slot * 8, ((c / kStages) & 1) ^ 1);
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(P::kConsumerRegs));
  const int cw = wg;  // consumer warpgroup 0 .. P::kWgs - 1
  const int warp = (threadIdx.x / 32) % 4;
  RsThread<P::kMb> t;
  t.lane = static_cast<int>(threadIdx.x) % 32;
  t.tig = t.lane % 4;
#pragma unroll
  for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb)
    t.row[mb] = RsConsumerRow<kUp>(4 * RsPlan<kBM>::kMb * cw + 4 * mb + warp, t.lane / 4);
  t.code_swz = RsCodeChunk(t.row[0], 0);  // the same for the other m-block and the + kHalf rows
  for (uint32_t i = 0;; ++i) {
    // A plain spin, no watchdog (BarWait's costs the consumers 136 bytes of spills here): the
    // producer's thread 0 arrives unless it is stuck in a wait of its own, which traps.
    while (!wgmma_ws::BarTryWait(item_bars + (i % kSlots) * 8, (i / kSlots) & 1)) {
    }
    const int item = item_q[i % kSlots];
    if (item < 0) break;
    const int tile = item / n_blocks;
    const int64_t n0 = int64_t{item % n_blocks} * S::kBN;
    const int64_t e = g.tiles[2 * tile];
    const int64_t row0 = g.tiles[2 * tile + 1];
    const int64_t row_end = min(row0 + kBM, int64_t{g.offsets[e + 1]});
    const int rows = static_cast<int>(row_end - row0);
    // Another width set runs each width's item whole (RsItem); {64, 128} (the up GEMM above a
    // mean of 20 rows) one accumulator and one epilogue, as measured since session 44.
    if constexpr (kWidths != kRsLandedWidths) {
      const int width = __shfl_sync(0xFFFFFFFFu, RsTileWidth(kWidths, rows), 0);
      RsItem<kUp, kWidths, kBM>(width, g, smem, base, t, kt_count, c, cw, n0, row0, rows);
      c += kt_count;
    } else {
      float acc[RsPlan<kBM>::kMb][64];
#pragma unroll
      for (int mb = 0; mb < RsPlan<kBM>::kMb; ++mb) {
#pragma unroll
        for (int j = 0; j < 64; ++j) acc[mb][j] = 0.f;
      }
      const bool narrow = __shfl_sync(0xFFFFFFFFu, rows <= 64 ? 1 : 0, 0) != 0;
      if (narrow) {
        RsConsumeTile<64, kRsHalfRows<kUp>, kBM>(smem, base, t, kt_count, c, acc);
      } else {
        RsConsumeTile<128, kRsHalfRows<kUp>, kBM>(smem, base, t, kt_count, c, acc);
      }
      c += kt_count;
      RsEpilogueStep<kUp, 128, kBM>(g, smem, base, t, c, cw, n0, row0, rows, acc);
    }
    ++c;
  }
}

}  // namespace flashserve::kernels::moe_device
