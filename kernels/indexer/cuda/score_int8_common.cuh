// The int8 scorer's constants, shared-memory plan and small device helpers (score_int8_kernel.cuh,
// score_int8_tile.cuh and score_int8_q.cuh only; not a public header). README.md "CUDA" gives the
// scorer's proof.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/indexer/cuda/indexer_kernels.cuh"
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
// The row-group instantiations (prefill / single-row decode calls): 1 (default) = unbounded
// (241 / 235 registers, 2 CTAs per SM by the registers). Session 61 experiment, build-time only:
// -DFS_INDEXER_I8_MIN_CTAS=3 / 4 bounds them to 168 / 128 registers (ptxas: 176 / 324 bytes of
// spill stores in the unmasked kernel), since Nsight on the 1-row launch at 2^20 keys (H100)
// found 1.85 warps per scheduler, 0.64 eligible, and 38 % of the stall samples on fixed-latency
// dependencies ("wait"), 2 % on loads: stalls more warps would hide, if the spills stay off the
// fast path. Launches size their grids by the occupancy, so the bound is all that changes.
#ifndef FS_INDEXER_I8_MIN_CTAS
#define FS_INDEXER_I8_MIN_CTAS 1
#endif
inline constexpr int kMmaRowsMinCtasPerSm = FS_INDEXER_I8_MIN_CTAS;
static_assert(kMmaRowsMinCtasPerSm >= 1 && kMmaRowsMinCtasPerSm <= 4, "1 .. 4 CTAs per SM");
// The lean kernel (IndexerScoreParams::cuda_i8_lean): its registers hold only the lean path; the
// other tiles go to a second (patch) launch of the general kernel. 3: 168 registers, 20 bytes of
// spills (4: 128 registers, 196 bytes of spill stores).
#ifndef FS_INDEXER_I8_LEAN_MIN_CTAS
#define FS_INDEXER_I8_LEAN_MIN_CTAS 3
#endif
inline constexpr int kMmaLeanMinCtasPerSm = FS_INDEXER_I8_LEAN_MIN_CTAS;
static_assert(kMmaLeanMinCtasPerSm >= 1 && kMmaLeanMinCtasPerSm <= 4, "1 .. 4 CTAs per SM");
inline constexpr int kMmaThreads = 32 * kMmaWarps;
inline constexpr int kMmaWarpKeys = 32;
inline constexpr int kMmaTileKeys = kMmaWarps * kMmaWarpKeys;
inline constexpr int kMmaVRowBytes = 80;  // 32 bf16 head terms + 16 bytes of padding (no conflicts)
inline constexpr int kMmaVBytes = kMmaWarpKeys * kMmaVRowBytes;  // per warp
inline constexpr int kMmaQueue = kMmaWarpKeys * kMmaHeads;       // fallbacks per warp and row

inline constexpr int kI8Blocks = kMmaDim / 32;               // 32-blocks of d per head
inline constexpr int kI8RowBytes = kMmaDim / 2 + kI8Blocks;  // one FP4 key row (68)
inline constexpr int kI8QFragBytes = kMmaHeads * kMmaDim;    // int8 q of one row
// Per (row, head): dq, min_q, budget, w, qtot, klo, khi (4 bytes each), wp (2), qc (4 blocks × 4);
// per row 16 uint4 of qtot in mma C order (8 bytes per head).
inline constexpr int kI8HeadInfoBytes = kMmaHeads * (7 * 4 + 2 + kI8Blocks * 4 + 8);
// Per row of the CTA (I8RowInfo): its reach, the scaled epilogue's bounds on min_k and the
// smallest budget over its heads.
struct I8RowInfo {
  int64_t reach;
  int klo, khi, min_budget, pad[3];
};
inline constexpr int kI8RowInfoBytes = sizeof(I8RowInfo);
inline constexpr int kI8SpanBad = 255;  // a key that always falls back
inline constexpr int kI8FoldSpanK = 3;  // key scale spans folded into the int8 codes (12·2^3 < 128)
// Exponent ranges that keep Eref = min_q + min_k in [−149, 100].
inline constexpr int kI8MinQLo = -49, kI8MinQHi = 40;
inline constexpr int kI8MinKLo = -100, kI8MinKHi = 60;  // UE8M0 bytes 28 .. 188
// The scaled epilogue's exponent limits (README "The scaled epilogue"): every value it rounds is
// a multiple of 2^-133 (the bf16 subnormal step) and below 2^127 in both scalings.
inline constexpr int kI8GridExp = -133,
                     kI8TopExp = 97;      // 97 = 127 − 25 (|R| <= 2^24) − 5 (32 terms)
inline constexpr int kI8Never = 1 << 20;  // a kLo no key reaches
static_assert(kI8HeadInfoBytes % 16 == 0, "row blocks of head info stay 16-byte aligned");

inline size_t ScoreInt8SmemBytes(int rows) {
  return static_cast<size_t>(rows) * (kI8QFragBytes + kI8HeadInfoBytes + kI8RowInfoBytes) +
         static_cast<size_t>(kMmaWarps) * (kMmaVBytes + kMmaQueue * 2);
}

// d += A·B (A u8, B s8 → s32).
__device__ __forceinline__ void MmaU8S8Acc(uint32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                           uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d = A·B + C (A u8, B s8 → s32).
__device__ __forceinline__ void MmaU8S8(uint32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1, const uint4& c) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c.x), "r"(c.y), "r"(c.z),
        "r"(c.w));
}

// prmt.b32 in its default mode: byte n of the result is byte (sel >> 4n) & 7 of {b, a} (a the low
// word), or that byte's top bit replicated when bit 4n + 3 of sel is set; sel's bits 16 .. 31 are
// not read.
__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// The decode tables of |m| = 2·|E2M1| (codes 0 .. 7: 0, 1, 2, 3 | 4, 6, 8, 12) shifted left by f
// (0 .. 3): every byte stays below 0x80 (12·8 = 96), so the word shift moves no bit into the next
// byte and a replicated top bit is 0.
__device__ __forceinline__ uint32_t TableLo(uint32_t f) { return 0x03020100u << f; }
__device__ __forceinline__ uint32_t TableHi(uint32_t f) { return 0x0C080604u << f; }

// Four E2M1 codes (the low 16 bits of s, element 0 in the low nibble) as four biased bytes
// 128 + m·2^f, m = 2·value. Positive codes pick their magnitude from the table and read 0 through
// the flipped word (its sign bit then asks for the replicated top bit, 0); negative codes the other
// way round. 128 + pos − neg is in [32, 224] per byte, so the word add borrows nothing across
// bytes. The mma reads these bytes as u8; the accumulators start at −128·Σq (README "Biased
// codes").
__device__ __forceinline__ uint32_t E2m1x4ToBiasedU8(uint32_t tl, uint32_t th, uint32_t s) {
  return Prmt(tl, th, s) + 0x80808080u - Prmt(tl, th, s ^ 0x8888u);
}

// The smallest / largest of a word's 4 bytes (unsigned), by 16-bit lane pairs.
__device__ __forceinline__ int MinByte(uint32_t x) {
  uint32_t m;
  asm("min.u16x2 %0, %1, %2;" : "=r"(m) : "r"(x & 0x00FF00FFu), "r"((x >> 8) & 0x00FF00FFu));
  return static_cast<int>(min(m & 0xFFFFu, m >> 16));
}
__device__ __forceinline__ int MaxByte(uint32_t x) {
  uint32_t m;
  asm("max.u16x2 %0, %1, %2;" : "=r"(m) : "r"(x & 0x00FF00FFu), "r"((x >> 8) & 0x00FF00FFu));
  return static_cast<int>(max(m & 0xFFFFu, m >> 16));
}
// Whether any byte of x is 0xFF: its low 7 bits + 1 carry into the top bit, which must be set.
__device__ __forceinline__ bool HasByteFF(uint32_t x) {
  return (((x & 0x7F7F7F7Fu) + 0x01010101u) & x & 0x80808080u) != 0;
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

// The same with negative results (and −0) as +0: bf16 rounding is monotonic and maps 0 to 0, so
// this is relu(bf16(x)) = bf16(relu(x)) (x finite here).
__device__ __forceinline__ uint32_t CvtReluBf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// a·b + c per bf16 half, the exact product and sum rounded once to nearest even (subnormals kept).
__device__ __forceinline__ uint32_t FmaBf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
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

}  // namespace flashserve::kernels::indexer_device
