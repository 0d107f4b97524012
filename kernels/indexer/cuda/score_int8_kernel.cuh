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
// - mma.sync m16n8k32 (s8·s8 → s32) gives each block's exact integer partial P_b; the exact dot
//   product is S·2^Eref with S = Σ_b P_b·2^(sh_b) (sh_b = the block's exponent above
//   Eref = min_q + min_k over nonzero blocks), summed in int32.
// - The CPU's sequential fp32 sum equals S·2^Eref when every product and partial sum is an integer
//   multiple of 2^Eref below 2^(Eref + 24) in magnitude with −149 <= Eref <= 100: then each fp32
//   mul and add is exact. All of them are bounded by Σ_d |q_d·k_d| <= 4·32·Mq·12·2^(span_q +
//   span_k)·2^Eref (Mq = max |m| of the head's q, span = max − min exponent over nonzero blocks),
//   so the kernel checks 1536·Mq·2^(span_q + span_k) < 2^24 per (row, head, key) as one compare of
//   the key's span against the head's budget. Failing dot products ("fallbacks") are recomputed in
//   the CPU's order from the decoded key (counted in cuda_rechecks).
// - Then the CPU's bf16 rounding, ReLU, × w and head sum from +0 ascending.
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
// staged once per many tiles); each warp reads its 32 keys' codes straight into A fragments (M =
// keys, N = heads), once for all rows. Within a 32-block, lane quad t holds d = 8t .. 8t + 7 (one
// 4-byte load of codes); the same permutation of d is applied to q, which leaves each block's
// exact integer sum unchanged. Heads are permuted over the B columns so that lane t of a quad
// holds heads 8t .. 8t + 7 of its keys; the bf16 head terms go through shared memory (a key per
// lane) for the ascending head sum.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/cuda/score_tile_kernel.cuh"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels::indexer_device {

inline constexpr int kMmaHeads = 32;
inline constexpr int kMmaDim = 128;
inline constexpr int kMmaRows = 8;  // rows of the call per CTA (keys read once per 8 rows)
inline constexpr int kMmaWarps = 4;
// Batched decode rows: compiled for 2 CTAs per SM (<= 255 registers, ptxas takes 233), like the
// 8-row kernel (unbounded, 223). Until session 20 the bound was 3 CTAs (<= 168 registers): since
// the folded fast path it spilled 32 bytes there and ran 2–4 % slower (bench_indexer batch_score 8
// × 65,536: 57.2–57.7 µs at 3 against 55.0–55.1 at 2; 64 × 65,536: 347.6 against 341.2).
inline constexpr int kMmaMinCtasPerSm = 2;
inline constexpr int kMmaThreads = 32 * kMmaWarps;
inline constexpr int kMmaWarpKeys = 32;
inline constexpr int kMmaTileKeys = kMmaWarps * kMmaWarpKeys;
inline constexpr int kMmaVRowBytes = 80;  // 32 bf16 head terms + 16 bytes of padding (no conflicts)
inline constexpr int kMmaVBytes = kMmaWarpKeys * kMmaVRowBytes;  // per warp
inline constexpr int kMmaQueue = kMmaWarpKeys * kMmaHeads;       // fallbacks per warp and row

inline constexpr int kI8Blocks = kMmaDim / 32;               // 32-blocks of d per head
inline constexpr int kI8RowBytes = kMmaDim / 2 + kI8Blocks;  // one FP4 key row (68)
inline constexpr int kI8QFragBytes = kMmaHeads * kMmaDim;    // int8 q of one row
inline constexpr int kI8HeadInfoBytes = kMmaHeads * 16;      // dq, min_q, budget, w
inline constexpr int kI8RowInfoBytes = 16;                   // the row's reach (int64) + padding
inline constexpr int kI8SpanBad = 255;                       // a key that always falls back
inline constexpr int kI8FoldSpanK = 3;  // key scale spans folded into the int8 codes (12·2^3 < 128)
// Exponent ranges that keep Eref = min_q + min_k in [−149, 100].
inline constexpr int kI8MinQLo = -49, kI8MinQHi = 40;
inline constexpr int kI8MinKLo = -100, kI8MinKHi = 60;  // UE8M0 bytes 28 .. 188

inline size_t ScoreInt8SmemBytes(int rows) {
  return static_cast<size_t>(rows) * (kI8QFragBytes + kI8HeadInfoBytes + kI8RowInfoBytes) +
         static_cast<size_t>(kMmaWarps) * (kMmaVBytes + kMmaQueue * 2);
}

// d += A·B (s8·s8 → s32).
__device__ __forceinline__ void MmaS8Acc(uint32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d = A·B (s8·s8 → s32).
__device__ __forceinline__ void MmaS8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                      uint32_t a3, uint32_t b0, uint32_t b1) {
  uint32_t c[4] = {0u, 0u, 0u, 0u};
  MmaS8Acc(c, a0, a1, a2, a3, b0, b1);
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = static_cast<int>(c[i]);
}

// Four E2M1 codes (16 bits, element 0 in the low nibble) as four int8 m = 2·value.
__device__ __forceinline__ uint32_t E2m1x4ToS8(uint32_t h) {
  const uint32_t sel = h & 0x7777u;
  const uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, sel);
  const uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, sel);
  return __byte_perm(pos, neg, 0x3210u | ((h >> 1) & 0x4444u));
}

// Four int8 lanes each shifted left by f (0 .. 3; no lane overflows: |m| <= 12): the bits a
// lane pushes into its upper neighbour are cleared by the mask.
__device__ __forceinline__ uint32_t ShiftS8x4(uint32_t x, uint32_t f) {
  return (x << f) & (0x01010101u * ((0xFFu << f) & 0xFFu));
}

// {hi: bf16(hi), lo: bf16(lo)}, each rounded to nearest even — FloatToBf16 for every non-NaN
// value, subnormals and overflow to inf included (cvt.rn.bf16x2.f32 has no .ftz: subnormal inputs
// and results are kept; the GPU tests' tiny-scale cases produce them). One instruction for two
// values; the integer form (bits + 0x7FFF + lsb) took three per value.
__device__ __forceinline__ uint32_t CvtBf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ float LowBf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float HighBf16(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

__device__ __forceinline__ bool Visible(const IndexerScoreParams& p, int64_t row, int64_t reach,
                                        int64_t t) {
  return t < reach && (p.candidates == nullptr || p.candidates[row * p.candidates_stride + t] != 0);
}

// 2^n as fp32 for n in [−126, 127].
__device__ __forceinline__ float Pow2(int n) {
  return __uint_as_float(static_cast<uint32_t>(n + 127) << 23);
}

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

// Splits one (row, head) of q into int8 fragments (q_frag: [block c][n-tile j][lane] uint2) and
// its per-head info: dq (byte b: block b's exponent above min_q), min_q, budget (largest key span
// the exactness bound allows; −1: every key falls back), w. A lane quad per (row, head): lane
// c = 0..3 of the quad scans 32-block c of d and writes its fragment bytes; the head's exponent
// range, validity, dq and max |m| are combined over the quad with shuffles (every lane of the warp
// must call this), and lane 0 of the quad stores the head's info.
__device__ __forceinline__ void PrepareQHeadQuad(const uint16_t* qh, float wv,
                                                 unsigned char* q_frag, int head, int c,
                                                 uint32_t* dq_out, int* min_out, int* budget_out,
                                                 float* w_out) {
  constexpr int kNone = 1 << 20;
  bool ok = fabsf(wv) <= 3.4028234663852886e38f;
  int lo = kNone, hi = -kNone;
#pragma unroll 4
  for (int d = 0; d < 32; ++d) {
    const uint32_t mag = __ldg(qh + 32 * c + d) & 0x7FFFu;
    if (mag == 0) continue;
    const uint32_t ef = mag >> 7;
    if (ef == 0xFFu) {
      ok = false;
      continue;
    }
    const uint32_t sig = ef != 0 ? (0x80u | (mag & 0x7Fu)) : (mag & 0x7Fu);
    const int x = ef != 0 ? static_cast<int>(ef) - 134 : -133;  // value = sig · 2^x
    lo = min(lo, x + __ffs(static_cast<int>(sig)) - 1);
    hi = max(hi, x + 31 - __clz(static_cast<int>(sig)));
  }
  const bool nz = lo <= hi;           // a nonzero block; lo = its exponent
  if (nz && hi - lo > 6) ok = false;  // |m| would exceed 127
  int min_q = nz ? lo : kNone, max_q = nz ? lo : -kNone, top_q = nz ? hi : -kNone;
  int ok_all = ok ? 1 : 0;
#pragma unroll
  for (int o = 1; o < kI8Blocks; o *= 2) {
    ok_all &= __shfl_xor_sync(0xFFFFFFFFu, ok_all, o);
    min_q = min(min_q, __shfl_xor_sync(0xFFFFFFFFu, min_q, o));
    max_q = max(max_q, __shfl_xor_sync(0xFFFFFFFFu, max_q, o));
    top_q = max(top_q, __shfl_xor_sync(0xFFFFFFFFu, top_q, o));
  }
  ok = ok_all != 0;
  if (min_q > max_q) min_q = max_q = top_q = 0;  // an all-zero head
  if (min_q < kI8MinQLo || min_q > kI8MinQHi || max_q - min_q > 24) ok = false;
  // Folded: every value of the head is an integer multiple of 2^min_q below 2^(top_q + 1), so
  // v / 2^min_q fits int8 when top_q − min_q <= 6; the bytes then carry the block shifts and dq is
  // 0 (the same value per d: the block's integer P_b comes out already shifted).
  const bool fold = ok && top_q - min_q <= 6;
  int mq = 0;
  uint32_t dq = nz && ok && !fold ? static_cast<uint32_t>(lo - min_q) << (8 * c) : 0u;
  const int j = (head % 8) / 2, gg = 2 * (head / 8) + head % 2;
#pragma unroll 4
  for (int d = 0; d < 32; ++d) {
    const uint16_t b = __ldg(qh + 32 * c + d);
    const uint32_t mag = b & 0x7FFFu;
    int m = 0;
    if (ok && mag != 0) {
      const uint32_t ef = mag >> 7;
      const uint32_t sig = ef != 0 ? (0x80u | (mag & 0x7Fu)) : (mag & 0x7Fu);
      const int x = ef != 0 ? static_cast<int>(ef) - 134 : -133;
      const int tz = __ffs(static_cast<int>(sig)) - 1;
      m = static_cast<int>(sig >> tz) << (x + tz - lo);
      mq = max(mq, m);  // the budget's Mq: per block, unfolded
      if (fold) m <<= lo - min_q;
      if ((b & 0x8000u) != 0) m = -m;
    }
    // d = 8t + i within the block: lane (gg, t), register i / 4, byte i % 4.
    const int t = d / 8, i = d % 8;
    q_frag[((c * 4 + j) * 32 + gg * 4 + t) * 8 + (i / 4) * 4 + i % 4] =
        static_cast<unsigned char>(static_cast<int8_t>(m));
  }
#pragma unroll
  for (int o = 1; o < kI8Blocks; o *= 2) {
    dq |= __shfl_xor_sync(0xFFFFFFFFu, dq, o);
    mq = max(mq, __shfl_xor_sync(0xFFFFFFFFu, mq, o));
  }
  if (c != 0) return;
  int budget = -1;
  if (ok) {
    if (mq == 0) {
      budget = 64;  // every product is ±0
    } else {
      for (int s = 24 - (max_q - min_q); s >= 0; --s) {
        if ((int64_t{1536} * mq << (s + max_q - min_q)) < (int64_t{1} << 24)) {
          budget = s;
          break;
        }
      }
    }
  }
  *dq_out = dq;
  *min_out = min_q;
  *budget_out = budget;
  *w_out = wv;
}

// grid.x walks key tiles (grid-stride), grid.y groups of kMmaRows rows (kBatch: single rows of
// a batched decode call, each with its own keys, width and reach from `rows`; p.tokens = batch,
// p.width = max_width, p.k_rows = the pool).
template <bool kBatch>
__global__ void __launch_bounds__(kMmaThreads, kBatch ? kMmaMinCtasPerSm : 1)
    IndexerScoreInt8Kernel(IndexerScoreParams p, BatchRows rows) {
  constexpr int kRows = kBatch ? 1 : kMmaRows;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int rows_cap = static_cast<int>(p.tokens < kRows ? p.tokens : kRows);
  unsigned char* q_frag = smem;  // [row][c][j][lane] uint2
  uint32_t* dq_s = reinterpret_cast<uint32_t*>(smem + rows_cap * kI8QFragBytes);  // [row][h]
  int* minq_s = reinterpret_cast<int*>(dq_s + rows_cap * kMmaHeads);
  int* budget_s = minq_s + rows_cap * kMmaHeads;
  float* w_s = reinterpret_cast<float*>(budget_s + rows_cap * kMmaHeads);
  int64_t* reach_s = reinterpret_cast<int64_t*>(w_s + rows_cap * kMmaHeads);  // [row], stride 2
  unsigned char* const warp_base =
      reinterpret_cast<unsigned char*>(reach_s) + rows_cap * kI8RowInfoBytes;
  unsigned char* v_s = warp_base + warp * kMmaVBytes;
  uint16_t* queue =
      reinterpret_cast<uint16_t*>(warp_base + kMmaWarps * kMmaVBytes) + warp * kMmaQueue;
  const int64_t groups = (p.tokens + kRows - 1) / kRows;
  unsigned long long fallbacks = 0;

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
    if (blockIdx.x >= tiles) continue;  // uniform: a short row leaves this CTA nothing to do
    __syncthreads();                    // the previous group's readers are done
    if (tid < nrows) reach_s[2 * tid] = reach_of(row0 + tid);  // once per group, not per tile
    // A lane quad per (row, head), a lane per 32-block of d: nrows · 128 = a multiple of the
    // block, so every warp runs the quad shuffles whole.
    for (int i = tid; i < nrows * kMmaHeads * kI8Blocks; i += kMmaThreads) {
      const int rh = i / kI8Blocks, r = rh / kMmaHeads, h = rh % kMmaHeads;
      PrepareQHeadQuad(p.q + (row0 + r) * p.q_stride + h * kMmaDim,
                       Bf16ToFloat(p.w[(row0 + r) * p.w_stride + h]), q_frag + r * kI8QFragBytes, h,
                       i % kI8Blocks, dq_s + rh, minq_s + rh, budget_s + rh, w_s + rh);
    }
    __syncthreads();

    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int64_t wk0 = tile * kMmaTileKeys + warp * kMmaWarpKeys;  // the warp's first key
      {
        // Warm L2 with this warp's keys of its next tile (a lane per key; a row spans at most two
        // 128-byte lines, so its first and last byte cover it): the loads below then wait on L2,
        // not HBM. No registers held across the tile; no effect on the results.
        const int64_t next = wk0 + static_cast<int64_t>(gridDim.x) * kMmaTileKeys + lane;
        if (next < width) {
          const uint8_t* row = keys + next * p.k_row_stride;
          asm volatile("prefetch.global.L2 [%0];" ::"l"(row));
          asm volatile("prefetch.global.L2 [%0];" ::"l"(row + kI8RowBytes - 1));
        }
      }
      if (wk0 >= reach_s[2 * (nrows - 1)]) {  // no row sees these keys (reaches ascend)
        for (int r = 0; r < nrows; ++r) {
          if (wk0 + lane < width) p.scores[(row0 + r) * p.scores_stride + wk0 + lane] = kBf16NegInf;
        }
        continue;
      }
      // Key slot kk = 2·mt + half is key wk0 + 16·mt + 8·half + g = wk0 + 8·kk + g. a[kk][c]: its
      // int8 codes of block c, d = 8t .. 8t + 3 (x) and 8t + 4 .. 8t + 7 (y).
      uint32_t words[4][kI8Blocks];
      uint32_t nzq = 0;  // bit 4·kk + c: block c of slot kk holds a nonzero code
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int64_t key = wk0 + 8 * kk + g;
        const uint32_t* row = reinterpret_cast<const uint32_t*>(keys + key * p.k_row_stride);
#pragma unroll
        for (int c = 0; c < kI8Blocks; ++c) {
          words[kk][c] = key < width ? __ldg(row + 4 * c + t) : 0u;
          nzq |= (words[kk][c] & 0x77777777u) != 0 ? 1u << (4 * kk + c) : 0u;
        }
      }
      nzq |= __shfl_xor_sync(0xFFFFFFFFu, nzq, 1);  // the quad holds all 32 codes of a block
      nzq |= __shfl_xor_sync(0xFFFFFFFFu, nzq, 2);
      // The scale analysis of key wk0 + lane (slot lane / 8 of quad lane % 8), once per key.
      uint32_t info_sh, info_lo;  // shifts (byte c) | 0x80: folded; min_k (byte 0) | span << 8
      int keys_span;
      {
        const int64_t key = wk0 + lane;
        const uint32_t nz =
            (__shfl_sync(0xFFFFFFFFu, nzq, 4 * (lane % 8)) >> (4 * (lane / 8))) & 0xFu;
        const uint32_t scales =
            key < width ? __ldg(reinterpret_cast<const uint32_t*>(keys + key * p.k_row_stride) +
                                kMmaDim / 8)
                        : 0u;
        int lo = 1 << 20, hi = -(1 << 20);
        bool ok = true;
#pragma unroll
        for (int c = 0; c < kI8Blocks; ++c) {
          const int s = static_cast<int>((scales >> (8 * c)) & 0xFFu);
          if (s == 0xFF) ok = false;  // decodes to NaN even where the codes are zero
          if ((nz >> c) & 1u) {
            lo = min(lo, s - 128);
            hi = max(hi, s - 128);
          }
        }
        if (lo > hi) lo = hi = 0;  // every code zero: the dot products are ±0
        if (lo < kI8MinKLo || hi > kI8MinKHi) ok = false;
        uint32_t sh = 0;  // byte c: block c's exponent above min_k (<= 24 on an ok key)
#pragma unroll
        for (int c = 0; c < kI8Blocks; ++c) {
          const int s = static_cast<int>((scales >> (8 * c)) & 0xFFu);
          if (ok && ((nz >> c) & 1u)) sh |= static_cast<uint32_t>(s - 128 - lo) << (8 * c);
        }
        // Folded (span <= 3): |m|·2^(s_b − 128 − min_k) <= 12·8 fits int8, so the block shifts go
        // into the codes and the key's dk is 0.
        const int span = ok ? hi - lo : kI8SpanBad;
        info_sh = sh | (ok && hi - lo <= kI8FoldSpanK ? 0x80u : 0u);
        info_lo = (static_cast<uint32_t>(ok ? lo : 0) & 0xFFu) | static_cast<uint32_t>(span) << 8;
        keys_span = __reduce_max_sync(0xFFFFFFFFu, span);
      }
      uint2 a[4][kI8Blocks];
      uint32_t dk[4];      // byte c: block c's exponent above min_k (0 where folded)
      uint32_t spans = 0;  // byte kk: the key's exponent span (kI8SpanBad: always falls back)
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
          a[kk][c] = make_uint2(ShiftS8x4(E2m1x4ToS8(words[kk][c] & 0xFFFFu), f),
                                ShiftS8x4(E2m1x4ToS8(words[kk][c] >> 16), f));
        }
        dk[kk] = fold ? 0u : sh;
        pk[kk] = Pow2(static_cast<int>(static_cast<int8_t>(ilo & 0xFFu)));
        spans |= ((ilo >> 8) & 0xFFu) << (8 * kk);
      }
      const uint32_t keys_shift = dk[0] | dk[1] | dk[2] | dk[3];  // 0: this lane's keys folded

      for (int r = 0; r < nrows; ++r) {
        const int64_t row = row0 + r;
        const int64_t reach = reach_s[2 * r];
        uint16_t* out = p.scores + row * p.scores_stride;
        if (wk0 >= reach) {  // warp-uniform
          if (wk0 + lane < width) out[wk0 + lane] = kBf16NegInf;
          continue;
        }
        // Heads 8t .. 8t + 7 of this lane: min_q, w (their shifts and budgets are read where
        // the rarer paths need them).
        const int hi0 = r * kMmaHeads + 8 * t;
        float pq[8];  // 2^min_q (garbage where the head always falls back: never used)
        float wv[8];
#pragma unroll
        for (int hh = 0; hh < 8; ++hh) {
          pq[hh] = Pow2(minq_s[hi0 + hh]);
          wv[hh] = w_s[hi0 + hh];
        }
        uint32_t acc[2][4][4];  // S per (mt, n-tile, element), int32 as wrapping uint32
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0u;
          }
        }
        const uint2* qf = reinterpret_cast<const uint2*>(q_frag + r * kI8QFragBytes);
        // Warp-uniform: with every head of the row and every key of the warp folded, all shifts
        // are 0 and each (key, head) sum S comes straight out of one mma chain over the blocks.
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
        if (__all_sync(0xFFFFFFFFu, (dq_s[r * kMmaHeads + lane] | keys_shift) == 0u)) {
          for_each_mma([&](int, int j, int mt, const uint2& k0, const uint2& k1, const uint2& b) {
            MmaS8Acc(acc[mt][j], k0.x, k1.x, k0.y, k1.y, b.x, b.y);
          });
        } else {
          uint32_t dq[8];
#pragma unroll
          for (int hh = 0; hh < 8; ++hh) dq[hh] = dq_s[hi0 + hh];
          for_each_mma([&](int c, int j, int mt, const uint2& k0, const uint2& k1, const uint2& b) {
            int part[4];
            MmaS8(part, k0.x, k1.x, k0.y, k1.y, b.x, b.y);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int kk = 2 * mt + e / 2, hh = 2 * j + e % 2;
              // dq, dk bytes are <= 24 each on the exact path (no carries between bytes); a
              // failing pair's garbage is never used.
              const uint32_t sh = ((dq[hh] + dk[kk]) >> (8 * c)) & 31u;
              acc[mt][j][e] += static_cast<uint32_t>(part[e]) << sh;
            }
          });
        }
        // Warp-uniform: every key's span within every head's budget (the usual case) leaves no
        // (key, head) pair to recompute.
        uint32_t fail = 0, visible = 0;
        if (keys_span > __reduce_min_sync(0xFFFFFFFFu, budget_s[r * kMmaHeads + lane])) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int hh = 0; hh < 8; ++hh) {
              const int span = static_cast<int>((spans >> (8 * kk)) & 0xFFu);
              fail |= (span <= budget_s[hi0 + hh] ? 0u : 1u) << (8 * kk + hh);
            }
          }
        }
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int mt = kk / 2, half = kk % 2;
          const int key_local = 16 * mt + 8 * half + g;
          if (Visible(p, row, reach, wk0 + key_local)) visible |= 0xFFu << (8 * kk);
          uint32_t packed[4];  // bf16 head terms 8t + 2i (low half) and 8t + 2i + 1 (high)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float dot[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int hh = 2 * i + e;
              const int s = static_cast<int>(acc[mt][hh / 2][2 * half + hh % 2]);
              // On the exact path |s| < 2^24, min_q in [−49, 40], min_k in [−100, 60]: s is an fp32
              // value, s·2^min_q lies in [2^-49, 2^64) (exact), and s·2^(min_q + min_k) = s·2^Eref
              // is an fp32 value (a multiple of 2^-149 below 2^(Eref + 24)), so both products are
              // exact and equal the previous one-scale form bit for bit (no FTZ). Failing pairs'
              // values (possibly inf / NaN) are overwritten by their recomputation (or never
              // shown).
              dot[e] = __fmul_rn(__fmul_rn(__int2float_rn(s), pq[hh]), pk[kk]);
            }
            // bf16(qk) (round to nearest even, subnormals kept: cvt.rn without .ftz), ReLU, × w
            // in fp32, bf16 again.
            const uint32_t qk = CvtBf16x2(dot[0], dot[1]);
            const float v0 = __fmul_rn(wv[2 * i], fmaxf(LowBf16(qk), 0.0f));
            const float v1 = __fmul_rn(wv[2 * i + 1], fmaxf(HighBf16(qk), 0.0f));
            packed[i] = CvtBf16x2(v0, v1);  // a ±0 term does not change the head sum
          }
          *reinterpret_cast<uint4*>(v_s + key_local * kMmaVRowBytes + 16 * t) =
              make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
        fail &= visible;
        if (__any_sync(0xFFFFFFFFu, fail != 0)) {
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
            const float dot = ExactDotRow(p.q + row * p.q_stride + head * kMmaDim,
                                          keys + (wk0 + key_local) * p.k_row_stride);
            const float qk = RoundToBf16(dot);
            const float relu = qk > 0.0f ? qk : 0.0f;
            const uint16_t term = FloatToBf16(__fmul_rn(w_s[r * kMmaHeads + head], relu));
            *reinterpret_cast<uint16_t*>(v_s + key_local * kMmaVRowBytes + 2 * head) = term;
          }
          fallbacks += lane == 0 ? static_cast<unsigned long long>(total) : 0ull;
        }
        __syncwarp();
        // Head sum of key wk0 + lane, heads ascending from +0.
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const uint4 x = *reinterpret_cast<const uint4*>(v_s + lane * kMmaVRowBytes + 16 * c);
          const uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            sum = __fadd_rn(sum, LowBf16(words[i]));
            sum = __fadd_rn(sum, HighBf16(words[i]));
          }
        }
        const int64_t key = wk0 + lane;
        if (key < width) out[key] = Visible(p, row, reach, key) ? FloatToBf16(sum) : kBf16NegInf;
        __syncwarp();  // the next row's terms overwrite v_s
      }
    }
  }
  if (p.cuda_rechecks != nullptr && fallbacks != 0) atomicAdd(p.cuda_rechecks, fallbacks);
}

}  // namespace flashserve::kernels::indexer_device
