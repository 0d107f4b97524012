// The split-state combine of the wgmma family (README.md "Split states of the wgmma family"):
// WgmmaCombineKernel merges the fragment-order states that WgmmaKernel / WgmmaWsKernel write
// (WgmmaStoreSplitState, sparse_attn_wgmma_epilogue.cuh). Only sparse_attn_launch.cu includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_device.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_epilogue.cuh"

namespace flashserve::kernels::attn_device {

inline constexpr int kWgmmaCombineGroups = 2;  // float4 groups per thread, per-thread form
// The shared form's (1–12 tokens at the released width): one float4 group per thread, so an item
// takes 32 CTAs and a thread's 10 split states are one batch of loads (session 84: ncu had the
// 1-token combine at 8.1–8.3 µs on 16 CTAs, latency-bound, a third of the attention; with two
// groups and batches of 6 a thread waited on two rounds of state loads). The same operations per
// value in the same order: the same bits.
inline constexpr int kWgmmaCombineSharedGroups = 1;
template <bool kShared>
__host__ __device__ constexpr int WgmmaCombineGroups() {
  return kShared ? kWgmmaCombineSharedGroups : kWgmmaCombineGroups;
}
template <bool kShared>
__host__ __device__ constexpr int WgmmaCombineCtasPerItem() {
  return kWgmmaStateGroups / WgmmaCombineGroups<kShared>();
}
inline constexpr int kWgmmaCombinePass = 16;  // splits whose weights a combine CTA keeps at once
// Splits whose states a shared-form thread loads at once: 10 (one float4 group each: 40
// registers, as 6 × 2 groups took before session 84, at 124 registers, two CTAs of 256 threads
// per SM; 8 × 2 took 141, one CTA per SM).
inline constexpr int kWgmmaCombineBatch = 10;
static_assert(kWgmmaStateGroups % kWgmmaCombineGroups == 0);
static_assert(kWgmmaStateGroups % kWgmmaCombineSharedGroups == 0);

// Merges the split states of the wgmma family: CTA (item, g) of 256 threads takes float4 groups
// WgmmaCombineGroups<kShared>()·g .. of every consumer thread position, i.e. thread tid merges
// exactly the values that thread tid of the split CTAs wrote (rows r0, r0 + 8, dims 256·half + 8j +
// c2, + 1). Per row: M = max(kInitMax, m_s), w_s = 2^(m_s − M) (the states' maxima are in
// WgmmaSoftmax's base-2 units), denom = Σ_s denom_s·w_s (+ exp(sink − M) = WgmmaSinkTerm when > 0),
// o = bf16(Σ_s acc_s·w_s / denom), +0 when denom is 0; splits in ascending order (CombineKernel's
// order, in base 2). Launched as a programmatic dependent of the split kernel.
// Two instantiations of the same operations, chosen by the launcher from the split count (two
// kernels rather than a branch: the shared form's registers would cost the per-thread form its
// occupancy — measured as one kernel with a uniform branch, 64 tokens 40.7 → 44.2 µs):
// - <kD, false> below kSparseAttnCombineSharedMinSplits splits (sparse_attn_path.h): every thread
//   computes M, w_s and denom of its two rows itself (the 8 threads sharing a row, and the item's
//   16 CTAs, all compute them): the shortest chain of dependent loads when there are few splits
//   (13 tokens and up at the released width: 2–5).
// - <kD, true> from kSparseAttnCombineSharedMinSplits splits (session 20; 1–12 tokens: 10 splits):
//   M, the weights w_s of a pass of kWgmmaCombinePass splits (into shared memory) and denom once
//   per row, by thread h < 64 — the per-thread form computed each weight 8 × 16 times (a
//   double-precision exp until session 25, exp2f since); the state loads are issued
//   kWgmmaCombineBatch splits at a time, before the first of them is used; one float4 group per
//   thread since session 84 (kWgmmaCombineSharedGroups: 32 CTAs per item). Nsight Compute had the
//   per-thread form's 1-token combine (16 CTAs) as long as the split kernel (13.4 vs 12.8 µs).
//   Session 77: the first batch of states is requested before the row phase, and each row's
//   (m_s, denom_s) pairs are loaded in one batch per pass (the weights were computed by all
//   threads after a barrier and denom summed over one dependent load per split: ~14 round trips
//   to the L2 at 10 splits, now ~3). The same operations in the same order: the same bits.
// kRope: the output's inverse RoPE (Geometry::rope.out) is compiled in.
template <int kD, bool kShared, bool kRope>
__global__ void __launch_bounds__(kWgmmaStateThreads)
    WgmmaCombineKernel(const SparseAttnParams p, const Geometry geo) {
  static_assert(kD == WgmmaShape::kD);
  constexpr int kH = WgmmaShape::kHeads;
  // The kernel after the attention (wo_a's swapped-role Linear, a LaunchPdl launch) may take the
  // idle SMs now and request its weights there; it waits for this grid before it reads o.
  LaunchDependents();
  WaitPrerequisiteGrids();
  const int tid = static_cast<int>(threadIdx.x);
  const int half = tid / 128;
  const int lane = tid % 32;
  const int r0 = ((tid % 128) / 32) * 16 + lane / 4;
  const int c2 = 2 * (lane % 4);
  constexpr int kGroups = WgmmaCombineGroups<kShared>();
  constexpr int kCtasPerItem = WgmmaCombineCtasPerItem<kShared>();
  const int64_t items = geo.units / geo.splits;
  for (int64_t cta = blockIdx.x; cta < items * kCtasPerItem; cta += gridDim.x) {
    const int64_t item = cta / kCtasPerItem;
    const int g0 = static_cast<int>(cta % kCtasPerItem) * kGroups;
    const int64_t t = item / geo.groups;
    const int64_t h0 = (item % geo.groups) * kH;
    const int64_t unit0 = item * geo.splits;
    const float2* md = WgmmaStateMd(geo, unit0);
    const float4* acc = WgmmaStateAcc(geo, unit0) + g0 * kWgmmaStateThreads + tid;
    float a[kGroups][4];
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[j][i] = 0.0f;
    }
    // The output's inverse RoPE (Geometry::rope.out): this thread's pairs j are rope pairs when
    // their dim d = 256·half + 8(g0 + j) + c2 >= first; their cos/sin are computed here, before
    // the state loads they overlap.
    float2 rope_cs[kGroups];
    const AttnRope& rope = geo.rope;
    const bool rope_out = kRope && rope.pairs > 0 && rope.out;
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      const int d = half * 256 + 8 * (g0 + j) + c2;
      rope_cs[j] = rope_out && d >= rope.first ? RopeCosSin(rope, t, (d - rope.first) >> 1)
                                               : make_float2(1.0f, 0.0f);
    }
    float mx[2] = {kInitMax, kInitMax};
    float den[2] = {0.0f, 0.0f};
    if constexpr (!kShared) {
      for (int64_t s = 0; s < geo.splits; ++s) {
#pragma unroll
        for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], md[s * kH + r0 + 8 * r].x);
      }
#pragma unroll 2
      for (int64_t s = 0; s < geo.splits; ++s) {
        float w[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float2 v = md[s * kH + r0 + 8 * r];
          w[r] = exp2f(__fsub_rn(v.x, mx[r]));
          den[r] = __fadd_rn(den[r], __fmul_rn(v.y, w[r]));
        }
        const float4* st = acc + s * (kWgmmaStateGroups * kWgmmaStateThreads);
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          const float4 v = st[j * kWgmmaStateThreads];
          a[j][0] = __fadd_rn(a[j][0], __fmul_rn(v.x, w[0]));
          a[j][1] = __fadd_rn(a[j][1], __fmul_rn(v.y, w[0]));
          a[j][2] = __fadd_rn(a[j][2], __fmul_rn(v.z, w[1]));
          a[j][3] = __fadd_rn(a[j][3], __fmul_rn(v.w, w[1]));
        }
      }
    } else {
      __shared__ float s_w[kWgmmaCombinePass][kH];
      __shared__ float s_mx[kH];
      __shared__ float s_den[kH];
      // The first pass's first kWgmmaCombineBatch states, requested before anything waits on
      // them (session 77: they depend on nothing here, and at 10 splits every state round trip
      // and the per-row chain below were on the 1-token step's critical path).
      float4 x[kWgmmaCombineBatch][kGroups];
      auto load_states = [&](int64_t first, int count) {
#pragma unroll
        for (int i = 0; i < kWgmmaCombineBatch; ++i) {
          if (i >= count) continue;
          const float4* st = acc + (first + i) * (kWgmmaStateGroups * kWgmmaStateThreads);
#pragma unroll
          for (int j = 0; j < kGroups; ++j) x[i][j] = st[j * kWgmmaStateThreads];
        }
      };
      load_states(
          0, static_cast<int>(geo.splits < kWgmmaCombineBatch ? geo.splits : kWgmmaCombineBatch));
      __syncthreads();     // the previous item's readers of s_w, s_mx, s_den are done
      float m = kInitMax;  // row tid's M (tid < kH): max over the splits, ascending
      if (tid < kH) {
        for (int64_t s0 = 0; s0 < geo.splits; s0 += kWgmmaCombinePass) {
          float m_s[kWgmmaCombinePass];
#pragma unroll
          for (int i = 0; i < kWgmmaCombinePass; ++i) {
            m_s[i] = s0 + i < geo.splits ? md[(s0 + i) * kH + tid].x : 0.0f;
          }
#pragma unroll
          for (int i = 0; i < kWgmmaCombinePass; ++i) {
            if (s0 + i < geo.splits) m = fmaxf(m, m_s[i]);
          }
        }
        s_mx[tid] = m;
      }
      float d = 0.0f;  // row tid's denom (tid < kH)
      for (int64_t s0 = 0; s0 < geo.splits; s0 += kWgmmaCombinePass) {
        const int n = static_cast<int>(geo.splits - s0 < kWgmmaCombinePass ? geo.splits - s0
                                                                           : kWgmmaCombinePass);
        if (s0 > 0) {
          __syncthreads();  // the previous pass's readers of s_w are done
          load_states(s0, n < kWgmmaCombineBatch ? n : kWgmmaCombineBatch);
        }
        // Row tid's weights w_s = 2^(m_s − M) of the pass and its denom terms in split order,
        // each (m_s, denom_s) pair loaded once, the pass's loads issued together.
        if (tid < kH) {
          float2 v[kWgmmaCombinePass];
#pragma unroll
          for (int i = 0; i < kWgmmaCombinePass; ++i) {
            v[i] = i < n ? md[(s0 + i) * kH + tid] : make_float2(0.0f, 0.0f);
          }
#pragma unroll
          for (int i = 0; i < kWgmmaCombinePass; ++i) {
            if (i >= n) continue;
            const float w = exp2f(__fsub_rn(v[i].x, m));
            s_w[i][tid] = w;
            d = __fadd_rn(d, __fmul_rn(v[i].y, w));
          }
        }
        __syncthreads();
        for (int i0 = 0; i0 < n; i0 += kWgmmaCombineBatch) {
          if (i0 > 0)
            load_states(s0 + i0, n - i0 < kWgmmaCombineBatch ? n - i0 : kWgmmaCombineBatch);
#pragma unroll
          for (int i = 0; i < kWgmmaCombineBatch; ++i) {
            if (i0 + i >= n) continue;
            const float w0 = s_w[i0 + i][r0], w1 = s_w[i0 + i][r0 + 8];
#pragma unroll
            for (int j = 0; j < kGroups; ++j) {
              a[j][0] = __fadd_rn(a[j][0], __fmul_rn(x[i][j].x, w0));
              a[j][1] = __fadd_rn(a[j][1], __fmul_rn(x[i][j].y, w0));
              a[j][2] = __fadd_rn(a[j][2], __fmul_rn(x[i][j].z, w1));
              a[j][3] = __fadd_rn(a[j][3], __fmul_rn(x[i][j].w, w1));
            }
          }
        }
      }
      if (tid < kH) s_den[tid] = d;
      __syncthreads();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = s_mx[r0 + 8 * r];
        den[r] = s_den[r0 + 8 * r];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t h = h0 + r0 + 8 * r;
      if (h >= p.heads) continue;
      // seen ⇔ denom > 0; the sink is added after the test (CombineKernel).
      const float d =
          den[r] > 0.0f ? __fadd_rn(den[r], WgmmaSinkTerm(p.attn_sink[h], mx[r])) : 0.0f;
      uint16_t* o = p.out + t * p.out_stride + h * p.out_head_stride + half * 256 + c2;
#pragma unroll
      for (int j = 0; j < kGroups; ++j) {
        const int dim = half * 256 + 8 * (g0 + j) + c2;
        const float v0 = __fdiv_rn(a[j][2 * r], d), v1 = __fdiv_rn(a[j][2 * r + 1], d);
        uint32_t out = 0u;
        if (d > 0.0f) {
          out =
              rope_out && dim >= rope.first ? OutRopeRotate(v0, v1, rope_cs[j]) : PackBf16(v0, v1);
        }
        *reinterpret_cast<uint32_t*>(o + 8 * (g0 + j)) = out;
      }
    }
  }
}

}  // namespace flashserve::kernels::attn_device
