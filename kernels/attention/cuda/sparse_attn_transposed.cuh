// A prototype of the transposed products for the row form (kernels/attention/wgmma_ws.md
// "Session 57" and "Session 69"): the gate experiment that decides whether the row form's decode
// can move onto the consumer warpgroups. Not part of LaunchSparseAttn: the GPU test and
// bench_sparse_attn (`--path tproto`) call it through transposed_proto.h. Included by
// transposed_proto.cu only (sm_90a).
//
// Both products read the list block's entries as the register-sourced wgmma operand A, so that a
// later version can decode serving rows straight into A fragments with no bf16 tile in shared
// memory. Here the entries are the bf16 pool's rows, gathered by a producer warpgroup into
// wgmma-ws's swizzled stage tiles and read into A fragments with ldmatrix (the stand-in for the
// decode):
//   Sᵀ = K·Qᵀ    M = 64 entries, N = 64 heads, K = 512 dims: A = the block's rows (ldmatrix),
//                B = the Q tile (K-major, as wgmma-ws's A); 32 m64n64k16 k-steps;
//   Oᵀ = Vᵀ·Pᵀ   M = 512 dims (8 m64 blocks, 4 per consumer warpgroup), N = 64 heads, K = 64
//                entries: A = the rows transposed (ldmatrix.trans), B = Pᵀ (64 entries × 64
//                heads bf16, MN-major, 8 KB, the only tile the softmax writes).
// The softmax runs down Sᵀ's columns (a head's 64 entries lie over lane / 4, the +8 row and the
// warpgroup's 4 warps: three shuffles and a shared-memory exchange per head). The online softmax
// is the wgmma family's (base 2, lazy rescale with kWgmmaRescaleSlack) with the row sums kept as
// per-thread partials reduced once at the end, so the output agrees with LaunchSparseAttn to
// rounding (not bit for bit).
//
// TransposedProtoKernel: one CTA per token (64 heads, the whole list, no splits), three
// warpgroups: 0 and 1 consume (warpgroup g leads the blocks of parity g: Sᵀ, the softmax, Pᵀ; both
// do Oᵀ for dims 256g..), 2 produces (Q with the first block, then each list block into stage
// b % 2 with cp.async; mbarriers full / empty as wgmma-ws). The lead publishes m′ and α of a
// block and its Pᵀ, then arrives on named barrier 4 + g, which the other warpgroup syncs on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_device.cuh"
#include "kernels/attention/cuda/sparse_attn_pipeline.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/common/wgmma.cuh"

namespace flashserve::kernels::attn_device {

struct TransposedShape {
  static constexpr int kD = 512;
  static constexpr int kHeads = 64;
  static constexpr int kConsumerThreads = 256;
  static constexpr int kProducerThreads = 128;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr uint32_t kConsumerRegs = 232;
  static constexpr uint32_t kProducerRegs = 40;
  static_assert(kConsumerThreads * kConsumerRegs + kProducerThreads * kProducerRegs <= 65536);
  static constexpr uint32_t kTileBytes = WgmmaShape::kTileBytes;  // 64 KB: [64][512] bf16
  static constexpr uint32_t kPBytes = 64 * 128;                   // Pᵀ: [64 entries][64 heads]
  static constexpr uint32_t kQOff = 0;
  static constexpr uint32_t kStageOff = kQOff + kTileBytes;        // two stages
  static constexpr uint32_t kPOff = kStageOff + 2 * kTileBytes;    // two Pᵀ buffers
  static constexpr uint32_t kIdxOff = kPOff + 2 * kPBytes;         // int32 [2][64]
  static constexpr uint32_t kCmaxOff = kIdxOff + 2 * 64 * 4;       // fp32 [2 wg][4 warps][64]
  static constexpr uint32_t kCsumOff = kCmaxOff + 2 * 4 * 64 * 4;  // fp32 [2 wg][4 warps][64]
  static constexpr uint32_t kMOff = kCsumOff + 2 * 4 * 64 * 4;     // fp32 [64] running max
  static constexpr uint32_t kAlphaOff = kMOff + 64 * 4;            // fp32 [2][64]
  static constexpr uint32_t kDenOff = kAlphaOff + 2 * 64 * 4;      // fp32 [64] running denominators
  static constexpr uint32_t kBarOff = kDenOff + 64 * 4;            // full[2], empty[2]
  static constexpr uint32_t kEnd = kBarOff + 4 * 8;
  static constexpr size_t kSmemBytes = kEnd + 1024;
  static constexpr uint32_t kFullArrivals = 2 * kProducerThreads;  // copies landed + idx written
  static constexpr uint32_t kEmptyArrivals = kConsumerThreads;
  // Named barriers: 1 the consumers, 2 / 3 warpgroup 0 / 1 alone, 4 / 5 the hand-off from
  // warpgroup 0 / 1, 6 / 7 warpgroup 0 / 1's probe.
  static constexpr uint32_t kConsumerBarrier = 1;
};
static_assert(TransposedShape::kSmemBytes <= 227 * 1024, "shared memory per CTA");
static_assert(TransposedShape::kPOff % 1024 == 0, "Pᵀ tiles are swizzle-atom aligned");

__device__ __forceinline__ uint32_t TpFullBar(uint32_t base, uint32_t s) {
  return base + TransposedShape::kBarOff + s * 8;
}
__device__ __forceinline__ uint32_t TpEmptyBar(uint32_t base, uint32_t s) {
  return base + TransposedShape::kBarOff + (2 + s) * 8;
}

// MbarWait with a watchdog: traps after 2^28 failed tests (seconds) so that a protocol error in
// this prototype fails its test instead of hanging the device. The producer's waits only (in the
// consumers the trap path costs registers enough for ptxas to serialise the wgmmas, C7512); a
// consumer stuck anywhere leaves the producer waiting on `empty`, so it traps there.
__device__ __forceinline__ void TpWait(uint32_t bar, uint32_t parity) {
  for (uint32_t n = 0; !MbarTest(bar, parity); ++n) {
    if (n == (1u << 28)) __trap();
  }
}

// Named barrier `id` (a register) over `n` threads.
__device__ __forceinline__ void TpBarSync(uint32_t id, uint32_t n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void TpBarArrive(uint32_t id, uint32_t n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// Sᵀ[64 entries x 64 heads] = K·Qᵀ of the block in stage `tile`: 32 k-steps in 8 groups of 4 (a
// column block each), A fragments by ldmatrix.x4 (lane l addresses row 16w + 8((l/8)&1) + l%8,
// chunk 2ks + l/16 of the swizzled tile) double-buffered by group: a set is reloaded only after
// wait_group 1 says the group that read it has finished (wgmma reads its A registers
// asynchronously). B = the Q tile K-major. The last group is left in flight.
// kSs: both operands from shared memory (A = the stage tile K-major, one group of 32 k-steps) —
// the variant that measures the transposed structure without the register-sourced A.
template <bool kSs>
__device__ __forceinline__ void TpIssueSt(float (&s)[32], uint32_t q_base, uint32_t tile, int warp,
                                          int lane) {
  using W = WgmmaShape;
  if constexpr (kSs) {
    const uint64_t dq = wgmma::MakeSw128Desc(q_base, W::kKMajorLbo, W::kKMajorSbo);
    const uint64_t dk = wgmma::MakeSw128Desc(tile, W::kKMajorLbo, W::kKMajorSbo);
    wgmma::FenceOperands(s);
    wgmma::Fence();
#pragma unroll
    for (int ks = 0; ks < 32; ++ks) {
      const uint64_t step = ((ks / 4) * W::kColBlockBytes + (ks % 4) * 32) >> 4;
      wgmma::WgmmaM64N64K16SS(s, dk + step, dq + step, ks > 0);
    }
    wgmma::CommitGroup();
    return;
  }
  const int i = lane / 8;
  const uint32_t e = static_cast<uint32_t>(16 * warp + 8 * (i & 1) + lane % 8);
  const uint32_t y = static_cast<uint32_t>(i >> 1) ^ (e & 7u);
  uint32_t off[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) off[kk] = tile + e * 128u + (((2u * kk) ^ y) << 4);
  const uint64_t desc_q = wgmma::MakeSw128Desc(q_base, W::kKMajorLbo, W::kKMajorSbo);
  // Groups of kG k-steps, A double-buffered by group (2·kG·4 registers: the accumulators of both
  // products, these and the partial sums must fit the consumers' 224 without moving an
  // accumulator, or ptxas serialises every wgmma: C7515).
  constexpr int kG = 2, kGroups = 32 / kG;
  uint32_t a[2][kG][4];
#pragma unroll
  for (int k = 0; k < kG; ++k) LdMatrixX4(a[0][k], off[k % 4] + (k / 4) * W::kColBlockBytes);
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) {
    wgmma::FenceOperands(s);
    wgmma::Fence();
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      const int ks = gi * kG + k;
      const uint64_t step = ((ks / 4) * W::kColBlockBytes + (ks % 4) * 32) >> 4;
      wgmma::WgmmaM64N64K16RS(s, a[gi & 1][k], desc_q + step, ks > 0);
    }
    wgmma::CommitGroup();
    if (gi + 1 < kGroups) {
      wgmma::WaitGroup<1>();
#pragma unroll
      for (int k = 0; k < kG; ++k) {
        const int ks = (gi + 1) * kG + k;
        LdMatrixX4(a[(gi + 1) & 1][k], off[ks % 4] + (ks / 4) * W::kColBlockBytes);
      }
    }
  }
}

// Oᵀ[dims 256g .. + 255][64 heads] += Vᵀ·Pᵀ of the block in stage `tile`: one group per m64 block
// of the warpgroup (4 k-steps of 16 entries), A by ldmatrix.x4.trans (lane l addresses row 16j +
// 8(l/16) + l%8, chunk 8M + 2w + (l/8)&1), double-buffered as TpIssueSt's; B = Pᵀ MN-major. The
// last group is left in flight.
template <bool kSs>
__device__ __forceinline__ void TpIssueOt(float (&acc)[4][32], uint32_t tile, uint32_t p_tile,
                                          int g, int warp, int lane) {
  using W = WgmmaShape;
  if constexpr (kSs) {  // A = the stage tile read MN-major (rows = entries, 64 dims per row)
    const uint64_t dp = wgmma::MakeSw128Desc(p_tile, W::kColBlockBytes, 1024);
#pragma unroll
    for (int m = 0; m < 4; ++m) wgmma::FenceOperands(acc[m]);
    wgmma::Fence();
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint64_t dv = wgmma::MakeSw128Desc(
          tile + static_cast<uint32_t>(4 * g + m) * W::kColBlockBytes, W::kColBlockBytes, 1024);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wgmma::WgmmaM64N64K16SSTransAB(acc[m], dv + ((j * 2048) >> 4), dp + ((j * 2048) >> 4));
      }
    }
    wgmma::CommitGroup();
    wgmma::WaitGroup<0>();
#pragma unroll
    for (int m = 0; m < 4; ++m) wgmma::FenceOperands(acc[m]);
    return;
  }
  const int i = lane / 8;
  const uint32_t r = static_cast<uint32_t>(lane % 8);
  const uint32_t ob =
      ((i >> 1) * 8u + r) * 128u +
      (((2u * static_cast<uint32_t>(warp) + static_cast<uint32_t>(i & 1)) ^ r) << 4);
  const uint64_t desc_p = wgmma::MakeSw128Desc(p_tile, W::kColBlockBytes, 1024);
  const uint32_t t0 = tile + static_cast<uint32_t>(4 * g) * W::kColBlockBytes + ob;
  // Groups of 2 k-steps (half an m64 block), A double-buffered by group (TpIssueSt's reason).
  uint32_t a[2][2][4];
  LdMatrixX4Trans(a[0][0], t0);
  LdMatrixX4Trans(a[0][1], t0 + 2048);
#pragma unroll
  for (int gi = 0; gi < 8; ++gi) {
    const int m = gi / 2;
    if (gi % 2 == 0) wgmma::FenceOperands(acc[m]);  // not while its first half is in flight
    wgmma::Fence();
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int j = (gi % 2) * 2 + k;
      wgmma::WgmmaM64N64K16RSTransB(acc[m], a[gi & 1][k], desc_p + ((j * 2048) >> 4));
    }
    wgmma::CommitGroup();
    if (gi + 1 < 8) {
      wgmma::WaitGroup<1>();
      const int m1 = (gi + 1) / 2, j1 = ((gi + 1) % 2) * 2;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        LdMatrixX4Trans(a[(gi + 1) & 1][k], t0 + m1 * W::kColBlockBytes + (j1 + k) * 2048);
      }
    }
  }
  wgmma::WaitGroup<0>();
#pragma unroll
  for (int m = 0; m < 4; ++m) wgmma::FenceOperands(acc[m]);
}

// The lead's column softmax of block Sᵀ: −inf at invalid entries, the block max of each head
// over the warpgroup (shuffles over lane / 4, then s_cmax across the 4 warps), m′, α, p = 2^(S·c
// − m′) packed as bf16 into Pᵀ (swizzled, row = entry), and the block's column sums per warp in
// s_csum (TpLeadDenominators adds them up). Publishes m′ (s_m) and α (s_alpha) by warp 0's lanes
// 0..3. `alpha` gets the thread's 16 heads' α (heads 8j + 2t + {0, 1} at alpha[2j + {0, 1}]).
// Written head pair by head pair, so that few values beyond S and the accumulators are live.
__device__ __forceinline__ void TpSoftmaxLead(const float (&s)[32], const int32_t* idx, float c,
                                              int warp, int lane, float* s_cmax, float* s_csum,
                                              float* s_m, float* s_alpha, uint32_t p_tile,
                                              uint32_t wg_bar, float (&alpha)[16]) {
  const int r = lane / 4, t = lane % 4;
  const int e0 = 16 * warp + r, e1 = e0 + 8;
  const bool v0 = idx[e0] >= 0, v1 = idx[e1] >= 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float v[2];
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      float x = fmaxf(v0 ? s[4 * j + cc] : -INFINITY, v1 ? s[4 * j + 2 + cc] : -INFINITY);
      x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 4));
      x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 8));
      v[cc] = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 16));
    }
    if (r == 0) {
      *reinterpret_cast<float2*>(s_cmax + warp * 64 + 8 * j + 2 * t) = make_float2(v[0], v[1]);
    }
  }
  TpBarSync(wg_bar, 128);
  float m_new[16];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int h = 8 * j + 2 * t;
    const float2 m_old = *reinterpret_cast<const float2*>(s_m + h);
    float2 b = *reinterpret_cast<const float2*>(s_cmax + h);
#pragma unroll
    for (int w = 1; w < 4; ++w) {
      const float2 o = *reinterpret_cast<const float2*>(s_cmax + w * 64 + h);
      b.x = fmaxf(b.x, o.x);
      b.y = fmaxf(b.y, o.y);
    }
    m_new[2 * j] = WgmmaNextMax(m_old.x, __fmul_rn(b.x, c));
    m_new[2 * j + 1] = WgmmaNextMax(m_old.y, __fmul_rn(b.y, c));
    alpha[2 * j] = WgmmaAlpha(m_old.x, m_new[2 * j]);
    alpha[2 * j + 1] = WgmmaAlpha(m_old.y, m_new[2 * j + 1]);
  }
  // Every thread has read s_m and s_cmax before warp 0 overwrites s_m.
  TpBarSync(wg_bar, 128);
  if (warp == 0 && r == 0) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int h = 8 * j + 2 * t;
      *reinterpret_cast<float2*>(s_m + h) = make_float2(m_new[2 * j], m_new[2 * j + 1]);
      *reinterpret_cast<float2*>(s_alpha + h) = make_float2(alpha[2 * j], alpha[2 * j + 1]);
    }
  }
  const uint32_t sw = static_cast<uint32_t>(r);  // e0 % 8 == e1 % 8 == r
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float p[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float x = (q < 2 ? v0 : v1) ? s[4 * j + q] : -INFINITY;
      p[q] = Exp2Sfu(__fmaf_rn(x, c, -m_new[2 * j + (q & 1)]));
    }
    const uint32_t col = ((static_cast<uint32_t>(j) ^ sw) << 4) + 4u * t;
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p_tile + e0 * 128u + col),
                 "r"(PackBf16(p[0], p[1]))
                 : "memory");
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p_tile + e1 * 128u + col),
                 "r"(PackBf16(p[2], p[3]))
                 : "memory");
    float v[2];
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      float x = __fadd_rn(p[cc], p[2 + cc]);
      x = __fadd_rn(x, __shfl_xor_sync(0xFFFFFFFFu, x, 4));
      x = __fadd_rn(x, __shfl_xor_sync(0xFFFFFFFFu, x, 8));
      v[cc] = __fadd_rn(x, __shfl_xor_sync(0xFFFFFFFFu, x, 16));
    }
    if (r == 0) {
      *reinterpret_cast<float2*>(s_csum + warp * 64 + 8 * j + 2 * t) = make_float2(v[0], v[1]);
    }
  }
}

// After the lead's barrier that follows TpSoftmaxLead: den[h] = den[h]·α[h] + the block's sum,
// by the warpgroup's threads 0..63 (one head each), before the hand-off arrival, so that the
// updates of consecutive blocks (by alternating warpgroups) happen in block order.
__device__ __forceinline__ void TpLeadDenominators(int wtid, const float* s_csum,
                                                   const float* s_alpha, float* s_den) {
  if (wtid < 64) {
    const float bsum = __fadd_rn(__fadd_rn(s_csum[wtid], s_csum[64 + wtid]),
                                 __fadd_rn(s_csum[128 + wtid], s_csum[192 + wtid]));
    s_den[wtid] = __fadd_rn(__fmul_rn(s_den[wtid], s_alpha[wtid]), bsum);
  }
}

template <int kD, bool kSs>
__global__ void __launch_bounds__(TransposedShape::kThreads, 1)
    TransposedProtoKernel(const SparseAttnParams p) {
  using TS = TransposedShape;
  static_assert(kD == TS::kD, "head_dim 512 only");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = AlignedSmem(smem_raw);
  const uint32_t base = SmemAddr(smem);
  const int64_t t = blockIdx.x;
  const int nb = static_cast<int>((p.width + kBlock - 1) / kBlock);
  int32_t* s_idx = reinterpret_cast<int32_t*>(smem + TS::kIdxOff);
  if (nb == 0) {  // an empty list: +0 everywhere (the consumers' loop runs at least one block)
    uint16_t* out = p.out + t * p.out_stride;
    for (int i = static_cast<int>(threadIdx.x); i < 64 * 64; i += TS::kThreads) {
      *reinterpret_cast<uint4*>(out + (i / 64) * p.out_head_stride + (i % 64) * 8) =
          make_uint4(0, 0, 0, 0);
    }
    return;
  }
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < 2; ++s) {
      MbarInit(TpFullBar(base, s), TS::kFullArrivals);
      MbarInit(TpEmptyBar(base, s), TS::kEmptyArrivals);
    }
  }
  float* s_m = reinterpret_cast<float*>(smem + TS::kMOff);
  if (threadIdx.x < 64) {
    s_m[threadIdx.x] = kInitMax;
    reinterpret_cast<float*>(smem + TS::kDenOff)[threadIdx.x] = 0.0f;
  }
  __syncthreads();
  const int wg = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  if (wg == 2) {
    SetMaxRegsDec<TS::kProducerRegs>();
    const int ptid = static_cast<int>(threadIdx.x) - TS::kConsumerThreads;
    const int sub = ptid % 8;
    // Q with block 0: head ptid / 8 + 16j, chunks sub + 8k.
    const uint16_t* q = p.q + t * p.q_stride;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int h = ptid / 8 + 16 * j;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int ch = sub + 8 * k;
        CpAsync16(base + TS::kQOff + TileOffset(h, ch), q + h * p.q_head_stride + ch * 8, true);
      }
    }
    const int32_t* list = p.indices + t * p.indices_stride;
    for (int b = 0; b < nb; ++b) {
      const uint32_t st = b & 1;
      if (b >= 2)
        TpWait(TpEmptyBar(base, st), ((b >> 1) - 1) & 1);  // the consumers' hangs trap here
      const uint32_t tile = base + TS::kStageOff + st * TS::kTileBytes;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = ptid / 8 + 16 * j;
        const int64_t pos = int64_t{b} * kBlock + e;
        int32_t ix = pos < p.width ? list[pos] : -1;
        if (ix >= p.n_kv) ix = -1;
        const uint16_t* row = p.kv + (ix >= 0 ? int64_t{ix} * p.kv_stride : 0);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int ch = sub + 8 * k;
          CpAsync16(tile + TileOffset(e, ch), row + ch * 8, ix >= 0);
        }
        if (sub == 0) s_idx[st * 64 + e] = ix;
      }
      CpAsyncMbarrierArriveNoinc(TpFullBar(base, st));
      MbarArrive(TpFullBar(base, st));
    }
    CpAsyncWaitAll();
    return;
  }
  SetMaxRegsInc<TS::kConsumerRegs>();
  const int g = wg;
  const int wtid = static_cast<int>(threadIdx.x) % 128;
  const int warp = wtid / 32, lane = wtid % 32;
  const int r = lane / 4, tq = lane % 4;
  const float c = p.softmax_scale * kLog2E;
  const uint32_t q_base = base + TS::kQOff;
  float* s_cmax = reinterpret_cast<float*>(smem + TS::kCmaxOff) + g * 4 * 64;
  float* s_csum = reinterpret_cast<float*>(smem + TS::kCsumOff) + g * 4 * 64;
  float* s_alpha = reinterpret_cast<float*>(smem + TS::kAlphaOff);
  const uint32_t wg_bar = 2 + g, my_hand = 4 + g, other_hand = 4 + (g ^ 1);
  float acc[4][32];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
#pragma unroll
    for (int k = 0; k < 32; ++k) acc[m][k] = 0.0f;
  }
  float* s_den = reinterpret_cast<float*>(smem + TS::kDenOff);
  float s[32];
  if (g == 0) {  // block 0's Sᵀ; the follower of block b issues block b + 1's after its Oᵀ(b)
    MbarWait(TpFullBar(base, 0), 0);
    wgmma::FenceProxyAsyncShared();
    TpIssueSt<kSs>(s, q_base, base + TS::kStageOff, warp, lane);
  }
  int b = 0;
  do {  // nb >= 1 (checked at the kernel start): the loop exit is the only way to the epilogue
    const uint32_t st = b & 1;
    const uint32_t tile = base + TS::kStageOff + st * TS::kTileBytes;
    const uint32_t p_tile = base + TS::kPOff + st * TS::kPBytes;
    float alpha[16];
    if ((b & 1) == g) {
      wgmma::WaitGroup<0>();  // Sᵀ(b) and this warpgroup's Oᵀ(b − 1)
      wgmma::FenceOperands(s);
      TpSoftmaxLead(s, s_idx + st * 64, c, warp, lane, s_cmax, s_csum, s_m, s_alpha + st * 64,
                    p_tile, wg_bar, alpha);
      wgmma::FenceProxyAsyncShared();
      TpBarSync(wg_bar, 128);  // the whole Pᵀ is written before this warpgroup's Oᵀ
      TpLeadDenominators(wtid, s_csum, s_alpha + st * 64, s_den);
      TpBarArrive(my_hand, 256);
    } else {
      // Nothing of this warpgroup is in flight here (its last Sᵀ was consumed as lead, its Oᵀ
      // waited for); the wait says so to ptxas, which otherwise keeps s pinned through this
      // path and runs out of registers (C7512).
      wgmma::WaitGroup<0>();
      wgmma::FenceOperands(s);
      TpBarSync(other_hand, 256);
      MbarWait(TpFullBar(base, st), (b >> 1) & 1);        // completed already (the lead waited)
      if constexpr (kSs) wgmma::FenceProxyAsyncShared();  // Oᵀ reads the stage by wgmma
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 a2 = *reinterpret_cast<const float2*>(s_alpha + st * 64 + 8 * j + 2 * tq);
        alpha[2 * j] = a2.x;
        alpha[2 * j + 1] = a2.y;
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) wgmma::FenceOperands(acc[m]);
    bool any = false;
#pragma unroll
    for (int k = 0; k < 16; ++k) any |= alpha[k] != 1.0f;
    if (any) {
#pragma unroll
      for (int m = 0; m < 4; ++m) {
#pragma unroll
        for (int k = 0; k < 32; ++k) acc[m][k] = __fmul_rn(acc[m][k], alpha[2 * (k / 4) + (k & 1)]);
      }
    }
    // Every rescale is done before TpIssueOt's first wgmma.fence (else the compiler may sink the
    // multiplies of acc[1..3] into the pipeline stage, and ptxas serialises every wgmma: C7514).
#pragma unroll
    for (int m = 0; m < 4; ++m) wgmma::FenceOperands(acc[m]);
    TpIssueOt<kSs>(acc, tile, p_tile, g, warp, lane);  // waited for
    if ((b & 1) != g && b + 1 < nb) {
      // This warpgroup leads block b + 1: its Sᵀ runs while the other warpgroup finishes Oᵀ(b).
      MbarWait(TpFullBar(base, st ^ 1), ((b + 1) >> 1) & 1);
      wgmma::FenceProxyAsyncShared();
      TpIssueSt<kSs>(s, q_base, base + TS::kStageOff + (st ^ 1) * TS::kTileBytes, warp, lane);
    }
    // Every ldmatrix of this block by this warpgroup has completed (Sᵀ's before its wait, Oᵀ's
    // before their wgmmas were issued): the stage may be refilled; the wgmmas read registers and
    // Pᵀ, not the stage.
    MbarArrive(TpEmptyBar(base, st));
  } while (++b < nb);
  wgmma::WaitGroup<0>();
#pragma unroll
  for (int m = 0; m < 4; ++m) wgmma::FenceOperands(acc[m]);
  // Every Sᵀ read of the Q tile is done (both warpgroups waited) and the last s_den update too.
  NamedBarrier<TS::kConsumerBarrier, TS::kConsumerThreads>();
  float inv[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const int h = 8 * (k / 2) + 2 * tq + (k & 1);
    float den = s_den[h];
    if (den > 0.0f) den = __fadd_rn(den, WgmmaSinkTerm(p.attn_sink[h], s_m[h]));
    inv[k] = den > 0.0f ? 1.0f / den : 0.0f;
  }
  // Stage the output [head][512] bf16 in the Q tile (chunk ^ head % 8 swizzle), then copy out.
#pragma unroll
  for (int m = 0; m < 4; ++m) {
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      const int h = 8 * (k / 4) + 2 * tq + (k & 1);
      const int d = 64 * (4 * g + m) + 16 * warp + r + 8 * ((k >> 1) & 1);
      const float v = __fmul_rn(acc[m][k], inv[2 * (k / 4) + (k & 1)]);
      const uint32_t addr = q_base + static_cast<uint32_t>(h) * 1024u +
                            ((static_cast<uint32_t>((d / 8) ^ (h & 7))) << 4) + (d % 8) * 2;
      const __nv_bfloat16 bv = __float2bfloat16_rn(v);
      asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr),
                   "h"(*reinterpret_cast<const uint16_t*>(&bv))
                   : "memory");
    }
  }
  NamedBarrier<TS::kConsumerBarrier, TS::kConsumerThreads>();
  const int ctid = static_cast<int>(threadIdx.x);
  uint16_t* out = p.out + t * p.out_stride;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int lin = i * 256 + ctid;
    const int h = lin / 64, ch = lin % 64;
    const uint4 v =
        *reinterpret_cast<const uint4*>(smem + TS::kQOff + h * 1024 + ((ch ^ (h & 7)) << 4));
    *reinterpret_cast<uint4*>(out + h * p.out_head_stride + ch * 8) = v;
  }
}

}  // namespace flashserve::kernels::attn_device
