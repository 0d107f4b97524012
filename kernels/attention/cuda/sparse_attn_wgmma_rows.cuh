// The row form's wgmma kernel (attention.h SparseAttnKvRows; README.md "Row form"): the wgmma
// path's math (sparse_attn_wgmma.cuh helpers and WgmmaSoftmax: the same operations in the same
// order, so its results equal the bf16 form's fed the decoded pool) over serving rows that never
// touch shared memory raw. Included by sparse_attn_launch.cu only (sm_90a).
//
// WgmmaRowsKernel: a CTA of two warpgroups (256 threads) takes one unit = (token, group of 64
// heads, split), like WgmmaKernel. Thread 4e + t owns list entry e of every block: it loads its
// share of the entry's serving row (the 16-value groups q = t + 4k, in two halves k = 4h ..
// 4h + 3: half 0 straight into registers, half 1 into its own shared-memory slot) and later
// decodes it exactly (row_decode.cuh: the values of DecodeRowsCpu) into the block's bf16 tile —
// one of two tiles, so that block b + 1 is decoded while the tensor cores run block b. Per block b
// (tile b % 2):
//   barrier (tile b published) → issue S(b) → decode block b + 1 into the other tile, load block
//   b + 2 → wait S, softmax → P·V(b), waited.
// A block's loads are issued a whole block before its decode, so their latency hides behind the
// block's tensor work. Shared memory: WgmmaShape's bf16 layout (Q, two 64 KB tiles, idx [2][64],
// the row max / sum / P exchange, the RoPE table) and the slots (WgmmaRowsShape).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/row_decode.cuh"
#include "kernels/attention/cuda/sparse_attn_device.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_cluster.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_epilogue.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_ws.cuh"
#include "kernels/common/stream_load.cuh"
#include "kernels/common/wgmma.cuh"

namespace flashserve::kernels::attn_device {

// Half h of a thread's share of one serving row, in registers between its loads and its decode:
// the 16-value groups q = t + 4k, k = 4h .. 4h + 3 (t = thread % 4). A window row (FP8 + UE8M0
// per 32): w[4k' ..] = the 16 code bytes of group k' = k - 4h, w[16], w[17] = scale bytes 8h ..
// 8h + 7 (those of the half's groups). A compressed row (FP4 + E4M3 per 16): w[2k' ..] = the 8
// code bytes of group k', w[8 .. 11] = scale bytes 16h .. 16h + 15.
struct RowHalf {
  uint32_t w[18];
  // Words i .. i + 3 / i, i + 1 (compile-time i after unrolling).
  __device__ __forceinline__ void Set4(int i, uint4 v) {
    w[i] = v.x;
    w[i + 1] = v.y;
    w[i + 2] = v.z;
    w[i + 3] = v.w;
  }
  __device__ __forceinline__ void Set2(int i, uint2 v) {
    w[i] = v.x;
    w[i + 1] = v.y;
  }
};

// Issues the loads of half h of serving row `row` (thread sub-index t) into x; -1 loads nothing.
// Rows are 16-byte aligned (CheckRowFormFits); the four threads of a row read 64 (window) or 32
// (compressed) contiguous code bytes per load instruction.
__device__ __forceinline__ void LoadRowHalf(const SparseAttnKvRows& r, int32_t row, int t, int h,
                                            RowHalf& x) {
  constexpr int kD = WgmmaShape::kD;
  if (row < 0) return;
  if (row < r.n_window) {
    const uint8_t* src = r.window + int64_t{row} * r.window_stride;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      x.Set4(4 * k, cuda_common::LoadNc16(src + 16 * (t + 4 * (4 * h + k))));
    x.Set2(16, cuda_common::LoadNc8(src + kD + 8 * h));
  } else {
    const uint8_t* src = r.compressed + (int64_t{row} - r.n_window) * r.compressed_stride;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      x.Set2(2 * k, cuda_common::LoadNc8(src + 8 * (t + 4 * (4 * h + k))));
    x.Set4(8, cuda_common::LoadNc16(src + kD / 2 + 16 * h));
  }
}

// Decodes half h of serving row `row` (landed in x) into the thread's entry of a bf16 tile:
// group q = t + 4k → tile chunks 2q, 2q + 1 (DecodeRowPair's placement, conflict-free stores),
// i.e. column block q / 4 = 4h + k at the thread's fixed offsets `dst0`, `dst1` (RowsDst) plus
// (4h + k) · kColBlockBytes; the values of DecodeRowsCpu (row_decode.cuh's block decoders); -1
// gives zeros.
__device__ __forceinline__ void DecodeRowHalf(int64_t n_window, int32_t row, const RowHalf& x,
                                              int t, int h, uint32_t dst0, uint32_t dst1) {
  const uint32_t col = static_cast<uint32_t>(h) * 4 * WgmmaShape::kColBlockBytes;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t out[2][4] = {{0u, 0u, 0u, 0u}, {0u, 0u, 0u, 0u}};
    if (row >= 0 && row < n_window) {
      // Scale byte 512 + q / 2 = byte (t + 4k) / 2 of the half's 8 (word k / 2: t < 4).
      const uint4 c = make_uint4(x.w[4 * k], x.w[4 * k + 1], x.w[4 * k + 2], x.w[4 * k + 3]);
      const uint32_t sb = (x.w[16 + k / 2] >> (8 * (((t + 4 * k) >> 1) & 3))) & 0xFFu;
      DecodeFp8Ue8m0Block16(c, sb, out);
    } else if (row >= 0) {
      // Scale byte 256 + q = byte t of the half's word k.
      const uint2 c = make_uint2(x.w[2 * k], x.w[2 * k + 1]);
      const uint32_t sb = (x.w[8 + k] >> (8 * t)) & 0xFFu;
      DecodeFp4E4m3Block16(c, sb, out);
    }
    StShared128(dst0 + col + k * WgmmaShape::kColBlockBytes, out[0]);
    StShared128(dst1 + col + k * WgmmaShape::kColBlockBytes, out[1]);
  }
}

// The thread's two store offsets into a tile at `kv_base` (entry e, chunks 2t and 2t + 1 of
// column block 0; DecodeRowHalf adds the column block).
__device__ __forceinline__ void RowsDst(uint32_t kv_base, int e, int t, uint32_t& dst0,
                                        uint32_t& dst1) {
  dst0 = kv_base + TileOffset(e, 2 * t);
  dst1 = kv_base + TileOffset(e, 2 * t + 1);
}

// Half 1 of a thread's share goes through shared memory instead (registers: the accumulators,
// P and half 0 leave no room for a second half in flight): a slot of kRowSlotBytes per thread
// after WgmmaShape's layout and the RoPE table, in RowHalf's order — a window row's 4 × 16 code
// bytes at 0, its 8 scale bytes at 64; a compressed row's 4 × 8 code bytes at 0, its 16 scale bytes
// at 32. Each thread copies (cp.async) and decodes only its own slot, so its own wait_group is
// the only synchronisation. 80 bytes: 5 16-byte units, so the slots of 8 threads hit distinct
// banks.
struct WgmmaRowsShape {
  static constexpr uint32_t kRowSlotBytes = 80;
  static constexpr uint32_t kSlotsOff = WgmmaShape::kEnd + WgmmaShape::kRopeBytes;
  static constexpr uint32_t kEnd = kSlotsOff + WgmmaShape::kThreads * kRowSlotBytes;
  static constexpr size_t kSmemBytes = kEnd + 1024;  // + slack to align to 1024
};
static_assert(WgmmaRowsShape::kSlotsOff % 16 == 0);
static_assert(WgmmaRowsShape::kSmemBytes <= 227 * 1024, "shared memory per CTA");

__device__ __forceinline__ void CpAsync8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
}

// Issues the cp.async copies of half 1 of serving row `row` (thread sub-index t) into the
// thread's slot at `slot`; -1 copies nothing.
__device__ __forceinline__ void CopyRowHalf1(const SparseAttnKvRows& r, int32_t row, int t,
                                             uint32_t slot) {
  constexpr int kD = WgmmaShape::kD;
  if (row < 0) return;
  if (row < r.n_window) {
    const uint8_t* src = r.window + int64_t{row} * r.window_stride;
#pragma unroll
    for (int k = 0; k < 4; ++k) CpAsync16(slot + 16 * k, src + 16 * (t + 4 * (4 + k)), true);
    CpAsync8(slot + 64, src + kD + 8);
  } else {
    const uint8_t* src = r.compressed + (int64_t{row} - r.n_window) * r.compressed_stride;
#pragma unroll
    for (int k = 0; k < 4; ++k) CpAsync8(slot + 8 * k, src + 8 * (t + 4 * (4 + k)));
    CpAsync16(slot + 32, src + kD / 2 + 16, true);
  }
}

// The landed slot of serving row `row` as RowHalf (half 1); nothing for -1.
__device__ __forceinline__ void ReadRowHalf1(int64_t n_window, int32_t row, const uint8_t* slot,
                                             RowHalf& x) {
  if (row < 0) return;
  const auto* v = reinterpret_cast<const uint4*>(slot);
  if (row < n_window) {
#pragma unroll
    for (int k = 0; k < 4; ++k) x.Set4(4 * k, v[k]);
    x.Set2(16, *reinterpret_cast<const uint2*>(slot + 64));
  } else {
    x.Set4(0, v[0]);
    x.Set4(4, v[1]);
    x.Set4(8, v[2]);
  }
}

// The list index of the thread's entry (threadIdx.x / 4) of block `blk`, unchecked (-1 past
// blk_end or the list): loaded ahead and checked only where it is used (RowsRowCheck), so that
// no compare waits for the load.
__device__ __forceinline__ int32_t RowsIndexOf(const SparseAttnParams& p, int64_t t, int64_t blk,
                                               int64_t blk_end) {
  if (blk >= blk_end) return -1;
  const int64_t pos = blk * kBlock + threadIdx.x / 4;
  return pos < p.width ? p.indices[t * p.indices_stride + pos] : -1;
}
// The pool row of list index `idx`, or -1 when unused or out of range (past n_window +
// n_compressed).
__device__ __forceinline__ int32_t RowsRowCheck(const SparseAttnParams& p, int32_t idx) {
  return (idx >= 0 && idx < p.kv_rows.n_window + p.kv_rows.n_compressed) ? idx : -1;
}

// A template on kRope and kCluster (kD = 512). kRope: the RoPE code (Geometry::rope) is compiled
// in; the launcher takes this instantiation only when it fills geo.rope. kCluster: a split list's
// CTAs merge their states in their cluster (sparse_attn_wgmma_cluster.cuh; launched as clusters of
// geo.splits CTAs, one unit per CTA) instead of writing them for WgmmaCombineKernel.
template <bool kRope, bool kCluster = false>
__global__ void __launch_bounds__(WgmmaShape::kThreads, 1)
    WgmmaRowsKernel(const SparseAttnParams p, const Geometry geo) {
  using W = WgmmaShape;
  static_assert(W::kThreads == 4 * kBlock, "four threads per list entry");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = AlignedSmem(smem_raw);
  const uint32_t base = SmemAddr(smem);
  auto* s_idx = reinterpret_cast<int32_t*>(smem + W::kIdxOff);  // [2][64]: the tiles' rows
  auto* s_max = reinterpret_cast<float*>(smem + W::kMaxOff);
  auto* s_sum = reinterpret_cast<float*>(smem + W::kSumOff);
  auto* s_p = reinterpret_cast<uint32_t*>(smem + W::kPOff);
  auto* rope_table = reinterpret_cast<float2*>(smem + W::kEnd);
  const int tid = static_cast<int>(threadIdx.x);
  // The warpgroup (entries 32·half.. in S, dims 256·half.. in P·V), through a shuffle so that
  // ptxas sees it warp-uniform (WgmmaQkIssue branches on it).
  const int half = __shfl_sync(0xFFFFFFFFu, tid / 128, 0);
  const int wtid = tid % 128;
  const int e = tid / 4;  // the thread's list entry of every block
  const int sub = tid % 4;
  const uint32_t slot = WgmmaRowsShape::kSlotsOff + tid * WgmmaRowsShape::kRowSlotBytes;
  const int64_t n_window = p.kv_rows.n_window;
  const float c = __fmul_rn(p.softmax_scale, kLog2E);  // WgmmaSoftmax's scale
  const int64_t n_blocks = (p.width + kBlock - 1) / kBlock;
  LaunchDependents();  // the combine kernel (if any) may take idle SMs and wait there

  for (int64_t unit = blockIdx.x; unit < geo.units; unit += gridDim.x) {
    const UnitSpan u = UnitOf(geo, unit, n_blocks, WgmmaShape::kHeads);
    const int64_t t = u.t, blk_begin = u.blk_begin, blk_end = u.blk_end;
    // List indices of blocks blk_begin .. + 3 (read before the Q copies, so that their latency
    // overlaps the issue; checked only where used).
    const int32_t idx0 = RowsIndexOf(p, t, blk_begin, blk_end);
    const int32_t idx1 = RowsIndexOf(p, t, blk_begin + 1, blk_end);
    const int32_t idx2 = RowsIndexOf(p, t, blk_begin + 2, blk_end);
    int32_t idx3 = RowsIndexOf(p, t, blk_begin + 3, blk_end);
    // Not for a unit without blocks (width 0): its epilogue stages +0 in the Q tile, and no
    // barrier orders the other threads' Q copies before that (session 68).
    if (blk_begin < blk_end) WgmmaLoadQ(p, t, u.h0, base + W::kQOff, tid, W::kThreads);
    CpAsyncCommit();
    const int32_t row0 = RowsRowCheck(p, idx0);
    int32_t row1 = RowsRowCheck(p, idx1);
    RowHalf x0;  // half 0 of the next block's row, in flight or landed
    {
      // The first block through registers (both halves), then the second block's loads (half 0
      // into x0, half 1 into the slot: its own commit group), so that they fly while the first
      // is decoded into tile 0 (its latency is exposed once per unit).
      RowHalf xa, xb;
      LoadRowHalf(p.kv_rows, row0, sub, 0, xa);
      LoadRowHalf(p.kv_rows, row0, sub, 1, xb);
      LoadRowHalf(p.kv_rows, row1, sub, 0, x0);
      CopyRowHalf1(p.kv_rows, row1, sub, base + slot);
      CpAsyncCommit();
      if (blk_begin < blk_end) {
        uint32_t dst0, dst1;
        RowsDst(base + W::kKvOff, e, sub, dst0, dst1);
        DecodeRowHalf(n_window, row0, xa, sub, 0, dst0, dst1);
        DecodeRowHalf(n_window, row0, xb, sub, 1, dst0, dst1);
        if (sub == 0) s_idx[e] = row0;
      }
    }
    int32_t row2 = RowsRowCheck(p, idx2);
    float sink[2] = {0.0f, 0.0f};  // read now, off the epilogue's path
    if (geo.splits == 1) WgmmaLoadSinks(p, u.h0, wtid, sink);

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    float m_run[2] = {kInitMax, kInitMax};  // rows r0, r0 + 8 of the thread's fragments
    float den_run[2] = {0.0f, 0.0f};
    bool seen = false;
    // The RoPE table: read after the first block's barriers (Q) or the block loop's (epilogue).
    if (kRope && RopeTableNeeded(geo.rope, geo.splits)) {
      RopeFillTable(geo.rope, t, tid, rope_table);
    }
    CpAsyncWait<1>();  // this thread's Q copies landed (the slot's may still be in flight)
    if (kRope && geo.rope.pairs > 0 && geo.rope.q && blk_begin < blk_end) {
      // q's RoPE before the block loop: after the barrier every thread's Q copies and the table
      // are visible; the first block's fence.proxy.async and barrier publish the rotated Q.
      __syncthreads();
      WgmmaRotateQ(geo.rope, rope_table, base + W::kQOff, tid, W::kThreads);
    }

    for (int64_t blk = blk_begin; blk < blk_end; ++blk) {
      const int buf = static_cast<int>((blk - blk_begin) & 1);
      const uint32_t kv_base = base + W::kKvOff + buf * W::kTileBytes;
      const uint32_t next_base = base + W::kKvOff + (buf ^ 1) * W::kTileBytes;
      const int32_t* idx = s_idx + buf * kBlock;
      // This thread's tile writes (and Q) before the async proxy's reads; after the barrier every
      // thread's are visible, and every thread's wgmma reads of the other tile (P·V of blk - 1)
      // are done, so block blk + 1 may be decoded into it. Through a shuffle, so that ptxas sees
      // the wgmma branches below warp-uniform.
      wgmma::FenceProxyAsyncShared();
      const bool any = __shfl_sync(0xFFFFFFFFu, __syncthreads_or(sub == 0 && idx[e] >= 0), 0) != 0;
      const bool next = blk + 1 < blk_end;
      float s[16];
      uint32_t a[4][4];  // bf16 P of the whole block in the register-A layout, k-steps 0..3
      if (any) {         // CTA-uniform; a block without a valid entry is a no-op (as on the CPU)
#pragma unroll
        for (int i = 0; i < 16; ++i) s[i] = 0.0f;
        WgmmaQkIssue(s, base + W::kQOff, kv_base, half);
      }
      if (next) {
        // Both halves of block blk + 1 (half 0 from x0, half 1 from the slot, read into x0 once
        // half 0 is decoded) into the other tile, one copy of the decode code; then block
        // blk + 2's loads.
        uint32_t dst0, dst1;
        RowsDst(next_base, e, sub, dst0, dst1);
#pragma unroll 1
        for (int h = 0; h < 2; ++h) {
          if (h == 1) {
            CpAsyncWait<0>();  // this thread's slot copies (half 1 of block blk + 1) landed
            ReadRowHalf1(n_window, row1, smem + slot, x0);
          }
          DecodeRowHalf(n_window, row1, x0, sub, h, dst0, dst1);
        }
        if (sub == 0) s_idx[(buf ^ 1) * kBlock + e] = row1;
        LoadRowHalf(p.kv_rows, row2, sub, 0, x0);
        CopyRowHalf1(p.kv_rows, row2, sub, base + slot);
        CpAsyncCommit();
      }
      if (any) {
        WgmmaWait(s);
        float alpha[2];
        WgmmaSoftmax(s, idx, c, half, wtid, s_max, s_sum, s_p, m_run, den_run, alpha, a);
        // acc·1 = acc: a warp none of whose rows moved its max skips the 128 multiplies.
        if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
          for (int i = 0; i < 128; ++i) acc[i] = __fmul_rn(acc[i], alpha[(i >> 1) & 1]);
        }
        WgmmaPv(acc, a, kv_base, half);  // waited: this thread's reads of the tile are done
        seen = true;
      }
      row1 = row2;
      row2 = RowsRowCheck(p, idx3);
      idx3 = RowsIndexOf(p, t, blk + 4, blk_end);
    }

    if (geo.splits == 1) {
      WgmmaStoreOutput<!kRope>(p, t, u.h0, half, wtid, seen, acc, m_run, den_run, sink, geo.rope,
                               kRope && geo.rope.pairs > 0 && geo.rope.out ? rope_table : nullptr,
                               smem + W::kQOff);
    } else if constexpr (kCluster) {
      WgmmaClusterMerge<kRope>(p, geo, t, u.h0, tid, acc, m_run, den_run, smem);
    } else {
      WgmmaStoreSplitState(geo, unit, tid, acc, m_run, den_run);  // for WgmmaCombineKernel
    }
    CpAsyncWait<0>();
    // One unit per CTA (the launcher's grid); without the loop ptxas keeps the merge in 238
    // registers, with it the merge spilled (~0.9 KB).
    if constexpr (kCluster) break;
    __syncthreads();  // the next unit reuses Q, the tiles, the slots and the exchange arrays
  }
}

}  // namespace flashserve::kernels::attn_device
