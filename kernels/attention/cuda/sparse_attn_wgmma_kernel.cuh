// WgmmaKernel: the wgmma path's unit kernel without warp specialisation (README.md "wgmma path";
// the layout and per-block steps are described at the top of sparse_attn_wgmma.cuh). Only
// sparse_attn_launch.cu includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_device.cuh"
#include "kernels/attention/cuda/sparse_attn_pipeline.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_epilogue.cuh"
#include "kernels/common/wgmma.cuh"

namespace flashserve::kernels::attn_device {

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
    const UnitSpan u = UnitOf(geo, unit, n_blocks, W::kHeads);
    const int64_t t = u.t, h0 = u.h0, blk_begin = u.blk_begin, blk_end = u.blk_end;

    // The first block's rows are read before the query copies are issued, so that their latency
    // overlaps the issue (the gather cannot start before they arrive).
    // A unit without blocks (width 0) loads nothing: its epilogue stages +0 in the Q tile, which
    // in-flight Q copies would overwrite (no wait comes before it on that path; session 68).
    const int32_t row_first = WgmmaRowOf(p, t, blk_begin, blk_end);
    if (blk_begin < blk_end) {
      WgmmaLoadQ(p, t, h0, base + W::kQOff, tid, W::kThreads);
      WgmmaLoadBlock(p, row_first, base + W::kKvOff, s_idx);
    }
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
