// The warp-specialised, persistent bf16-expansion wgmma main loop shared by LaunchFloatLinear
// (bf16 x · bf16 W, groups) and LaunchLinearFp8 (QDQ bf16 activations · E4M3 × UE8M0 weights).
// Same tiles, K steps, operands and wgmma sequence as cuda/wgmma_linear_gemm.cuh (so the same
// bits: 4 × m64n256k16 per 64-wide K step, ascending, fp32 accumulators from +0), but:
// - one producer warpgroup (threads 256 .. 383) fills a kStages ring through TMA
//   (cp.async.bulk.tensor, CUtensorMaps made on the host by cuda/tma_map.h), completion on
//   mbarriers (expect_tx); for FP8 weights its 128 threads also decode the raw codes into the
//   swizzled bf16 B tile (exact E4M3 × UE8M0 -> bf16, e4m3_bf16_decode.cuh);
// - two consumer warpgroups (threads 0 .. 255) only wait, issue wgmma, release stages and store;
// - persistent CTAs: grid = min(tiles, SMs); CTA b walks tiles b, b + grid, ... (m fastest, then
//   n, then group · splits + split), so the producer fills the next tile's stages while the
//   consumers run the epilogue;
// - kBn: the tile's output columns, 256 (kBN) or, on bf16 weights only, 192 / 160 / 128 — fewer
//   column-waves where N / 256 tiles leave the last wave's SMs idle (LinearCudaWsTileCols; each
//   output's wgmma k16 steps are the same in the same order).
// - the stream-K tail (Args::whole < items; LinearCudaTailPlan): the work items past `whole` are
//   K ranges of the last wave's tiles; each range stores its fp32 accumulators in its workspace
//   slot, and a second kernel (cuda/wgmma_ws_tail.cuh) sums every tail tile's slots.
// Included by cuda/float_linear_launch.cu and cuda/linear_fp8_launch.cu only (sm_90a). README.md
// "CUDA: the warp-specialised wgmma main loop" documents the design.
//
// Shared memory (base rounded up to 1024 bytes):
//   A     kStages × [128 rows][64 bf16], TMA 128-byte swizzle (= wgmma::Sw128Offset)
//   B     kStages × [kBn rows][64 bf16], same; FP8 (kBn 256): the TMA puts the stage's raw codes
//         [256 rows][64 bytes] (no swizzle) in the slot's upper half (bytes 16384 ..), and the
//         decoders overwrite the slot in place (rows 0 .. 127 first, a producer barrier, then
//         rows 128 .. 255 from codes held in registers).
//   bars  loaded[kStages] (1 arrival + TMA bytes), decoded[kStages] (FP8: 128 arrivals),
//         empty[kStages] (8 arrivals: lane 0 of each consumer warp after its wgmma finished).
// Step counter c (per CTA, over all its tiles): stage c % kStages, parity (c / kStages) & 1.
//
// PTX (ISA 9.x): mbarrier.init / arrive / arrive.expect_tx / try_wait.parity / test_wait.parity
// (§9.7.13.15), cp.async.bulk.tensor.3d...mbarrier::complete_tx::bytes (§9.7.9.25.5.1),
// fence.mbarrier_init, fence.proxy.async (generic writes of the decoders before the wgmma's
// async-proxy reads), barrier.sync with an id and a count (producer-only barrier 1).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/common/cuda_check.h"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/per_device_cache.h"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/e4m3_bf16_decode.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_linear_gemm.cuh"

namespace flashserve::kernels::wgmma_ws {

using wgmma_linear::kBK;
using wgmma_linear::kBM;
using wgmma_linear::kBN;
inline constexpr int kConsumerThreads = 256;
inline constexpr int kThreads = 384;  // + one producer warpgroup
inline constexpr int kStages = 4;
inline constexpr uint32_t kAStage = kBM * 128;
inline constexpr uint32_t kAOff = 0;
inline constexpr uint32_t kBOff = kStages * kAStage;
// The epilogue's staging rows: per consumer warp 16 rows of 64 bf16 at a 144-byte pitch (the 16
// extra bytes make the fragment-order writes conflict-free).
inline constexpr uint32_t kStagePitch = 144;
inline constexpr uint32_t kWarpStageBytes = 16 * kStagePitch;

// The shared-memory plan of the kernel with kBn-column tiles.
template <int kBn>
struct Smem {
  static_assert(kBn == 256 || kBn == 192 || kBn == 160 || kBn == 128, "a tile width of WsTileCols");
  static constexpr uint32_t kBStage = kBn * 128;
  static constexpr uint32_t kBarOff = kBOff + kStages * kBStage;
  static constexpr uint32_t kStageOff = kBarOff + 3 * kStages * 8;
  static constexpr int kBytes =
      static_cast<int>(kStageOff + (kConsumerThreads / 32) * kWarpStageBytes) + 1024;
  static_assert(kBytes <= 227 * 1024);
  static_assert(kStageOff % 16 == 0);
  static_assert(kBStage % wgmma::kSw128AtomBytes == 0, "every B stage starts 1024-byte aligned");
};
inline constexpr uint32_t kRawOffset = Smem<kBN>::kBStage / 2;  // FP8: codes in the upper half
inline constexpr uint32_t kRawStage = kBN * kBK;
static_assert(kRawStage == kRawOffset);

struct Args {
  TmaOperand a;                      // bf16 x: box 64 × 128 rows, 128-byte swizzle
  TmaOperand b;                      // bf16 W: box 64 × kBn, swizzled; FP8: codes 64 × 256 bytes
  const uint8_t* w_scale = nullptr;  // FP8: UE8M0 [ceil(N/32), K/32]
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t steps_per_split = 0;
  int splits = 1, groups = 1;
  int m_tiles = 0, n_tiles = 0;
  // CTA pairs (kCluster 2): the walk's m index covers m_walk = ceil(m_tiles / cluster) pairs of
  // m tiles; CTA rank r of a cluster takes m tile cluster · i + r. One CTA: m_walk = m_tiles.
  int cluster = 1, m_walk = 0;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0, y_group_stride = 0;
  bool y_pair = false;
  float* partial = nullptr;  // [groups, splits, m, n] fp32 when splits > 1
  // The work items: [0, whole) the tiles of that index (m fastest, then n, then group · splits +
  // split); whole + j (j < items - whole) is K range j % tail_ranges (tail_steps K steps, the
  // last range fewer) of tile whole + j / tail_ranges. No tail: whole == items (tiles · splits).
  int64_t items = 0, whole = 0;
  int tail_ranges = 1;
  int64_t tail_steps = 0;
  float* tail_partial = nullptr;  // [items - whole][kBM · kBn] fp32, slot j in thread order
};

// ---- mbarrier / TMA primitives -----------------------------------------------------------------
__device__ __forceinline__ void BarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void BarArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// `count` arrivals at once.
__device__ __forceinline__ void BarArrive(uint32_t bar, uint32_t count) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
               "r"(count)
               : "memory");
}
__device__ __forceinline__ void BarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile(
      "{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
// True once the phase of parity `parity` has completed (try_wait may sleep a little).
__device__ __forceinline__ bool BarTryWait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
__device__ __forceinline__ bool BarTestWait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
__device__ __forceinline__ void BarWait(uint32_t bar, uint32_t parity) {
  if (BarTryWait(bar, parity)) return;
  const uint64_t t0 = GlobalTimerNs();
  while (!BarTryWait(bar, parity)) {
    // A wait that never completes is a broken pipeline invariant: trap after 10 s (the launch
    // fails; the caller's CUDA_CHECK reports it) instead of hanging the process. No printf
    // here: its call would cost the consumers registers.
    if (GlobalTimerNs() - t0 > 10'000'000'000ull) __trap();
  }
}

// The tensor coordinates of `op`'s box at (K element k0, row row0, group).
struct TmaCoord {
  int32_t c0, c1, c2;
};
__device__ __forceinline__ TmaCoord CoordOf(const TmaOperand& op, int64_t k0, int64_t row0,
                                            int64_t group) {
  const int32_t g = static_cast<int32_t>(group) * op.group_mul;
  const auto r = static_cast<int32_t>(row0);
  return {static_cast<int32_t>(k0), op.group_inner ? g : r, op.group_inner ? r : g};
}

// The box of `op` at (K element k0, row row0, group) into shared `dst`; completion (the box's
// bytes, zero-filled outside the tensor) is signalled on `bar`.
__device__ __forceinline__ void TmaLoad(const TmaOperand& op, uint32_t dst, uint32_t bar,
                                        int64_t k0, int64_t row0, int64_t group) {
  const TmaCoord c = CoordOf(op, k0, row0, group);
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&op.map)), "r"(c.c0), "r"(c.c1), "r"(c.c2), "r"(bar)
      : "memory");
}

// TmaLoad into the same shared offset of every CTA in `mask` (bit r = cluster rank r), each
// CTA's own `bar` (the same offset) receiving the box's bytes.
__device__ __forceinline__ void TmaLoadMulticast(const TmaOperand& op, uint32_t dst, uint32_t bar,
                                                 int64_t k0, int64_t row0, int64_t group,
                                                 uint16_t mask) {
  const TmaCoord c = CoordOf(op, k0, row0, group);
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&op.map)), "r"(c.c0), "r"(c.c1), "r"(c.c2), "r"(bar), "h"(mask)
      : "memory");
}

__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Arrives on the mbarrier at shared offset `bar` of cluster CTA `rank`. The default semantics
// (release at CTA scope): what a consumer releases is its own wgmma's reads of its own stage,
// complete once wgmma.wait_group returns. A .release.cluster arrive compiles to MEMBAR.ALL.GPU
// before every arrival, which serialised each consumer's wgmma groups (kit s67: CTA pairs at
// 2.2x the time of one CTA per tile).
__device__ __forceinline__ void BarArriveCluster(uint32_t bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

// Every non-exited thread of the cluster (not .aligned: callers may diverge within a warp).
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// Barrier among the producer warpgroup's 128 threads only (id 1; 0 is __syncthreads). Not
// .aligned: thread 0 may reach it from its own loader branch.
__device__ __forceinline__ void ProducerSync() {
  asm volatile("barrier.sync 1, 128;\n" ::: "memory");
}

// ---- the tile walk -----------------------------------------------------------------------------
struct Tile {
  int64_t row0, n0, group, split, kt0, kt_count;
  int64_t slot;  // the stream-K tail's range item (item - whole), or -1 for a whole tile
};

template <int kBn>
__device__ __forceinline__ Tile TileAt(const Args& g, int64_t item, int rank) {
  Tile x;
  int64_t t = item;
  x.slot = -1;
  if (item >= g.whole) {
    x.slot = item - g.whole;
    t = g.whole + x.slot / g.tail_ranges;
  }
  const int64_t mt = (t % g.m_walk) * g.cluster + rank, rest = t / g.m_walk;
  const int64_t nt = rest % g.n_tiles, z = rest / g.n_tiles;
  x.row0 = mt * kBM;
  x.n0 = nt * kBn;
  x.group = z / g.splits;
  x.split = z % g.splits;
  const int64_t k_steps = (g.k + kBK - 1) / kBK;
  x.kt0 = x.split * g.steps_per_split;
  x.kt_count = min(x.kt0 + g.steps_per_split, k_steps) - x.kt0;  // >= 1 (plan)
  if (x.slot >= 0) {  // a tail range (the plan has one split)
    x.kt0 = (x.slot % g.tail_ranges) * g.tail_steps;
    x.kt_count = min(x.kt0 + g.tail_steps, k_steps) - x.kt0;  // >= 1 (LinearCudaTailPlan)
  }
  return x;
}

// The loads of this CTA's steps in order, issued by one producer thread.
struct Loader {
  int64_t tile;   // current tile index (global), >= total when done
  int64_t step;   // local K step inside the tile
  int64_t count;  // steps issued so far (the CTA step counter)
  int rank;       // cluster rank (0 without a cluster)
  Tile cur;
};

// Issues the loads of step ld.count (x box and W box, or the raw codes, into stage
// ld.count % kStages, whose slot the caller has seen released) with one expect_tx of their bytes,
// and advances the cursor to the next step of this CTA's walk. kCluster 2: the pair's tiles share
// the W box; rank r loads its half (rows kBn/2 · r ..) into both CTAs' slots (g.b's box is
// kBn/2 rows), and a CTA past the last m tile (an odd m_tiles' lone pair) loads no x box.
template <bool kFp8, int kBn, int kCluster>
__device__ __forceinline__ void IssueStage(const Args& g, Loader& ld, uint32_t base, int64_t total,
                                           int64_t stride) {
  using S = Smem<kBn>;
  const int s = static_cast<int>(ld.count % kStages);
  const uint32_t loaded = base + S::kBarOff + s * 8;
  const int64_t kt = ld.cur.kt0 + ld.step;
  const bool a_rows = ld.cur.row0 < g.m;
  const uint32_t bytes = (a_rows ? kAStage : 0u) + (kFp8 ? kRawStage : S::kBStage);
  BarArriveExpectTx(loaded, bytes);
  if (a_rows) TmaLoad(g.a, base + kAOff + s * kAStage, loaded, kt * kBK, ld.cur.row0, ld.cur.group);
  const uint32_t b_dst = base + kBOff + s * S::kBStage + (kFp8 ? kRawOffset : 0u);
  if constexpr (kCluster == 1) {
    TmaLoad(g.b, b_dst, loaded, kt * kBK, ld.cur.n0, ld.cur.group);
  } else {
    static_assert(kCluster == 2);
    // FP8: half the raw codes (kBn/2 rows of 64 bytes); bf16: kBn/2 swizzled rows of 128 bytes,
    // a multiple of the 1024-byte swizzle atom, so each half lands as in the whole box.
    constexpr uint32_t kHalf = (kFp8 ? kRawStage : S::kBStage) / 2;
    static_assert(kFp8 || kHalf % wgmma::kSw128AtomBytes == 0);
    TmaLoadMulticast(g.b, b_dst + ld.rank * kHalf, loaded, kt * kBK, ld.cur.n0 + ld.rank * kBn / 2,
                     ld.cur.group, 0x3);
  }
  ++ld.count;
  if (++ld.step == ld.cur.kt_count) {
    ld.step = 0;
    ld.tile += stride;
    if (ld.tile < total) ld.cur = TileAt<kBn>(g, ld.tile, ld.rank);
  }
}

// ---- FP8 decode --------------------------------------------------------------------------------
// Producer thread p (0 .. 127) owns chunk c = p % 8 (codes 8c .. 8c+7) of rows p / 8 + 16·i,
// i = 0 .. 15, of the stage; row r's scale block is (n0/32 + r/32, 2·kt + c/4) = (.., i / 2).
// The scale bytes of the thread's 8 blocks (127 = 1.0 outside the weight), read from global
// memory (L1-resident: one 32-byte sector holds 16 steps of one scale row).
__device__ __forceinline__ void LoadScales(const Args& g, const Tile& t, int64_t kt, int p,
                                           uint32_t (&sb)[8]) {
  const int64_t scale_rows = (g.n + 31) / 32, k_blocks = g.k / 32;
  const int64_t kb = kt * (kBK / 32) + (p % 8) / 4;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t sr = t.n0 / 32 + j;
    sb[j] = (sr < scale_rows && kb < k_blocks) ? __ldg(g.w_scale + sr * k_blocks + kb) : 127u;
  }
}

__device__ __forceinline__ void DecodeChunk(uint2 codes, const gemm_device::ScaleMul& mul,
                                            uint8_t* b, int r, int c) {
  uint32_t v[4];
  gemm_device::DecodeB(codes, mul, v);
  *reinterpret_cast<uint4*>(b + wgmma::Sw128Offset(r, c)) = make_uint4(v[0], v[1], v[2], v[3]);
}

// Decodes the raw codes in the upper half of B slot `b` into the whole slot.
__device__ __forceinline__ void DecodeSlot(uint8_t* b, int p,
                                           const gemm_device::ScaleMul (&mul)[8]) {
  const uint8_t* raw = b + kRawOffset;
  const int r0 = p / 8, c = p % 8;
  uint2 held[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    held[i] = *reinterpret_cast<const uint2*>(raw + (r0 + 16 * (i + 8)) * kBK + c * 8);
  }
  // Rows 0 .. 127 lie below the raw codes: decode them while other threads still read.
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = r0 + 16 * i;
    DecodeChunk(*reinterpret_cast<const uint2*>(raw + r * kBK + c * 8), mul[i / 2], b, r, c);
  }
  ProducerSync();  // every raw code is in registers or decoded
#pragma unroll
  for (int i = 0; i < 8; ++i) DecodeChunk(held[i], mul[4 + i / 2], b, r0 + 16 * (i + 8), c);
}

// ---- the epilogue through shared memory ----------------------------------------------------
// One round of StoreTileStaged: the warp's 16 rows × 8·kChunks columns from column 64·rd of the
// tile (kChunks 8, or 4 for the last round of a 160-column tile). The warp writes its fragment
// block into its staging rows (bf16 pairs, fragment order), then each lane stores 16 bytes of
// 32 / kChunks rows per instruction.
template <int kChunks, int kAcc>
__device__ __forceinline__ void StoreStagedRound(const float (&acc)[kAcc], int rd,
                                                 const float* bias, uint16_t* y, int64_t y_stride,
                                                 uint32_t stage, uint32_t w_lo, uint32_t w_hi,
                                                 int lane) {
#pragma unroll
  for (int jj = 0; jj < kChunks; ++jj) {
    const int j = 8 * rd + jj;
    float v0 = acc[4 * j], v1 = acc[4 * j + 1], v2 = acc[4 * j + 2], v3 = acc[4 * j + 3];
    if (bias != nullptr) {
      const float b0 = __ldg(bias + 8 * j), b1 = __ldg(bias + 8 * j + 1);
      v0 = exact::AddRn(v0, b0);
      v1 = exact::AddRn(v1, b1);
      v2 = exact::AddRn(v2, b0);
      v3 = exact::AddRn(v3, b1);
    }
    const uint32_t lo = exact::F32x2ToBf16x2(v0, v1);
    const uint32_t hi = exact::F32x2ToBf16x2(v2, v3);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(w_lo + 16 * jj), "r"(lo) : "memory");
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(w_hi + 16 * jj), "r"(hi) : "memory");
  }
  __syncwarp();
  constexpr int kRowsPerStore = 32 / kChunks;
#pragma unroll
  for (int q = 0; q < 16 / kRowsPerStore; ++q) {
    const int row = kRowsPerStore * q + lane / kChunks, chunk = lane % kChunks;
    uint4 w;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                 : "r"(stage + row * kStagePitch + 16 * chunk)
                 : "memory");
    *reinterpret_cast<uint4*>(y + row * y_stride + 64 * rd + 8 * chunk) = w;
  }
  __syncwarp();  // the next round overwrites the staging rows
}

// An interior tile's bf16 output without a split (2·kAcc columns), written by 16-byte stores of
// whole 128-byte row pieces (64-byte ones in a 160-column tile's last round). The same values as
// StoreTile (the same AddRn and F32ToBf16). False (nothing stored) when the tile or the output
// does not qualify. The 4-byte fragment-order stores to global memory half-filled every 32-byte
// sector they touched and cost the tensor cores their idle epilogue: wq_b at M = 4,096 672 -> 556
// us, wo_a 388 -> 363 (README "CUDA: the wgmma epilogue").
template <int kAcc>
__device__ __forceinline__ bool StoreTileStaged(const wgmma_linear::Args& g,
                                                const float (&acc)[kAcc], int64_t group,
                                                int64_t row0, int64_t n0, uint32_t stage) {
  constexpr int kCols = 2 * kAcc;
  static_assert(kCols % 32 == 0);
  if (g.splits > 1 || g.y_bf16 == nullptr || row0 + kBM > g.m || n0 + kCols > g.n ||
      reinterpret_cast<uintptr_t>(g.y_bf16) % 16 != 0 || g.y_stride % 8 != 0 ||
      g.y_group_stride % 8 != 0) {
    return false;
  }
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int64_t r0 = row0 + 64 * wg + 16 * warp;
  uint16_t* y = g.y_bf16 + group * g.y_group_stride + r0 * g.y_stride + n0;
  const uint32_t w_lo = stage + (lane / 4) * kStagePitch + 4 * (lane % 4);
  const uint32_t w_hi = w_lo + 8 * kStagePitch;
  const float* bias = g.bias != nullptr ? g.bias + n0 + 2 * (lane % 4) : nullptr;
#pragma unroll
  for (int rd = 0; rd < kCols / 64; ++rd) {
    StoreStagedRound<8>(acc, rd, bias, y, g.y_stride, stage, w_lo, w_hi, lane);
  }
  if constexpr (kCols % 64 != 0) {
    StoreStagedRound<4>(acc, kCols / 64, bias, y, g.y_stride, stage, w_lo, w_hi, lane);
  }
  return true;
}

// ---- the stream-K tail
// --------------------------------------------------------------------------- A tail range's end
// (consumer threads): its accumulators into its workspace slot, thread t's acc[4i .. 4i + 3] at
// float4 i · 256 + t (every store a warp's whole 512 bytes; the layout WsTailReduceKernel reads).
template <int kAcc>
__device__ __forceinline__ void TailStore(const Args& g, const float (&acc)[kAcc], int64_t slot) {
  static_assert(kAcc % 4 == 0);
  constexpr int64_t kSlot4 = int64_t{kConsumerThreads} * kAcc / 4;  // float4s per slot
  float4* mine = reinterpret_cast<float4*>(g.tail_partial) + slot * kSlot4 + threadIdx.x;
#pragma unroll
  for (int i = 0; i < kAcc / 4; ++i) {
    __stcg(mine + i * kConsumerThreads,
           make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
  }
}

// D (64 × kBn fp32) += A·B of one 16-wide K step, both operands from shared memory.
template <int kBn>
__device__ __forceinline__ void WgmmaStep(float (&acc)[kBn / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kBn == 256) {
    wgmma::WgmmaM64N256K16SS(acc, desc_a, desc_b, true);
  } else if constexpr (kBn == 192) {
    wgmma::WgmmaM64N192K16SS(acc, desc_a, desc_b, true);
  } else if constexpr (kBn == 160) {
    wgmma::WgmmaM64N160K16SS(acc, desc_a, desc_b, true);
  } else {
    static_assert(kBn == 128);
    wgmma::WgmmaM64N128K16SS(acc, desc_a, desc_b, true);
  }
}

// ---- the kernel --------------------------------------------------------------------------------
// kCluster 2: launched in clusters of two CTAs along M (Args::cluster 2) that share each W box
// by TMA multicast; each CTA's empty barriers then count both CTAs' consumer warps.
template <bool kFp8, int kBn = kBN, int kCluster = 1>
__global__ void __launch_bounds__(kThreads, 1) WgmmaWsKernel(const __grid_constant__ Args g) {
  static_assert(!kFp8 || kBn == kBN, "the in-place FP8 decode fills 256-row slots");
  using S = Smem<kBn>;
  extern __shared__ uint8_t wgmma_ws_smem_raw[];
  const uint32_t raw_addr = wgmma_linear::SmemAddr(wgmma_ws_smem_raw);
  uint8_t* smem = wgmma_ws_smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t base = wgmma_linear::SmemAddr(smem);
  const uint32_t bar_loaded = base + S::kBarOff;
  const uint32_t bar_decoded = bar_loaded + kStages * 8;
  const uint32_t bar_empty = bar_decoded + kStages * 8;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarInit(bar_loaded + s * 8, 1);
      BarInit(bar_decoded + s * 8, 128);
      BarInit(bar_empty + s * 8, kCluster * kConsumerThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // The peer's multicasts and arrivals reach this CTA's barriers only once they are initialised.
  if constexpr (kCluster == 1) {
    __syncthreads();
  } else {
    ClusterSync();
  }
  const int rank = kCluster == 1 ? 0 : static_cast<int>(ClusterRank());
  const int64_t first = blockIdx.x / kCluster;  // the cluster's first item
  const int64_t total = g.items;
  const int64_t stride = gridDim.x / kCluster;

  if (threadIdx.x >= kConsumerThreads) {
    // ---- producer warpgroup ----
    const int p = static_cast<int>(threadIdx.x) - kConsumerThreads;
    Loader ld{first, 0, 0, rank, Tile{}};
    if (ld.tile < total) ld.cur = TileAt<kBn>(g, ld.tile, rank);
    if constexpr (!kFp8) {
      if (p == 0) {
        while (ld.tile < total) {
          BarWait(bar_empty + (ld.count % kStages) * 8, ((ld.count / kStages) & 1) ^ 1);
          IssueStage<false, kBn, kCluster>(g, ld, base, total, stride);
        }
      }
    } else {
      int64_t c = 0;  // decode step counter
      for (int64_t t = first; t < total; t += stride) {
        const Tile tile = TileAt<kBn>(g, t, rank);
        for (int64_t step = 0; step < tile.kt_count; ++step, ++c) {
          // Thread 0 keeps up to kStages steps issued: step c (waiting for its slot) and any
          // later ones whose slot the consumers have already released.
          if (p == 0) {
            while (ld.tile < total && ld.count < c + kStages) {
              const uint32_t empty = bar_empty + (ld.count % kStages) * 8;
              const uint32_t parity = ((ld.count / kStages) & 1) ^ 1;
              if (ld.count == c) {
                BarWait(empty, parity);
              } else if (!BarTestWait(empty, parity)) {
                break;
              }
              IssueStage<true, kBn, kCluster>(g, ld, base, total, stride);
            }
          }
          __syncwarp();
          const int s = static_cast<int>(c % kStages);
          uint32_t sb[8];  // in flight during the wait
          LoadScales(g, tile, tile.kt0 + step, p, sb);
          BarWait(bar_loaded + s * 8, (c / kStages) & 1);
          gemm_device::ScaleMul mul[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) mul[j] = gemm_device::MakeScaleMul(sb[j]);
          DecodeSlot(smem + kBOff + s * S::kBStage, p, mul);
          wgmma::FenceProxyAsyncShared();
          BarArrive(bar_decoded + s * 8);
          // The next step's raw codes land in another slot; no thread reads this one again.
        }
      }
    }
    if constexpr (kCluster > 1) ClusterSync();  // the pair's end (below)
    return;
  }

  // ---- consumer warpgroups ----
  const int wg = threadIdx.x / 128;
  const bool lane0 = threadIdx.x % 32 == 0;
  int64_t c = 0;
  float acc[kBn / 2];
  // A consumer warp's release of stage `step`: every CTA of the cluster loads into it.
  auto release = [&](int64_t step) {
    const uint32_t bar = bar_empty + (step % kStages) * 8;
    if constexpr (kCluster == 1) {
      BarArrive(bar);
    } else {
#pragma unroll
      for (int r = 0; r < kCluster; ++r) BarArriveCluster(bar, r);
    }
  };
  for (int64_t t = first; t < total; t += stride) {
    const Tile tile = TileAt<kBn>(g, t, rank);
#pragma unroll
    for (int i = 0; i < kBn / 2; ++i) acc[i] = 0.f;
    for (int64_t step = 0; step < tile.kt_count; ++step, ++c) {
      const int s = static_cast<int>(c % kStages);
      const uint32_t parity = (c / kStages) & 1;
      BarWait(bar_loaded + s * 8, parity);
      if constexpr (kFp8) BarWait(bar_decoded + s * 8, parity);
      __syncwarp();  // converged for the .aligned wgmma instructions
      const uint32_t a_addr = base + kAOff + s * kAStage + wg * 64 * 128;
      const uint32_t b_addr = base + kBOff + s * S::kBStage;
      wgmma::FenceOperands(acc);
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        WgmmaStep<kBn>(acc,
                       wgmma::MakeSw128Desc(a_addr + kk * 32, wgmma_linear::kKMajorLbo,
                                            wgmma_linear::kKMajorSbo),
                       wgmma::MakeSw128Desc(b_addr + kk * 32, wgmma_linear::kKMajorLbo,
                                            wgmma_linear::kKMajorSbo));
      }
      wgmma::CommitGroup();
      wgmma::FenceOperands(acc);
      wgmma::WaitGroup<1>();
      // This warp's wgmma of the previous step has finished: release that stage.
      if (step > 0) {
        __syncwarp();
        if (lane0) release(c - 1);
      }
    }
    wgmma::WaitGroup<0>();
    wgmma::FenceOperands(acc);
    __syncwarp();
    if (lane0) release(c - 1);
    if (tile.row0 >= g.m) continue;  // the pair's CTA past the last m tile: nothing to store
    if (tile.slot >= 0) {            // a tail range: its partial for WsTailReduceKernel
      TailStore(g, acc, tile.slot);
      continue;
    }
    wgmma_linear::Args e;
    e.bias = g.bias;
    e.m = g.m;
    e.n = g.n;
    e.splits = g.splits;
    e.y_bf16 = g.y_bf16;
    e.y_f32 = g.y_f32;
    e.y_stride = g.y_stride;
    e.y_group_stride = g.y_group_stride;
    e.y_pair = g.y_pair;
    e.partial = g.partial;
    if (StoreTileStaged(e, acc, tile.group, tile.row0, tile.n0,
                        base + S::kStageOff + (threadIdx.x / 32) * kWarpStageBytes)) {
      continue;
    }
    wgmma_linear::StoreTile(e, acc, tile.group, tile.split, tile.row0, tile.n0);
  }
  // Neither CTA of a pair exits while the other may still multicast into it or arrive on its
  // barriers: every load a CTA issues completes before both CTAs' consumers finish.
  if constexpr (kCluster > 1) ClusterSync();
}

}  // namespace flashserve::kernels::wgmma_ws

namespace flashserve::kernels::wgmma_ws {

// A launch of `grid` CTAs of kThreads with `smem` bytes in clusters of two along x; `attr` (the
// cluster dimension) must outlive the config's use.
inline cudaLaunchConfig_t PairConfig(unsigned grid, int smem, cudaStream_t stream,
                                     cudaLaunchAttribute& attr) {
  attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

// The most clusters of two CTAs of `kernel` (one per SM, `smem` bytes) resident at once on the
// current device: cudaOccupancyMaxActiveClusters, asked once per device and instantiation (an
// SM count per GPC that is odd leaves one SM of that GPC out).
template <typename Kernel>
int MaxPairs(Kernel* kernel, int smem, PerDeviceInt& cache) {
  const int device = CurrentDevice();
  return cache.Get(device, [&] {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        PairConfig(2 * static_cast<unsigned>(SmCount(device)), smem, nullptr, attr);
    int clusters = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    return clusters;
  });
}

// Launches the kernel with one CTA per SM (at most one per work item) on `stream`. `g` is
// complete but for the tile counts (n_tiles = ceil(N / kBn)), which are given here, and the item
// count, set here; g.b's box is 64 × kBn, or 64 × kBn/2 with kCluster 2. A stream-K tail:
// g.tail_ranges > 1 with g.whole, g.tail_steps and g.tail_partial set (one split, kCluster 1; the
// caller then runs WsTailReduceKernel); else none. kCluster 2: clusters of two CTAs along M, as
// many as fit at once (MaxPairs), each pair walking pairs of m tiles that share their W tile.
// Opts the kernel into its shared memory once per device. CUDA launch failures abort.
template <bool kFp8, int kBn = kBN, int kCluster = 1>
void Launch(Args& g, int64_t m_tiles, int64_t n_tiles, cudaStream_t stream) {
  static_assert(kCluster == 1 || kCluster == 2);
  constexpr int kSmemBytes = Smem<kBn>::kBytes;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = WgmmaWsKernel<kFp8, kBn, kCluster>;
  EnsureSmemLimit(kernel, kSmemBytes, smem_set);
  g.m_tiles = static_cast<int>(m_tiles);
  g.n_tiles = static_cast<int>(n_tiles);
  g.cluster = kCluster;
  g.m_walk = static_cast<int>((m_tiles + kCluster - 1) / kCluster);
  const int64_t tiles = int64_t{g.m_walk} * n_tiles * g.groups * g.splits;
  if (kCluster == 1 && g.tail_ranges > 1) {
    g.items = g.whole + (tiles - g.whole) * g.tail_ranges;
  } else {
    g.tail_ranges = 1;
    g.items = g.whole = tiles;
  }
  if constexpr (kCluster == 1) {
    const int sms = SmCount(CurrentDevice());  // cached per device: no driver call per launch
    const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(g.items, sms));
    kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytes, stream>>>(g);
    CUDA_CHECK(cudaGetLastError());
  } else {
    static PerDeviceInt pairs_cache;
    const int pairs = MaxPairs(kernel, kSmemBytes, pairs_cache);
    if (pairs < 1) {
      std::fprintf(stderr, "wgmma_ws: no cluster of two CTAs fits this device\n");
      std::abort();
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = PairConfig(
        static_cast<unsigned>(2 * std::min<int64_t>(g.items, pairs)), kSmemBytes, stream, attr);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, g));
  }
}

// The bf16-weight kernel in tiles of `cols` columns (256, 192, 160 or 128: a width of
// LinearCudaWsTileColsFor); g.n gives the column tiles, g.b's box must be 64 × cols (64 × cols/2
// with kCluster 2).
template <int kCluster = 1>
void LaunchBf16(Args& g, int64_t cols, int64_t m_tiles, cudaStream_t stream) {
  const int64_t n_tiles = (g.n + cols - 1) / cols;
  switch (cols) {
    case 128:
      Launch<false, 128, kCluster>(g, m_tiles, n_tiles, stream);
      break;
    case 160:
      Launch<false, 160, kCluster>(g, m_tiles, n_tiles, stream);
      break;
    case 192:
      Launch<false, 192, kCluster>(g, m_tiles, n_tiles, stream);
      break;
    default:
      Launch<false, kBN, kCluster>(g, m_tiles, n_tiles, stream);
      break;
  }
}

}  // namespace flashserve::kernels::wgmma_ws
