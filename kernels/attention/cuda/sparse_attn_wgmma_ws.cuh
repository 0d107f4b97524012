// The warp-specialised wgmma kernel of LaunchSparseAttn (path wgmma-ws; README.md "CUDA",
// "wgmma-ws"): the wgmma path's math (sparse_attn_wgmma.cuh helpers, the same softmax operations
// in the same order) with the gather moved to a producer warpgroup and the list blocks passed
// through a ring of shared-memory stages guarded by mbarriers. Included by sparse_attn_launch.cu
// and wgmma_ws_check.cu only (sm_90a).
//
// WgmmaWsKernel: a persistent CTA of three warpgroups (384 threads, one per SM) walks units =
// (token, group of 64 heads, split) grid-stride, like WgmmaKernel's units. Warpgroups 0 and 1 are
// the consumers (the same values as WgmmaKernel's n32 variant, bit for bit): the two lead
// alternate non-empty blocks — the lead computes the block's whole S (m64n64: full tensor rate,
// where the n32 halves ran at 2/3, shared-memory-bound), its softmax, and hands m′, the row sums
// and bf16 P to the other through shared memory and named barrier 4 + lead; the other, meanwhile,
// issues the S of the next block (which it leads) when that block has already landed (probed,
// never waited for); each does P·V for dims 256g..; warpgroup 2 is the producer: it copies every
// list block's 64 rows into stage (ring slot % 2) with cp.async (8 threads per row, so a warp's
// request is 4 rows × 128 contiguous bytes), Q with a unit's first block (and rotates q's RoPE
// pairs once Q has landed), and signals the stage's `full` barrier through
// cp.async.mbarrier.arrive (the hardware arrives once the thread's copies have landed; the
// producer never waits for them) plus a plain arrive for its idx writes (an L2 prefetch of the
// block after next was measured and removed: README.md "wgmma-ws"). The consumers wait on `full`,
// fence the landed copies to the async proxy, and arrive on `empty` once their P·V of the stage
// has completed — except for a unit's last block, whose stage becomes the unit's output stage and
// is released after the epilogue — and on `q_empty` once a unit's block loop is done, so that the
// next unit's first block and Q are gathered during this unit's tail. Shared memory:
// WgmmaShape's layout (Q, two 64 KB stages, idx [2][64], row max / sum / P exchange), five
// mbarriers (full[2], empty[2], q_empty) and three cos/sin tables. No CTA-wide barrier after the
// start: the consumers meet on named barrier 1 (256 threads) before the output stage, on 4 / 5
// for the lead's hand-off and each warpgroup on 6 / 7 (128 threads) to agree on the probe, the
// producer threads on named barrier 3 before rotating Q, the two roles only through the
// mbarriers. Registers: the producer gives its warpgroup's down to kProducerRegs, the consumers
// take kConsumerRegs.
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

// FS_WS_ROWS_WIDE (an A/B build, wgmma_ws.md "Session 70"; never the default): the row form's
// producer role on two warpgroups (256 threads, 512 per CTA), so that twice the warps decode; the
// consumers' P·V then runs as m64n128 halves (an m64n256 instruction does not compile under the
// 128-register launch bound of 512 threads), the bf16 form's producer stays one warpgroup (the
// other gives its registers up and exits).
#ifdef FS_WS_ROWS_WIDE
inline constexpr int kWsProducerWarpgroups = 2;
#else
inline constexpr int kWsProducerWarpgroups = 1;
#endif
inline constexpr int kWsPvParts = kWsProducerWarpgroups == 1 ? 1 : 2;  // WgmmaPvIssue's kParts

struct WgmmaWsShape {
  static constexpr int kConsumerThreads = 256;  // warpgroups 0, 1
  static constexpr int kProducerThreads = 128;  // warpgroup 2: the bf16 form's producer
  // The row form's producer threads (warpgroups 2 ..; FS_WS_ROWS_WIDE: 2, 3).
  static constexpr int kRowsProducerThreads = 128 * kWsProducerWarpgroups;
  static constexpr int kThreads = kConsumerThreads + kRowsProducerThreads;
  static constexpr uint32_t kStages = 2;  // Q + 3 stages of 64 KB would exceed 227 KB
  // setmaxnreg: 256 · 208 + 128 · 88 = 64512 = 384 · 168, the CTA's allocation (setmaxnreg only
  // moves registers within it; a larger sum would hang the consumers' inc). ptxas allocates
  // each role within its budget (-Xptxas -v: no spills at 208 / 88; the producer's unrolled
  // copies spill below 88). FS_WS_ROWS_WIDE: 256 · 208 + 256 · 48 = 65536 = 512 · 128 (at 200 /
  // 56 ptxas serialises every wgmma, C7512).
  static constexpr uint32_t kConsumerRegs = 208;
  static constexpr uint32_t kProducerRegs = kWsProducerWarpgroups == 1 ? 88 : 48;
  static constexpr uint32_t kLaunchRegs = 65536 / kThreads / 8 * 8;  // 168 / 128
  static_assert(kConsumerThreads * kConsumerRegs + kRowsProducerThreads * kProducerRegs <=
                kThreads * kLaunchRegs);  // the CTA's allocation under __launch_bounds__
  // Named barriers: 0 is __syncthreads.
  static constexpr uint32_t kConsumerBarrier = 1;  // the two consumer warpgroups
  // mbarriers after WgmmaShape's layout: full[kStages], empty[kStages], then q_empty, 8 bytes
  // each (the region rounded up to 16 bytes). Expected arrivals per phase: full — two per
  // producer thread (its copies landed, its s_idx writes released); empty and q_empty — one per
  // consumer thread (q_empty: the unit's last read of the Q tile is done, so the producer may
  // copy the next unit's Q into it).
  static constexpr uint32_t kFullArrivals = 2 * kProducerThreads;
  static constexpr uint32_t kRowsFullArrivals = kRowsProducerThreads;  // the row form: one each
  static constexpr uint32_t kEmptyArrivals = kConsumerThreads;
  static constexpr uint32_t kQEmptyArrivals = kConsumerThreads;
  static constexpr uint32_t kBarOff = WgmmaShape::kEnd;
  static constexpr uint32_t kEnd = kBarOff + (2 * kStages + 1 + 1) * 8;
  // After the layout: the consumers' cos/sin table (the output's RoPE), then the producer's two
  // (q's RoPE; one per unit parity, WsRotateQ), then the alignment slack.
  static constexpr uint32_t kRopeTables = 3 * WgmmaShape::kRopeBytes;
  static constexpr size_t kSmemBytes = kEnd + kRopeTables + 1024;
  // The producer's copy pattern: thread i copies chunks 8k + i % 8 of entries i / 8 + 16j.
  static constexpr int kRowsPerThread = kBlock / (kProducerThreads / 8);  // 4
  // The row form (kRows): the producer stages the serving rows of a block in chunks of
  // kRawChunkRows rows through a ring of kRawSlots slots after the barriers (a slot: the chunk's
  // rows kRawRowBytes apart, the larger serving row), then the rows' indices [slot][row], and
  // decodes each landed chunk into the block's bf16 stage. kRawAhead chunks are in flight while
  // one is decoded. 223.6 KB in all.
  static constexpr int kRawChunkRows = 8;
  static constexpr int kRawChunks = kBlock / kRawChunkRows;  // per block
  static constexpr int kRawSlots = 5;
  static constexpr int kRawAhead = kRawSlots - 1;
  static constexpr int kRawThreadsPerRow = kRowsProducerThreads / kRawChunkRows;  // 16 (wide: 32)
  static constexpr uint32_t kRawRowBytes = WgmmaShape::kRawSlotBytes;             // 528
  static constexpr uint32_t kRawSlotBytes = kRawChunkRows * kRawRowBytes;
  static constexpr uint32_t kRawOff = kEnd;
  static constexpr uint32_t kRawIdxOff = kRawOff + kRawSlots * kRawSlotBytes;
  // The list indices of the chunks ahead, [kIdxAhead slots][kRawChunkRows], copied (cp.async)
  // with the chunk kRawAhead earlier, so that no global load sits on the producer's issue path.
  static constexpr int kIdxAhead = 2 * kRawAhead;
  static constexpr uint32_t kPreIdxOff = kRawIdxOff + kRawSlots * kRawChunkRows * 4;
  static constexpr uint32_t kRowsEnd = kPreIdxOff + kIdxAhead * kRawChunkRows * 4;
  static constexpr size_t kRowsSmemBytes = kRowsEnd + kRopeTables + 1024;
  static constexpr uint32_t kProducerBarrier = 3;  // the producer role's threads
  // The lead hand-off (WsConsumeUnit): warpgroup g arrives on kLeadBarrier0 + g once its P, m′
  // and row sums of a block it leads are in shared memory; the other warpgroup syncs on it. One
  // barrier per direction, so that a warpgroup never arrives twice on an uncompleted phase.
  static constexpr uint32_t kLeadBarrier0 = 4;
};
static_assert(WgmmaWsShape::kBarOff % 8 == 0, "mbarriers are 8-byte aligned");
static_assert(WgmmaWsShape::kSmemBytes <= 227 * 1024, "shared memory per CTA");
static_assert(WgmmaWsShape::kRowsSmemBytes <= 227 * 1024, "shared memory per CTA (row form)");
static_assert(WgmmaWsShape::kRawOff % 16 == 0 && WgmmaWsShape::kRawRowBytes % 16 == 0);
static_assert(WgmmaShape::kChunks % WgmmaWsShape::kRawThreadsPerRow == 0);
static_assert(WgmmaShape::kThreads == WgmmaWsShape::kConsumerThreads);
static_assert(WgmmaShape::kMathBarrier == WgmmaWsShape::kConsumerBarrier,
              "WgmmaSoftmax's named barrier is the consumers' one");

__device__ __forceinline__ uint32_t WsFullBar(uint32_t base, uint32_t stage) {
  return base + WgmmaWsShape::kBarOff + stage * 8;
}
__device__ __forceinline__ uint32_t WsEmptyBar(uint32_t base, uint32_t stage) {
  return base + WgmmaWsShape::kBarOff + (WgmmaWsShape::kStages + stage) * 8;
}
__device__ __forceinline__ uint32_t WsQEmptyBar(uint32_t base) {
  return base + WgmmaWsShape::kBarOff + 2 * WgmmaWsShape::kStages * 8;
}

// The end of a unit's block loop in both roles: at least one block, so that the consumers always
// have a ring stage for the output (WsConsumeUnit); a block past blk_end has no valid entry.
__device__ __forceinline__ int64_t WsBlockStop(int64_t blk_begin, int64_t blk_end) {
  return blk_end > blk_begin ? blk_end : blk_begin + 1;
}

// Waits until the consumers have released the Q tile of the CTA's previous unit (`units` = the
// units this CTA started before; a fresh barrier counts as released).
__device__ __forceinline__ void WsWaitQEmpty(uint32_t base, uint32_t units) {
  MbarWait(WsQEmptyBar(base), (units & 1) ^ 1);
}

// The producer warpgroup's thread `ptid` (0..127) copies 16-byte chunks 8k + ptid % 8 (k = 0..7)
// of entries ptid / 8 + 16j (j = 0..3) of a list block: rows[j] is entry j's pool row or -1
// (zero-filled). When ptid % 8 == 0 it writes s_idx[entry] = rows[j].
__device__ __forceinline__ void WsLoadBlock(const SparseAttnParams& p, const int32_t (&rows)[4],
                                            int ptid, uint32_t kv_base, int32_t* s_idx) {
  static_assert(WgmmaWsShape::kRowsPerThread == 4, "rows[] holds four entries");
  const int sub = ptid % 8;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int e = ptid / 8 + 16 * j;
    const int32_t row = rows[j];
    const uint16_t* src = row >= 0 ? p.kv + int64_t{row} * p.kv_stride : p.q;
#pragma unroll
    for (int k = 0; k < WgmmaShape::kChunks / 8; ++k) {
      const int chunk = 8 * k + sub;
      CpAsync16(kv_base + TileOffset(e, chunk), row >= 0 ? src + chunk * 8 : src, row >= 0);
    }
    if (sub == 0) s_idx[e] = row;
  }
}

// The list entries of the producer thread's four rows of block `blk` as read (-1 past blk_end or
// the list's end), not yet checked against the pool (WsValidRows): the check is made a block
// later, so that the producer does not wait here for the loads (it did: ~7 % of wgmma-ws's warp
// samples at 256 tokens sat on the range check right after the load, session 26).
__device__ __forceinline__ void WsListEntries(const SparseAttnParams& p, int64_t t, int64_t blk,
                                              int64_t blk_end, int ptid, int32_t (&entries)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t pos = blk * kBlock + ptid / 8 + 16 * j;
    entries[j] = blk < blk_end && pos < p.width ? p.indices[t * p.indices_stride + pos] : -1;
  }
}

// The pool rows of four list entries: the entry, or -1 when unused or out of range (RowOf's rule).
__device__ __forceinline__ void WsValidRows(const SparseAttnParams& p, const int32_t (&entries)[4],
                                            int32_t (&rows)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) rows[j] = entries[j] >= 0 && entries[j] < p.n_kv ? entries[j] : -1;
}

// q's RoPE on the producer (kRope with rope.q; README.md "wgmma-ws", RoPE): the unit's cos/sin
// into the producer's table of this unit's parity (`units` & 1: a fast thread may fill the next
// unit's table while a slow one still rotates with this one's), read after a producer barrier.
__device__ __forceinline__ float2* WsProducerRopeTable(uint8_t* rope_tables, uint32_t units) {
  return reinterpret_cast<float2*>(rope_tables + (1 + (units & 1)) * WgmmaShape::kRopeBytes);
}

// Rotates the landed Q tile in place by the 128 producer threads once every one of them has
// waited for its own copies of Q (CpAsyncWaitAll before the call) and the table is written, then
// fences the writes to the async proxy: the consumers' wgmma reads them after the block's `full`
// phase, to which each producer thread arrives after this.
template <int kN = WgmmaWsShape::kProducerThreads>
__device__ __forceinline__ void WsRotateQ(const AttnRope& rope, const float2* table,
                                          uint32_t q_base, int ptid) {
  NamedBarrier<WgmmaWsShape::kProducerBarrier, kN>();
  WgmmaRotateQ(rope, table, q_base, ptid, kN);
  wgmma::FenceProxyAsyncShared();
}

// The producer's part of one unit: blocks blk_begin .. WsBlockStop - 1 into the ring, Q with the
// first. `it` counts ring slots over the CTA's units (stage it % 2, phase (it / 2) % 2); the
// consumers count the same blocks. A block's `full` phase completes after 2 arrivals per producer
// thread: cp.async.mbarrier.arrive (its copies, Q included, have landed) and a plain arrive
// (releases its s_idx writes). The producer never waits for its own copies, so block blk + 1's
// copies can be issued while block blk's are still in flight. The indices of block blk + 2 are
// read after block blk is issued; block blk + 1's are already in registers. Across units: the
// first block's copies are issued as soon as its stage is free (during the previous unit's last
// block), Q's only once the consumers released the Q tile (`units`: WsWaitQEmpty), so the
// gather of a unit's first block overlaps the previous unit's tail. kRope with rope.q: the
// producer rotates Q once it has landed, before its second arrival on the first block's `full`
// (WsRotateQ), so the consumers find it rotated.
template <bool kRope>
__device__ __forceinline__ void WsProduceUnit(const SparseAttnParams& p, const AttnRope& rope,
                                              int64_t t, int64_t h0, int64_t blk_begin,
                                              int64_t blk_end, uint32_t base, uint8_t* smem,
                                              uint8_t* rope_tables, uint32_t& it, uint32_t units) {
  using W = WgmmaShape;
  using WS = WgmmaWsShape;
  const int ptid = static_cast<int>(threadIdx.x) - WS::kConsumerThreads;
  auto* s_idx = reinterpret_cast<int32_t*>(smem + W::kIdxOff);
  const bool rotate = kRope && rope.pairs > 0 && rope.q;
  float2* q_table = WsProducerRopeTable(rope_tables, units);
  if (rotate) RopeFillTable(rope, t, ptid, q_table);
  int32_t rows[4];  // block blk
  int32_t next[4];  // block blk + 1's list entries (WsListEntries)
  WsListEntries(p, t, blk_begin, blk_end, ptid, next);
  WsValidRows(p, next, rows);
  WsListEntries(p, t, blk_begin + 1, blk_end, ptid, next);
  const int64_t blk_stop = WsBlockStop(blk_begin, blk_end);
  for (int64_t blk = blk_begin; blk < blk_stop; ++blk, ++it) {
    const uint32_t stage = it % WS::kStages;
    // The consumers released this stage (its previous block's P·V, or the previous unit's output
    // stage, completed); a fresh barrier counts as released (parity 1).
    MbarWait(WsEmptyBar(base, stage), ((it / WS::kStages) & 1) ^ 1);
    WsLoadBlock(p, rows, ptid, base + W::kKvOff + stage * W::kTileBytes, s_idx + stage * kBlock);
    if (blk == blk_begin) {
      WsWaitQEmpty(base, units);
      WgmmaLoadQ(p, t, h0, base + W::kQOff, ptid, WS::kProducerThreads);
    }
    CpAsyncMbarrierArriveNoinc(WsFullBar(base, stage));
    if (rotate && blk == blk_begin) {
      // Q's copies are never committed (the mbarrier tracks them): wait_all, not wait_group 0,
      // which returned with them in flight and let the rotation read stale Q (session 68).
      CpAsyncWaitAll();
      WsRotateQ(rope, q_table, base + W::kQOff, ptid);
    }
    MbarArrive(WsFullBar(base, stage));
    WsValidRows(p, next, rows);
    WsListEntries(p, t, blk + 2, blk_end, ptid, next);
  }
}

// ---- the row form's producer (kRows) ------------------------------------------------------------

// Thread `sub` (0..15) of a chunk row copies the 16-byte pieces sub, sub + 16, .. of serving row
// `row` (33 of a window row, 18 of a compressed one) to `dst`; -1 copies nothing.
__device__ __forceinline__ void WsLoadRawRow(const SparseAttnParams& p, int32_t row, int sub,
                                             uint32_t dst) {
  if (row < 0) return;
  const SparseAttnKvRows& r = p.kv_rows;
  const bool window = row < r.n_window;
  const uint8_t* src = window ? r.window + int64_t{row} * r.window_stride
                              : r.compressed + (int64_t{row} - r.n_window) * r.compressed_stride;
  const int chunks = window ? WgmmaShape::kWindowChunks : WgmmaShape::kCompressedChunks;
  for (int c = sub; c < chunks; c += WgmmaWsShape::kRawThreadsPerRow) {
    CpAsync16(dst + c * 16, src + c * 16, true);
  }
}

// Decodes the thread's 16-value pairs sub, sub + 16 of the landed serving row `row` at `raw`
// into entry e of the bf16 tile at `kv_base` (DecodeRowPair, the row kernel's decoders: the
// values of DecodeRowsCpu, so the tile holds the bf16 form's values); -1 gives a zero row.
__device__ __forceinline__ void WsDecodeRawRow(const SparseAttnParams& p, int32_t row,
                                               const uint8_t* raw, int sub, int e,
                                               uint32_t kv_base) {
  constexpr int kPairs = WgmmaShape::kChunks / 2 / WgmmaWsShape::kRawThreadsPerRow;  // 2
#pragma unroll
  for (int g = 0; g < kPairs; ++g) {
    DecodeRowPair(p, row, raw, sub + WgmmaWsShape::kRawThreadsPerRow * g, e, kv_base);
  }
}

// The row form's producer part of one unit: Q, then the serving rows of blocks blk_begin ..
// blk_end - 1 in chunks of 8 rows (chunk k: list positions 64·blk_begin + 8k ..) through the raw
// ring (slot k % 5, 4 chunks in flight), each chunk decoded into its block's bf16 stage (ring
// slot `it`, as WsProduceUnit's) once it has landed. Thread ptid: chunk row ptid / 16, pieces and
// value groups ptid % 16 (+ 16 ..). A chunk's list indices are copied into shared memory with
// the chunk four ahead of it (its cp.async group), so the copies are issued without a global
// load in the way (the indices of chunks 0..7 come first, waited for). Per chunk k: wait for its
// cp.async group (Q comes with chunk 0's) → producer barrier (every thread's copies of the chunk
// and of chunk k + 4's indices visible; every thread done decoding chunk k - 1, whose slot the
// next copy reuses) → copies of chunk k + 4 and of chunk k + 8's indices → with a block's first
// chunk, wait for the stage's `empty` → decode → with its last chunk, fence.proxy.async (the
// decoded tile before the consumers' wgmma reads) and one arrival per thread on `full`.
template <bool kRope>
__device__ __forceinline__ void WsProduceRowsUnit(const SparseAttnParams& p, const AttnRope& rope,
                                                  int64_t t, int64_t h0, int64_t blk_begin,
                                                  int64_t blk_end, uint32_t base, uint8_t* smem,
                                                  uint8_t* rope_tables, uint32_t& it,
                                                  uint32_t units) {
  using W = WgmmaShape;
  using WS = WgmmaWsShape;
  const int ptid = static_cast<int>(threadIdx.x) - WS::kConsumerThreads;
  const int rr = ptid / WS::kRawThreadsPerRow;  // the thread's row of a chunk
  const int sub = ptid % WS::kRawThreadsPerRow;
  auto* s_idx = reinterpret_cast<int32_t*>(smem + W::kIdxOff);
  auto* raw_idx = reinterpret_cast<int32_t*>(smem + WS::kRawIdxOff);
  auto* pre_idx = reinterpret_cast<int32_t*>(smem + WS::kPreIdxOff);
  // Past blk_end (WsBlockStop's extra block) every position is past the width: no valid entry.
  const int64_t n_chunks = (WsBlockStop(blk_begin, blk_end) - blk_begin) * WS::kRawChunks;
  const int64_t pos0 = blk_begin * kBlock + rr;  // the thread's row's list position in chunk 0
  const int32_t* list = p.indices + t * p.indices_stride;
  const bool rotate = kRope && rope.pairs > 0 && rope.q;
  float2* q_table = WsProducerRopeTable(rope_tables, units);
  if (rotate) RopeFillTable(rope, t, ptid, q_table);
  // Chunk j's index of the thread's row into pre_idx (thread sub 0 of the row; -1 past the list).
  auto fetch_idx = [&](int64_t j) {
    if (sub != 0) return;
    const int i = static_cast<int>(j % WS::kIdxAhead) * WS::kRawChunkRows + rr;
    const int64_t pos = pos0 + j * WS::kRawChunkRows;
    if (j < n_chunks && pos < p.width) {
      CpAsync4(base + WS::kPreIdxOff + 4 * i, list + pos);
    } else {
      pre_idx[i] = -1;
    }
  };
  // Chunk j's rows (their indices landed) into raw slot j % 5.
  auto issue = [&](int64_t j) {
    const int slot = static_cast<int>(j % WS::kRawSlots);
    const int32_t idx = pre_idx[(j % WS::kIdxAhead) * WS::kRawChunkRows + rr];
    const int32_t row = (idx >= 0 && idx < p.kv_rows.n_window + p.kv_rows.n_compressed) ? idx : -1;
    WsLoadRawRow(p, row, sub,
                 base + WS::kRawOff + slot * WS::kRawSlotBytes + rr * WS::kRawRowBytes);
    if (sub == 0) raw_idx[slot * WS::kRawChunkRows + rr] = row;
  };
#pragma unroll 1
  for (int64_t j = 0; j < WS::kIdxAhead; ++j) fetch_idx(j);
  CpAsyncCommit();
  CpAsyncWait<0>();
  NamedBarrier<WS::kProducerBarrier, WS::kRowsProducerThreads>();
  WsWaitQEmpty(base, units);
  WgmmaLoadQ(p, t, h0, base + W::kQOff, ptid, WS::kRowsProducerThreads);
#pragma unroll 1
  for (int64_t k = 0; k < WS::kRawAhead; ++k) {
    if (k < n_chunks) issue(k);
    CpAsyncCommit();  // one group per chunk, empty past the end: the waits below count them
  }
#pragma unroll 1
  for (int64_t k = 0; k < n_chunks; ++k) {
    CpAsyncWait<WS::kRawAhead - 1>();  // chunk k's group (and every earlier one) completed
    // Q landed with chunk 0's group; its rotation's barrier is the chunk's (the fence before the
    // block's `full` arrival publishes the rotated Q with the decoded block).
    if (rotate && k == 0) {
      WsRotateQ<WS::kRowsProducerThreads>(rope, q_table, base + W::kQOff, ptid);
    } else {
      NamedBarrier<WS::kProducerBarrier, WS::kRowsProducerThreads>();
    }
    if (k + WS::kRawAhead < n_chunks) issue(k + WS::kRawAhead);  // into chunk k - 1's slot
    fetch_idx(k + WS::kIdxAhead);  // into chunk k's index slot (read when chunk k was issued)
    CpAsyncCommit();
    const int c = static_cast<int>(k % WS::kRawChunks);
    const uint32_t stage = it % WS::kStages;
    // The consumers released this stage (its previous block's P·V completed); a fresh barrier
    // counts as released (parity 1).
    if (c == 0) MbarWait(WsEmptyBar(base, stage), ((it / WS::kStages) & 1) ^ 1);
    const int slot = static_cast<int>(k % WS::kRawSlots);
    const int32_t row = raw_idx[slot * WS::kRawChunkRows + rr];
    const int e = c * WS::kRawChunkRows + rr;
    WsDecodeRawRow(p, row, smem + WS::kRawOff + slot * WS::kRawSlotBytes + rr * WS::kRawRowBytes,
                   sub, e, base + W::kKvOff + stage * W::kTileBytes);
    if (sub == 0) s_idx[stage * kBlock + e] = row;
    if (c == WS::kRawChunks - 1) {
      wgmma::FenceProxyAsyncShared();
      MbarArrive(WsFullBar(base, stage));
      ++it;
    }
  }
}

// ---- the consumer-side decode probe (kProbe; wgmma_ws.md "Session 70") -----------------------
//
// Timing only, to choose the row form's next design (its decode on the consumer warpgroups): the
// bf16 form's kernel, its values unchanged, where the warpgroup that follows a block also decodes
// one block of compressed serving rows (64 x 288 B, a fixed pattern in shared memory) into a 4 KB
// sink with the stage tile's swizzled stores — the instruction stream, shared-memory traffic and
// register pressure of decoding the block it leads next, without the raw rows' copies and waits.
// kProbe 1: the decode before the probe / issue of the next block's S (in the wait for the lead's
// hand-off); 2: after the warpgroup's P·V of the block is issued, the next block's S issued after
// the decode (the order a consumer-side decode needs: S(b + 1) reads the decoded tile); 3:
// placement 1 with a decode of half the instructions (WsProbeDecode<true>).
struct WsProbeShape {
  static constexpr uint32_t kRowBytes = 288;  // 256 code bytes + 32 E4M3 scale bytes
  static constexpr uint32_t kRawOff = WgmmaWsShape::kEnd + WgmmaWsShape::kRopeTables;
  static constexpr uint32_t kSinkOff = (kRawOff + kBlock * kRowBytes + 1023) / 1024 * 1024;
  static constexpr uint32_t kSinkBytes = 4096;
  static constexpr size_t kSmemBytes = kSinkOff + kSinkBytes + 1024;
};
static_assert(WsProbeShape::kRawOff % 16 == 0 && WsProbeShape::kSinkOff % 1024 == 0);
static_assert(WsProbeShape::kSmemBytes <= 227 * 1024, "shared memory per CTA (probe)");

// The pattern (code bytes from a multiplicative hash, scale bytes 0x38 = E4M3 1.0) by the 256
// consumer threads, then the consumers' barrier.
__device__ __forceinline__ void WsProbeFill(uint8_t* smem, int tid) {
  auto* raw = reinterpret_cast<uint32_t*>(smem + WsProbeShape::kRawOff);
  for (int i = tid; i < kBlock * static_cast<int>(WsProbeShape::kRowBytes) / 4;
       i += WgmmaWsShape::kConsumerThreads) {
    raw[i] = (4u * i) % WsProbeShape::kRowBytes < 256u ? 0x9E3779B9u * (i + 1) : 0x38383838u;
  }
  NamedBarrier<WgmmaWsShape::kConsumerBarrier, WgmmaWsShape::kConsumerThreads>();
}

// One warpgroup decodes the probe's block: thread wtid takes 16-value group q = wtid % 32 of rows
// wtid / 32 + 4j (j = 0..15), so that a warp reads 256 contiguous code bytes of one row; each
// group's two 16-byte stores go where the stage tile's would (TileOffset: column block q / 4,
// 128-byte swizzle by row % 8, which alternates between two values with j's parity), folded into
// the sink. The addresses are set up once, as a real decode's would be. kLean: a stand-in with the
// instruction count of a decode from a device bit order (wgmma_ws.md "Session 52": one PRMT and
// one HMUL2 per value pair, the scale by a shift; ~1.8 instructions per value against ~3.1), not
// the reference's values — the sensitivity of the probe's time to the decode's cost.
template <bool kLean = false>
__device__ __forceinline__ void WsProbeDecode(const uint8_t* smem, uint32_t base, int wtid) {
  using PS = WsProbeShape;
  const int q = wtid % 32;
  const int r0 = wtid / 32;
  const uint8_t* codes = smem + PS::kRawOff + r0 * PS::kRowBytes + 8 * q;
  const uint8_t* scales = smem + PS::kRawOff + r0 * PS::kRowBytes + 256 + q;
  const uint32_t col = static_cast<uint32_t>(q / 4) * WgmmaShape::kColBlockBytes;
  const uint32_t sw[2] = {wgmma::Sw128Offset(r0, 2 * q), wgmma::Sw128Offset(r0 + 4, 2 * q)};
  const uint32_t sink = base + PS::kSinkOff;
  constexpr uint32_t kMask = PS::kSinkBytes - 1;
#pragma unroll 2
  for (int j = 0; j < kBlock / 4; ++j) {
    uint32_t out[2][4];
    const uint2 w = *reinterpret_cast<const uint2*>(codes + j * 4 * PS::kRowBytes);
    const uint32_t sb = scales[j * 4 * PS::kRowBytes];
    if constexpr (kLean) {
      const uint32_t s2 = (sb << 7) | (sb << 23);
      const uint32_t words[2] = {w.x, w.y};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          uint32_t v;
          asm("prmt.b32 %0, %1, %2, %3;"
              : "=r"(v)
              : "r"(0x3F803F00u), "r"(0x40C04080u), "r"(words[h] >> (4 * k)));
          asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(out[h][k]) : "r"(v), "r"(s2));
        }
      }
    } else {
      DecodeFp4E4m3Block16(w, sb, out);
    }
    // Row r0 + 4j: Sw128Offset's row term (r0 + 4j)·128 = sw[j % 2]'s row term + 512·(j & ~1).
    const uint32_t at = col + sw[j % 2] + 512u * static_cast<uint32_t>(j & ~1);
    StShared128(sink + (at & kMask), out[0]);
    StShared128(sink + ((at ^ 16u) & kMask), out[1]);
  }
  wgmma::FenceProxyAsyncShared();
}

// Writes the unit's result: the normalised bf16 output (one split, WgmmaStoreOutput) or the
// split's state for WgmmaCombineKernel — WgmmaKernel's epilogue.
__device__ __forceinline__ void WsEpilogue(const SparseAttnParams& p, const Geometry& geo,
                                           int64_t unit, int64_t t, int64_t h0, int half, int wtid,
                                           bool seen, float (&acc)[128], const float (&m_run)[2],
                                           const float (&den_run)[2], const float (&sink)[2],
                                           const float2* rope_table, uint8_t* stage) {
  if (geo.splits == 1) {
    WgmmaStoreOutput(p, t, h0, half, wtid, seen, acc, m_run, den_run, sink, geo.rope, rope_table,
                     stage);
  } else {
    WgmmaStoreSplitState(geo, unit, 128 * half + wtid, acc, m_run, den_run);
  }
}

// The consumers' part of one unit; `half` = the consumer warpgroup (0, 1), warp-uniform. kRope:
// WgmmaWsKernel's. Across units (the CTA is persistent): the Q tile is released to the producer
// (q_empty) as soon as the block loop is done — every S has been waited for by then — and the
// unit's last ring stage is not released after its P·V but serves as the output stage
// (WgmmaStoreOutput's layout, 64 KB like Q) and is released once the output has been copied
// out, so that the next unit's Q and first block are in flight during this unit's epilogue.
template <bool kRope, bool kRows, int kProbe>
__device__ __forceinline__ void WsConsumeUnit(const SparseAttnParams& p, const Geometry& geo,
                                              int64_t unit, int64_t t, int64_t h0,
                                              int64_t blk_begin, int64_t blk_end, uint32_t base,
                                              uint8_t* smem, int half, uint32_t& it,
                                              uint32_t& leads) {
  using W = WgmmaShape;
  using WS = WgmmaWsShape;
  const int tid = static_cast<int>(threadIdx.x);
  const int wtid = tid % 128;
  const int lane = tid % 32;
  const auto* s_idx = reinterpret_cast<const int32_t*>(smem + W::kIdxOff);
  auto* s_max = reinterpret_cast<float*>(smem + W::kMaxOff);
  auto* s_sum = reinterpret_cast<float*>(smem + W::kSumOff);
  auto* s_p = reinterpret_cast<uint32_t*>(smem + W::kPOff);

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  float m_run[2] = {kInitMax, kInitMax};
  float den_run[2] = {0.0f, 0.0f};
  bool seen = false;
  float sink[2] = {0.0f, 0.0f};  // read now, off the epilogue's path
  // The output's RoPE cos/sin, by consumer threads 0..pairs-1, read in the epilogue after the
  // consumer barrier before it (q's RoPE is the producer's: WsRotateQ).
  auto* rope_table = reinterpret_cast<float2*>(smem + (kRows ? WS::kRowsEnd : WS::kEnd));
  if (geo.splits == 1) WgmmaLoadSinks(p, h0, wtid, sink);
  const bool out_rope = kRope && geo.rope.pairs > 0 && geo.rope.out && geo.splits == 1;
  if (out_rope && half == 0) RopeFillTable(geo.rope, t, wtid, rope_table);
  const float2* out_table = out_rope ? rope_table : nullptr;
  const int64_t blk_stop = WsBlockStop(blk_begin, blk_end);
  const float c = __fmul_rn(p.softmax_scale, kLog2E);
  uint32_t out_stage = 0;  // the unit's last ring stage: the output stage
  float s[32];
  bool s_issued = false;  // S of the block this warpgroup leads next is in flight or done
  // The follower leads the next block: its S runs while the lead's softmax does, if the block has
  // landed already (never waiting for it here: this block's P·V and stage release would wait for
  // the gather). Not past the unit (its Q waits for this unit's end).
  const auto issue_next_s = [&](bool last) {
    const uint32_t next = (it + 1) % WS::kStages;
    // Warpgroup-uniform (the wgmma needs all four warps): the probes of its 128 threads
    // and-reduced on its own named barrier.
    const bool landed = !last && MbarTest(WsFullBar(base, next), ((it + 1) / WS::kStages) & 1);
    const bool all_landed = half == 0 ? NamedBarrierAnd<WS::kLeadBarrier0 + 2, 128>(landed)
                                      : NamedBarrierAnd<WS::kLeadBarrier0 + 3, 128>(landed);
    if (all_landed) {
      wgmma::FenceProxyAsyncShared();
      const int32_t* idx1 = s_idx + next * kBlock;
      if (__any_sync(0xFFFFFFFFu, idx1[lane] >= 0 || idx1[lane + 32] >= 0)) {
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = 0.0f;
        WgmmaQkIssueWhole(s, base + W::kQOff, base + W::kKvOff + next * W::kTileBytes);
        s_issued = true;
      }
    }
  };
  for (int64_t blk = blk_begin; blk < blk_stop; ++blk, ++it) {
    const uint32_t stage = it % WS::kStages;
    const bool last = blk + 1 == blk_stop;
    out_stage = stage;
    MbarWait(WsFullBar(base, stage), (it / WS::kStages) & 1);
    // The copies landed (the barrier's acquire); order them before this thread's async-proxy
    // (wgmma) reads.
    wgmma::FenceProxyAsyncShared();
    const int32_t* idx = s_idx + stage * kBlock;
    const uint32_t kv_base = base + W::kKvOff + stage * W::kTileBytes;
    // Same value in every warp of both warpgroups: the branches below are CTA-uniform.
    const bool any = __any_sync(0xFFFFFFFFu, idx[lane] >= 0 || idx[lane + 32] >= 0);
    if (!any) {  // a block without a valid entry is a no-op (as on the CPU)
      if (!last) MbarArrive(WsEmptyBar(base, stage));
      continue;
    }
    seen = true;
    // Warpgroup (leads & 1) leads this block: its whole S, the softmax, P for the other.
    const bool lead = static_cast<int>(leads & 1u) == half;
    ++leads;
    float alpha[2];
    uint32_t a[4][4];  // bf16 P of the whole block in the register-A layout, k-steps 0..3
    if (lead) {
      if (!s_issued) {
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = 0.0f;
        WgmmaQkIssueWhole(s, base + W::kQOff, kv_base);
      }
      s_issued = false;
      WgmmaWait(s);
      WgmmaSoftmaxLead(s, idx, c, wtid, s_max, s_sum, s_p, m_run, den_run, alpha, a);
      if (half == 0) {
        NamedArrive<WS::kLeadBarrier0, WS::kConsumerThreads>();
      } else {
        NamedArrive<WS::kLeadBarrier0 + 1, WS::kConsumerThreads>();
      }
    } else {
      if constexpr (kProbe == 1 || kProbe == 3) {
        if (!last) WsProbeDecode<kProbe == 3>(smem, base, wtid);
      }
      if constexpr (kProbe != 2) issue_next_s(last);
      if (half == 0) {
        NamedBarrier<WS::kLeadBarrier0 + 1, WS::kConsumerThreads>();
      } else {
        NamedBarrier<WS::kLeadBarrier0, WS::kConsumerThreads>();
      }
      WgmmaSoftmaxFollow(wtid, s_max, s_sum, s_p, m_run, den_run, alpha, a);
    }
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = __fmul_rn(acc[i], alpha[(i >> 1) & 1]);
    }
    if (kProbe == 2 && !lead) {
      WgmmaPvIssue<kWsPvParts>(acc, a, kv_base, half);
      if (!last) WsProbeDecode(smem, base, wtid);
      issue_next_s(last);
      wgmma::WaitGroup<0>();
      wgmma::FenceOperands(acc);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int j = 0; j < 4; ++j) wgmma::FenceOperand(a[k][j]);
      }
    } else {
      WgmmaPv<kWsPvParts>(acc, a, kv_base, half);  // waited (S of the next block too)
    }
    if (!last) MbarArrive(WsEmptyBar(base, stage));
  }
  MbarArrive(WsQEmptyBar(base));
  // Both warpgroups' P·V reads of the last stage are done before either writes its output there.
  if (geo.splits == 1) NamedBarrier<WS::kConsumerBarrier, WS::kConsumerThreads>();
  WsEpilogue(p, geo, unit, t, h0, half, wtid, seen, acc, m_run, den_run, sink, out_table,
             smem + W::kKvOff + out_stage * W::kTileBytes);
  MbarArrive(WsEmptyBar(base, out_stage));  // after this thread's reads of the output stage
}

// A template on kD so that the header may be included by several .cu files (kD = 512).
// kRope: the RoPE code (Geometry::rope) is compiled in; the launcher takes this instantiation
// only when it fills geo.rope.
template <int kD, bool kRope, bool kRows, int kProbe = 0>
__global__ void __launch_bounds__(WgmmaWsShape::kThreads, 1)
    WgmmaWsKernel(const SparseAttnParams p, const Geometry geo) {
  using W = WgmmaShape;
  using WS = WgmmaWsShape;
  static_assert(kD == W::kD, "the wgmma path is instantiated for head_dim 512 only");
  static_assert(kProbe == 0 || (!kRope && !kRows), "the probe runs on the bf16 form only");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = AlignedSmem(smem_raw);
  const uint32_t base = SmemAddr(smem);
  const int64_t n_blocks = (p.width + kBlock - 1) / kBlock;
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < WS::kStages; ++s) {
      MbarInit(WsFullBar(base, s), kRows ? WS::kRowsFullArrivals : WS::kFullArrivals);
      MbarInit(WsEmptyBar(base, s), WS::kEmptyArrivals);
    }
    MbarInit(WsQEmptyBar(base), WS::kQEmptyArrivals);
  }
  __syncthreads();     // the barriers are initialised before anyone waits or arrives
  LaunchDependents();  // the combine kernel (if any) may take idle SMs and wait there
  uint32_t it = 0;     // ring slots used so far, the same count in both roles
  uint32_t units = 0;  // units this CTA started (the producer's q_empty phase)
  uint8_t* rope_tables = smem + (kRows ? WS::kRowsEnd : WS::kEnd);
  // The warpgroup index through a shuffle, so that the compiler sees it warp-uniform: the wgmma
  // instructions below then sit in a branch it knows converged (no C7518 serialisation).
  const int wg = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  // Each role runs its own unit loop after its register reallocation, so that ptxas allocates
  // each loop within its role's budget.
  if (wg >= 2) {
    SetMaxRegsDec<WS::kProducerRegs>();
    if (!kRows && wg > 2) return;  // FS_WS_ROWS_WIDE: the bf16 form's producer is warpgroup 2
    for (int64_t unit = blockIdx.x; unit < geo.units; unit += gridDim.x) {
      const UnitSpan u = UnitOf(geo, unit, n_blocks, W::kHeads);
      if constexpr (kRows) {
        WsProduceRowsUnit<kRope>(p, geo.rope, u.t, u.h0, u.blk_begin, u.blk_end, base, smem,
                                 rope_tables, it, units++);
      } else {
        WsProduceUnit<kRope>(p, geo.rope, u.t, u.h0, u.blk_begin, u.blk_end, base, smem,
                             rope_tables, it, units++);
      }
    }
    CpAsyncWaitAll();  // no copy outlives its thread (the bf16 form's are uncommitted)
  } else {
    SetMaxRegsInc<WS::kConsumerRegs>();
    if constexpr (kProbe != 0) WsProbeFill(smem, static_cast<int>(threadIdx.x));
    uint32_t leads = 0;  // non-empty blocks so far (over the CTA's units): which warpgroup leads
    for (int64_t unit = blockIdx.x; unit < geo.units; unit += gridDim.x) {
      const UnitSpan u = UnitOf(geo, unit, n_blocks, W::kHeads);
      WsConsumeUnit<kRope, kRows, kProbe>(p, geo, unit, u.t, u.h0, u.blk_begin, u.blk_end, base,
                                          smem, wg, it, leads);
    }
  }
}

}  // namespace flashserve::kernels::attn_device
