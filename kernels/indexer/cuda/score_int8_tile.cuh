// The int8 scorer's scoring of one warp tile for every row of a row group (I8TileScorer), the
// tile's key loads and the exact recompute of a fallback (score_int8_kernel.cuh only; not a
// public header). README.md "CUDA" gives the proof of the bits; score_int8_kernel.cuh's comment
// the layout. Split from the kernel in session 61, when the tile scoring left the kernel's lambda
// for the lean kernel (Score<true>).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/cuda/score_int8_common.cuh"
#include "kernels/indexer/cuda/score_tile_kernel.cuh"  // DecodeIndexK8
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

}  // namespace flashserve::kernels::indexer_device
