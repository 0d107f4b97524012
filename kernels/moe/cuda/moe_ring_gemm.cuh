// The TMA-ring expert GEMM (MoeCudaGemm::kStreamRing, tile_rows 8; README.md "The TMA-ring
// expert GEMM"): the weight-streaming GEMM's numerics (cuda/moe_stream_gemm.cuh: FP4 weights as
// the mma A operand decoded by DecodeFp4x8, the <= 8 slot rows of a tile as B) with its weights,
// scales and activations brought through a shared-memory ring instead of a register ring, and
// the work cut stream-K over kRingCtasPerSm persistent CTAs per SM. Device code of
// cuda/moe_ring_launch.cu.
//
// Work: a pair is (tile, 128-weight-row block cb) — up: 64 w1 rows and the same 64 w3 rows, i.e.
// 64 output columns; down: 128 w2 rows, 128 output columns — of K / 256 units (256 K each). The
// call's num_tiles · blocks · units units are cut into gridDim.x' contiguous ranges
// (RingSplit: gridDim.x' <= gridDim.x so that no pair spans more than kRingMaxOrdinals ranges),
// CTA c taking range c in order: every CTA has the same number of units (± 1), whatever the tile
// count, and a pair is split only where a range ends inside it.
//
// Per unit, warp 8 (the producer) fills a stage: lane 0 the TMA boxes (the 128 weight rows × 128
// code bytes, 128-byte swizzle; the tile's slot rows' 256 activations, one box of 4 × 64 bf16 per
// row into the row's 512 bytes, 128-byte swizzle), the 32 lanes the rows' 8 scale bytes each
// (cp.async, 8 bytes a copy, arriving on the same mbarrier). Warps 0..7 read their 16 rows' codes
// and scales (one m16 tile: up 8 w1 + the same 8 w3 rows, down 16 w2 rows), run
// StreamCompute (the streaming GEMM's decode and mma, reading the slot rows' activations from
// the stage) and release the stage. Where a CTA's range leaves a pair (the pair's last unit, or
// the range's), the accumulators are stored as fp32 partials at the range's ordinal in that pair
// (0 for the range that starts it: the call's [slots][N] partials; >= 1, only a range's first
// pair: its CTA's 8 × 128 block); MoeRingEpilogueKernel — launched right after — sums each
// output's partials in ordinal order (fp32 from the first), then applies the streaming GEMM's
// epilogue: up, SwiGLU and the FP8 quantiser (StoreQuantizedBlock32Warp); down, the bf16 cast.
// Only the fp32 summation order differs from the streaming GEMM (where a pair is split).
//
// Stage layout (1024-byte aligned, kRingStageBytes): 128 weight rows of 128 bytes (up: w1 rows at
// 0..63, w3 rows at 64..127), then 8 activation rows of 512 bytes (row t: 4 lines of 128 bytes,
// line 4t + q the unit's columns 64q .. 64q + 63 in operand order, chunk c of line L at c ^ (L %
// 8)), then the 128 weight rows' 8 scale bytes. Quad lane tig owns the unit's 32-blocks 2tig and
// 2tig + 1 (StreamShape kG = 2): code chunks 2tig, 2tig + 1 of its rows and activation line 4t +
// tig of slot row t — a quarter warp's 16-byte reads then fall into 8 distinct bank quads. The
// swizzle is the TMA unit's function of the shared-memory address (the 16-byte chunk bits 4..6
// XOR bits 7..9), so a row's box written at a 512-byte offset takes phases 4t .. 4t + 3
// (checked on the H200 by the stage tests' exact-arithmetic rows at tiles of up to 8 rows).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/moe/cuda/moe_stream_gemm.cuh"

namespace flashserve::kernels::moe_device {

inline constexpr int kRingUnitK = 256;
inline constexpr int kRingWeightBytes = 128 * 128;
// Activation row t of a stage at t · kRingActPitch bytes (512: the row's 4 lines next to each
// other, their 128-byte swizzle phase 4t + q; a quarter warp's reads conflict-free).
inline constexpr int kRingActPitch = 512;
inline constexpr int kRingActBytes = 8 * kRingActPitch;
inline constexpr int kRingScaleBytes = 128 * kRingUnitK / 32;
inline constexpr int kRingStageBytes = kRingWeightBytes + kRingActBytes + kRingScaleBytes;
inline constexpr int kRingConsumerThreads = 256;                // warps 0..7
inline constexpr int kRingThreads = kRingConsumerThreads + 32;  // + the producer warp
// Two CTAs per SM of 3 stages each (128 KB of the SM's shared memory: room for a concurrent
// branch's CTAs). Measured on the H200 (bench_moe --gemm 7, the whole routed layer): 2 CTAs of 8
// consumer warps 101.8 µs at 2 tokens, one CTA of 6 stages 109.5; 2, 3 or 4 stages the same; 16
// consumer warps per CTA (two per row tile, each half of a unit's blocks) 115.8 — the consumers'
// instruction issue, not the ring's depth, bounds it (README.md "The TMA-ring expert GEMM";
// figures of a first build, before the unrolled walk).
inline constexpr int kRingStages = 3;
inline constexpr int kRingCtasPerSm = 2;
inline constexpr int kRingMaxOrdinals = 4;  // ranges a pair may be split over
// fp32 values of a CTA's partial block (8 slot rows × the pair's 128 columns).
inline constexpr int64_t kRingBlockFloats = 8 * 128;
inline constexpr int kRingSmemBytes = kRingStages * kRingStageBytes + 2 * kRingStages * 8 + 1024;
static_assert(kRingStageBytes % 1024 == 0, "stages must keep the 128-byte swizzle's alignment");

struct RingArgs {
  GemmArgs g;                 // the streaming GEMM's arguments (w / w_up: unused, the maps below)
  wgmma_ws::TmaOperand w;     // w1 (up) or w2 (down) codes: [E·N rows][K/2 bytes]
  wgmma_ws::TmaOperand w_up;  // w3 (up)
  wgmma_ws::TmaOperand a;     // activations: (64 columns, K/64 groups, rows), boxes 64 × 4 × 1
  // fp32 partials (MoeCudaRingPartialBytes): [slots][up ? 2N : N], each pair's columns from the
  // range that starts it (up: gate at c, up at N + c), then [kMoeCudaRingMaxCtas][8][128]: CTA
  // c's for the pair its range enters part-way (ordinal >= 1: only a range's first pair), row t
  // of the tile, the pair's column (up: gate 0..63, up 64..127); then (down) the int32 slot
  // records (RingSlotRecords).
  float* partial = nullptr;
  int64_t slots = 0;
  int64_t ring_grid = 0;  // the ring kernel's gridDim.x (the epilogue recomputes its cut)
};

// The down ring's record of each slot row (after its partials, MoeCudaRingPartialBytes): its
// tile's index << 4 | its row in the tile, written where the range starting the tile's first
// column block leaves it — for a combine that sums the partials itself (moe_ring_combine.cuh).
__host__ __device__ inline int32_t* RingSlotRecords(float* partial, int64_t slots, int64_t cols) {
  return reinterpret_cast<int32_t*>(partial + slots * cols +
                                    kMoeCudaRingMaxCtas * kRingBlockFloats);
}
__host__ __device__ inline const int32_t* RingSlotRecords(const float* partial, int64_t slots,
                                                          int64_t cols) {
  return reinterpret_cast<const int32_t*>(partial + slots * cols +
                                          kMoeCudaRingMaxCtas * kRingBlockFloats);
}

// The cut of a call: `units` per pair, `total` units, `ctas` ranges; range c is [Begin(c),
// Begin(c + 1)). ctas <= gridDim.x is the largest count that keeps every range at least
// ceil((units - 1) / (kRingMaxOrdinals - 1)) units long, so at most kRingMaxOrdinals ranges meet a
// pair.
struct RingSplit {
  int64_t units = 0, total = 0, ctas = 0;

  __device__ __forceinline__ RingSplit(int64_t pairs, int64_t units_per_pair, int64_t grid)
      : units(units_per_pair), total(pairs * units_per_pair) {
    const int64_t min_units =
        max(int64_t{1}, (units - 1 + kRingMaxOrdinals - 2) / (kRingMaxOrdinals - 1));
    ctas = max(int64_t{1}, min(grid, total / min_units));
  }
  __device__ __forceinline__ int64_t Begin(int64_t c) const { return c * total / ctas; }
  // The range holding unit x (x < total): the last c with Begin(c) <= x.
  __device__ __forceinline__ int64_t RangeOf(int64_t x) const {
    return ((x + 1) * ctas + total - 1) / total - 1;
  }
};

// A walk over a range's units without a division per unit: unit u of pair (tile t, block cb).
struct RingCursor {
  int units, blocks;
  int u, cb, t;
  __device__ __forceinline__ RingCursor(int64_t x, int units_per_pair, int blocks_per_tile)
      : units(units_per_pair), blocks(blocks_per_tile) {
    const int64_t pair = x / units;
    u = static_cast<int>(x - pair * units);
    t = static_cast<int>(pair / blocks);
    cb = static_cast<int>(pair - int64_t{t} * blocks);
  }
  __device__ __forceinline__ int64_t Pair() const { return int64_t{t} * blocks + cb; }
  __device__ __forceinline__ void Next() {
    if (++u == units) {
      u = 0;
      if (++cb == blocks) {
        cb = 0;
        ++t;
      }
    }
  }
};

// The ring position of a walk: stage s and the parity of its current pass.
template <int kStages>
struct RingSlot {
  int s = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void Next() {
    if (++s == kStages) {
      s = 0;
      phase ^= 1u;
    }
  }
};

__device__ __forceinline__ void CpAsync4MbarrierArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// 8 bytes (dst and src 8-byte aligned: LaunchRing checks the scale arrays' bases; a row's unit
// offset is a multiple of 8).
__device__ __forceinline__ void CpAsync8Shared(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}

// The tile of pair p: its expert, first slot row and row count (<= 8).
struct RingTile {
  int64_t e = 0, row0 = 0;
  int rows = 0;
  __device__ __forceinline__ void Load(const GemmArgs& g, int64_t tile) {
    e = g.tiles[2 * tile];
    row0 = g.tiles[2 * tile + 1];
    rows = static_cast<int>(min(row0 + 8, int64_t{g.offsets[e + 1]}) - row0);
  }
};

template <bool kUp>
__global__ void __launch_bounds__(kRingThreads, kRingCtasPerSm)
    MoeExpertRingKernel(const __grid_constant__ RingArgs a) {
  const GemmArgs& g = a.g;
  extern __shared__ unsigned char ring_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(ring_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = ring_raw + (base - raw);
  const uint32_t full_bars = base + kRingStages * kRingStageBytes;
  const uint32_t empty_bars = full_bars + kRingStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kRingStages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, 1);
      wgmma_ws::BarInit(empty_bars + s * 8, kRingConsumerThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  cuda_common::PdlLaunchDependents();   // the epilogue may be scheduled; it waits for this kernel
  cuda_common::PdlWaitPrerequisites();  // the tile list and the activations
  const int warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;

  constexpr int64_t kPairCols = kUp ? 64 : 128;  // output columns per pair
  const int64_t blocks = g.n / kPairCols;
  const RingSplit split(int64_t{*g.num_tiles} * blocks, g.k / kRingUnitK, a.ring_grid);
  if (blockIdx.x >= split.ctas) return;
  const int64_t beg = split.Begin(blockIdx.x), end = split.Begin(blockIdx.x + 1);
  const int64_t scale_row = g.k / 32;

  if (warp == kRingConsumerThreads / 32) {  // the producer
    RingTile tile;
    int cur_tile = -1;
    int32_t token[8];
    RingCursor c(beg, static_cast<int>(split.units), static_cast<int>(blocks));
    RingSlot<kRingStages> slot;
    for (int64_t x = beg; x < end; ++x, c.Next(), slot.Next()) {
      const int64_t u = c.u, n0 = int64_t{c.cb} * kPairCols;
      if (c.t != cur_tile) {
        cur_tile = c.t;
        tile.Load(g, c.t);
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int64_t row = tile.row0 + min(r, tile.rows - 1);
          token[r] = g.a_row != nullptr ? g.a_row[row] : static_cast<int32_t>(row);
        }
      }
      const uint32_t s = static_cast<uint32_t>(slot.s);
      const uint32_t stage = base + s * kRingStageBytes;
      if (x - beg >= kRingStages) {  // the consumers have released the stage's last fill
        wgmma_ws::BarWait(empty_bars + s * 8, slot.phase ^ 1u);
      }
      // Scale bytes: stage row r (up: w1 rows 0..63, w3 rows 64..127) gets its 8 bytes of unit u,
      // lane l copying rows l, l + 32, l + 64, l + 96, one 8-byte copy each (two 4-byte copies
      // until session 40: each a request for a 32-byte sector of its own row).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = lane + 32 * i;
        const bool second = kUp && r >= 64;
        const int64_t wrow = tile.e * g.n + n0 + (kUp ? (r & 63) : r);
        const uint8_t* src = (second ? g.w_up_scale : g.w_scale) + wrow * scale_row + u * 8;
        const uint32_t dst = stage + kRingWeightBytes + kRingActBytes + r * 8;
        CpAsync8Shared(dst, src);
      }
      CpAsync4MbarrierArrive(full_bars + s * 8);
      __syncwarp();
      if (lane == 0) {
        const uint32_t bar = full_bars + s * 8;
        wgmma_ws::BarArriveExpectTx(bar, kRingWeightBytes + tile.rows * 2 * kRingUnitK);
        if constexpr (kUp) {
          wgmma_ws::TmaLoad(a.w, stage, bar, u * 128, tile.e * g.n + n0, 0);
          wgmma_ws::TmaLoad(a.w_up, stage + kRingWeightBytes / 2, bar, u * 128, tile.e * g.n + n0,
                            0);
        } else {
          wgmma_ws::TmaLoad(a.w, stage, bar, u * 128, tile.e * g.n + n0, 0);
        }
        for (int r = 0; r < tile.rows; ++r) {
          wgmma_ws::TmaLoad(a.a, stage + kRingWeightBytes + r * kRingActPitch, bar, 0, 4 * u,
                            token[r]);
        }
      }
    }
    return;
  }

  // Consumers: warp w's m16 tile — up: stage rows 8w + grp (w1) and 64 + 8w + grp (w3); down:
  // 16w + grp and 16w + grp + 8.
  const int grp = lane / 4, tig = lane % 4;
  const int srow[2] = {kUp ? 8 * warp + grp : 16 * warp + grp,
                       kUp ? 64 + 8 * warp + grp : 16 * warp + grp + 8};
  // The lane's activation line: slot row grp's columns 64·tig .. 64·tig + 63 of the unit, its
  // swizzle phase the line's index in the 1024-byte pattern.
  const uint32_t line = static_cast<uint32_t>(grp * kRingActPitch + 128 * tig);
  const uint32_t act = line + 16 * ((line / 128) & 7);
  const int64_t np = kUp ? 2 * g.n : g.n;  // partial row length
  // The thread's byte offsets inside a stage: its rows' code chunks and scale bytes.
  uint32_t code_at[2][2], scale_at[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      code_at[h][b] = static_cast<uint32_t>(srow[h] * 128 + 16 * ((2 * tig + b) ^ (srow[h] & 7)));
    }
    scale_at[h] = static_cast<uint32_t>(kRingWeightBytes + kRingActBytes + srow[h] * 8 + 2 * tig);
  }
  float acc[1][1][4] = {{{0.f, 0.f, 0.f, 0.f}}};
  RingTile tile;
  int cur_tile = -1;
  RingCursor c(beg, static_cast<int>(split.units), static_cast<int>(blocks));
  const int n = static_cast<int>(end - beg);
  // The walk unrolled over the stages: unit j of the range sits in stage j % kRingStages, so the
  // stage addresses are constants of each unrolled copy.
  uint32_t phase = 0;
  for (int j = 0; j < n; phase ^= 1u) {
#pragma unroll
    for (int s = 0; s < kRingStages; ++s, ++j) {
      if (j >= n) break;
      if (c.t != cur_tile) {  // CTA-uniform
        cur_tile = c.t;
        tile.Load(g, cur_tile);
      }
      const unsigned char* stage = smem + s * kRingStageBytes;
      wgmma_ws::BarWait(full_bars + s * 8, phase);
      StreamUnit<1, 2> unit;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          unit.q[0][h][b] = *reinterpret_cast<const uint4*>(stage + code_at[h][b]);
        }
        unit.s[0][h] = *reinterpret_cast<const unsigned short*>(stage + scale_at[h]);
      }
      // Every lane reads its slot row, also past the tile's rows (stale stage bytes, reaching
      // only outputs that are never stored): a zero operand selected per lane instead cost ~18
      // instructions per unit, 10 % of the kernel (README.md).
      StreamCompute<1, 2, 1>(unit, stage + kRingWeightBytes, act, 0, 1, acc);
      __syncwarp();
      if (lane == 0) wgmma_ws::BarArrive(empty_bars + s * 8);
      if (c.u + 1 == c.units || j + 1 == n) {
        // The range leaves the pair: its partials at the range's ordinal in the pair.
        const int64_t pair = c.Pair();
        const int64_t n0 = int64_t{c.cb} * kPairCols;
        // Ordinal 0 (the range starting the pair): [slots][np]; a range entering it part-way
        // (its first pair only): the CTA's 8 × 128 block after those (RingArgs::partial).
        const bool first = split.RangeOf(pair * split.units) == blockIdx.x;  // CTA-uniform
        float* out = first ? a.partial + tile.row0 * np + n0
                           : a.partial + a.slots * np + int64_t{blockIdx.x} * kRingBlockFloats;
        const int64_t row_pitch = first ? np : 128;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int t = 2 * tig + (q & 1);
          if (t < tile.rows) {
            // The column inside the pair (up: gate 0..63, up 64..127) and in the partial row.
            const int lc = kUp ? 8 * warp + grp + 64 * (q >> 1) : 16 * warp + grp + 8 * (q >> 1);
            const int64_t col = kUp && first && q >= 2 ? g.n + lc - 64 : lc;
            out[t * row_pitch + col] = acc[0][0][q];
          }
          acc[0][0][q] = 0.f;
        }
        if constexpr (!kUp) {
          if (first && c.cb == 0 && warp == 0 && lane < tile.rows) {
            RingSlotRecords(a.partial, a.slots, np)[tile.row0 + lane] = c.t << 4 | lane;
          }
        }
      }
      c.Next();
    }
  }
}

// The epilogue of a ring GEMM call: a warp per (tile, 32 output columns), lane l column l of the
// block, for each of the tile's slot rows: the sum of the column's partials over the ranges that
// met its pair, in ordinal order; then up: SwiGLU (gate at column c, up at N + c) with the slot's
// weight and the FP8 quantiser of the 32 values (StoreQuantizedBlock32Warp, as StreamStoreUp);
// down: the bf16 cast (StreamStoreDown). Launched as a programmatic dependent of the ring kernel.
inline constexpr int kRingEpilogueThreads = 256;

template <bool kUp>
__global__ void __launch_bounds__(kRingEpilogueThreads)
    MoeRingEpilogueKernel(const __grid_constant__ RingArgs a) {
  __shared__ __align__(16) uint16_t vals[kRingEpilogueThreads];
  cuda_common::PdlWaitPrerequisites();  // the partials
  const GemmArgs& g = a.g;
  const int lane = threadIdx.x % 32;
  uint16_t* block_vals = vals + (threadIdx.x - lane);
  constexpr int64_t kPairCols = kUp ? 64 : 128;
  const int64_t blocks = g.n / kPairCols, col_blocks = g.n / 32;
  const int64_t num_tiles = *g.num_tiles;
  const RingSplit split(num_tiles * blocks, g.k / kRingUnitK, a.ring_grid);
  const int64_t np = kUp ? 2 * g.n : g.n;
  const int64_t warps = int64_t{gridDim.x} * (kRingEpilogueThreads / 32);
  for (int64_t w = int64_t{blockIdx.x} * (kRingEpilogueThreads / 32) + threadIdx.x / 32;
       w < num_tiles * col_blocks; w += warps) {  // warp-uniform
    const int64_t t = w / col_blocks, col = (w % col_blocks) * 32 + lane;
    const int64_t pair = t * blocks + col / kPairCols;
    const int64_t first = split.RangeOf(pair * split.units);
    const int64_t ords = split.RangeOf(pair * split.units + split.units - 1) - first + 1;
    // The later ranges' partials: CTA first + o's block, the column's place in the pair.
    const float* later = a.partial + a.slots * np + first * kRingBlockFloats + col % kPairCols;
    RingTile tile;
    tile.Load(g, t);
    for (int r = 0; r < tile.rows; ++r) {
      const int64_t slot = tile.row0 + r;
      const float* p = a.partial + slot * np + col;
      float sum = p[0], sum_up = kUp ? p[g.n] : 0.f;
      for (int64_t o = 1; o < ords; ++o) {
        const float* q = later + (o * 8 + r) * 128;
        sum = exact::AddRn(sum, q[0]);
        if constexpr (kUp) sum_up = exact::AddRn(sum_up, q[64]);
      }
      if constexpr (kUp) {
        __syncwarp();
        block_vals[lane] = static_cast<uint16_t>(
            SwiGluBf16(sum, sum_up, g.swiglu_limit, g.slot_weight[slot], true));
        __syncwarp();
        StoreQuantizedBlock32Warp(block_vals, g.act, g.out, slot * g.n + col - lane, lane);
      } else {
        g.out[slot * g.n + col] = static_cast<uint16_t>(exact::F32ToBf16(sum));
      }
    }
  }
}

}  // namespace flashserve::kernels::moe_device
