// The Hopper (sm_90a) wgmma path of LaunchSparseAttn for head_dim 512 (README.md "CUDA", "wgmma
// path"): the tile layout, S, the softmax and P·V, shared by the wgmma family's kernels and the
// primitive check kernel (wgmma_check.cu). The unit's tail (split states, the output stage, the
// RoPE) is in sparse_attn_wgmma_epilogue.cuh, WgmmaKernel in sparse_attn_wgmma_kernel.cuh.
// Only .cu files of this target include it (sm_90a: wgmma needs the 'a' target).
//
// WgmmaKernel: a CTA of two warpgroups (256 threads) takes one unit = (token, group of 64 heads,
// split of the list), like TensorKernel<512, 4>. Shared memory (1024-byte aligned base):
//   Q    [64 heads][512]   bf16, 8 column blocks of 64 dims × 64 rows × 128 B, 128-byte swizzle
//   KV   2 × [64 rows][512] the gathered list block, same layout, double-buffered (cp.async,
//        invalid entries zero-filled)
//   idx  int32 [2][64]; row max and row sum exchange fp32 [2][64] each; P exchange [2][8][128] u32
// Per 64-entry block:
//   S = Q·K^T   warpgroup g: wgmma m64n32k16 (A = Q, B = K rows 32g..32g+31, both K-major from
//               shared memory), 32 k-steps over the 512 dims, S in registers (16 per thread);
//   softmax     × scale, -inf at invalid entries; row max of the half block → shared memory →
//               m' = max(m, both halves); α = exp(m − m'); p = exp(l − m') (fp32); the half-block
//               row sums → shared memory, denom = denom·α + (sum_0 + sum_1); bf16(p) packed into
//               the wgmma register-A layout; the two halves swap through shared memory;
//   P·V         acc = acc·α (fp32, in registers), then acc += P·V with wgmma m64n256k16 (A =
//               bf16 P from registers, B = the same KV rows read MN-major, dims 256g..256g+255),
//               4 k-steps of 16 entries. The tensor core adds the block's products into the
//               rescaled accumulator (tolerance: README.md).
// Every thread owns rows r0 = 16·(warp % 4) + lane / 4 and r0 + 8 of both the S and the P·V
// accumulators (wgmma.cuh gives the fragment layout), so the softmax state (m, denom of those two
// rows) lives in registers, duplicated over the 4 lanes of a quad and over the two warpgroups.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/row_decode.cuh"
#include "kernels/attention/cuda/sparse_attn_device.cuh"
#include "kernels/attention/cuda/sparse_attn_pipeline.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/quant/cuda/quant_kernels.cuh"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::attn_device {

struct WgmmaShape {
  static constexpr int kD = 512;
  static constexpr int kHeads = 64;     // one wgmma M
  static constexpr int kThreads = 256;  // two warpgroups
  // Named barrier of the two math warpgroups (WgmmaSoftmax; 0 is __syncthreads). In WgmmaKernel
  // and WgmmaRowsKernel they are the whole CTA; wgmma-ws's producer warpgroup is not in it.
  static constexpr uint32_t kMathBarrier = 1;
  static constexpr int kChunks = kD / 8;                              // 16-byte chunks per row
  static constexpr uint32_t kColBlockBytes = 64 * 128;                // 64 rows × 128 B (64 dims)
  static constexpr uint32_t kTileBytes = kColBlockBytes * (kD / 64);  // 64 KB
  static constexpr uint32_t kQOff = 0;
  static constexpr uint32_t kKvOff = kQOff + kTileBytes;  // two buffers
  static constexpr uint32_t kIdxOff = kKvOff + 2 * kTileBytes;
  static constexpr uint32_t kMaxOff = kIdxOff + 2 * kBlock * 4;
  static constexpr uint32_t kSumOff = kMaxOff + 2 * kBlock * 4;
  static constexpr uint32_t kPOff = kSumOff + 2 * kBlock * 4;
  static constexpr uint32_t kEnd = kPOff + 2 * 8 * 128 * 4;
  // Every layout ends with the unit's cos/sin of the fused output RoPE (float2 per pair), at its
  // end offset (kEnd, kSplitKEnd, WgmmaWsShape::kEnd; WgmmaRowsShape puts it at kEnd).
  static constexpr uint32_t kRopeBytes = 8 * kRopeMaxPairs;
  static constexpr size_t kSmemBytes = kEnd + kRopeBytes + 1024;  // + slack to align to 1024
  // The split-K variant (WgmmaKernel<kD, true>) swaps partial S instead of row max / sums / P:
  // fp32 [2 warpgroups][32][128 threads] after the index arrays; 225.5 KB in all.
  static constexpr uint32_t kXOff = kIdxOff + 2 * kBlock * 4;
  static constexpr uint32_t kSplitKEnd = kXOff + 2 * 32 * 128 * 4;
  static constexpr size_t kSplitKSmemBytes = kSplitKEnd + kRopeBytes + 1024;
  // The serving rows (attention.h SparseAttnKvRows): a window row's bytes (the larger row) and
  // both rows in 16-byte chunks (the ws row kernel's raw copies).
  static constexpr uint32_t kRawSlotBytes = kD + kD / 32;                     // 528: window row
  static constexpr int kWindowChunks = static_cast<int>(kRawSlotBytes / 16);  // 33
  static constexpr int kCompressedChunks = static_cast<int>((kD / 2 + kD / 16) / 16);  // 18
  // Descriptor byte offsets. K-major (S step): rows of 128 B, 8-row groups 1024 B apart; the
  // leading offset is unused (K per instruction = 32 B inside the atom), 16 encodes as 1.
  static constexpr uint32_t kKMajorLbo = 16;
  static constexpr uint32_t kKMajorSbo = 1024;
  // MN-major (P·V's B): 64-dim column blocks kColBlockBytes apart (leading), 8-entry K groups
  // 1024 B apart (stride).
  static constexpr uint32_t kMnMajorLbo = kColBlockBytes;
  static constexpr uint32_t kMnMajorSbo = 1024;
};

// Byte offset of 16-byte chunk `chunk` (0..63) of row `row` in a [64][512] bf16 tile.
__device__ __forceinline__ uint32_t TileOffset(int row, int chunk) {
  return static_cast<uint32_t>(chunk / 8) * WgmmaShape::kColBlockBytes +
         wgmma::Sw128Offset(static_cast<uint32_t>(row), static_cast<uint32_t>(chunk % 8));
}

// Shared base of the dynamic shared memory rounded up to 1024 bytes (the swizzle atom).
__device__ __forceinline__ uint8_t* AlignedSmem(uint8_t* raw) {
  const uint32_t addr = SmemAddr(raw);
  return raw + (((addr + 1023u) & ~1023u) - addr);
}

// S[64 x kN] = Q · K[rows kRow0 .. kRow0 + kN)^T over 512 dims: 32 wgmma m64nNk16 k-steps (A = Q,
// B = the block's K rows, both K-major from shared memory), issued and committed as one group,
// not waited for (WgmmaWait does that), so that the caller can issue the next block's gather
// while the tensor cores run. The descriptors' start addresses advance in their low words only
// (the 14-bit address field never carries: shared memory < 256 KB). n8 tile j holds entries
// kRow0 + 8j ..; every element is summed over the same k-steps in the same order whatever kN, so
// the whole block's S (kN = 64) equals its two halves' (kN = 32) element for element.
template <int kN, int kRow0>
__device__ __forceinline__ void WgmmaQkIssueRows(float (&s)[kN / 2], uint32_t q_base,
                                                 uint32_t kv_base) {
  static_assert(kN == 32 || kN == 64, "m64n32 or m64n64");
  using W = WgmmaShape;
  const uint64_t desc_q = wgmma::MakeSw128Desc(q_base, W::kKMajorLbo, W::kKMajorSbo);
  const uint64_t desc_k = wgmma::MakeSw128Desc(kv_base + kRow0 * 128, W::kKMajorLbo, W::kKMajorSbo);
  const auto q_lo = static_cast<uint32_t>(desc_q), k_lo = static_cast<uint32_t>(desc_k);
  const uint64_t hi = desc_q & 0xFFFFFFFF00000000ull;  // the same for both (same lbo / sbo)
  wgmma::FenceOperands(s);
  wgmma::Fence();
#pragma unroll
  for (int ks = 0; ks < W::kD / 16; ++ks) {
    // k-step ks: column block ks / 4, bytes 32·(ks % 4) into each 128-byte row; the start
    // address field counts 16-byte units.
    const uint32_t step = ((ks / 4) * W::kColBlockBytes + (ks % 4) * 32) >> 4;
    if constexpr (kN == 32) {
      wgmma::WgmmaM64N32K16SS(s, hi | (q_lo + step), hi | (k_lo + step), ks > 0);
    } else {
      wgmma::WgmmaM64N64K16SS(s, hi | (q_lo + step), hi | (k_lo + step), ks > 0);
    }
  }
  wgmma::CommitGroup();
}

// S[64 x 32] of entries 32·kHalf .. (WgmmaKernel and WgmmaRowsKernel split S by entries).
template <int kHalf>
__device__ __forceinline__ void WgmmaQkIssueHalf(float (&s)[16], uint32_t q_base,
                                                 uint32_t kv_base) {
  WgmmaQkIssueRows<32, 32 * kHalf>(s, q_base, kv_base);
}

// WgmmaQkIssueHalf for warpgroup `half` (entries 32·half ..). One instantiation per warpgroup, so
// that the descriptors derive from uniform values only (no per-k-step register-to-uniform moves);
// `half` must be known warp-uniform to ptxas (a __shfl_sync result), or the branch serialises
// the wgmma.
__device__ __forceinline__ void WgmmaQkIssue(float (&s)[16], uint32_t q_base, uint32_t kv_base,
                                             int half) {
  if (half == 0) {
    WgmmaQkIssueHalf<0>(s, q_base, kv_base);
  } else {
    WgmmaQkIssueHalf<1>(s, q_base, kv_base);
  }
}

// S[64 x 64] = Q · K^T of the whole block by one warpgroup (wgmma-ws: the warpgroups lead
// alternate blocks); tiles 0..3 are WgmmaQkIssueHalf<0>'s, 4..7 WgmmaQkIssueHalf<1>'s.
__device__ __forceinline__ void WgmmaQkIssueWhole(float (&s)[32], uint32_t q_base,
                                                  uint32_t kv_base) {
  WgmmaQkIssueRows<64, 0>(s, q_base, kv_base);
}

// Waits for every wgmma group this warpgroup committed; `r` are the registers they wrote.
template <int kN>
__device__ __forceinline__ void WgmmaWait(float (&r)[kN]) {
  wgmma::WaitGroup<0>();
  wgmma::FenceOperands(r);
}

// S[64 x 32] = Q · K[rows 32·half ..]^T over 512 dims, waited for (the primitive check's form).
__device__ __forceinline__ void WgmmaQk(float (&s)[16], uint32_t q_base, uint32_t kv_base,
                                        int half) {
  WgmmaQkIssue(s, q_base, kv_base, half);
  WgmmaWait(s);
}

// Split-K S: warpgroup `half` computes the partial S[64 x 64] = Q[:, dims 256·half ..] ·
// K[:, dims 256·half ..]^T over its 256 dims, 16 wgmma m64n64k16 k-steps (A = Q, B = the 64 K
// rows, both K-major from shared memory: column blocks 4·half .. 4·half + 3); issued and
// committed, not waited for. Fragment layout as WgmmaQk's with n8 tiles 0..7 (entries 8j ..).
__device__ __forceinline__ void WgmmaQkSplitKIssue(float (&s)[32], uint32_t q_base,
                                                   uint32_t kv_base, int half) {
  using W = WgmmaShape;
  const uint32_t cols = half * 4 * W::kColBlockBytes;
  const uint64_t desc_q = wgmma::MakeSw128Desc(q_base + cols, W::kKMajorLbo, W::kKMajorSbo);
  const uint64_t desc_k = wgmma::MakeSw128Desc(kv_base + cols, W::kKMajorLbo, W::kKMajorSbo);
  wgmma::FenceOperands(s);
  wgmma::Fence();
#pragma unroll
  for (int ks = 0; ks < W::kD / 32; ++ks) {
    const uint64_t step = ((ks / 4) * W::kColBlockBytes + (ks % 4) * 32) >> 4;
    wgmma::WgmmaM64N64K16SS(s, desc_q + step, desc_k + step, ks > 0);
  }
  wgmma::CommitGroup();
}

// Completes split-K S: thread i of either warpgroup holds the same (row, entry) positions, so
// it swaps its 32 partials with thread i of the other through `x` (fp32 [2][32][128], conflict-
// free) around one CTA barrier and adds. x + y = y + x in fp32: both warpgroups end with the same
// full S (dims 0..255 partial + dims 256..511 partial). Every thread of the CTA must call it.
__device__ __forceinline__ void WgmmaSplitKExchange(float (&s)[32], float* x, int half, int wtid) {
#pragma unroll
  for (int k = 0; k < 32; ++k) x[(half * 32 + k) * 128 + wtid] = s[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 32; ++k) s[k] = __fadd_rn(s[k], x[((half ^ 1) * 32 + k) * 128 + wtid]);
}

// acc[64 x 256] += P[64 x 64] · V[64 entries][dims 256·half ..]: 4 wgmma k-steps of 16 entries,
// P from registers (a[ks] = k-step ks in the register-A layout), committed as one group, not
// waited for (acc and a stay in use until the group completes). lbo / sbo: the MN-major
// descriptor offsets (WgmmaShape's; the check kernel also tries others).
// kParts 2: as two m64n128 products (acc, acc + 64: the same fragment layout; the second's B two
// column blocks on), for CTAs of 512 threads (FS_WS_ROWS_WIDE), where m64n256 does not compile.
template <int kParts = 1>
__device__ __forceinline__ void WgmmaPvIssue(float (&acc)[128], const uint32_t (&a)[4][4],
                                             uint32_t kv_base, int half,
                                             uint32_t lbo = WgmmaShape::kMnMajorLbo,
                                             uint32_t sbo = WgmmaShape::kMnMajorSbo) {
  static_assert(kParts == 1 || kParts == 2);
  const uint64_t desc_v =
      wgmma::MakeSw128Desc(kv_base + half * 4 * WgmmaShape::kColBlockBytes, lbo, sbo);
  wgmma::FenceOperands(acc);
  wgmma::Fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    // 16 entries = two 8-row groups of 1024 B.
    const uint64_t desc = desc_v + ((ks * 2048) >> 4);
    if constexpr (kParts == 1) {
      wgmma::WgmmaM64N256K16RSTransB(acc, a[ks], desc, true);
    } else {
      wgmma::WgmmaM64N128K16RSTransB(acc, a[ks], desc);
      wgmma::WgmmaM64N128K16RSTransB(acc + 64, a[ks],
                                     desc + ((2 * WgmmaShape::kColBlockBytes) >> 4));
    }
  }
  wgmma::CommitGroup();
}

// WgmmaPvIssue, waited for (with every earlier group of the warpgroup).
template <int kParts = 1>
__device__ __forceinline__ void WgmmaPv(float (&acc)[128], const uint32_t (&a)[4][4],
                                        uint32_t kv_base, int half,
                                        uint32_t lbo = WgmmaShape::kMnMajorLbo,
                                        uint32_t sbo = WgmmaShape::kMnMajorSbo) {
  WgmmaPvIssue<kParts>(acc, a, kv_base, half, lbo, sbo);
  wgmma::WaitGroup<0>();
  wgmma::FenceOperands(acc);
}

// bf16(lo) | bf16(hi) << 16, both rounded to nearest even (one cvt.rn.bf16x2.f32).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- the wgmma family's online softmax in base 2 (README.md "wgmma path", softmax) -------------
//
// Logits stay raw S in registers; a row's running max is kept scaled, m = max(S)·c with
// c = softmax_scale·log2(e) (> 0, so max(S)·c is exactly the max of the rounded S·c), and
// p = 2^(S·c − m) is one FFMA and one SFU ex2 (ex2.approx.ftz: relative error ~2^-22, far below
// the bf16(p) rounding the P·V step applies; 2^-inf = +0). Lazy rescaling: m moves only when a
// block's max exceeds it by more than kWgmmaRescaleSlack (log2 units), so p ≤ 2^8 and the
// accumulators are rescaled (128 multiplies per thread) about once per row instead of in ~93 % of
// blocks (session 24's count). The result is the same in exact arithmetic: acc and denom carry
// the same factor 2^-m, which the epilogue's division cancels; the split states carry m in these
// units (WgmmaCombineKernel). A row that saw no valid entry keeps kInitMax (then 2^(S·c − m) of
// a later block's valid entry is never taken: its block max exceeds kInitMax + slack).
inline constexpr float kLog2E = 1.44269504088896340736f;
inline constexpr float kWgmmaRescaleSlack = 8.0f;

__device__ __forceinline__ float Exp2Sfu(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The max / the sum of v over the 4 lanes of a quad (the lanes that share an accumulator row):
// lane ^ 1, then lane ^ 2.
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
  return __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
}

// The running max after a block whose scaled row max is m_blk (−inf: no valid entry).
__device__ __forceinline__ float WgmmaNextMax(float m_run, float m_blk) {
  return m_blk > __fadd_rn(m_run, kWgmmaRescaleSlack) ? m_blk : m_run;
}

// α = 2^(m − m′): exactly 1 when the max did not move (the 128 acc multiplies are skipped).
__device__ __forceinline__ float WgmmaAlpha(float m_run, float m_new) {
  return m_new == m_run ? 1.0f : Exp2Sfu(__fsub_rn(m_run, m_new));
}

// exp(sink − M) for the denominator, M a scaled running max: 2^(sink·log2(e) − M) (CUDA's exp2f,
// ≤ 2 ulp; once per row).
__device__ __forceinline__ float WgmmaSinkTerm(float sink, float m) {
  return exp2f(__fmaf_rn(sink, kLog2E, -m));
}

// The masking step of the wgmma softmaxes: S = −inf at the entries whose list index is −1 (n8
// tile j of `s` holds entries 8j + c2, + 1 of `idx`, c2 = 2·(lane % 4)), and the thread's row
// maxima over its fragment (bmax[0]: row r0, bmax[1]: r0 + 8).
template <int kN>
__device__ __forceinline__ void WgmmaMaskRowMax(float (&s)[kN], const int32_t* idx, int c2,
                                                float (&bmax)[2]) {
  bmax[0] = -INFINITY;
  bmax[1] = -INFINITY;
#pragma unroll
  for (int j = 0; j < kN / 4; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float& x = s[4 * j + i];
      x = idx[8 * j + c2 + (i & 1)] >= 0 ? x : -INFINITY;
      bmax[i >> 1] = fmaxf(bmax[i >> 1], x);
    }
  }
}

// One block's online softmax for the math thread's rows r0, r0 + 8 over its warpgroup's 32
// entries (S from WgmmaQkIssue), shared by WgmmaKernel, WgmmaWsKernel and WgmmaRowsKernel (so
// their outputs agree bit for bit): −inf at invalid entries, half-block row max → s_max →
// m′ = WgmmaNextMax(m, both halves · c), α, p = 2^(S·c − m′), half-block row sums → s_sum, bf16(p)
// → s_p, and back: a = the whole block's bf16 P in the register-A layout (S's n8 tiles 2k, 2k + 1
// = k-step k; thread i of either warpgroup holds the same fragment positions), den and m updated.
// Two named barriers over the 256 math threads. `c` = softmax_scale·log2(e).
__device__ __forceinline__ void WgmmaSoftmax(float (&s)[16], const int32_t* idx, float c, int half,
                                             int wtid, float* s_max, float* s_sum, uint32_t* s_p,
                                             float (&m_run)[2], float (&den_run)[2],
                                             float (&alpha)[2], uint32_t (&a)[4][4]) {
  constexpr uint32_t kBar = WgmmaShape::kMathBarrier, kN = WgmmaShape::kThreads;
  const int lane = wtid % 32;
  const int r0 = (wtid / 32) * 16 + lane / 4;
  const int c2 = 2 * (lane % 4);
  float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = half * 32 + j * 8 + c2 + (i & 1);  // WgmmaMaskRowMax over this half
      float& x = s[4 * j + i];
      x = idx[e] >= 0 ? x : -INFINITY;
      bmax[i >> 1] = fmaxf(bmax[i >> 1], x);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) bmax[r] = QuadMax(bmax[r]);
  if (lane % 4 == 0) {
    s_max[half * kBlock + r0] = bmax[0];
    s_max[half * kBlock + r0 + 8] = bmax[1];
  }
  NamedBarrier<kBar, kN>();

  float m_new[2], bsum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + 8 * r;
    const float m_blk = __fmul_rn(fmaxf(s_max[row], s_max[kBlock + row]), c);
    m_new[r] = WgmmaNextMax(m_run[r], m_blk);
    alpha[r] = WgmmaAlpha(m_run[r], m_new[r]);
    bsum[r] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    s[i] = Exp2Sfu(__fmaf_rn(s[i], c, -m_new[(i >> 1) & 1]));  // 2^-inf = +0
    bsum[(i >> 1) & 1] = __fadd_rn(bsum[(i >> 1) & 1], s[i]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) bsum[r] = QuadSum(bsum[r]);
  if (lane % 4 == 0) {
    s_sum[half * kBlock + r0] = bsum[0];
    s_sum[half * kBlock + r0 + 8] = bsum[1];
  }
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s_p[(half * 8 + kk * 4 + i) * 128 + wtid] =
          PackBf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
    }
  }
  NamedBarrier<kBar, kN>();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[2 * h + kk][i] = s_p[(h * 8 + kk * 4 + i) * 128 + wtid];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + 8 * r;
    den_run[r] =
        __fadd_rn(__fmul_rn(den_run[r], alpha[r]), __fadd_rn(s_sum[row], s_sum[kBlock + row]));
    m_run[r] = m_new[r];
  }
}

// The lead warpgroup's online-softmax step of a block whose S it computed whole
// (WgmmaQkIssueWhole; wgmma-ws): WgmmaSoftmax's operations in WgmmaSoftmax's order for rows r0,
// r0 + 8 — the block max, m′ = WgmmaNextMax, α, p = 2^(S·c − m′), the row sums formed as there
// (entries 0..31 and 32..63 each summed in tile order and over the quad, then added), denom, and
// bf16(p) in the register-A layout — so that the result is WgmmaKernel's bit for bit. No barrier:
// it publishes m′ (s_max) and the block's row sums (s_sum) by the quads' lane 0, and its P in the
// exchange layout (s_p, 16 words per thread), for the other warpgroup (WgmmaSoftmaxFollow) after
// the caller's barrier arrival. `c` = softmax_scale·log2(e).
__device__ __forceinline__ void WgmmaSoftmaxLead(float (&s)[32], const int32_t* idx, float c,
                                                 int wtid, float* s_max, float* s_sum,
                                                 uint32_t* s_p, float (&m_run)[2],
                                                 float (&den_run)[2], float (&alpha)[2],
                                                 uint32_t (&a)[4][4]) {
  const int lane = wtid % 32;
  const int r0 = (wtid / 32) * 16 + lane / 4;
  const int c2 = 2 * (lane % 4);
  float bmax[2];
  WgmmaMaskRowMax(s, idx, c2, bmax);
  float m_new[2], lo[2], hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_new[r] = WgmmaNextMax(m_run[r], __fmul_rn(QuadMax(bmax[r]), c));
    alpha[r] = WgmmaAlpha(m_run[r], m_new[r]);
    lo[r] = 0.0f;
    hi[r] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    s[i] = Exp2Sfu(__fmaf_rn(s[i], c, -m_new[(i >> 1) & 1]));  // 2^-inf = +0
    float& sum = i < 16 ? lo[(i >> 1) & 1] : hi[(i >> 1) & 1];
    sum = __fadd_rn(sum, s[i]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float bsum = __fadd_rn(QuadSum(lo[r]), QuadSum(hi[r]));
    den_run[r] = __fadd_rn(__fmul_rn(den_run[r], alpha[r]), bsum);
    m_run[r] = m_new[r];
    if (lane % 4 == 0) {
      s_max[r0 + 8 * r] = m_new[r];
      s_sum[r0 + 8 * r] = bsum;
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a[k][i] = PackBf16(s[8 * k + 2 * i], s[8 * k + 2 * i + 1]);
      s_p[(4 * k + i) * 128 + wtid] = a[k][i];
    }
  }
}

// The other warpgroup's step of the same block, after the lead's barrier arrival: m′ and the
// row sums from s_max / s_sum, α = WgmmaAlpha(m, m′) (the lead's operation on the same values),
// denom, and the lead's bf16 P from s_p (thread i of either warpgroup holds the same fragment
// positions).
__device__ __forceinline__ void WgmmaSoftmaxFollow(int wtid, const float* s_max, const float* s_sum,
                                                   const uint32_t* s_p, float (&m_run)[2],
                                                   float (&den_run)[2], float (&alpha)[2],
                                                   uint32_t (&a)[4][4]) {
  const int lane = wtid % 32;
  const int r0 = (wtid / 32) * 16 + lane / 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = s_max[r0 + 8 * r];
    alpha[r] = WgmmaAlpha(m_run[r], m_new);
    den_run[r] = __fadd_rn(__fmul_rn(den_run[r], alpha[r]), s_sum[r0 + 8 * r]);
    m_run[r] = m_new;
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[k][i] = s_p[(4 * k + i) * 128 + wtid];
  }
}

// Issues the cp.async copies of one list block into KV buffer `kv_base` and its rows (or -1)
// into s_idx (64 entries). Thread i copies chunks i % 4, i % 4 + 4, .. of entry i / 4, whose pool
// row `row` (-1: unused or out of range) it read beforehand (WgmmaRowOf, one block ahead, so that
// no global load sits between the barrier and the copies); a warp's request covers 8 rows × 64
// contiguous bytes. When i % 4 == 0 it writes s_idx[i / 4]. Invalid entries are zero-filled.
__device__ __forceinline__ void WgmmaLoadBlock(const SparseAttnParams& p, int32_t row,
                                               uint32_t kv_base, int32_t* s_idx) {
  static_assert(WgmmaShape::kThreads == 4 * kBlock, "four threads per list entry");
  const int e = threadIdx.x / 4;
  const uint16_t* src = row >= 0 ? p.kv + int64_t{row} * p.kv_stride : p.q;
#pragma unroll
  for (int k = 0; k < WgmmaShape::kChunks / 4; ++k) {
    const int chunk = static_cast<int>(threadIdx.x % 4) + 4 * k;
    CpAsync16(kv_base + TileOffset(e, chunk), row >= 0 ? src + chunk * 8 : src, row >= 0);
  }
  if (threadIdx.x % 4 == 0) s_idx[e] = row;
}

// Threads i of n issue the cp.async copies of token t's queries of heads h0 .. h0 + 63 into the
// Q tile at `q_base` (16-byte chunks i, i + n, ..; heads past p.heads zero-filled).
__device__ __forceinline__ void WgmmaLoadQ(const SparseAttnParams& p, int64_t t, int64_t h0,
                                           uint32_t q_base, int i, int n) {
  using W = WgmmaShape;
#pragma unroll 1
  for (int c = i; c < W::kHeads * W::kChunks; c += n) {
    const int r = c / W::kChunks;
    const int chunk = c % W::kChunks;
    const bool valid = h0 + r < p.heads;
    const uint16_t* src =
        valid ? p.q + t * p.q_stride + (h0 + r) * p.q_head_stride + chunk * 8 : p.q;
    CpAsync16(q_base + TileOffset(r, chunk), src, valid);
  }
}

// The pool row of this thread's entry (threadIdx.x / 4) of list block `blk`, or -1 when the block
// is past `blk_end` (not loaded), the entry unused or out of range. Indices are int32, so the row
// fits.
__device__ __forceinline__ int32_t WgmmaRowOf(const SparseAttnParams& p, int64_t t, int64_t blk,
                                              int64_t blk_end) {
  if (blk >= blk_end) return -1;
  return static_cast<int32_t>(RowOf(p, t, blk * kBlock + threadIdx.x / 4));
}

__device__ __forceinline__ void StShared128(uint32_t addr, const uint32_t (&v)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}

// Values 16q .. 16q + 15 (tile chunks 2q, 2q + 1) of the landed serving row `row` at `slot` into
// entry e of the bf16 tile at `kv_base`, exactly (row_decode.cuh DecodeRowValues16: the values of
// DecodeRowsCpu; -1 gives zeros).
__device__ __forceinline__ void DecodeRowPair(const SparseAttnParams& p, int32_t row,
                                              const uint8_t* slot, int q, int e, uint32_t kv_base) {
  uint32_t out[2][4];
  DecodeRowValues16(p.kv_rows.n_window, row, slot, q, out);
  StShared128(kv_base + TileOffset(e, 2 * q), out[0]);
  StShared128(kv_base + TileOffset(e, 2 * q + 1), out[1]);
}

// The split-K variant's online-softmax step for rows r0 and r0 + 8 over all 64 entries of the
// block (every thread holds the full S of its fragment positions, the same in both
// warpgroups): WgmmaSoftmax's operations without the exchange — −inf at invalid entries, block
// max over the quad, m′ = WgmmaNextMax(m, max·c), α, p = 2^(S·c − m′), the block sum (the
// thread's 16 values per row in tile order, then the quad tree), denom = denom·α + sum, and
// bf16(p) packed into the register-A layout (k-step k = n8 tiles 2k, 2k + 1: a[k] = rows r0 /
// r0 + 8 of tile 2k, then of 2k + 1). `c` = softmax_scale·log2(e).
__device__ __forceinline__ void WgmmaSoftmaxFullBlock(float (&s)[32], const int32_t* idx, float c,
                                                      int c2, float (&m_run)[2],
                                                      float (&den_run)[2], float (&alpha)[2],
                                                      uint32_t (&a)[4][4]) {
  float bmax[2];
  WgmmaMaskRowMax(s, idx, c2, bmax);
  float m_new[2], bsum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_new[r] = WgmmaNextMax(m_run[r], __fmul_rn(QuadMax(bmax[r]), c));
    alpha[r] = WgmmaAlpha(m_run[r], m_new[r]);
    bsum[r] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    s[i] = Exp2Sfu(__fmaf_rn(s[i], c, -m_new[(i >> 1) & 1]));
    bsum[(i >> 1) & 1] = __fadd_rn(bsum[(i >> 1) & 1], s[i]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    den_run[r] = __fadd_rn(__fmul_rn(den_run[r], alpha[r]), QuadSum(bsum[r]));
    m_run[r] = m_new[r];
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[k][i] = PackBf16(s[8 * k + 2 * i], s[8 * k + 2 * i + 1]);
  }
}

}  // namespace flashserve::kernels::attn_device
