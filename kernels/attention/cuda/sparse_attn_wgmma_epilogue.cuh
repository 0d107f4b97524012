// The wgmma family's unit tail (README.md "Split states of the wgmma family", "RoPE inside the
// attention", "Output stage"): the split states in fragment order, the RoPE of Q and of the
// output from the step's cos/sin table, and the unsplit output through the shared-memory stage.
// Shared by WgmmaKernel (sparse_attn_wgmma_kernel.cuh), WgmmaWsKernel and WgmmaRowsKernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_device.cuh"
#include "kernels/attention/cuda/sparse_attn_pipeline.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/attention/div_by_rcp.h"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/norm_rope/cuda/norm_rope_math.cuh"

namespace flashserve::kernels::attn_device {

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
    pair = exact::F32x2ToBf16x2(re, im);
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
  return exact::F32x2ToBf16x2(re, im);
}

// The output pair (v0, v1) of dims (d, d + 1) as stored: rotated when it is a rope pair (table
// set, d >= first), else the plain bf16 pair.
__device__ __forceinline__ uint32_t OutPair(float v0, float v1, int d, const AttnRope& r,
                                            const float2* table) {
  if (table == nullptr || d < r.first) return PackBf16(v0, v1);
  return OutRopeRotate(v0, v1, table[(d - r.first) >> 1]);
}

// The output's staging tile (64 KB: WgmmaKernel's and the row kernel's Q tile, free once the
// unit's last S was waited for; wgmma-ws: the unit's last ring stage): row R (head h0 + R) holds
// its 512 bf16 outputs as 64 chunks of 16 bytes, chunk c at byte 1024·R + 16·(c ^ (R % 8)), so
// that both the accumulator layout's 4-byte writes (a warp: 8 rows × one chunk) and the row-wise
// 16-byte reads touch 32 distinct banks. The shared address of dim d (even) of row R:
__device__ __forceinline__ uint32_t OutStageAddr(uint32_t base, int row, int d) {
  return base + row * 1024 + (((d >> 3) ^ (row & 7)) << 4) + (d & 7) * 2;
}

// Copies the staged rows of the unit's heads to p.out with 16-byte stores, a warp's 32 lanes
// writing 512 contiguous bytes of one head row (the launchers take the wgmma family only with
// p.out and its strides 16-byte aligned: TensorPathFits, CheckRowFormFits). Every one of the 256
// math threads calls it after writing its part of the stage. `table` (the unit's cos/sin, or
// nullptr): first the rope pairs of the staged bf16 rows are rotated in place by the conjugate,
// (row, pair) items dealt over the 256 threads, then a second barrier — the same operations on
// the same bf16 pairs as OutPair (OutRopeRotate rounds to bf16 first), in a short loop instead of
// 16 unrolled rotations per warpgroup-1 thread.
__device__ __forceinline__ void WgmmaCopyOutStage(const SparseAttnParams& p, int64_t t, int64_t h0,
                                                  int tid, uint8_t* stage,
                                                  const AttnRope& rope = AttnRope{},
                                                  const float2* table = nullptr) {
  NamedBarrier<WgmmaShape::kMathBarrier, WgmmaShape::kThreads>();
  const int64_t rows = min(p.heads - h0, int64_t{WgmmaShape::kHeads});
  if (table != nullptr) {
    const uint32_t base = SmemAddr(stage);
#pragma unroll 1
    for (int item = tid; item < rows * rope.pairs; item += WgmmaShape::kThreads) {
      const int row = item / rope.pairs, k = item % rope.pairs;
      const int d = rope.first + 2 * k;
      const uint32_t addr = OutStageAddr(base, row, d);
      uint32_t pair;
      asm volatile("ld.shared.b32 %0, [%1];" : "=r"(pair) : "r"(addr));
      const float2 cs = table[k];
      float re = 0.0f, im = 0.0f;
      norm_rope_device::RotatePair(exact::Bf16ToF32(pair & 0xFFFFu), exact::Bf16ToF32(pair >> 16),
                                   cs.x, -cs.y, &re, &im);
      pair = exact::F32x2ToBf16x2(re, im);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(pair) : "memory");
    }
    NamedBarrier<WgmmaShape::kMathBarrier, WgmmaShape::kThreads>();
  }
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
      // Staged: the rope pairs are rotated in the stage (WgmmaCopyOutStage).
      put(j, OutPair(acc[4 * j + 2 * r], acc[4 * j + 2 * r + 1], d0 + 8 * j, rope,
                     kStaged ? nullptr : rope_table));
    }
  }
  if constexpr (kStaged) {
    WgmmaCopyOutStage(p, t, h0, 128 * half + wtid, stage, rope, seen ? rope_table : nullptr);
  }
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

}  // namespace flashserve::kernels::attn_device
