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
#include "kernels/indexer/cuda/score_tile_kernel.cuh"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels::indexer_device {

// The CPU's qk for q head qh (bf16) and k_rows row kr: fp32 mul then add, d ascending, from +0.
__device__ __forceinline__ float ExactDotRow(const uint16_t* qh, const uint8_t* kr) {
  float acc = 0.0f;
#pragma unroll 1
  for (int c = 0; c < kMmaDim / 8; ++c) {
    const uint4 kv = DecodeIndexK8(kr, kMmaDim, c);
    const uint32_t kw[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc = __fadd_rn(acc, __fmul_rn(Bf16ToFloat(__ldg(qh + 8 * c + 2 * i)), LowBf16(kw[i])));
      acc = __fadd_rn(acc, __fmul_rn(Bf16ToFloat(__ldg(qh + 8 * c + 2 * i + 1)), HighBf16(kw[i])));
    }
  }
  return acc;
}

// The first key of slot kk (0 .. 3) of a warp tile for lane-dependent kk (lane / 8 or a fallback
// entry's key / 8): a select chain, not a dynamically indexed (local-memory) array.
template <typename Key>
__device__ __forceinline__ Key SlotBase(const Key (&base)[4], int kk) {
  return kk == 0 ? base[0] : kk == 1 ? base[1] : kk == 2 ? base[2] : base[3];
}

// Whether all 8 bytes of x are nonzero (a byte's low 7 bits + 0x7F carry into its top bit, or
// the top bit is set).
__device__ __forceinline__ bool AllBytesNonzero(uint64_t x) {
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full, kTop = 0x8080808080808080ull;
  return ((((x & kLow7) + kLow7) | x) & kTop) == kTop;
}

// The scoring of one warp tile for every row of a row group: the kernel's state as members (named
// as the kernel's locals, set per group), the tile's key bytes as arguments.
template <bool kMask>
struct I8TileScorer {
  const uint8_t* keys;  // the group's key rows
  int64_t width, row0;
  int nrows, lane, g, t;
  const I8RowInfo* row_s;
  const unsigned char* q_frag;
  const uint32_t* dq_s;
  const int* minq_s;
  const int* budget_s;
  const float* w_s;
  const uint16_t* wp_s;
  const uint4* qt4_s;
  const int* qc_s;
  unsigned char* v_s;  // the warp's head terms
  uint16_t* queue;     // the warp's fallback queue
  // The lean kernel's facts of the group (set only there): every head of every row folded (dq 0),
  // the smallest budget over its rows and the tightest bounds on a key's min_k.
  bool heads_folded;
  int lean_budget, lean_klo, lean_khi;
  unsigned long long fallbacks;  // this thread's count of recomputed dot products

  // Scores the warp tile of slots base[0..3] (`words`, `scales`: its key bytes; own: the key of
  // this lane, base[lane / 8] + lane % 8) for every row of the group. whole (kMask,
  // warp-uniform): every row of the group sees every key of the tile's filled slots.
  // kLeanOnly (the lean kernel): only tiles whose every row takes the folded mma chain, no
  // fallback and the scaled epilogue; returns false, having written nothing, for any other tile.
  template <bool kLeanOnly, typename Base, typename Own>
  __device__ __forceinline__ bool Score(const IndexerScoreParams& p, const Base& base, Own own,
                                        bool whole, const uint32_t (&words)[4][kI8Blocks],
                                        uint32_t scales) {
    // With a candidate mask: lane_vis bit r = row r sees key `own` (its mask byte read once per
    // tile and row unless the tile is whole; the rows' loops take the other keys' bits by
    // shuffles), rows_seeing bit r = row r sees a key of this warp tile. A row that sees none
    // gets −inf for the tile without its mma and epilogue, a tile no row sees skips the decode
    // too (uniform; the same bits: every masked key is −inf whatever its score, and never falls
    // back).
    uint32_t rows_seeing = (1u << nrows) - 1u, lane_vis = 0xFFFFFFFFu;
    if (kMask && whole) {
      lane_vis = own < width ? rows_seeing : 0u;  // slot 0 is always filled
    } else if constexpr (kMask) {
      rows_seeing = 0;
      lane_vis = 0;
      for (int r = 0; r < nrows; ++r) {
        const bool sees = own < width && Visible(p, row0 + r, row_s[r].reach, own);
        lane_vis |= sees ? 1u << r : 0u;
        rows_seeing |= __any_sync(0xFFFFFFFFu, sees) ? 1u << r : 0u;
      }
      if (rows_seeing == 0) {
        for (int r = 0; r < nrows; ++r) {
          if (own < width) p.scores[(row0 + r) * p.scores_stride + own] = kBf16NegInf;
        }
        return true;
      }
    }
    uint32_t nzq = 0;  // bit 4·kk + c: block c of slot kk holds a nonzero code
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int c = 0; c < kI8Blocks; ++c) {
        nzq |= (words[kk][c] & 0x77777777u) != 0 ? 1u << (4 * kk + c) : 0u;
      }
    }
    nzq |= __shfl_xor_sync(0xFFFFFFFFu, nzq, 1);  // the quad holds all 32 codes of a block
    nzq |= __shfl_xor_sync(0xFFFFFFFFu, nzq, 2);
    // The scale analysis of key `own` (slot lane / 8 of quad lane % 8), once per key.
    uint32_t info_sh, info_lo;  // shifts (byte c) | 0x80: folded; min_k (byte 0) | span << 8
    int keys_span;
    {
      const uint32_t nz =
          (__shfl_sync(0xFFFFFFFFu, nzq, 4 * (lane % 8)) >> (4 * (lane / 8))) & 0xFu;
      // Byte-parallel over the 4 scale bytes: nzb marks the nonzero blocks, whose bytes give
      // the min and max (zero blocks read as 0xFF for the min and 0 for the max).
      const uint32_t nzb = ((nz * 0x00204081u) & 0x01010101u) * 0xFFu;
      int lo = MinByte(scales | ~nzb) - 128, hi = MaxByte(scales & nzb) - 128;
      if (nz == 0) lo = hi = 0;  // every code zero: the dot products are ±0
      // A 0xFF byte decodes to NaN even where the codes are zero.
      const bool ok = !HasByteFF(scales) && lo >= kI8MinKLo && hi <= kI8MinKHi;
      // Byte c: block c's exponent above min_k (<= 24 on an ok key; no borrows: a nonzero
      // block's byte is >= min_k + 128, a zero block's 0 − 0).
      const uint32_t sh =
          ok ? (scales & nzb) - ((static_cast<uint32_t>(lo + 128) * 0x01010101u) & nzb) : 0u;
      // Folded (span <= 3): |m|·2^(s_b − 128 − min_k) <= 12·8 fits int8, so the block shifts go
      // into the codes and the key's dk is 0.
      const int span = ok ? hi - lo : kI8SpanBad;
      info_sh = sh | (ok && hi - lo <= kI8FoldSpanK ? 0x80u : 0u);
      info_lo = (static_cast<uint32_t>(ok ? lo : 0) & 0xFFu) | static_cast<uint32_t>(span) << 8;
      keys_span = __reduce_max_sync(0xFFFFFFFFu, span);
    }
    if constexpr (kLeanOnly) {
      // The lean path takes the tile only where every row runs the folded mma chain, no pair can
      // fall back and every row's scaled epilogue applies (the general conditions below, for all
      // rows at once); otherwise the caller runs the general scorer on it.
      const int own_lo = static_cast<int>(static_cast<int8_t>(info_lo & 0xFFu));
      if (!__all_sync(0xFFFFFFFFu, heads_folded && (info_sh & 0x80u) != 0u &&
                                       keys_span <= lean_budget && own_lo >= lean_klo &&
                                       own_lo <= lean_khi)) {
        return false;
      }
    }
    // The key of the head sum (`own`): its min_k, and whether it always falls back.
    const int own_mk = static_cast<int>(static_cast<int8_t>(info_lo & 0xFFu));
    const bool own_bad = (info_lo >> 8) == kI8SpanBad;
    uint2 a[4][kI8Blocks];  // biased u8 codes 128 + m·2^f (E2m1x4ToBiasedU8)
    uint32_t dk[4];         // byte c: block c's exponent above min_k (0 where folded)
    uint32_t spans = 0;     // byte kk: the key's exponent span (kI8SpanBad: always falls back)
    float pk[4];  // 2^min_k (an ok key's min_k is in [−100, 60]: a normal fp32 power of two)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t ish = __shfl_sync(0xFFFFFFFFu, info_sh, 8 * kk + g);
      const uint32_t ilo = __shfl_sync(0xFFFFFFFFu, info_lo, 8 * kk + g);
      const bool fold = (ish & 0x80u) != 0;
      const uint32_t sh = ish & 0xFFFFFF7Fu;
#pragma unroll
      for (int c = 0; c < kI8Blocks; ++c) {
        const uint32_t f = fold ? (sh >> (8 * c)) & 0xFFu : 0u;
        const uint32_t tl = TableLo(f), th = TableHi(f), w = words[kk][c];
        a[kk][c] = make_uint2(E2m1x4ToBiasedU8(tl, th, w), E2m1x4ToBiasedU8(tl, th, w >> 16));
      }
      dk[kk] = fold ? 0u : sh;
      pk[kk] = Pow2(static_cast<int>(static_cast<int8_t>(ilo & 0xFFu)));
      spans |= ((ilo >> 8) & 0xFFu) << (8 * kk);
    }
    const uint32_t keys_shift = dk[0] | dk[1] | dk[2] | dk[3];  // 0: this lane's keys folded

    for (int r = 0; r < nrows; ++r) {
      const int64_t row = row0 + r;
      const int64_t reach = row_s[r].reach;
      uint16_t* out = p.scores + row * p.scores_stride;
      // Warp-uniform (with a mask, rows_seeing holds the reach).
      if ((!kMask && base[0] >= reach) || (rows_seeing >> r & 1u) == 0) {
        if (own < width) out[own] = kBf16NegInf;
        continue;
      }
      const int hi0 = r * kMmaHeads + 8 * t;  // heads 8t .. 8t + 7 of this lane
      uint32_t acc[2][4][4];  // S per (mt, n-tile, element), int32 as wrapping uint32
      const uint2* qf = reinterpret_cast<const uint2*>(q_frag + r * kI8QFragBytes);
      // The block-c products of n-tile j (heads) and key tile mt: k0 / k1 its two 8-key halves.
      auto for_each_mma = [&](auto&& mma) {
#pragma unroll
        for (int c = 0; c < kI8Blocks; ++c) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint2 b = qf[(c * 4 + j) * 32 + lane];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) mma(c, j, mt, a[2 * mt][c], a[2 * mt + 1][c], b);
          }
        }
      };
      // Warp-uniform: with every head of the row and every key of the warp folded, all shifts
      // are 0 and each (key, head) sum S comes straight out of one mma chain over the blocks,
      // started at −128·Σq (the codes' bias; C column 2t + e % 2 of n-tile j is head
      // 8t + 2j + e % 2).
      if (kLeanOnly || __all_sync(0xFFFFFFFFu, (dq_s[r * kMmaHeads + lane] | keys_shift) == 0u)) {
        uint4 qt[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) qt[j] = qt4_s[r * 16 + 4 * t + j];
        for_each_mma([&](int c, int j, int mt, const uint2& k0, const uint2& k1, const uint2& b) {
          if (c == 0) {
            MmaU8S8(acc[mt][j], k0.x, k1.x, k0.y, k1.y, b.x, b.y, qt[j]);
          } else {
            MmaU8S8Acc(acc[mt][j], k0.x, k1.x, k0.y, k1.y, b.x, b.y);
          }
        });
      } else {
        uint32_t dq[8];
#pragma unroll
        for (int hh = 0; hh < 8; ++hh) dq[hh] = dq_s[hi0 + hh];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0u;
          }
        }
        const int* qc = qc_s + r * kI8Blocks * kMmaHeads + 8 * t;
        for_each_mma([&](int c, int j, int mt, const uint2& k0, const uint2& k1, const uint2& b) {
          // Block c's exact integer P_c: the biased sum started at −128·Σ_c q.
          const uint2 q2 = *reinterpret_cast<const uint2*>(qc + c * kMmaHeads + 2 * j);
          uint32_t part[4];
          MmaU8S8(part, k0.x, k1.x, k0.y, k1.y, b.x, b.y, make_uint4(q2.x, q2.y, q2.x, q2.y));
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int kk = 2 * mt + e / 2, hh = 2 * j + e % 2;
            // dq, dk bytes are <= 24 each on the exact path (no carries between bytes); a
            // failing pair's garbage is never used.
            const uint32_t sh = ((dq[hh] + dk[kk]) >> (8 * c)) & 31u;
            acc[mt][j][e] += part[e] << sh;
          }
        });
      }
      // Warp-uniform: every key's span within every head's budget (the usual case) leaves no
      // (key, head) pair to recompute.
      uint32_t fail = 0, visible = 0;
      if (!kLeanOnly && keys_span > row_s[r].min_budget) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
          for (int hh = 0; hh < 8; ++hh) {
            const int span = static_cast<int>((spans >> (8 * kk)) & 0xFFu);
            fail |= (span <= budget_s[hi0 + hh] ? 0u : 1u) << (8 * kk + hh);
          }
        }
      }
      // Warp-uniform: no mask and the warp's keys below the reach (the usual case).
      const bool all_visible = !kMask && base[0] + kMmaWarpKeys <= reach;
      if (all_visible) {
        visible = 0xFFFFFFFFu;
      } else {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int key_local = 16 * (kk / 2) + 8 * (kk % 2) + g;
          const bool seen = kMask ? (__shfl_sync(0xFFFFFFFFu, lane_vis, key_local) >> r & 1u) != 0
                                  : base[kk] + g < reach;
          if (seen) visible |= 0xFFu << (8 * kk);
        }
      }
      fail &= visible;
      // Warp-uniform: the scaled epilogue (README "The scaled epilogue") where no visible pair
      // falls back and every key's min_k is within the row's bounds; its terms are the CPU's
      // divided by 2^min_k of their key, the head sum is multiplied back below.
      const bool scaled =
          kLeanOnly ||
          __all_sync(0xFFFFFFFFu,
                     fail == 0u && (own_bad || (own_mk >= row_s[r].klo && own_mk <= row_s[r].khi)));
      // The bf16 head terms of key slot kk into v_s: term(mt, half, i, kk) gives heads 8t + 2i
      // (low half) and 8t + 2i + 1 (high) of key 16·mt + 8·half + g.
      auto store_terms = [&](auto&& term) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int mt = kk / 2, half = kk % 2;
          uint32_t packed[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) packed[i] = term(mt, half, i, kk);
          *reinterpret_cast<uint4*>(v_s + (16 * mt + 8 * half + g) * kMmaVRowBytes + 16 * t) =
              make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
      };
      if (scaled) {
        const uint4 wq = *reinterpret_cast<const uint4*>(wp_s + hi0);
        const uint32_t wp[4] = {wq.x, wq.y, wq.z, wq.w};  // bf16(w·2^min_q), heads 8t + 2i, + 1
        store_terms([&](int mt, int half, int i, int) {
          // S is exact in fp32 (|S| < 2^24); relu(bf16(S)), then bf16(w·2^min_q·that) in one
          // rounding (c = −0 keeps a +0 product +0).
          const uint32_t r2 =
              CvtReluBf16x2(__int2float_rn(static_cast<int>(acc[mt][i][2 * half])),
                            __int2float_rn(static_cast<int>(acc[mt][i][2 * half + 1])));
          return FmaBf16x2(r2, wp[i], 0x80008000u);
        });
      } else {
        // Heads 8t .. 8t + 7 of this lane: 2^min_q, w.
        float pq[8];  // garbage where the head always falls back: never used
        float wv[8];
#pragma unroll
        for (int hh = 0; hh < 8; ++hh) {
          pq[hh] = Pow2(minq_s[hi0 + hh]);
          wv[hh] = w_s[hi0 + hh];
        }
        store_terms([&](int mt, int half, int i, int kk) {
          float dot[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int hh = 2 * i + e;
            const int s = static_cast<int>(acc[mt][hh / 2][2 * half + hh % 2]);
            // On the exact path |s| < 2^24, min_q in [−49, 40], min_k in [−100, 60]: s is an
            // fp32 value, s·2^min_q lies in [2^-49, 2^64) (exact), and s·2^(min_q + min_k) =
            // s·2^Eref is an fp32 value (a multiple of 2^-149 below 2^(Eref + 24)), so both
            // products are exact (no FTZ). Failing pairs' values (possibly inf / NaN) are
            // overwritten by their recomputation (or never shown).
            dot[e] = __fmul_rn(__fmul_rn(__int2float_rn(s), pq[hh]), pk[kk]);
          }
          // bf16(qk) (round to nearest even, subnormals kept: cvt.rn without .ftz), ReLU, × w
          // in fp32, bf16 again.
          const uint32_t qk = CvtBf16x2(dot[0], dot[1]);
          const float v0 = __fmul_rn(wv[2 * i], fmaxf(LowBf16(qk), 0.0f));
          const float v1 = __fmul_rn(wv[2 * i + 1], fmaxf(HighBf16(qk), 0.0f));
          return CvtBf16x2(v0, v1);  // a ±0 term does not change the head sum
        });
      }
      if (!kLeanOnly && __any_sync(0xFFFFFFFFu, fail != 0)) {
        // Compact the failing (lane, element) pairs into the warp's queue, then recompute them
        // 32 at a time, each in the CPU's exact order.
        const int cnt = __popc(fail);
        int incl = cnt;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
          const int y = __shfl_up_sync(0xFFFFFFFFu, incl, o);
          if (lane >= o) incl += y;
        }
        const int total = __shfl_sync(0xFFFFFFFFu, incl, 31);
        int at = incl - cnt;
        for (uint32_t f = fail; f != 0; f &= f - 1) {
          queue[at++] = static_cast<uint16_t>(lane * 32 + __ffs(static_cast<int>(f)) - 1);
        }
        __syncwarp();
        for (int e = lane; e < total; e += 32) {
          const int entry = queue[e];
          const int el = entry / 32, i = entry % 32;
          const int kk = i / 8, head = 8 * (el % 4) + i % 8;
          const int key_local = 16 * (kk / 2) + 8 * (kk % 2) + el / 4;
          const float dot =
              ExactDotRow(p.q + row * p.q_stride + head * kMmaDim,
                          keys + (SlotBase(base, key_local / 8) + key_local % 8) * p.k_row_stride);
          const float qk = RoundToBf16(dot);
          const float relu = qk > 0.0f ? qk : 0.0f;
          const uint16_t term = FloatToBf16(__fmul_rn(w_s[r * kMmaHeads + head], relu));
          *reinterpret_cast<uint16_t*>(v_s + key_local * kMmaVRowBytes + 2 * head) = term;
        }
        fallbacks += lane == 0 ? static_cast<unsigned long long>(total) : 0ull;
      }
      __syncwarp();
      // Head sum of key `own`, heads ascending from +0.
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const uint4 x = *reinterpret_cast<const uint4*>(v_s + lane * kMmaVRowBytes + 16 * c);
        const uint32_t hw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sum = __fadd_rn(sum, LowBf16(hw[i]));
          sum = __fadd_rn(sum, HighBf16(hw[i]));
        }
      }
      const int64_t key = own;
      // The scaled terms' sum times 2^min_k: exact (README "The scaled epilogue").
      if (scaled) sum = __fmul_rn(sum, Pow2(own_mk));
      if (key < width) {
        const bool seen = kMask ? (lane_vis >> r & 1u) != 0 : key < reach;
        out[key] = all_visible || seen ? FloatToBf16(sum) : kBf16NegInf;
      }
      __syncwarp();  // the next row's terms overwrite v_s
    }
    return true;
  }
};

// A warp tile's key bytes: slot kk holds keys base[kk] + g (the first key of an 8-key block),
// words[kk][c] their codes of block c, d = 8t .. 8t + 7; scales: the UE8M0 bytes of key `own`.
// Keys >= width (past the row, or an unfilled slot) read as zeros.
template <typename Base, typename Own>
__device__ __forceinline__ void LoadI8Tile(const uint8_t* keys, int64_t k_row_stride, int64_t width,
                                           int g, int t, const Base& base, Own own,
                                           uint32_t (&words)[4][kI8Blocks], uint32_t& scales) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int64_t key = base[kk] + g;
    const uint32_t* row = reinterpret_cast<const uint32_t*>(keys + key * k_row_stride);
#pragma unroll
    for (int c = 0; c < kI8Blocks; ++c) words[kk][c] = key < width ? __ldg(row + 4 * c + t) : 0u;
  }
  scales = own < width
               ? __ldg(reinterpret_cast<const uint32_t*>(keys + own * k_row_stride) + kMmaDim / 8)
               : 0u;
}

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
