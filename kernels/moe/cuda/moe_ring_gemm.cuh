// The TMA-ring expert GEMM (MoeCudaGemm::kStreamRing, tile_rows 8; kernels/moe/ring_gemm.md): the
// weight-streaming GEMM's numerics (cuda/moe_stream_gemm.cuh: FP4 weights as the mma A operand
// decoded by DecodeFp4x8, the <= 8 slot rows of a tile as B) with its weights, scales and
// activations brought through a shared-memory ring instead of a register ring, and the work cut
// stream-K over kRingCtasPerSm persistent CTAs per SM. Device code of cuda/moe_ring_launch.cu.
//
// Work: a pair is (tile, 128-weight-row block cb) — up: 64 w1 rows and the same 64 w3 rows, i.e.
// 64 output columns; down: 128 w2 rows, 128 output columns — of K / 256 units (256 K each). The
// call's num_tiles · blocks · units units are cut into contiguous chunks (RingSplit, a function of
// the unit count, the grid and the kind of cut; MoeCudaRingCut, kAuto by the slot count):
// - static: one range per CTA, every CTA the same number of units (± 1) whatever the tile count;
// - dynamic: first one lead chunk per CTA, together 6/8 of the units, then small chunks of the
//   rest, about kRingSmallPerCta per CTA, which the CTAs grab from a counter in the partials
//   (RingCounters) until they run out; the kernel after the ring (epilogue or combine) resets
//   the counter for the next call. Two co-resident CTAs of an SM do not run at the same speed
//   (the warp schedulers favour the older CTA's warps: 124 against 148 µs for the same 123 units
//   at 8 tokens), and a unit's cost grows with its tile's rows; equal static ranges left the SMs
//   14 % apart at 256 tokens (kernels/moe/ring_gemm.md "Session 41").
// A pair is split only where a chunk ends inside it; the cut fixes where, so the fp32 partial
// sums — and the output bits — do not depend on which CTA ran a chunk.
//
// Per unit, warp 8 (the producer) fills a stage: lane 0 (dynamic cut) the stage's header (the
// unit's tile, rows, block and chunk, where the chunk leaves the pair; tile < 0: no more work) and
// the TMA boxes (the 128 weight rows × 128 code bytes, 128-byte swizzle; the tile's slot rows' 256
// activations, one box of 4 × 64 bf16 per row into the row's 512 bytes, 128-byte swizzle), the 32
// lanes the rows' 8 scale bytes each (cp.async, 8 bytes a copy, arriving on the same mbarrier).
// Warps 0..7 read their 16 rows' codes and scales (one m16 tile: up 8 w1 + the same 8 w3 rows, down
// 16 w2 rows), run StreamCompute (the streaming GEMM's decode and mma, reading the slot rows'
// activations from the stage) and release the stage. Where a chunk leaves a pair (the pair's last
// unit, or the chunk's), the accumulators are stored as fp32 partials at the chunk's ordinal in
// that pair (0 for the chunk that starts it: the call's [slots][N] partials; >= 1, only a chunk's
// first pair: the chunk's 8 × 128 block); MoeRingEpilogueKernel — launched right after — sums each
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
// A stage's `full` arrivals: each producer lane's cp.async arrival (its scale copies,
// CpAsyncMbarrierArriveNoinc) and lane 0's arrive.expect_tx (the weight and activation TMA bytes).
// Until session 68 the lanes used the incrementing form (no .noinc, `full` initialised to 1): the
// same phases, but compute-sanitizer's synccheck reports it as "Barrier overflow" (the pending
// count above the expected one), which hid every other finding of the tool.
inline constexpr uint32_t kRingFullArrivals = 32 + 1;
// Two CTAs per SM of 3 stages each (128 KB of the SM's shared memory: room for a concurrent
// branch's CTAs). Measured on the H200 (bench_moe --gemm 7, the whole routed layer): 2 CTAs of 8
// consumer warps 101.8 µs at 2 tokens, one CTA of 6 stages 109.5; 2, 3 or 4 stages the same; 16
// consumer warps per CTA (two per row tile, each half of a unit's blocks) 115.8 — the consumers'
// instruction issue, not the ring's depth, bounds it (kernels/moe/ring_gemm.md;
// figures of a first build, before the unrolled walk).
inline constexpr int kRingStages = 3;
inline constexpr int kRingCtasPerSm = 2;
// Chunks a pair may be split over (the combine keeps a pair's later-chunk count in 3 bits).
inline constexpr int kRingMaxOrdinals = 8;
// The dynamic cut: the lead chunks take kRingLeadEighths / 8 of a call's units; the rest is cut
// for about kRingSmallPerCta small chunks per CTA, at most kMoeCudaRingMaxChunks chunks in all
// (session 41 on the H200 at 128 / 256 tokens, routed layer µs: 6/8 and 8 per CTA 1,695 / 2,054,
// 4/8 and 16 1,692-1,700 / 2,059-2,072; 6/8 costs less at 64 tokens and below).
inline constexpr int kRingLeadEighths = 6;
inline constexpr int kRingSmallPerCta = 8;
// fp32 values of a chunk's partial block (8 slot rows × the pair's 128 columns).
inline constexpr int64_t kRingBlockFloats = 8 * 128;
// Per stage, after the barriers: the producer's header of its fill (RingHeader).
inline constexpr int kRingSmemUsed =
    kRingStages * kRingStageBytes + 2 * kRingStages * 8 + kRingStages * 8 + 1024;
// The launch's shared-memory request is what the kernel uses (kRingSmemUsed), unless the
// compiled kernel's registers would let more than kRingCtasPerSm CTAs share an SM; then it is
// raised until no more fit (moe_ring_launch.cu RingSmemBytes). Session 41: a build of the dynamic
// cut at 64 registers let 3 CTAs in and the 2-per-SM grid piled onto two thirds of the SMs (10 %
// slower at 256 tokens); a fixed 76 KB request (session 42) cost ~1.5 % where 2 CTAs fit anyway.
static_assert(kRingStageBytes % 1024 == 0, "stages must keep the 128-byte swizzle's alignment");

// What a call's cut depends on besides its units: the ring kernel's gridDim.x and the kind of cut
// (MoeCudaRingCut kStatic / kDynamic: which instantiation of the kernels runs).
struct RingCut {
  int64_t grid = 0;
  bool dynamic = false;
};

struct RingArgs {
  GemmArgs g;                 // the streaming GEMM's arguments (w / w_up: unused, the maps below)
  wgmma_ws::TmaOperand w;     // w1 (up) or w2 (down) codes: [E·N rows][K/2 bytes]
  wgmma_ws::TmaOperand w_up;  // w3 (up)
  wgmma_ws::TmaOperand a;     // activations: (64 columns, K/64 groups, rows), boxes 64 × 4 × 1
  // fp32 partials (MoeCudaRingPartialBytes, after the counters): [slots][up ? 2N : N], each
  // pair's columns from the chunk that starts it (up: gate at c, up at N + c), then
  // [kMoeCudaRingMaxChunks][8][128]: chunk c's for the pair it enters part-way (ordinal >= 1:
  // only a chunk's first pair), row t of the tile, the pair's column (up: gate 0..63, up
  // 64..127); then (down) the int32 slot records (RingSlotRecords).
  float* partial = nullptr;
  // This GEMM's counter (RingCounters; the dynamic cut only): small chunks grabbed; zero on entry,
  // reset by the kernel after the ring (its epilogue, or the combine that sums its partials).
  int32_t* counters = nullptr;
  int64_t slots = 0;
  RingCut cut;  // the epilogue recomputes the chunks
};

// The ring GEMMs' counters, the first 256 bytes of the partials buffer (up's, down's, the rest
// unused); the partials proper (RingArgs::partial) follow.
inline constexpr int64_t kRingCounterWords = 64;  // 256 bytes: the partials' rows stay aligned
__host__ __device__ inline int32_t* RingCounters(float* partials, bool up) {
  return reinterpret_cast<int32_t*>(partials) + (up ? 0 : 1);
}
__host__ __device__ inline float* RingPartials(float* partials) {
  return partials + kRingCounterWords;
}
__host__ __device__ inline const float* RingPartials(const float* partials) {
  return partials + kRingCounterWords;
}

// The down ring's record of each slot row (after its partials, MoeCudaRingPartialBytes): its
// tile's index << 4 | its row in the tile, written where the chunk starting the tile's first
// column block leaves it — for a combine that sums the partials itself (moe_ring_combine.cuh).
__host__ __device__ inline int32_t* RingSlotRecords(float* partial, int64_t slots, int64_t cols) {
  return reinterpret_cast<int32_t*>(partial + slots * cols +
                                    kMoeCudaRingMaxChunks * kRingBlockFloats);
}
__host__ __device__ inline const int32_t* RingSlotRecords(const float* partial, int64_t slots,
                                                          int64_t cols) {
  return reinterpret_cast<const int32_t*>(partial + slots * cols +
                                          kMoeCudaRingMaxChunks * kRingBlockFloats);
}

// The cut of a call (`units` per pair, `total` units, a grid of `grid` CTAs) into `chunks`
// chunks, chunk c = [Begin(c), Begin(c + 1)); RangeOf(x) is the chunk holding unit x (x < total).
// Every chunk is at least ceil((units - 1) / (kRingMaxOrdinals - 1)) units long but the last, so at
// most kRingMaxOrdinals chunks meet a pair.
template <bool kDynamic>
struct RingSplit;

__device__ __forceinline__ int64_t RingMinUnits(int64_t units) {
  return max(int64_t{1}, (units - 1 + kRingMaxOrdinals - 2) / (kRingMaxOrdinals - 1));
}

// The static cut: one range per CTA, chunks <= grid the largest count that keeps every range at
// least the minimum long; range c = [c · total / chunks, ...).
template <>
struct RingSplit<false> {
  int64_t units = 0, total = 0, chunks = 0;

  __device__ __forceinline__ RingSplit(int64_t pairs, int64_t units_per_pair, const RingCut& cut)
      : units(units_per_pair), total(pairs * units_per_pair) {
    chunks = max(int64_t{1}, min(cut.grid, total / RingMinUnits(units)));
  }
  __device__ __forceinline__ int64_t Begin(int64_t c) const { return c * total / chunks; }
  __device__ __forceinline__ int64_t RangeOf(int64_t x) const {
    return ((x + 1) * chunks + total - 1) / total - 1;
  }
};

// The dynamic cut: `lead` lead chunks (lead <= grid) of together kRingLeadEighths / 8 of the units
// (lead_units; chunk c < lead = [c · lead_units / lead, ...), lengths differing by at most one),
// then small chunks of `small` units (the last one shorter).
template <>
struct RingSplit<true> {
  int64_t units = 0, total = 0, lead_units = 0, lead = 0, small = 0, chunks = 0;

  __device__ __forceinline__ RingSplit(int64_t pairs, int64_t units_per_pair, const RingCut& cut)
      : units(units_per_pair), total(pairs * units_per_pair) {
    const int64_t grid = cut.grid, min_units = RingMinUnits(units);
    lead_units = total * kRingLeadEighths / 8;
    lead = min(grid, lead_units / min_units);
    if (lead == 0) lead_units = 0;
    const int64_t rest = total - lead_units;
    small = max(min_units, (rest + grid * kRingSmallPerCta - 1) / (grid * kRingSmallPerCta));
    small = max(small, (rest + kMoeCudaRingMaxChunks - lead - 1) / (kMoeCudaRingMaxChunks - lead));
    chunks = lead + (rest + small - 1) / small;
  }
  __device__ __forceinline__ int64_t Begin(int64_t c) const {
    return c <= lead ? c * lead_units / max(lead, int64_t{1})
                     : min(total, lead_units + (c - lead) * small);
  }
  __device__ __forceinline__ int64_t RangeOf(int64_t x) const {
    return x < lead_units ? ((x + 1) * lead + lead_units - 1) / lead_units - 1
                          : lead + (x - lead_units) / small;
  }
};

// A stage's header, written by the producer's lane 0 before it arrives on the stage's full
// barrier (release), read by the consumers after their wait (acquire): the unit the stage holds,
// decoded — its tile (< 0: no more units, the consumers leave) with the tile's first slot row and
// row count, its block and chunk — and where the chunk leaves the unit's pair after it (the
// pair's last unit or the chunk's), kRingStore, with kRingFirst where the chunk also started the
// pair (its partials go to [slots][N], else to the chunk's block). The consumers then run no
// index arithmetic and no global loads of their own.
inline constexpr int32_t kRingStore = 1, kRingFirst = 2;
struct alignas(16) RingHeader {
  int32_t tile;
  int32_t row0;
  int32_t chunk;
  int32_t bits;  // cb << 8 | rows << 2 | kRingStore | kRingFirst
  __device__ __forceinline__ int cb() const { return bits >> 8; }
  __device__ __forceinline__ int rows() const { return (bits >> 2) & 15; }
};

// A walk over a chunk's units without a division per unit: unit u of pair (tile t, block cb).
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

// A consumer warp's share of one filled stage: its rows' codes and scales, then StreamCompute (the
// streaming GEMM's decode and mma, reading the slot rows' activations from the stage). Every lane
// reads its slot row, also past the tile's rows (stale stage bytes, reaching only outputs that
// are never stored): a zero operand selected per lane instead cost ~18 instructions per unit, 10 %
// of the kernel (kernels/moe/ring_gemm.md).
__device__ __forceinline__ void RingConsumeStage(const unsigned char* stage,
                                                 const uint32_t (&code_at)[2][2],
                                                 const uint32_t (&scale_at)[2], uint32_t act,
                                                 float (&acc)[1][1][4]) {
  StreamUnit<1, 2> unit;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      unit.q[0][h][b] = *reinterpret_cast<const uint4*>(stage + code_at[h][b]);
    }
    unit.s[0][h] = *reinterpret_cast<const unsigned short*>(stage + scale_at[h]);
  }
  StreamCompute<1, 2, 1>(unit, stage + kRingWeightBytes, act, 0, 1, acc);
}

// Where a chunk leaves a pair (tile t at slot row row0, `rows` rows; block cb): the consumer
// warp's accumulators as partials at the chunk's ordinal in the pair — ordinal 0 (`first`: the
// chunk starting the pair) in [slots][np], else the chunk's 8 × 128 block after those
// (RingArgs::partial) — then zeroed; the down ring's warp 0 also records the tile's slot rows
// where the chunk starting its first block leaves it.
template <bool kUp>
__device__ __forceinline__ void RingStorePartials(const RingArgs& a, float (&acc)[1][1][4],
                                                  bool first, int64_t chunk, int t, int64_t row0,
                                                  int rows, int cb, int warp, int lane) {
  constexpr int64_t kPairCols = kUp ? 64 : 128;
  const int64_t np = kUp ? 2 * a.g.n : a.g.n;
  const int grp = lane / 4, tig = lane % 4;
  const int64_t n0 = int64_t{cb} * kPairCols;
  float* out =
      first ? a.partial + row0 * np + n0 : a.partial + a.slots * np + chunk * kRingBlockFloats;
  const int64_t row_pitch = first ? np : 128;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int r = 2 * tig + (q & 1);
    if (r < rows) {
      // The column inside the pair (up: gate 0..63, up 64..127) and in the partial row.
      const int lc = kUp ? 8 * warp + grp + 64 * (q >> 1) : 16 * warp + grp + 8 * (q >> 1);
      const int64_t col = kUp && first && q >= 2 ? a.g.n + lc - 64 : lc;
      out[r * row_pitch + col] = acc[0][0][q];
    }
    acc[0][0][q] = 0.f;
  }
  if constexpr (!kUp) {
    if (first && cb == 0 && warp == 0 && lane < rows) {
      RingSlotRecords(a.partial, a.slots, np)[row0 + lane] = t << 4 | lane;
    }
  }
}

// kDynamic: the cut of RingSplit<true>, chunks past the lead ones grabbed from a.counters, each
// stage carrying a RingHeader; else one static range per CTA, the consumers walking it themselves
// (no header: a static call runs the code measured before session 42, which the header form
// slowed by ~5 %).
template <bool kUp, bool kDynamic>
__global__ void __launch_bounds__(kRingThreads, kRingCtasPerSm)
    MoeExpertRingKernel(const __grid_constant__ RingArgs a) {
  const GemmArgs& g = a.g;
  extern __shared__ unsigned char ring_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(ring_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = ring_raw + (base - raw);
  const uint32_t full_bars = base + kRingStages * kRingStageBytes;
  const uint32_t empty_bars = full_bars + kRingStages * 8;
  RingHeader* headers =
      reinterpret_cast<RingHeader*>(smem + kRingStages * kRingStageBytes + 2 * kRingStages * 8);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kRingStages; ++s) {
      wgmma_ws::BarInit(full_bars + s * 8, kRingFullArrivals);
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
  const RingSplit<kDynamic> split(int64_t{*g.num_tiles} * blocks, g.k / kRingUnitK, a.cut);
  if (!kDynamic && blockIdx.x >= split.chunks) return;

  if (warp == kRingConsumerThreads / 32) {  // the producer
    const int64_t scale_row = g.k / 32;
    RingTile tile;
    int cur_tile = -1;
    int32_t token[8];
    RingSlot<kRingStages> slot;
    int64_t fills = 0;
    // The CTA's range (static) or lead chunk, then small chunks grabbed one ahead (lane 0 holds
    // the next).
    int64_t chunk = blockIdx.x, next = 0;
    if (kDynamic && lane == 0 && chunk < split.chunks) {
      next = a.cut.grid + atomicAdd(a.counters, 1);
    }
    while (chunk < split.chunks) {
      const int64_t beg = split.Begin(chunk), end = split.Begin(chunk + 1);
      RingCursor c(beg, static_cast<int>(split.units), static_cast<int>(blocks));
      // Whether this chunk started the current pair (ordinal 0).
      bool first = kDynamic && split.RangeOf(c.Pair() * split.units) == chunk;
      for (int64_t x = beg; x < end; ++x, ++fills, c.Next(), slot.Next()) {
        const int64_t u = c.u, n0 = int64_t{c.cb} * kPairCols;
        if (u == 0) first = true;  // a pair this chunk enters at its first unit
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
        if (fills >= kRingStages) {  // the consumers have released the stage's last fill
          wgmma_ws::BarWait(empty_bars + s * 8, slot.phase ^ 1u);
        }
        // Scale bytes: stage row r (up: w1 rows 0..63, w3 rows 64..127) gets its 8 bytes of
        // unit u, lane l copying rows l, l + 32, l + 64, l + 96, one 8-byte copy each (two
        // 4-byte copies until session 40: each a request for a 32-byte sector of its own row).
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = lane + 32 * i;
          const bool second = kUp && r >= 64;
          const int64_t wrow = tile.e * g.n + n0 + (kUp ? (r & 63) : r);
          const uint8_t* src = (second ? g.w_up_scale : g.w_scale) + wrow * scale_row + u * 8;
          const uint32_t dst = stage + kRingWeightBytes + kRingActBytes + r * 8;
          CpAsync8Shared(dst, src);
        }
        CpAsyncMbarrierArriveNoinc(full_bars + s * 8);
        __syncwarp();
        if (lane == 0) {
          if constexpr (kDynamic) {
            const int32_t flags =
                (u + 1 == split.units || x + 1 == end ? kRingStore : 0) | (first ? kRingFirst : 0);
            headers[s] =
                RingHeader{c.t, static_cast<int32_t>(tile.row0), static_cast<int32_t>(chunk),
                           c.cb << 8 | tile.rows << 2 | flags};
          }
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
      if constexpr (!kDynamic) break;
      chunk = __shfl_sync(0xFFFFFFFFu, next, 0);
      if (lane == 0 && chunk < split.chunks) next = a.cut.grid + atomicAdd(a.counters, 1);
    }
    if (kDynamic && lane == 0) {
      // The end mark, in the next stage once the consumers have released it.
      const uint32_t s = static_cast<uint32_t>(slot.s);
      if (fills >= kRingStages) wgmma_ws::BarWait(empty_bars + s * 8, slot.phase ^ 1u);
      headers[s] = RingHeader{-1, 0, 0, 0};
      wgmma_ws::BarArrive(full_bars + s * 8, kRingFullArrivals);  // stands for a whole fill
    }
    // No copy outlives its thread (the consumers' `full` waits cover every one already; this
    // keeps the producer's exit like the other mbarrier producers').
    CpAsyncWaitAll();
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
  // The walk unrolled over the stages: fill j of the CTA sits in stage j % kRingStages, so the
  // stage addresses are constants of each unrolled copy.
  if constexpr (kDynamic) {
    for (uint32_t phase = 0;; phase ^= 1u) {
#pragma unroll
      for (int s = 0; s < kRingStages; ++s) {
        const unsigned char* stage = smem + s * kRingStageBytes;
        wgmma_ws::BarWait(full_bars + s * 8, phase);
        // The unit's loads and mma first, the header after: no branch between the wait and the
        // stage's loads. The end mark's stage holds stale bytes (or none): that unit's sums are
        // never stored.
        RingConsumeStage(stage, code_at, scale_at, act, acc);
        const RingHeader h = headers[s];  // before the release: the producer rewrites it after
        __syncwarp();
        if (lane == 0) wgmma_ws::BarArrive(empty_bars + s * 8);
        if (h.tile < 0) return;            // CTA-uniform: no more units
        if ((h.bits & kRingStore) != 0) {  // CTA-uniform: the chunk leaves the pair
          RingStorePartials<kUp>(a, acc, (h.bits & kRingFirst) != 0, h.chunk, h.tile, h.row0,
                                 h.rows(), h.cb(), warp, lane);
        }
      }
    }
  } else {
    const int64_t beg = split.Begin(blockIdx.x), end = split.Begin(blockIdx.x + 1);
    RingTile tile;
    int cur_tile = -1;
    RingCursor c(beg, static_cast<int>(split.units), static_cast<int>(blocks));
    const int n = static_cast<int>(end - beg);
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
        RingConsumeStage(stage, code_at, scale_at, act, acc);
        __syncwarp();
        if (lane == 0) wgmma_ws::BarArrive(empty_bars + s * 8);
        if (c.u + 1 == c.units || j + 1 == n) {  // the range leaves the pair
          const bool first = split.RangeOf(c.Pair() * split.units) == blockIdx.x;  // CTA-uniform
          RingStorePartials<kUp>(a, acc, first, blockIdx.x, c.t, tile.row0, tile.rows, c.cb, warp,
                                 lane);
        }
        c.Next();
      }
    }
  }
}

// The epilogue of a ring GEMM call: a warp per (tile, 32 output columns), lane l column l of the
// block, for each of the tile's slot rows: the sum of the column's partials over the chunks that
// met its pair, in ordinal order; then up: SwiGLU (gate at column c, up at N + c) with the slot's
// weight and the FP8 quantiser of the 32 values (StoreQuantizedBlock32Warp, as StreamStoreUp);
// down: the bf16 cast (StreamStoreDown). Launched as a programmatic dependent of the ring kernel.
inline constexpr int kRingEpilogueThreads = 256;

template <bool kUp, bool kDynamic>
__global__ void __launch_bounds__(kRingEpilogueThreads)
    MoeRingEpilogueKernel(const __grid_constant__ RingArgs a) {
  __shared__ __align__(16) uint16_t vals[kRingEpilogueThreads];
  cuda_common::PdlWaitPrerequisites();                                   // the partials
  if (kDynamic && blockIdx.x == 0 && threadIdx.x == 0) *a.counters = 0;  // done grabbing
  const GemmArgs& g = a.g;
  const int lane = threadIdx.x % 32;
  uint16_t* block_vals = vals + (threadIdx.x - lane);
  constexpr int64_t kPairCols = kUp ? 64 : 128;
  const int64_t blocks = g.n / kPairCols, col_blocks = g.n / 32;
  const int64_t num_tiles = *g.num_tiles;
  const RingSplit<kDynamic> split(num_tiles * blocks, g.k / kRingUnitK, a.cut);
  const int64_t np = kUp ? 2 * g.n : g.n;
  const int64_t warps = int64_t{gridDim.x} * (kRingEpilogueThreads / 32);
  for (int64_t w = int64_t{blockIdx.x} * (kRingEpilogueThreads / 32) + threadIdx.x / 32;
       w < num_tiles * col_blocks; w += warps) {  // warp-uniform
    const int64_t t = w / col_blocks, col = (w % col_blocks) * 32 + lane;
    const int64_t pair = t * blocks + col / kPairCols;
    const int64_t first = split.RangeOf(pair * split.units);
    const int64_t ords = split.RangeOf(pair * split.units + split.units - 1) - first + 1;
    // The later chunks' partials: chunk first + o's block, the column's place in the pair.
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
