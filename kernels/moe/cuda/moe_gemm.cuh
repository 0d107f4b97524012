// The grouped expert GEMMs: FP4 E2M1 weights (× UE8M0 per 32) expanded to bf16 in registers,
// bf16 QDQ activations, mma.sync m16n8k16 with fp32 accumulators. Device code of
// cuda/moe_launch.cu only.
//
// Work split: a CTA of 4 warps owns one tile of up to kBM slot rows of one expert (the tile list
// of the permute stage, walked grid-stride over gridDim.y) and kBN output columns (blockIdx.x).
// Each warp owns all kBM rows and kWN n8 column tiles; for the up projection half of them are w1
// (gate) and half the same columns of w3 (up), so the SwiGLU pairs sit in the same thread.
// K advances kBK (128 or 256) at a time through a kStages-deep cp.async ring (A rows, FP4 codes,
// scales).
//
// Operand layout trick: a thread of an mma quad (tig = lane % 4) covers, in every 32-wide K block,
// the logical columns 8·tig .. 8·tig+7. The FP4 codes of those columns are one 32-bit word, which
// DecodeFp4x8 turns into the pairs (j, j+4), j < 4; the A rows are stored in the matching order
// (MoeOperandColumn), so one 16-byte shared load gives the same four pairs of A. The k slots of
// the two m16n8k16 instructions of a block are then a permutation of the block's 32 columns, the
// same for A and B, which leaves the dot product unchanged.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"

namespace flashserve::kernels::moe_device {

inline constexpr int kGemmThreads = 128;
inline constexpr int kGemmWarps = kGemmThreads / 32;

// kBK: K per pipeline stage, 128 or 256 (4 or 8 scale blocks; the launcher takes 256 when K
// allows). A 256-wide stage reads 128 contiguous bytes (a whole line) of every weight row per
// request instead of 64: scattered 64-byte reads of thousands of rows at once are the suspected
// reason the first version streamed the weights at ~1.1 TB/s (README.md "CUDA").
template <int kMT, int kWN, bool kUp, int kBK = 128>
struct GemmShape {
  static_assert(!kUp || kWN % 2 == 0, "the up projection pairs gate and up tiles");
  static_assert(kBK == 128 || kBK == 256);
  static constexpr int kBlocks = kBK / 32;          // scale blocks per stage
  static constexpr int kScaleWords = kBK / 128;     // 32-bit scale words per row and stage
  static constexpr int kBM = 16 * kMT;              // slot rows per tile
  static constexpr int kNB = 8 * kWN * kGemmWarps;  // weight rows per CTA
  static constexpr int kBN = kUp ? kNB / 2 : kNB;   // output columns per CTA
  static constexpr int kARow = 2 * kBK;             // bytes of one A row per stage
  static constexpr int kBRow = kBK / 2 + 16;        // FP4 bytes of one B row + bank padding
  static constexpr int kAStage = kBM * kARow;
  static constexpr int kBStage = kNB * kBRow;
  static constexpr int kStageBytes = kAStage + kBStage + 4 * kScaleWords * kNB;
  // 64-row tiles: 3 stages of 128 or 2 of 256 (two CTAs per SM either way; a 256-wide stage is
  // ~1.5 us of tensor work, more than the load latency it must cover). Smaller tiles: 4 stages
  // of 128, or 3 of 256 (the 16-row tile then fits four CTAs per SM, so the 432-CTA grid of a
  // one-token call runs in a single wave).
  static constexpr int kStages = kBM >= 64 ? (kBK == 256 ? 2 : 3) : (kBK == 256 ? 3 : 4);
  static constexpr int kTilePitch = kBN + 8;  // bf16 elements per row of the SwiGLU tile
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kTileBytes = kUp ? kBM * kTilePitch * 2 : 0;
  static constexpr int kSmemBytes = kPipeBytes > kTileBytes ? kPipeBytes : kTileBytes;
  static_assert(kStageBytes % 16 == 0 && kAStage % 16 == 0 && kBStage % 16 == 0);
};

struct GemmArgs {
  const uint16_t* a = nullptr;          // [slots, K] bf16, operand order (or [m, K], see a_row)
  const int32_t* a_row = nullptr;       // optional [slots]: A row of slot r (up: slot_token)
  const uint8_t* w = nullptr;           // [E, N, K/2]: w1 (up) or w2 (down)
  const uint8_t* w_scale = nullptr;     // [E, N, K/32]
  const uint8_t* w_up = nullptr;        // [E, N, K/2]: w3 (up only)
  const uint8_t* w_up_scale = nullptr;  // [E, N, K/32]
  int64_t n_experts = 0;                // E (the TMA-ring GEMM's weight maps)
  int64_t n = 0;                        // N of one projection: I (up) or D (down)
  int64_t k = 0;                        // K: D (up) or I (down)
  const int32_t* offsets = nullptr;
  const int32_t* tiles = nullptr;
  const int32_t* num_tiles = nullptr;
  const float* slot_weight = nullptr;  // up only
  float swiglu_limit = 0.f;            // up only
  uint16_t* out = nullptr;             // up: ag [slots, I] operand order; down: ye [slots, D]
  uint16_t* act = nullptr;             // up only, optional: a [slots, I]
  // The register-sourced GEMM only, optional: 2 words, zero on entry and left zero, from which
  // its persistent CTAs take items (null: each CTA walks its items grid-stride).
  int32_t* work_counters = nullptr;
};

// The A operand row of slot row r: the slot's token (a_row: the per-token QDQ rows) or r.
__device__ __forceinline__ const uint16_t* ARow(const GemmArgs& g, int64_t r) {
  const int64_t row = g.a_row != nullptr ? int64_t{__ldg(g.a_row + r)} : r;
  return g.a + row * g.k;
}

// Shared-memory row of the warp's n8 tile j (see the file comment).
template <int kWN, bool kUp, int kBN>
__device__ __forceinline__ int WarpTileRow(int warp, int j) {
  if (!kUp) return (warp * kWN + j) * 8;
  constexpr int kHalf = kWN / 2;
  return j < kHalf ? (warp * kHalf + j) * 8 : kBN + (warp * kHalf + j - kHalf) * 8;
}

// Issues the cp.async copies of K step kt into `stage`.
template <int kMT, int kWN, bool kUp, int kBK>
__device__ __forceinline__ void LoadStage(const GemmArgs& g, unsigned char* stage, int64_t kt,
                                          int64_t e, int64_t n0, int64_t row0, int64_t row_end) {
  using S = GemmShape<kMT, kWN, kUp, kBK>;
  constexpr int kAChunks = kBK / 8;   // 16-byte chunks of an A row
  constexpr int kBChunks = kBK / 32;  // 16-byte chunks of a B row
  const int tid = threadIdx.x;
  // Rows past the expert's end are not loaded: whatever the ring holds there only reaches
  // output rows that are never stored (row r of A feeds row r of the product alone).
  const int rows = static_cast<int>(row_end - row0);
  for (int i = tid; i < rows * kAChunks; i += kGemmThreads) {
    const int r = i / kAChunks, c = i % kAChunks;
    const uint16_t* src = ARow(g, row0 + r) + kt * kBK + c * 8;
    // 16-byte chunk c of row r goes to chunk c ^ 4 on odd rows: the two rows a quarter-warp
    // reads then hit disjoint bank halves.
    CpAsync16(stage + r * S::kARow + ((c ^ ((r & 1) << 2)) * 16), src, true);
  }
  // Consecutive threads take consecutive 16-byte chunks of one row: each row's kBK / 2 bytes
  // are requested together.
  for (int i = tid; i < S::kNB * kBChunks; i += kGemmThreads) {
    const int r = i / kBChunks, c = i % kBChunks;
    const bool up = kUp && r >= S::kBN;
    const int64_t nrow = n0 + (up ? r - S::kBN : r);
    const uint8_t* src =
        (up ? g.w_up : g.w) + (e * g.n + nrow) * (g.k / 2) + kt * (kBK / 2) + c * 16;
    CpAsync16(stage + S::kAStage + r * S::kBRow + c * 16, src, true);
  }
  // Scale rows are K / 32 bytes (a multiple of 4, not always of 8): 4-byte copies.
  for (int i = tid; i < S::kNB * S::kScaleWords; i += kGemmThreads) {
    const int r = i / S::kScaleWords, q = i % S::kScaleWords;
    const bool up = kUp && r >= S::kBN;
    const int64_t nrow = n0 + (up ? r - S::kBN : r);
    const uint8_t* src =
        (up ? g.w_up_scale : g.w_scale) + (e * g.n + nrow) * (g.k / 32) + kt * S::kBlocks + 4 * q;
    CpAsync4(stage + S::kAStage + S::kBStage + (r * S::kScaleWords + q) * 4, src);
  }
}

// LoadStage with the per-thread source and destination addresses computed once per tile
// (`kHoist`, MoeExpertUpParams::hoisted_addresses): a thread's copies of stage kt are its copies
// of stage 0 shifted by kt·kBK along K, so each copy then costs a 64-bit add and the cp.async
// instead of recomputing the row / chunk split, the 64-bit row address (expert · N + row) · K/2
// and the swizzle every stage. The same bytes land in the same places (bit-identical outputs);
// the price is registers (a pointer and an offset per copy), so the A rows are hoisted only
// where a thread has at most 4 of them per stage (16-row tiles; the weights always: 5 to 10
// copies).
template <int kMT, int kWN, bool kUp, int kBK>
struct HoistedLoads {
  using S = GemmShape<kMT, kWN, kUp, kBK>;
  static constexpr int kAChunks = kBK / 8;
  static constexpr int kBChunks = kBK / 32;
  static constexpr int kATotal = S::kBM * kAChunks;
  static constexpr int kBTotal = S::kNB * kBChunks;
  static constexpr int kSTotal = S::kNB * S::kScaleWords;
  static constexpr int kAIter = (kATotal + kGemmThreads - 1) / kGemmThreads;
  static constexpr int kBIter = (kBTotal + kGemmThreads - 1) / kGemmThreads;
  static constexpr int kSIter = (kSTotal + kGemmThreads - 1) / kGemmThreads;
  static constexpr bool kHoistA = kAIter <= 4;
  const uint16_t* a[kAIter];  // null: no copy (past the tile's rows); kHoistA only
  const uint8_t* b[kBIter];
  const uint8_t* s[kSIter];
  uint32_t a_dst[kAIter], b_dst[kBIter], s_dst[kSIter];  // byte offsets inside a stage

  __device__ __forceinline__ void Init(const GemmArgs& g, int64_t e, int64_t n0, int64_t row0,
                                       int64_t row_end) {
    const int tid = threadIdx.x;
    const int rows = static_cast<int>(row_end - row0);
#pragma unroll
    for (int it = 0; it < (kHoistA ? kAIter : 0); ++it) {
      const int i = tid + it * kGemmThreads;
      const int r = i / kAChunks, c = i % kAChunks;
      a[it] = i < kATotal && r < rows ? ARow(g, row0 + r) + c * 8 : nullptr;
      a_dst[it] = static_cast<uint32_t>(r * S::kARow + ((c ^ ((r & 1) << 2)) * 16));
    }
#pragma unroll
    for (int it = 0; it < kBIter; ++it) {
      const int i = tid + it * kGemmThreads;
      const int r = i / kBChunks, c = i % kBChunks;
      const bool up = kUp && r >= S::kBN;
      const int64_t nrow = n0 + (up ? r - S::kBN : r);
      b[it] = i < kBTotal ? (up ? g.w_up : g.w) + (e * g.n + nrow) * (g.k / 2) + c * 16 : nullptr;
      b_dst[it] = static_cast<uint32_t>(S::kAStage + r * S::kBRow + c * 16);
    }
#pragma unroll
    for (int it = 0; it < kSIter; ++it) {
      const int i = tid + it * kGemmThreads;
      const int r = i / S::kScaleWords, q = i % S::kScaleWords;
      const bool up = kUp && r >= S::kBN;
      const int64_t nrow = n0 + (up ? r - S::kBN : r);
      s[it] = i < kSTotal ? (up ? g.w_up_scale : g.w_scale) + (e * g.n + nrow) * (g.k / 32) + 4 * q
                          : nullptr;
      s_dst[it] = static_cast<uint32_t>(S::kAStage + S::kBStage + (r * S::kScaleWords + q) * 4);
    }
  }

  // LoadStage(g, stage, kt, ...) for the tile given to Init.
  __device__ __forceinline__ void Issue(const GemmArgs& g, unsigned char* stage, int64_t kt,
                                        int64_t row0, int64_t row_end) const {
    if constexpr (kHoistA) {
#pragma unroll
      for (int it = 0; it < kAIter; ++it) {
        if (a[it] != nullptr) CpAsync16(stage + a_dst[it], a[it] + kt * kBK, true);
      }
    } else {  // LoadStage's A loop
      const int rows = static_cast<int>(row_end - row0);
      for (int i = threadIdx.x; i < rows * kAChunks; i += kGemmThreads) {
        const int r = i / kAChunks, c = i % kAChunks;
        const uint16_t* src = ARow(g, row0 + r) + kt * kBK + c * 8;
        CpAsync16(stage + r * S::kARow + ((c ^ ((r & 1) << 2)) * 16), src, true);
      }
    }
#pragma unroll
    for (int it = 0; it < kBIter; ++it) {
      if (b[it] != nullptr) CpAsync16(stage + b_dst[it], b[it] + kt * (kBK / 2), true);
    }
#pragma unroll
    for (int it = 0; it < kSIter; ++it) {
      if (s[it] != nullptr) CpAsync4(stage + s_dst[it], s[it] + kt * S::kBlocks);
    }
  }
};

// acc += one 32-wide K block (blk) of the stage. kWide: some scale byte of the thread's rows is
// above 128 (never in real checkpoints; the exact-arithmetic tests use them). sw: the thread's
// scale word of this block for each n8 tile (4 bytes = 4 blocks).
template <int kMT, int kWN, bool kUp, int kBK, bool kWide>
__device__ __forceinline__ void ComputeBlock(const unsigned char* stage, int blk, int valid_mt,
                                             const int (&brow)[kWN], const uint32_t (&sw)[kWN],
                                             float (&acc)[kMT][kWN][4]) {
  using S = GemmShape<kMT, kWN, kUp, kBK>;
  const int lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
  const unsigned char* sa = stage;
  const unsigned char* sb = stage + S::kAStage;
  const int sub = blk % 4;  // the block's byte in the scale word
  uint32_t bq[kWN][4];
#pragma unroll
  for (int j = 0; j < kWN; ++j) {
    const uint32_t w = LoadShared4(sb + brow[j] * S::kBRow + blk * 16 + tig * 4);
    if constexpr (kWide) {
      DecodeFp4x8Wide(w, (sw[j] >> (8 * sub)) & 0xFFu, bq[j]);
    } else {
      DecodeFp4x8(w, ScaleMultiplier(sw[j] + 0x7E7E7E7Eu, sub), bq[j]);
    }
  }
  const int chunk = (blk * 4 + tig) ^ ((grp & 1) << 2);  // rows grp, grp + 8: parity of grp
  uint4 lo[kMT] = {}, hi[kMT] = {};
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    if (mt >= valid_mt) break;
    lo[mt] = LoadShared16(sa + (mt * 16 + grp) * S::kARow + chunk * 16);
    hi[mt] = LoadShared16(sa + (mt * 16 + grp + 8) * S::kARow + chunk * 16);
  }
  // All first halves, then all second halves: the two products into one accumulator are kMT·kWN
  // instructions apart instead of back to back (an mma.sync result is ~30 cycles away).
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    if (mt >= valid_mt) break;
#pragma unroll
    for (int j = 0; j < kWN; ++j) {
      MmaBf16(acc[mt][j], lo[mt].x, hi[mt].x, lo[mt].y, hi[mt].y, bq[j][0], bq[j][1]);
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    if (mt >= valid_mt) break;
#pragma unroll
    for (int j = 0; j < kWN; ++j) {
      MmaBf16(acc[mt][j], lo[mt].z, hi[mt].z, lo[mt].w, hi[mt].w, bq[j][2], bq[j][3]);
    }
  }
}

// acc += the stage's kBK-wide K slice, for the first `valid_mt` m16 sub-tiles (the others hold
// only rows past the expert's end: skipping them keeps a 65-row expert from costing two full
// 64-row tiles of tensor-core work; the condition is uniform over the CTA).
template <int kMT, int kWN, bool kUp, int kBK>
__device__ __forceinline__ void ComputeStage(const unsigned char* stage, int valid_mt,
                                             float (&acc)[kMT][kWN][4]) {
  using S = GemmShape<kMT, kWN, kUp, kBK>;
  const int warp = threadIdx.x / 32, grp = (threadIdx.x % 32) / 4;
  const unsigned char* ss = stage + S::kAStage + S::kBStage;
  int brow[kWN];
  uint32_t scale_word[S::kScaleWords][kWN];
  bool wide = false;
#pragma unroll
  for (int j = 0; j < kWN; ++j) {
    brow[j] = WarpTileRow<kWN, kUp, S::kBN>(warp, j) + grp;
#pragma unroll
    for (int q = 0; q < S::kScaleWords; ++q) {
      scale_word[q][j] = LoadShared4(ss + (brow[j] * S::kScaleWords + q) * 4);
      wide |= HasWideScale(scale_word[q][j]);
    }
  }
  // Warp-uniform: mma.sync.aligned must be executed by all lanes together.
  if (!__any_sync(0xFFFFFFFFu, wide)) {
#pragma unroll
    for (int blk = 0; blk < S::kBlocks; ++blk) {
      ComputeBlock<kMT, kWN, kUp, kBK, false>(stage, blk, valid_mt, brow, scale_word[blk / 4], acc);
    }
  } else {
#pragma unroll
    for (int q = 0; q < S::kScaleWords; ++q) {  // static index: scale_word stays in registers
#pragma unroll 1
      for (int b = 0; b < 4; ++b) {
        ComputeBlock<kMT, kWN, kUp, kBK, true>(stage, 4 * q + b, valid_mt, brow, scale_word[q],
                                               acc);
      }
    }
  }
}

// Down projection: ye = bf16(acc).
template <int kMT, int kWN>
__device__ __forceinline__ void StoreDown(const GemmArgs& g, const float (&acc)[kMT][kWN][4],
                                          int64_t n0, int64_t row0, int64_t row_end) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < kWN; ++j) {
      const int64_t col = n0 + (warp * kWN + j) * 8 + 2 * tig;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = row0 + mt * 16 + grp + 8 * h;
        if (r < row_end) {
          const uint32_t v = exact::F32x2ToBf16x2(acc[mt][j][2 * h], acc[mt][j][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(g.out + r * g.n + col) = v;
        }
      }
    }
  }
}

// Up projection: SwiGLU into a bf16 tile in shared memory, then the FP8 quantiser per 32 columns
// of each row (the tile's kBN columns are whole 32-blocks of I).
template <int kMT, int kWN>
__device__ __forceinline__ void StoreUp(const GemmArgs& g, const float (&acc)[kMT][kWN][4],
                                        unsigned char* smem, int64_t n0, int64_t row0,
                                        int64_t row_end) {
  using S = GemmShape<kMT, kWN, true>;
  constexpr int kHalf = kWN / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
  uint16_t* tile = reinterpret_cast<uint16_t*>(smem);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    if (row0 + mt * 16 >= row_end) break;  // uniform: no row of this sub-tile is stored
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rl = mt * 16 + grp + 8 * h;
      const bool valid = row0 + rl < row_end;
      const float w = valid ? g.slot_weight[row0 + rl] : 0.f;
#pragma unroll
      for (int j = 0; j < kHalf; ++j) {
        const int col = (warp * kHalf + j) * 8 + 2 * tig;
        const uint32_t lo =
            SwiGluBf16(acc[mt][j][2 * h], acc[mt][kHalf + j][2 * h], g.swiglu_limit, w, true);
        const uint32_t hi = SwiGluBf16(acc[mt][j][2 * h + 1], acc[mt][kHalf + j][2 * h + 1],
                                       g.swiglu_limit, w, true);
        *reinterpret_cast<uint32_t*>(tile + rl * S::kTilePitch + col) = lo | (hi << 16);
      }
    }
  }
  __syncthreads();
  constexpr int kBlocks = S::kBN / 32;
  for (int u = threadIdx.x; u < S::kBM * kBlocks; u += kGemmThreads) {
    const int rl = u / kBlocks, cb = u % kBlocks;
    const int64_t r = row0 + rl;
    if (r >= row_end) continue;
    StoreQuantizedBlock32(tile + rl * S::kTilePitch + cb * 32, g.act, g.out,
                          r * g.n + n0 + cb * 32);
  }
}

template <int kMT, int kWN, bool kUp, int kBK, bool kHoist = false>
__global__ void __launch_bounds__(kGemmThreads) MoeExpertGemmKernel(GemmArgs g) {
  using S = GemmShape<kMT, kWN, kUp, kBK>;
  extern __shared__ __align__(128) unsigned char gemm_smem[];
  const int64_t n0 = int64_t{blockIdx.x} * S::kBN;
  const int num_tiles = *g.num_tiles;
  const int64_t kt_count = g.k / kBK;
  for (int tile = blockIdx.y; tile < num_tiles; tile += gridDim.y) {
    const int64_t e = g.tiles[2 * tile];
    const int64_t row0 = g.tiles[2 * tile + 1];
    const int64_t row_end = min(row0 + S::kBM, int64_t{g.offsets[e + 1]});
    const int valid_mt = static_cast<int>((row_end - row0 + 15) / 16);
    float acc[kMT][kWN][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int j = 0; j < kWN; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mt][j][q] = 0.f;
      }
    }
    HoistedLoads<kMT, kWN, kUp, kBK> hl;
    if constexpr (kHoist) hl.Init(g, e, n0, row0, row_end);
    auto load = [&](int64_t kt) {
      unsigned char* stage = gemm_smem + (kt % S::kStages) * S::kStageBytes;
      if constexpr (kHoist) {
        hl.Issue(g, stage, kt, row0, row_end);
      } else {
        LoadStage<kMT, kWN, kUp, kBK>(g, stage, kt, e, n0, row0, row_end);
      }
    };
#pragma unroll
    for (int s = 0; s < S::kStages - 1; ++s) {
      if (s < kt_count) load(s);
      CpAsyncCommit();
    }
    for (int64_t kt = 0; kt < kt_count; ++kt) {
      CpAsyncWait<S::kStages - 2>();
      __syncthreads();  // stage kt is visible; everyone is done with the stage refilled below
      const int64_t next = kt + S::kStages - 1;
      if (next < kt_count) load(next);
      CpAsyncCommit();
      ComputeStage<kMT, kWN, kUp, kBK>(gemm_smem + (kt % S::kStages) * S::kStageBytes, valid_mt,
                                       acc);
    }
    CpAsyncWait<0>();
    __syncthreads();  // the epilogue tile overlays the ring
    if constexpr (kUp) {
      StoreUp<kMT, kWN>(g, acc, gemm_smem, n0, row0, row_end);
    } else {
      StoreDown<kMT, kWN>(g, acc, n0, row0, row_end);
    }
    __syncthreads();  // the next tile refills the ring
  }
}

}  // namespace flashserve::kernels::moe_device
