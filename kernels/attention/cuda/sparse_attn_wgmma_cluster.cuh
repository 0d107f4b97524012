// The cluster merge of the row form's split states (split_states.md "Cluster merge"; session 85;
// opt-in, SparseAttnCombineForm::kCluster: measured slower than the combine kernel, 1 token 19.0
// against 14.7 µs graph on an H100): where WgmmaRowsKernel<kRope, true> runs, the `geo.splits` CTAs
// of one item (token, group of 64 heads) form one thread-block cluster, and instead of writing
// their split states to global memory for WgmmaCombineKernel they merge them through distributed
// shared memory:
//   1. each CTA writes its state (acc in fragment order, 128 KB: its two KV tiles; its rows'
//      (m, denom): the Q tile) into its own shared memory, then the cluster meets at a barrier;
//   2. CTA rank r merges the float4 groups j = r, r + n, r + 2n, ... (n = splits) of every
//      thread position: thread tid < 64 computes row tid's M, weights and denom from the n CTAs'
//      (m, denom) pairs, every thread loads its group's n states from the n CTAs, sums them in
//      rank (= split) order and writes the bf16 output pairs (the inverse RoPE where asked);
//   3. a second cluster barrier: no CTA exits while another still reads its shared memory.
// The same operations in the same order as WgmmaCombineKernel (M = max over the splits from
// kInitMax, w_s = 2^(m_s − M), denom and the states summed in split order, the sink added after
// the denom > 0 test, one correctly rounded division, OutRopeRotate): the same bits. It takes
// away the second launch, the 10 × 128 KB of states through the L2 and the combine's row phase
// (session 84, H100 ncu at 1 token: the combine 8.1–8.3 µs against the split kernel's 16.0).
// Included by sparse_attn_launch.cu only (sm_90a).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_device.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_epilogue.cuh"

namespace flashserve::kernels::attn_device {

// The largest cluster (non-portable on sm_90; the launcher opts in) and so the most splits the
// cluster merge takes.
inline constexpr int kWgmmaClusterMaxSplits = 16;

// The merge's shared memory inside WgmmaShape's layout, free once the unit's last P·V was waited
// for: the states [32 j][256 threads] float4 over both KV tiles; (m, denom) [64 rows] float2,
// then the row phase's weights [kWgmmaClusterMaxSplits][64], M [64] and denom [64] in the Q tile.
struct WgmmaClusterShape {
  static constexpr uint32_t kAccOff = WgmmaShape::kKvOff;
  static constexpr uint32_t kMdOff = WgmmaShape::kQOff;
  static constexpr uint32_t kWOff = kMdOff + WgmmaShape::kHeads * 8;
  static constexpr uint32_t kMxOff = kWOff + kWgmmaClusterMaxSplits * WgmmaShape::kHeads * 4;
  static constexpr uint32_t kDenOff = kMxOff + WgmmaShape::kHeads * 4;
  static constexpr uint32_t kEnd = kDenOff + WgmmaShape::kHeads * 4;
};
static_assert(WgmmaClusterShape::kEnd <= WgmmaShape::kQOff + WgmmaShape::kTileBytes);
static_assert(kWgmmaStateGroups * kWgmmaStateThreads * 16 == 2 * WgmmaShape::kTileBytes,
              "the states fill both KV tiles");

// The shared::cluster address of `addr` (this CTA's shared memory) in CTA `rank` of the cluster,
// and 16- / 8-byte loads through such addresses (32-bit: no generic pointers beside the states).
__device__ __forceinline__ uint32_t ClusterMap(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
__device__ __forceinline__ float4 ClusterLoad4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ float2 ClusterLoad2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
               : "=f"(v.x), "=f"(v.y)
               : "r"(addr)
               : "memory");
  return v;
}

// CTA `geo.splits`-cluster rank r's part of the merge of item (t, h0), called by all 256 threads
// of every CTA of the cluster after the block loop, with the thread's accumulators and row state
// (rows r0, r0 + 8 of its fragments). `smem`: the CTA's aligned shared memory (WgmmaShape's
// layout). kRope: the output's inverse RoPE (Geometry::rope.out) is compiled in.
template <bool kRope>
__device__ __forceinline__ void WgmmaClusterMerge(const SparseAttnParams& p, const Geometry& geo,
                                                  int64_t t, int64_t h0, int tid,
                                                  const float (&acc)[128], const float (&m_run)[2],
                                                  const float (&den_run)[2], uint8_t* smem) {
  namespace cg = cooperative_groups;
  using C = WgmmaClusterShape;
  constexpr int kH = WgmmaShape::kHeads;
  constexpr int kN = kWgmmaClusterMaxSplits;
  cg::cluster_group cluster = cg::this_cluster();
  const int n = static_cast<int>(geo.splits);  // == the cluster's size (the launcher's)
  const int rank = static_cast<int>(cluster.block_rank());
  const int half = tid / 128;
  const int lane = tid % 32;
  const int r0 = ((tid % 128) / 32) * 16 + lane / 4;
  const int c2 = 2 * (lane % 4);

  // 1. The state into this CTA's shared memory: both warpgroups' last wgmma reads of the tiles
  // and Q were waited for by their own threads; the barrier makes them all done.
  __syncthreads();
  float4* st = reinterpret_cast<float4*>(smem + C::kAccOff) + tid;
#pragma unroll
  for (int j = 0; j < kWgmmaStateGroups; ++j) {
    st[j * kWgmmaStateThreads] =
        make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
  }
  auto* md = reinterpret_cast<float2*>(smem + C::kMdOff);
  if (tid < 128 && lane % 4 == 0) {  // both warpgroups hold the same rows' (m, denom)
    md[r0] = make_float2(m_run[0], den_run[0]);
    md[r0 + 8] = make_float2(m_run[1], den_run[1]);
  }
  cluster.sync();  // release / acquire: every CTA's state is visible cluster-wide

  // 2. This CTA's groups. The first group's states are requested before the row phase.
  const uint32_t base = SmemAddr(smem);
  float4 x[kN];
  auto load_group = [&](int j) {
    const uint32_t local = base + C::kAccOff + (j * kWgmmaStateThreads + tid) * 16;
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s < n) x[s] = ClusterLoad4(ClusterMap(local, s));
    }
  };
  load_group(rank);
  auto* s_w = reinterpret_cast<float*>(smem + C::kWOff);  // [split][row]
  auto* s_mx = reinterpret_cast<float*>(smem + C::kMxOff);
  auto* s_den = reinterpret_cast<float*>(smem + C::kDenOff);
  if (tid < kH) {
    // Row tid: M = max over the splits (ascending, from kInitMax), w_s = 2^(m_s − M), denom =
    // Σ denom_s·w_s in split order — WgmmaCombineKernel's row phase.
    float2 v[kN];
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s < n) v[s] = ClusterLoad2(ClusterMap(base + C::kMdOff + tid * 8, s));
    }
    float m = kInitMax;
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s < n) m = fmaxf(m, v[s].x);
    }
    float d = 0.0f;
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s >= n) continue;
      const float w = exp2f(__fsub_rn(v[s].x, m));
      s_w[s * kH + tid] = w;
      d = __fadd_rn(d, __fmul_rn(v[s].y, w));
    }
    s_mx[tid] = m;
    s_den[tid] = d;
  }
  __syncthreads();
  // Rows r0, r0 + 8: the divisor (the sink after the denom > 0 test; 0: no valid entry).
  float den[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t h = h0 + r0 + 8 * r;
    const float dr = s_den[r0 + 8 * r];
    den[r] = h < p.heads && dr > 0.0f
                 ? __fadd_rn(dr, WgmmaSinkTerm(p.attn_sink[h], s_mx[r0 + 8 * r]))
                 : 0.0f;
  }
  const AttnRope& rope = geo.rope;
  const bool rope_out = kRope && rope.pairs > 0 && rope.out;
#pragma unroll 1
  for (int j = rank; j < kWgmmaStateGroups; j += n) {
    if (j != rank) load_group(j);
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s >= n) continue;
      const float w0 = s_w[s * kH + r0], w1 = s_w[s * kH + r0 + 8];
      a[0] = __fadd_rn(a[0], __fmul_rn(x[s].x, w0));
      a[1] = __fadd_rn(a[1], __fmul_rn(x[s].y, w0));
      a[2] = __fadd_rn(a[2], __fmul_rn(x[s].z, w1));
      a[3] = __fadd_rn(a[3], __fmul_rn(x[s].w, w1));
    }
    const int dim = half * 256 + 8 * j + c2;
    const float2 cs = rope_out && dim >= rope.first ? RopeCosSin(rope, t, (dim - rope.first) >> 1)
                                                    : make_float2(1.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t h = h0 + r0 + 8 * r;
      if (h >= p.heads) continue;
      const float d = den[r];
      const float v0 = __fdiv_rn(a[2 * r], d), v1 = __fdiv_rn(a[2 * r + 1], d);
      uint32_t out = 0u;
      if (d > 0.0f) {
        out = rope_out && dim >= rope.first ? OutRopeRotate(v0, v1, cs) : PackBf16(v0, v1);
      }
      *reinterpret_cast<uint32_t*>(p.out + t * p.out_stride + h * p.out_head_stride + dim) = out;
    }
  }
  cluster.sync();  // 3. no CTA exits (or reuses its tiles) while another reads them
}

}  // namespace flashserve::kernels::attn_device
