// Device code of the int8 tensor-core scorer for k_rows keys (indexer_launch.cu only; not a public
// header): released dims (32 heads × 128), 4-byte aligned rows. Bit-identical to IndexerScoreCpu
// on the decoded keys; README.md "CUDA" gives the proof. In short:
//
// - A key row holds, per 32-block b of d, E2M1 codes whose decoded values are m·2^(s_b − 128)
//   with m ∈ {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12} (twice the E2M1 value) and s_b the UE8M0 byte.
// - q (bf16, FP4-QDQ'd by the caller) is split per (row, head, block) into integers m with
//   |m| <= 127 and an exponent e: v = m·2^e exactly (e = the lowest set bit of the block's nonzero
//   values). A (row, head) with a non-finite value, |m| > 127, an exponent out of range or a
//   non-finite w takes the exact path for every key.
// - mma.sync m16n8k32 (u8·s8 → s32) gives each block's exact integer partial P_b; the exact dot
//   product is S·2^Eref with S = Σ_b P_b·2^(sh_b) (sh_b = the block's exponent above
//   Eref = min_q + min_k over nonzero blocks), summed in int32. The key codes enter as biased
//   bytes 128 + m (two byte permutes and one add per 4 codes, E2m1x4ToBiasedU8), so every
//   accumulator starts at −128·Σq of its head (and block) instead of 0 (session 45).
// - The CPU's sequential fp32 sum equals S·2^Eref when every product and partial sum is an integer
//   multiple of 2^Eref below 2^(Eref + 24) in magnitude with −149 <= Eref <= 100: then each fp32
//   mul and add is exact. All of them are bounded by Σ_d |q_d·k_d| <= 4·32·Mq·12·2^(span_q +
//   span_k)·2^Eref (Mq = max |m| of the head's q, span = max − min exponent over nonzero blocks),
//   so the kernel checks 1536·Mq·2^(span_q + span_k) < 2^24 per (row, head, key) as one compare of
//   the key's span against the head's budget. Failing dot products ("fallbacks") are recomputed in
//   the CPU's order from the decoded key (counted in cuda_rechecks).
// - Then the CPU's bf16 rounding, ReLU, × w and head sum from +0 ascending. Where no pair of the
//   warp tile falls back and every key's min_k is within the row's bounds (kLo, kHi), the same
//   bits come from the scaled epilogue: relu(bf16(S)) and bf16(w·2^min_q · that) in packed bf16x2
//   instructions, the head sum times 2^min_k at the end (every rounding scale-invariant there;
//   README "The scaled epilogue").
// - Folding (session 20): where a head's q values are all multiples of 2^min_q below 2^(min_q + 7)
//   its int8 bytes are v / 2^min_q (the block shifts inside the bytes, dq = 0); where a key's
//   block span is <= 3 its int8 codes are shifted by their block's exponent above min_k (|m|·8 <=
//   96, dk = 0). The values and so S are unchanged. When every head of the row and every key of
//   the warp's tile is folded (warp-uniform), S comes straight out of one accumulating mma chain
//   over the 4 blocks: no per-(key, head, block) shift-and-add. Otherwise the shift-combine runs
//   with the zero shifts of the folded side. Likewise the per-(key, head) budget compare is
//   skipped when the warp's largest key span is within the row's smallest budget.
//
// The tile scoring itself (I8TileScorer) is in score_int8_tile.cuh.
//
// Layout: a CTA of kMmaWarps warps holds the q of up to kMmaRows rows of the call (int8, fragment
// order) and walks tiles of kMmaTileKeys keys, grid-stride (one wave of resident CTAs, so q is
// staged once per many tiles; with a candidate mask, warp tiles of 4 kept 8-key blocks instead,
// see the kernel); each warp reads its 32 keys' codes straight into A fragments (M =
// keys, N = heads), once for all rows. Within a 32-block, lane quad t holds d = 8t .. 8t + 7 (one
// 4-byte load of codes); the same permutation of d is applied to q, which leaves each block's
// exact integer sum unchanged. Heads are permuted over the B columns so that lane t of a quad
// holds heads 8t .. 8t + 7 of its keys; the bf16 head terms go through shared memory (a key per
// lane) for the ascending head sum. Each warp loads its next tile's key bytes into registers
// while it works on the current one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/cuda/score_int8_common.cuh"
#include "kernels/indexer/cuda/score_int8_q.cuh"
#include "kernels/indexer/cuda/score_int8_tile.cuh"
#include "kernels/indexer/cuda/score_tile_kernel.cuh"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels::indexer_device {

// The lean kernel's mark of a warp tile it left to the patch kernel, in the tile's first score of
// the group's first row: a signalling-NaN pattern, which no scorer writes (every score goes
// through FloatToBf16, which sets bit 0x0040 of every NaN, or is the −inf constant).
inline constexpr uint16_t kI8Deferred = 0x7FA5;
static_assert((kI8Deferred & 0x7F80) == 0x7F80 && (kI8Deferred & 0x7F) != 0 &&
                  (kI8Deferred & 0x40) == 0,
              "a NaN without the quiet bit FloatToBf16 sets");
enum I8Mode : int {
  kI8Whole = 0,  // every tile, the general scorer
  kI8Lean = 1,   // the lean tiles; the others marked kI8Deferred
  kI8Patch = 2,  // only the tiles marked kI8Deferred, the general scorer
};
// Whether the lean kernel left the dense warp tile at key b0 of the group at row0 (warp-uniform).
__device__ __forceinline__ bool DeferredI8Tile(const IndexerScoreParams& p, int64_t row0,
                                               int64_t width, int64_t b0) {
  return b0 < width && p.scores[row0 * p.scores_stride + b0] == kI8Deferred;
}

// grid.y walks groups of kMmaRows rows (kBatch: single rows of a batched decode call, each with
// its own keys, width and reach from `rows`; p.tokens = batch, p.width = max_width, p.k_rows = the
// pool). A warp tile is 4 slots of 8 keys, slot kk's keys base[kk] + g (g = lane / 4).
// - Without a mask grid.x walks tiles of kMmaTileKeys consecutive keys (grid-stride; slot kk of
//   warp w is keys wk0 + 8·kk + g, wk0 = tile·kMmaTileKeys + 32·w).
// - kMask (p.candidates set, the launcher's choice; the unmasked instantiation carries none of this
//   code): only 8-key blocks some row of the group sees are scored. The warps of the grid take
//   chunks of `chunk_blocks` (8, 16 or 32) blocks grid-stride; a lane per block reads the rows'
//   8 mask bytes (one chunk ahead), a ballot gives the chunk's kept blocks, blocks no row keeps
//   get −inf at once, and the kept blocks fill the warp's tiles 4 at a time in order, across
//   chunks (a Reindex layer keeps <= 2,048 blocks per row: a quarter of them at 65,536 positions,
//   1/64 at 2^20).
// kMode (unmasked calls only, IndexerScoreParams::cuda_i8_lean; session 61): kI8Lean scores
// the tiles whose every row takes the folded mma chain, no fallback and the scaled epilogue
// (I8TileScorer::Score<true>) and marks the others kI8Deferred, so that its registers hold only
// that path (kMmaLeanMinCtasPerSm CTAs per SM); kI8Patch, launched after it, scores only the
// marked tiles with the general scorer (a CTA with none in a group skips the group's q
// preparation). Together the same bits as kI8Whole.
template <bool kBatch, bool kMask, int kMode = kI8Whole>
__global__ void __launch_bounds__(kMmaThreads, kMode == kI8Lean ? kMmaLeanMinCtasPerSm
                                               : kBatch         ? kMmaMinCtasPerSm
                                                                : kMmaRowsMinCtasPerSm)
    IndexerScoreInt8Kernel(IndexerScoreParams p, BatchRows rows, int chunk_blocks) {
  static_assert(kMode == kI8Whole || !kMask, "lean / patch: unmasked calls only");
  constexpr bool kLean = kMode == kI8Lean;
  constexpr int kRows = kBatch ? 1 : kMmaRows;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int rows_cap = static_cast<int>(p.tokens < kRows ? p.tokens : kRows);
  unsigned char* q_frag = smem;  // [row][c][j][lane] uint2
  // Head info, [row][h] arrays of n entries each (qc: [row][c][h]); then per row its reach
  // (int64) and the scaled epilogue's kLo, kHi (int32).
  const int n = rows_cap * kMmaHeads;
  uint32_t* dq_s = reinterpret_cast<uint32_t*>(smem + rows_cap * kI8QFragBytes);
  int* minq_s = reinterpret_cast<int*>(dq_s + n);
  int* budget_s = minq_s + n;
  float* w_s = reinterpret_cast<float*>(budget_s + n);
  int* qtot_s = reinterpret_cast<int*>(w_s + n);
  int* klo_s = qtot_s + n;
  int* khi_s = klo_s + n;
  int* qc_s = khi_s + n;
  uint16_t* wp_s = reinterpret_cast<uint16_t*>(qc_s + kI8Blocks * n);
  // [row][t][j]: qtot of heads 8t + 2j, 8t + 2j + 1, twice — an mma C operand in one load.
  uint4* qt4_s = reinterpret_cast<uint4*>(wp_s + n);
  I8RowInfo* row_s = reinterpret_cast<I8RowInfo*>(qt4_s + rows_cap * 16);
  unsigned char* const warp_base = reinterpret_cast<unsigned char*>(row_s + rows_cap);
  unsigned char* v_s = warp_base + warp * kMmaVBytes;
  uint16_t* queue =
      reinterpret_cast<uint16_t*>(warp_base + kMmaWarps * kMmaVBytes) + warp * kMmaQueue;
  const int64_t groups = (p.tokens + kRows - 1) / kRows;
  I8TileScorer<kMask> scorer;
  scorer.lane = lane;
  scorer.g = g;
  scorer.t = t;
  scorer.row_s = row_s;
  scorer.q_frag = q_frag;
  scorer.dq_s = dq_s;
  scorer.minq_s = minq_s;
  scorer.budget_s = budget_s;
  scorer.w_s = w_s;
  scorer.wp_s = wp_s;
  scorer.qt4_s = qt4_s;
  scorer.qc_s = qc_s;
  scorer.v_s = v_s;
  scorer.queue = queue;
  scorer.heads_folded = false;
  scorer.lean_budget = -1;
  scorer.lean_klo = kI8Never;
  scorer.lean_khi = -kI8Never;
  scorer.fallbacks = 0;

  for (int64_t group = blockIdx.y; group < groups; group += gridDim.y) {
    const int64_t row0 = group * kRows;
    const int nrows = static_cast<int>(p.tokens - row0 < kRows ? p.tokens - row0 : kRows);
    // The group's keys and width; reach_of(row) its rows' causal limits.
    const uint8_t* keys = p.k_rows;
    int64_t width = p.width;
    if constexpr (kBatch) {
      width = rows.Width(row0, p.width);
      keys += rows.k_row_offsets[row0] * p.k_row_stride;
    }
    auto reach_of = [&](int64_t row) {
      if constexpr (kBatch) {
        return rows.Reach(row, width);
      } else {
        return Reach(p.start_pos, p.ratio, row);
      }
    };
    const int64_t tiles = (width + kMmaTileKeys - 1) / kMmaTileKeys;
    // kMask: the group's 8-key blocks (the last one cropped to the width) in chunks.
    const int64_t n_blocks = (width + 7) / 8;
    const int64_t chunks = (n_blocks + chunk_blocks - 1) / chunk_blocks;
    // Uniform: a short row leaves this CTA nothing to do.
    if (blockIdx.x >= (kMask ? (chunks + kMmaWarps - 1) / kMmaWarps : tiles)) continue;
    // A warp tile's key bytes: slot kk = 2·mt + half holds keys base[kk] + g (base[kk] = the
    // first key of an 8-key block), words[kk][c] their codes of block c, d = 8t .. 8t + 7;
    // scales: the UE8M0 bytes of the lane's own key (slot lane / 8, key lane % 8). Loaded one
    // tile ahead into registers (next_*), so a tile's loads are in flight during the previous
    // tile's math. Keys >= width (past the row, or an unfilled slot) read as zeros.
    uint32_t next_words[4][kI8Blocks], next_scales;
    auto load_tile = [&](const auto& base, auto own) {
      LoadI8Tile(keys, p.k_row_stride, width, g, t, base, own, next_words, next_scales);
    };
    auto dense_base = [&](int64_t tile, int64_t(&base)[4]) {
      const int64_t wk0 = tile * kMmaTileKeys + warp * kMmaWarpKeys;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) base[kk] = wk0 + 8 * kk;
    };
    // kMask: the mask words of chunk mchunk (the next one to scan; lane = its block, 8 bytes per
    // row, as a 64-bit word of 0 / nonzero bytes; bytes past the width 0), read one chunk ahead.
    // Positions, blocks and chunks fit 32 bits there (width <= INT32_MAX; kNone <= 2^31 + 7).
    const uint32_t kNone = 8 * static_cast<uint32_t>(n_blocks);  // an unfilled slot's first key
    const uint32_t warp_step = gridDim.x * kMmaWarps;
    uint32_t mchunk = blockIdx.x * kMmaWarps + warp;
    uint64_t mask_words[kRows];
    const bool mask_vec = kMask && (reinterpret_cast<uintptr_t>(p.candidates) % 8 == 0 &&
                                    p.candidates_stride % 8 == 0);
    auto load_mask = [&](uint32_t chunk) {
      const uint32_t t0 = 8 * (chunk * chunk_blocks + lane);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        uint64_t v = 0;
        if (r < nrows && lane < chunk_blocks && t0 < width) {
          const uint8_t* m = p.candidates + (row0 + r) * p.candidates_stride + t0;
          if (mask_vec && t0 + 8 <= width) {
            const uint2 x = __ldg(reinterpret_cast<const uint2*>(m));
            v = static_cast<uint64_t>(x.y) << 32 | x.x;
          } else {
            for (int e = 0; e < 8 && t0 + e < width; ++e) {
              v |= static_cast<uint64_t>(__ldg(m + e) != 0 ? 1 : 0) << (8 * e);
            }
          }
        }
        mask_words[r] = v;
      }
    };
    if constexpr (kMask) {
      if (mchunk < chunks) load_mask(mchunk);  // in flight during the q preparation
    } else if constexpr (kMode == kI8Patch) {
      // Only groups where this CTA has a marked tile (the loads independent, all in flight).
      bool any = false;
#pragma unroll 4
      for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t base[4];
        dense_base(tile, base);
        any = DeferredI8Tile(p, row0, width, base[0]) || any;
      }
      if (__syncthreads_or(any) == 0) continue;
    } else {
      int64_t base[4];
      dense_base(blockIdx.x, base);
      load_tile(base, base[0] + lane);  // in flight during the q preparation
    }
    __syncthreads();  // the previous group's readers are done
    if (tid < nrows) row_s[tid].reach = reach_of(row0 + tid);  // once per group, not per tile
    // A lane quad per (row, head), a lane per 32-block of d: nrows · 128 = a multiple of the
    // block, so every warp runs the quad shuffles whole.
    for (int i = tid; i < nrows * kMmaHeads * kI8Blocks; i += kMmaThreads) {
      const int rh = i / kI8Blocks, r = rh / kMmaHeads, h = rh % kMmaHeads;
      const QHeadOut out{dq_s + rh,  minq_s + rh, budget_s + rh,
                         w_s + rh,   qtot_s + rh, klo_s + rh,
                         khi_s + rh, wp_s + rh,   qc_s + r * kI8Blocks * kMmaHeads + h};
      PrepareQHeadQuad(p.q + (row0 + r) * p.q_stride + h * kMmaDim,
                       p.w[(row0 + r) * p.w_stride + h], q_frag + r * kI8QFragBytes, h,
                       i % kI8Blocks, out);
    }
    __syncthreads();
    // Each row's bounds on a key's min_k for the scaled epilogue (the tightest over its heads),
    // its smallest budget and its C operands.
    for (int r = warp; r < nrows; r += kMmaWarps) {
      const int klo = __reduce_max_sync(0xFFFFFFFFu, klo_s[r * kMmaHeads + lane]);
      const int khi = __reduce_min_sync(0xFFFFFFFFu, khi_s[r * kMmaHeads + lane]);
      const int min_budget = __reduce_min_sync(0xFFFFFFFFu, budget_s[r * kMmaHeads + lane]);
      if (lane == 0) {
        row_s[r].klo = klo;
        row_s[r].khi = khi;
        row_s[r].min_budget = min_budget;
      }
      if (lane < 16) {  // lane = 4t + j
        const int h = 8 * (lane / 4) + 2 * (lane % 4);
        const uint32_t q0 = static_cast<uint32_t>(qtot_s[r * kMmaHeads + h]);
        const uint32_t q1 = static_cast<uint32_t>(qtot_s[r * kMmaHeads + h + 1]);
        qt4_s[r * 16 + lane] = make_uint4(q0, q1, q0, q1);
      }
    }
    __syncthreads();
    scorer.keys = keys;
    scorer.width = width;
    scorer.row0 = row0;
    scorer.nrows = nrows;
    if constexpr (kLean) {
      // The lean path's conditions for all rows of the group at once.
      int budget = row_s[0].min_budget, klo = row_s[0].klo, khi = row_s[0].khi;
      for (int r = 1; r < nrows; ++r) {
        budget = min(budget, row_s[r].min_budget);
        klo = max(klo, row_s[r].klo);
        khi = min(khi, row_s[r].khi);
      }
      bool folded = true;
      for (int i = lane; i < nrows * kMmaHeads; i += 32) folded = folded && dq_s[i] == 0u;
      scorer.heads_folded = __all_sync(0xFFFFFFFFu, folded);
      scorer.lean_budget = budget;
      scorer.lean_klo = klo;
      scorer.lean_khi = khi;
    }

    uint32_t words[4][kI8Blocks], scales;
    auto score_tile = [&](const auto& base, auto own, bool whole) {
      if constexpr (kLean) {
        if (!scorer.template Score<true>(p, base, own, whole, words, scales) && lane == 0 &&
            base[0] < width) {
          p.scores[row0 * p.scores_stride + base[0]] = kI8Deferred;  // for the patch kernel
          if (p.cuda_i8_deferred != nullptr) atomicAdd(p.cuda_i8_deferred, 1ull);
        }
      } else {
        scorer.template Score<false>(p, base, own, whole, words, scales);
      }
    };
    // Takes the next tile's words from the registers they were loaded into.
    auto take_words = [&] {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int c = 0; c < kI8Blocks; ++c) words[kk][c] = next_words[kk][c];
      }
      scales = next_scales;
    };

    if constexpr (kMask) {
      // The chunk scan: block b = mchunk·chunk_blocks + lane is kept when a row of the group sees
      // one of its positions (its mask bytes below the row's reach); `bits` the chunk's kept
      // blocks not yet in a tile (of the chunk starting at block cbase). Blocks no row keeps get
      // −inf here, as 16-byte rows where the scores rows allow it.
      const bool scores_vec =
          reinterpret_cast<uintptr_t>(p.scores) % 16 == 0 && p.scores_stride % 8 == 0;
      uint32_t cbase = 0;  // the first block of the chunk `bits` belongs to
      uint32_t bits = 0;
      uint32_t wbits = 0;  // the chunk's blocks every row of the group sees whole
      auto scan = [&] {
        const uint32_t t0 = 8 * (mchunk * chunk_blocks + lane);
        uint64_t seen = 0;
        bool whole = lane < chunk_blocks && t0 + 8 <= width;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r < nrows) {
            const int64_t vis = row_s[r].reach - t0;  // positions of the block below the reach
            const uint64_t below = vis >= 8 ? ~0ull : vis <= 0 ? 0ull : (1ull << (8 * vis)) - 1;
            seen |= mask_words[r] & below;
            whole = whole && vis >= 8 && AllBytesNonzero(mask_words[r]);
          }
        }
        bits = __ballot_sync(0xFFFFFFFFu, seen != 0);
        wbits = __ballot_sync(0xFFFFFFFFu, whole);
        if (seen == 0 && lane < chunk_blocks && t0 < width) {
          for (int r = 0; r < nrows; ++r) {
            uint16_t* out = p.scores + (row0 + r) * p.scores_stride + t0;
            if (scores_vec && t0 + 8 <= width) {
              *reinterpret_cast<uint4*>(out) =
                  make_uint4(0xFF80FF80u, 0xFF80FF80u, 0xFF80FF80u, 0xFF80FF80u);
            } else {
              for (int e = 0; e < 8 && t0 + e < width; ++e) out[e] = kBf16NegInf;
            }
          }
        }
        cbase = mchunk * chunk_blocks;
        mchunk += warp_step;
        if (mchunk < chunks) load_mask(mchunk);
      };
      // The next 4 kept blocks' first keys, in order (kNone where the warp's chunks run out).
      // Where the chunk at hand holds 4 more, straight from its bits; else shifted in from the top
      // through one copy of the scan's code (four unrolled copies ran 22 µs instead of 15.6 on a
      // 2^20-position row, where a tile takes several scans).
      // Returns whether every filled slot's block is seen whole by every row of the group.
      auto next_tile = [&](uint32_t(&nb)[4]) {
        bool whole = true;
        if (__popc(bits) >= 4) {  // warp-uniform
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const int at = __ffs(static_cast<int>(bits)) - 1;
            nb[kk] = 8 * (cbase + at);
            whole = whole && (wbits >> at & 1u) != 0;
            bits &= bits - 1;
          }
          return whole;
        }
#pragma unroll 1
        for (int kk = 0; kk < 4; ++kk) {
          while (bits == 0 && mchunk < chunks) scan();  // warp-uniform
          uint32_t key = kNone;
          if (bits != 0) {
            const int at = __ffs(static_cast<int>(bits)) - 1;
            key = 8 * (cbase + at);
            whole = whole && (wbits >> at & 1u) != 0;
            bits &= bits - 1;
          }
          nb[0] = nb[1];
          nb[1] = nb[2];
          nb[2] = nb[3];
          nb[3] = key;
        }
        return whole;
      };
      uint32_t nb[4];
      bool next_whole = next_tile(nb);
      if (nb[0] != kNone) load_tile(nb, SlotBase(nb, lane / 8) + lane % 8);
      while (nb[0] != kNone) {  // warp-uniform
        const uint32_t base[4] = {nb[0], nb[1], nb[2], nb[3]};
        const bool whole = next_whole;
        take_words();
        next_whole = next_tile(nb);
        if (nb[0] != kNone) load_tile(nb, SlotBase(nb, lane / 8) + lane % 8);
        score_tile(base, SlotBase(base, lane / 8) + lane % 8, whole);
      }
    } else if constexpr (kMode == kI8Patch) {
      for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t base[4];
        dense_base(tile, base);
        if (!DeferredI8Tile(p, row0, width, base[0])) continue;  // warp-uniform
        load_tile(base, base[0] + lane);
        take_words();
        score_tile(base, base[0] + lane, false);
      }
    } else {
      for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t base[4];
        dense_base(tile, base);
        take_words();
        if (tile + gridDim.x < tiles) {
          int64_t nb[4];
          dense_base(tile + gridDim.x, nb);
          load_tile(nb, nb[0] + lane);
        }
        if (base[0] >= row_s[nrows - 1].reach) {  // no row sees these keys (reaches ascend)
          for (int r = 0; r < nrows; ++r) {
            if (base[0] + lane < width) {
              p.scores[(row0 + r) * p.scores_stride + base[0] + lane] = kBf16NegInf;
            }
          }
          continue;
        }
        score_tile(base, base[0] + lane, false);
      }
    }
  }
  if (p.cuda_rechecks != nullptr && scorer.fallbacks != 0) {
    atomicAdd(p.cuda_rechecks, scorer.fallbacks);
  }
}

}  // namespace flashserve::kernels::indexer_device
