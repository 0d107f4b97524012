// The Hopper (sm_90a) wgmma path of LaunchSparseAttn for head_dim 512 (README.md "CUDA", "wgmma
// path"); the helpers below are shared with the primitive check kernel (wgmma_check.cu).
// Only sparse_attn_launch.cu and wgmma_check.cu include it (sm_90a: wgmma needs the 'a' target).
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
#include "kernels/attention/div_by_rcp.h"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/norm_rope/cuda/norm_rope_math.cuh"
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

// S[64 x 32] = Q · K[rows 32·kHalf ..]^T over 512 dims: 32 wgmma k-steps, issued and committed
// as one group, not waited for (WgmmaWait does that), so that the caller can issue the next
// block's gather while the tensor cores run. The descriptors' start addresses advance in their
// low words only (the 14-bit address field never carries: shared memory < 256 KB).
template <int kHalf>
__device__ __forceinline__ void WgmmaQkIssueHalf(float (&s)[16], uint32_t q_base,
                                                 uint32_t kv_base) {
  using W = WgmmaShape;
  const uint64_t desc_q = wgmma::MakeSw128Desc(q_base, W::kKMajorLbo, W::kKMajorSbo);
  const uint64_t desc_k =
      wgmma::MakeSw128Desc(kv_base + kHalf * 32 * 128, W::kKMajorLbo, W::kKMajorSbo);
  const auto q_lo = static_cast<uint32_t>(desc_q), k_lo = static_cast<uint32_t>(desc_k);
  const uint64_t hi = desc_q & 0xFFFFFFFF00000000ull;  // the same for both (same lbo / sbo)
  wgmma::FenceOperands(s);
  wgmma::Fence();
#pragma unroll
  for (int ks = 0; ks < W::kD / 16; ++ks) {
    // k-step ks: column block ks / 4, bytes 32·(ks % 4) into each 128-byte row; the start
    // address field counts 16-byte units.
    const uint32_t step = ((ks / 4) * W::kColBlockBytes + (ks % 4) * 32) >> 4;
    wgmma::WgmmaM64N32K16SS(s, hi | (q_lo + step), hi | (k_lo + step), ks > 0);
  }
  wgmma::CommitGroup();
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
// P from registers (a[ks] = k-step ks in the register-A layout), waited for. lbo / sbo: the
// MN-major descriptor offsets (WgmmaShape's; the check kernel also tries others).
__device__ __forceinline__ void WgmmaPv(float (&acc)[128], const uint32_t (&a)[4][4],
                                        uint32_t kv_base, int half,
                                        uint32_t lbo = WgmmaShape::kMnMajorLbo,
                                        uint32_t sbo = WgmmaShape::kMnMajorSbo) {
  const uint64_t desc_v =
      wgmma::MakeSw128Desc(kv_base + half * 4 * WgmmaShape::kColBlockBytes, lbo, sbo);
  wgmma::FenceOperands(acc);
  wgmma::Fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    // 16 entries = two 8-row groups of 1024 B.
    wgmma::WgmmaM64N256K16RSTransB(acc, a[ks], desc_v + ((ks * 2048) >> 4), true);
  }
  wgmma::CommitGroup();
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
      const int e = half * 32 + j * 8 + c2 + (i & 1);
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
  float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float& x = s[4 * j + i];
      x = idx[8 * j + c2 + (i & 1)] >= 0 ? x : -INFINITY;
      bmax[i >> 1] = fmaxf(bmax[i >> 1], x);
    }
  }
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

// ---- split states of the wgmma family (WgmmaKernel, WgmmaWsKernel) -----------------------------
//
// A split CTA's state is written in accumulator-fragment order, so that every store is a
// coalesced 16-byte one: acc [units][32 j][256 threads][4 floats] (thread tid = the consumer
// thread 128·half + wtid; its float4 j holds acc[4j .. 4j + 3] = rows r0, r0 + 8 × dims
// 256·half + 8j + c2, + 1), then (m, denom) [units][64 heads] as float pairs. The per-head layout
// [m, denom, acc[512]] of the mma.sync path's states took 128 scalar 4-byte stores per thread,
// each warp store touching 8 half-used sectors: at one token the split kernel stalled on the
// LSU queue ("LG throttle", 58 % of its stall cycles in Nsight Compute). The geometry's state
// pointer is 16-byte aligned by the launcher. Same total size: units · 64 · (512 + 2) floats.
inline constexpr int kWgmmaStateGroups = 32;  // float4 groups per consumer thread (128 acc)
inline constexpr int kWgmmaStateThreads = WgmmaShape::kThreads;

__device__ __forceinline__ float4* WgmmaStateAcc(const Geometry& geo, int64_t unit) {
  return reinterpret_cast<float4*>(geo.state) + unit * (kWgmmaStateGroups * kWgmmaStateThreads);
}
__device__ __forceinline__ float2* WgmmaStateMd(const Geometry& geo, int64_t unit) {
  return reinterpret_cast<float2*>(WgmmaStateAcc(geo, geo.units)) + unit * WgmmaShape::kHeads;
}

// Consumer thread `tid` (0..255) writes its part of the unit's split state.
__device__ __forceinline__ void WgmmaStoreSplitState(const Geometry& geo, int64_t unit, int tid,
                                                     const float (&acc)[128],
                                                     const float (&m_run)[2],
                                                     const float (&den_run)[2]) {
  float4* a = WgmmaStateAcc(geo, unit) + tid;
#pragma unroll
  for (int j = 0; j < kWgmmaStateGroups; ++j) {
    a[j * kWgmmaStateThreads] =
        make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
  }
  // Both warpgroups hold the same (m, denom) of rows r0, r0 + 8; one quad lane of the first
  // writes them.
  const int lane = tid % 32;
  if (tid < 128 && lane % 4 == 0) {
    const int r0 = (tid / 32) * 16 + lane / 4;
    float2* md = WgmmaStateMd(geo, unit);
    md[r0] = make_float2(m_run[0], den_run[0]);
    md[r0 + 8] = make_float2(m_run[1], den_run[1]);
  }
}

// ---- RoPE inside the attention (Geometry::rope; README.md "RoPE inside the attention") ----------

// cos/sin of pair k at token t's position: the caller's table (SparseAttnParams::rope_cos_sin,
// norm_rope LaunchRopeCosSin's bits).
__device__ __forceinline__ float2 RopeCosSin(const AttnRope& r, int64_t t, int k) {
  return r.cos_sin[t * r.pairs + k];
}

// Whether a unit computes the cos/sin table: for its Q tile, or for the unsplit epilogue.
__device__ __forceinline__ bool RopeTableNeeded(const AttnRope& r, int64_t splits) {
  return r.pairs > 0 && (r.q || (r.out && splits == 1));
}

// Thread i < pairs writes the unit's cos/sin of pair i into `table` (the layout's last bytes);
// the readers meet the writers at a barrier before they read it.
__device__ __forceinline__ void RopeFillTable(const AttnRope& r, int64_t t, int i, float2* table) {
  if (i < r.pairs) table[i] = RopeCosSin(r, t, i);
}

// Rotates the rope pairs of the Q tile at `q_base` in place, as norm_rope's RoPE kernel would have
// rotated q (fp32 products and sums from the bf16 values, one rounding each): threads `i` of
// `n` take the (head, pair) items i, i + n, ... Q must have landed and be visible to the calling
// threads, and `table` written; the callers then fence the writes to the async proxy and meet at
// a barrier before the first S.
__device__ __forceinline__ void WgmmaRotateQ(const AttnRope& r, const float2* table,
                                             uint32_t q_base, int i, int n) {
  for (int item = i; item < WgmmaShape::kHeads * r.pairs; item += n) {
    const int row = item / r.pairs, k = item % r.pairs;
    const int dim = r.first + 2 * k;
    const uint32_t addr = q_base + TileOffset(row, dim / 8) + static_cast<uint32_t>(dim % 8) * 2;
    uint32_t pair;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(pair) : "r"(addr));
    const float2 cs = table[k];
    float re = 0.0f, im = 0.0f;
    norm_rope_device::RotatePair(exact::Bf16ToF32(pair & 0xFFFFu), exact::Bf16ToF32(pair >> 16),
                                 cs.x, cs.y, &re, &im);
    pair = exact::F32ToBf16(re) | (exact::F32ToBf16(im) << 16);
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(pair) : "memory");
  }
}

// The bf16 pair the unfused kernel would store for (v0, v1), rotated by the conjugate of
// cs = (cos, sin) exactly as norm_rope's RoPE kernel rotates the stored values (fp32 products and
// sums from the bf16 values, one rounding each).
__device__ __forceinline__ uint32_t OutRopeRotate(float v0, float v1, float2 cs) {
  float re = 0.0f, im = 0.0f;
  norm_rope_device::RotatePair(exact::Bf16ToF32(Bf16Bits(v0)), exact::Bf16ToF32(Bf16Bits(v1)), cs.x,
                               -cs.y, &re, &im);
  return exact::F32ToBf16(re) | (exact::F32ToBf16(im) << 16);
}

// The output pair (v0, v1) of dims (d, d + 1) as stored: rotated when it is a rope pair (table
// set, d >= first), else the plain bf16 pair.
__device__ __forceinline__ uint32_t OutPair(float v0, float v1, int d, const AttnRope& r,
                                            const float2* table) {
  if (table == nullptr || d < r.first) return PackBf16(v0, v1);
  return OutRopeRotate(v0, v1, table[(d - r.first) >> 1]);
}

// The output's staging tile (the Q tile's 64 KB, free once the unit's last S was waited for):
// row R (head h0 + R) holds its 512 bf16 outputs as 64 chunks of 16 bytes, chunk c at byte
// 1024·R + 16·(c ^ (R % 8)), so that both the accumulator layout's 4-byte writes (a warp: 8 rows
// × one chunk) and the row-wise 16-byte reads touch 32 distinct banks.

// Copies the staged rows of the unit's heads to p.out with 16-byte stores, a warp's 32 lanes
// writing 512 contiguous bytes of one head row (the launchers take the wgmma family only with
// p.out and its strides 16-byte aligned: TensorPathFits, CheckRowFormFits). Every one of the 256
// math threads calls it after writing its part of the stage.
__device__ __forceinline__ void WgmmaCopyOutStage(const SparseAttnParams& p, int64_t t, int64_t h0,
                                                  int tid, const uint8_t* stage) {
  NamedBarrier<WgmmaShape::kMathBarrier, WgmmaShape::kThreads>();
  const int64_t rows = min(p.heads - h0, int64_t{WgmmaShape::kHeads});
  // Thread tid copies chunk tid % 64 of rows tid / 64 + 4i; the row's swizzle (row % 8)
  // alternates between two values.
  const int chunk = tid & 63, row0 = tid >> 6;
  const uint32_t sw0 = static_cast<uint32_t>((chunk ^ row0) << 4);
  const uint32_t sw1 = static_cast<uint32_t>((chunk ^ (row0 + 4)) << 4);
  const uint8_t* src = stage + row0 * 1024;
  uint16_t* dst = p.out + t * p.out_stride + (h0 + row0) * p.out_head_stride + chunk * 8;
#pragma unroll 1
  for (int row = row0; row < rows; row += 4) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src + ((row & 4) ? sw1 : sw0));
    src += 4096;
    dst += 4 * p.out_head_stride;
  }
}

// The unsplit epilogue of the wgmma family (WgmmaKernel, WgmmaWsKernel, WgmmaRowsKernel):
// consumer thread 128·half + wtid computes rows r0, r0 + 8 of its accumulator, dims
// 256·half + 8j + c2, + 1, as o = bf16(acc / (denom + exp(sink − m))), or +0 for a unit without
// any valid entry, into the staging tile `stage` (above; the Q tile), and the 256 threads
// then copy it out row by row (WgmmaCopyOutStage). Storing the pairs straight from the
// accumulator layout took 64 4-byte stores per thread, each warp's touching 8 rows' half-used
// sectors: the stores and the register waits behind them were ~20 % of wgmma-ws's consumer warp
// samples at 256 tokens (Nsight, session 26). `sink` holds the two rows' sink logits (read at the
// start of the unit, off this tail). The division is the CPU's correctly rounded one, computed
// from one reciprocal per row (div_by_rcp.h; README.md "Epilogue division"): the range checks of
// a row's 64 values are OR-ed into one flag and the row takes the three-operation sequence, or (a
// zero, tiny, huge or non-finite value; never with finite attention data of ordinary size) the
// IEEE division. __fdiv_rn per value made this tail 1,813 instructions per warp, 17 % of the
// wgmma-ws kernel's warp samples at 256 tokens. Only pairs j >= kWgmmaRopeFirstPair of warpgroup 1
// can be rope pairs (rd <= 64): their quotients replace acc (either division form) and one loop
// rotates and stores them, so the rotation is compiled for those 8 alone — rotating in both
// division forms for all 32 pairs had doubled the RoPE instantiations' code (10,000 instructions
// for wgmma-ws; instruction-cache misses, "no instruction" stalls 18 % of the samples at 256
// tokens, session 25). `rope_table`: the unit's cos/sin (RopeFillTable), nullptr without the
// output's RoPE.
inline constexpr int kWgmmaRopeFirstPair =
    (WgmmaShape::kD - 2 * kRopeMaxPairs - WgmmaShape::kD / 2) / 8;  // 24
static_assert(kWgmmaRopeFirstPair >= 0 && kWgmmaRopeFirstPair < 32);

// kStaged = false stores each pair straight from the accumulator layout instead (4-byte stores;
// `stage` unused): the RoPE row kernel, whose 255 registers had no room for the stage's addresses
// (it spilled in its block loop and lost 0.8–1.4 µs at every batch, session 26).
template <bool kStaged = true>
__device__ __forceinline__ void WgmmaStoreOutput(const SparseAttnParams& p, int64_t t, int64_t h0,
                                                 int half, int wtid, bool seen, float (&acc)[128],
                                                 const float (&m_run)[2], const float (&den_run)[2],
                                                 const float (&sink)[2], const AttnRope& rope,
                                                 const float2* rope_table, uint8_t* stage) {
  using attention_internal::DivByRcpInRange;
  using attention_internal::DivByRcpInRangeOnly;
  const int lane = wtid % 32;
  const int r0 = (wtid / 32) * 16 + lane / 4;
  const int c2 = 2 * (lane % 4);
  const uint32_t stage_addr = SmemAddr(stage);  // 1024-aligned: bits 4..6 are the swizzle's
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + 8 * r;
    if (h0 + row >= p.heads) continue;
    const int d0 = half * 256 + c2;  // the dim of the thread's pair j = 0
    // The stage offset of chunk 32·half + j with row % 8 = lane / 4, as a 32-bit shared address: an
    // XOR by j % 8 next to each store (one asm, so that ptxas does not keep eight addresses live
    // beside the accumulator: the row kernel spilled).
    const uint32_t srow = stage_addr + row * 1024 + half * 512 + ((lane / 4) << 4) + 2 * c2;
    uint16_t* o = p.out + t * p.out_stride + (h0 + row) * p.out_head_stride + d0;
    auto put = [&](int j, uint32_t v) {
      if constexpr (!kStaged) {
        *reinterpret_cast<uint32_t*>(o + 8 * j) = v;
        return;
      }
      asm volatile(
          "{\n .reg .b32 a;\n xor.b32 a, %0, %2;\n add.u32 a, a, %3;\n st.shared.b32 [a], %1;\n}" ::
              "r"(srow),
          "r"(v), "r"((j & 7) << 4), "r"(128 * (j >> 3)));
    };
    if (!seen) {
#pragma unroll
      for (int j = 0; j < 32; ++j) put(j, 0u);
      continue;
    }
    const float den = __fadd_rn(den_run[r], WgmmaSinkTerm(sink[r], m_run[r]));
    bool fast = DivByRcpInRange(den);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      fast &= DivByRcpInRange(acc[4 * j + 2 * r]) & DivByRcpInRange(acc[4 * j + 2 * r + 1]);
    }
    if (fast) {
      const float y = attention_internal::RcpRn(den);
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const float v0 = DivByRcpInRangeOnly(acc[4 * j + 2 * r], den, y);
        const float v1 = DivByRcpInRangeOnly(acc[4 * j + 2 * r + 1], den, y);
        if (j < kWgmmaRopeFirstPair) {
          put(j, PackBf16(v0, v1));
        } else {
          acc[4 * j + 2 * r] = v0;
          acc[4 * j + 2 * r + 1] = v1;
        }
      }
    } else {  // unrolled too: an indexed acc would move the array to the stack
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const float v0 = __fdiv_rn(acc[4 * j + 2 * r], den);
        const float v1 = __fdiv_rn(acc[4 * j + 2 * r + 1], den);
        if (j < kWgmmaRopeFirstPair) {
          put(j, PackBf16(v0, v1));
        } else {
          acc[4 * j + 2 * r] = v0;
          acc[4 * j + 2 * r + 1] = v1;
        }
      }
    }
#pragma unroll
    for (int j = kWgmmaRopeFirstPair; j < 32; ++j) {
      put(j, OutPair(acc[4 * j + 2 * r], acc[4 * j + 2 * r + 1], d0 + 8 * j, rope, rope_table));
    }
  }
  if constexpr (kStaged) WgmmaCopyOutStage(p, t, h0, 128 * half + wtid, stage);
}

// The sink logits of the thread's rows r0, r0 + 8 (0 past the heads), for WgmmaStoreOutput.
__device__ __forceinline__ void WgmmaLoadSinks(const SparseAttnParams& p, int64_t h0, int wtid,
                                               float (&sink)[2]) {
  const int r0 = (wtid / 32) * 16 + (wtid % 32) / 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t h = h0 + r0 + 8 * r;
    sink[r] = h < p.heads ? p.attn_sink[h] : 0.0f;
  }
}

// A template on kD only so that the header may be included by several .cu files (kD = 512).
// kSplitK picks the S step: false — warpgroup g computes entries 32g.. over all dims (n32) and
// the row max, the row sums and P are swapped through shared memory (three barriers per block);
// true — warpgroup g computes all 64 entries over dims 256g.. (n64, Q read once per block), the
// partial S are swapped and added (two barriers per block), and each warpgroup runs the softmax
// of the whole block itself (twice the expf per thread).
// kRope: the RoPE code (Geometry::rope: q rotation, the unsplit output's) is compiled in; the
// launcher takes these instantiations only when it fills geo.rope.
template <int kD, bool kSplitK, bool kRope>
__global__ void __launch_bounds__(WgmmaShape::kThreads, 1)
    WgmmaKernel(const SparseAttnParams p, const Geometry geo) {
  using W = WgmmaShape;
  static_assert(kD == W::kD, "the wgmma path is instantiated for head_dim 512 only");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = AlignedSmem(smem_raw);
  const uint32_t base = SmemAddr(smem);
  auto* s_idx = reinterpret_cast<int32_t*>(smem + W::kIdxOff);
  auto* s_max = reinterpret_cast<float*>(smem + W::kMaxOff);
  auto* s_sum = reinterpret_cast<float*>(smem + W::kSumOff);
  auto* s_p = reinterpret_cast<uint32_t*>(smem + W::kPOff);
  auto* s_x = reinterpret_cast<float*>(smem + W::kXOff);  // split-K only
  auto* rope_table = reinterpret_cast<float2*>(smem + (kSplitK ? W::kSplitKEnd : W::kEnd));
  const int tid = threadIdx.x;
  // The warpgroup (entries 32·half.. in S, dims 256·half.. in P·V), through a shuffle so that
  // ptxas sees it warp-uniform (WgmmaQkIssue branches on it).
  const int half = __shfl_sync(0xFFFFFFFFu, tid / 128, 0);
  const int wtid = tid % 128;
  const int c2 = 2 * (tid % 4);  // the split-K softmax's fragment column
  const float c = __fmul_rn(p.softmax_scale, kLog2E);
  const int64_t n_blocks = (p.width + kBlock - 1) / kBlock;
  LaunchDependents();  // the combine kernel (if any) may take idle SMs and wait there

  for (int64_t unit = blockIdx.x; unit < geo.units; unit += gridDim.x) {
    const int64_t item = unit / geo.splits;
    const int64_t split = unit % geo.splits;
    const int64_t t = item / geo.groups;
    const int64_t h0 = (item % geo.groups) * W::kHeads;
    const int64_t blk_begin = split * geo.blocks_per_split;
    const int64_t blk_end = min(n_blocks, blk_begin + geo.blocks_per_split);

    // The first block's rows are read before the query copies are issued, so that their latency
    // overlaps the issue (the gather cannot start before they arrive).
    const int32_t row_first = WgmmaRowOf(p, t, blk_begin, blk_end);
    WgmmaLoadQ(p, t, h0, base + W::kQOff, tid, W::kThreads);
    if (blk_begin < blk_end) WgmmaLoadBlock(p, row_first, base + W::kKvOff, s_idx);
    CpAsyncCommit();
    // The rows of the next block, read now so that the load's latency hides behind this block.
    int32_t row_next = WgmmaRowOf(p, t, blk_begin + 1, blk_end);

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    float m_run[2] = {kInitMax, kInitMax};  // rows r0, r0 + 8
    float den_run[2] = {0.0f, 0.0f};
    bool seen = false;
    float sink[2] = {0.0f, 0.0f};  // read now, off the epilogue's path
    if (geo.splits == 1) WgmmaLoadSinks(p, h0, wtid, sink);
    // The RoPE table: read after the first block's barriers (Q) or the block loop's (epilogue).
    if (kRope && RopeTableNeeded(geo.rope, geo.splits)) {
      RopeFillTable(geo.rope, t, tid, rope_table);
    }
    if (kRope && geo.rope.pairs > 0 && geo.rope.q && blk_begin < blk_end) {
      // q's RoPE, before the block loop (kept out of it): Q landed with the first commit group;
      // after the barrier every thread's Q copies and the table are visible. The first block's
      // fence.proxy.async and barrier publish the rotated Q to the wgmma.
      CpAsyncWait<0>();
      __syncthreads();
      WgmmaRotateQ(geo.rope, rope_table, base + W::kQOff, tid, W::kThreads);
    }

    for (int64_t blk = blk_begin; blk < blk_end; ++blk) {
      const int buf = static_cast<int>((blk - blk_begin) & 1);  // KV buffer buf of two
      const uint32_t kv_base = base + W::kKvOff + buf * W::kTileBytes;
      const int32_t* idx = s_idx + buf * kBlock;
      // This block (and Q) landed; every thread's async-proxy reads of the other buffer are done
      // (each waited for its wgmma before reaching this barrier), so it can be refilled.
      CpAsyncWait<0>();
      wgmma::FenceProxyAsyncShared();
      // Thread 4e wrote idx[e] itself (WgmmaLoadBlock), so it may read it before the barrier.
      const bool any = __syncthreads_or(tid % 4 == 0 && idx[tid / 4] >= 0);
      // Gathers the next block into the other buffer (its last readers, the previous P·V, were
      // waited for by every thread before the barrier) and reads the rows of the one after. One
      // commit group per block.
      auto load_next = [&] {
        if (blk + 1 < blk_end) {
          WgmmaLoadBlock(p, row_next, base + W::kKvOff + (buf ^ 1) * W::kTileBytes,
                         s_idx + (buf ^ 1) * kBlock);
        }
        CpAsyncCommit();
        row_next = WgmmaRowOf(p, t, blk + 2, blk_end);
      };
      if (!any) {  // a block without a valid entry is a no-op (as on the CPU)
        load_next();
        continue;
      }
      seen = true;
      uint32_t a[4][4];  // bf16 P of the whole block in the register-A layout, k-steps 0..3
      float alpha[2];
      if constexpr (kSplitK) {
        // S of this block goes to the tensor cores first; the gather is issued while they run.
        float s[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = 0.0f;
        WgmmaQkSplitKIssue(s, base + W::kQOff, kv_base, half);
        load_next();
        WgmmaWait(s);
        WgmmaSplitKExchange(s, s_x, half, wtid);
        WgmmaSoftmaxFullBlock(s, idx, c, c2, m_run, den_run, alpha, a);
      } else {
        // S of this block goes to the tensor cores first; the gather is issued while they run.
        float s[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) s[i] = 0.0f;
        WgmmaQkIssue(s, base + W::kQOff, kv_base, half);
        load_next();
        WgmmaWait(s);
        WgmmaSoftmax(s, idx, c, half, wtid, s_max, s_sum, s_p, m_run, den_run, alpha, a);
      }
      // acc·1 = acc: a warp none of whose rows moved its max skips the 128 multiplies (warp-
      // uniform branch; same bits).
      if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = __fmul_rn(acc[i], alpha[(i >> 1) & 1]);
      }
      WgmmaPv(acc, a, kv_base, half);
    }

    if (geo.splits == 1) {
      WgmmaStoreOutput(p, t, h0, half, wtid, seen, acc, m_run, den_run, sink, geo.rope,
                       kRope && geo.rope.pairs > 0 && geo.rope.out ? rope_table : nullptr,
                       smem + W::kQOff);
    } else {
      WgmmaStoreSplitState(geo, unit, tid, acc, m_run, den_run);  // for WgmmaCombineKernel
    }
    CpAsyncWait<0>();
    __syncthreads();  // the next unit reuses Q, the buffers and the exchange arrays
  }
}

}  // namespace flashserve::kernels::attn_device
