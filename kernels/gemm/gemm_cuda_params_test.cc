// Host-side pieces of the CUDA FP8 Linear (gemm_cuda.h): the plan, the workspace size and the
// params validation. No device needed.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm/gemm_cuda.h"

namespace flashserve::kernels {
namespace {

// A fake device view: the pointers are never dereferenced by the host checks.
struct FakeWeight {
  alignas(16) uint8_t codes[16] = {};
  uint8_t scales[1] = {};
  Fp8LinearDevice View(int64_t n, int64_t k) const { return {n, k, codes, scales, nullptr}; }
};

// An M-row call on `w` that passes validation given enough workspace (the validator reads no
// memory: x, y and the workspace are never dereferenced).
LinearCudaParams CallFor(const Fp8LinearDevice& w, int64_t m, size_t workspace_bytes) {
  static uint16_t x[1], y[1];
  LinearCudaParams q;
  q.weight = &w;
  q.m = m;
  q.x_bf16 = x;
  q.x_stride = w.k;
  q.y_bf16 = y;
  q.y_stride = w.n;
  q.workspace = reinterpret_cast<void*>(uintptr_t{1} << 20);
  q.workspace_bytes = workspace_bytes;
  return q;
}

TEST(LinearCudaPlanTest, TileRowsAndStepsFollowM) {
  // The weight-streaming kernel (tile_rows 8: x rows as the mma's n8 operand) up to M = 8 for
  // every weight, small ones included; then mma.sync with 16-row tiles up to M = 16.
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120).tile_rows, kLinearCudaStreamRows);
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120).kernel, LinearCudaKernel::kStream);
  for (int64_t m = 1; m <= 8; ++m) {
    for (int64_t n : {64, 512, 1280, 2304, 5120, 32768}) {
      EXPECT_EQ(PlanLinearCuda(m, n, 5120).kernel, LinearCudaKernel::kStream) << m << " " << n;
      EXPECT_EQ(PlanLinearCuda(m, n, 5120).tile_rows, kLinearCudaStreamRows) << m << " " << n;
    }
  }
  EXPECT_EQ(PlanLinearCuda(8, 32768, 1280).kernel, LinearCudaKernel::kStream);
  EXPECT_EQ(PlanLinearCuda(8, 25600, 6144).kernel, LinearCudaKernel::kStream);
  // M = 9 .. 16: the register-sourced wgmma kernel on weights of >= 32 Mi codes (wq_b, wo_b,
  // engram.wkv), the 16-row mma.sync kernel on the others; M = 17 .. 768: register-sourced.
  EXPECT_EQ(PlanLinearCuda(9, 32768, 1280).kernel, LinearCudaKernel::kWgmmaRs);
  EXPECT_EQ(PlanLinearCuda(16, 32768, 1280).tile_rows, kLinearCudaRsRows);
  EXPECT_EQ(PlanLinearCuda(16, 5120, 8192).kernel, LinearCudaKernel::kWgmmaRs);
  EXPECT_EQ(PlanLinearCuda(9, 1280, 5120).kernel, LinearCudaKernel::kMmaSync);
  EXPECT_EQ(PlanLinearCuda(9, 1280, 5120).tile_rows, 16);
  EXPECT_EQ(PlanLinearCuda(16, 1280, 5120).tile_rows, 16);
  EXPECT_EQ(PlanLinearCuda(16, 2304, 5120).kernel, LinearCudaKernel::kMmaSync);
  for (int64_t m : {17, 33, 64, 127, 128, 256, 300, 512, 768}) {
    for (int64_t n : {512, 1280, 2304, 5120, 32768}) {
      EXPECT_EQ(PlanLinearCuda(m, n, 5120).kernel, LinearCudaKernel::kWgmmaRs) << m << " " << n;
      EXPECT_EQ(PlanLinearCuda(m, n, 5120, 0, 0, false).kernel, LinearCudaKernel::kWgmmaRs);
    }
  }
  EXPECT_STREQ(LinearCudaKernelName(LinearCudaKernel::kWgmmaRs), "wgmma-rs");
  // Above kLinearCudaRsMaxM the mma.sync / wgmma rule below.
  EXPECT_NE(PlanLinearCuda(769, 1280, 5120).kernel, LinearCudaKernel::kWgmmaRs);
  // Forced tile rows keep their kernels at M <= 16 (16 is the mma.sync kernel's 16-row tile).
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120, 16).kernel, LinearCudaKernel::kMmaSync);
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120, 16).tile_rows, 16);
  EXPECT_EQ(PlanLinearCuda(16, 1280, 5120, 32).tile_rows, 32);
  // Forced tile_rows 8: the stream kernel at any M (a CTA per 16 rows).
  EXPECT_EQ(PlanLinearCuda(300, 1280, 5120, 8).kernel, LinearCudaKernel::kStream);
  EXPECT_EQ(PlanLinearCuda(300, 1280, 5120, 8).m_tiles, 19);
  EXPECT_STREQ(LinearCudaKernelName(LinearCudaKernel::kStream), "stream");
  // wgmma (M > kLinearCudaRsMaxM here; from M = 128 in the rule) with N >= 128 (FP8) / 256 (bf16
  // expansion), when every split keeps at least kLinearCudaWgmmaMinSplitK of K, else mma.sync
  // with 64-row tiles. N = 96 / 128 / 255: too narrow for a wgmma tile.
  EXPECT_EQ(PlanLinearCuda(1024, 96, 5120).tile_rows, 64);
  EXPECT_EQ(PlanLinearCuda(1024, 1280, 5120, 0, 0, false).kernel, LinearCudaKernel::kWgmmaFp8);
  EXPECT_EQ(PlanLinearCuda(1024, 1280, 5120, 0, 0, true).kernel, LinearCudaKernel::kWgmmaBf16);
  // K = 512 keeps every split below the threshold: mma.sync.
  EXPECT_EQ(PlanLinearCuda(1024, 5120, 512).kernel, LinearCudaKernel::kMmaSync);
  // K below the threshold: never wgmma automatically.
  EXPECT_EQ(PlanLinearCuda(4096, 4096, 512).tile_rows, 64);
  EXPECT_EQ(PlanLinearCuda(4096, 1280, 5120).tile_rows, 128);
  EXPECT_EQ(PlanLinearCuda(4096, 255, 5120, 0, 0, false).tile_rows, 128);
  EXPECT_EQ(PlanLinearCuda(4096, 255, 5120, 0, 0, true).tile_rows, 64);
  EXPECT_EQ(PlanLinearCuda(4096, 127, 5120).tile_rows, 64);
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120, 64).tile_rows, 64);
  EXPECT_EQ(PlanLinearCuda(4096, 1280, 5120, 64).tile_rows, 64);
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120, 128).tile_rows, 128);
  // The default wgmma is the bf16 expansion; the FP8 one is opt-in (wgmma_bf16 = false).
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120, 128).kernel, LinearCudaKernel::kWgmmaBf16);
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120, 128, 0, false).kernel, LinearCudaKernel::kWgmmaFp8);
  const LinearCudaPlan p = PlanLinearCuda(300, 2304, 5120, 64);
  EXPECT_EQ(p.kernel, LinearCudaKernel::kMmaSync);
  EXPECT_EQ(p.k_step, 128);
  EXPECT_EQ(p.tile_cols, 128);
  EXPECT_EQ(p.k_steps, 40);
  EXPECT_EQ(p.m_tiles, 5);
  EXPECT_EQ(p.n_tiles, 18);
  const LinearCudaPlan q = PlanLinearCuda(300, 2304, 5120, 128, 0, true);
  EXPECT_EQ(q.kernel, LinearCudaKernel::kWgmmaBf16);
  EXPECT_EQ(q.tile_rows, 128);
  EXPECT_EQ(q.tile_cols, 256);
  EXPECT_EQ(q.k_step, 64);
  EXPECT_EQ(q.k_steps, 80);
  EXPECT_EQ(q.m_tiles, 3);
  EXPECT_EQ(q.n_tiles, 9);
  // 27 tiles < 132: split to fill one CTA per SM (4 splits of 20 steps).
  EXPECT_EQ(q.splits, 4);
  EXPECT_EQ(PlanLinearCuda(300, 2304, 5120).kernel, LinearCudaKernel::kWgmmaRs);
  const LinearCudaPlan f = PlanLinearCuda(300, 2304, 5120, 128, 0, false);
  EXPECT_EQ(f.kernel, LinearCudaKernel::kWgmmaFp8);
  EXPECT_EQ(f.tile_rows, 128);
  EXPECT_EQ(f.tile_cols, 128);
  EXPECT_EQ(f.k_step, 128);
  EXPECT_EQ(f.k_steps, 40);
  EXPECT_EQ(f.m_tiles, 3);
  EXPECT_EQ(f.n_tiles, 18);
  EXPECT_EQ(f.splits, 2);                                 // 54 tiles: 2 splits of 20 steps
  EXPECT_EQ(PlanLinearCuda(4096, 5120, 8192).splits, 1);  // wo_b prefill: 640 tiles
}

// The stream plan at the decode shapes: at most 128 weight rows per CTA, K steps of 128, split
// on ceil(N / 128) CTAs to about 264, then n_tiles (CTAs along N, each taking every n_tiles-th
// m16 tile) raised toward 264 CTAs, one m tile for M <= 16.
TEST(LinearCudaPlanTest, StreamPlanAtDecodeShapes) {
  struct Case {
    int64_t n, k, n_tiles, splits, steps_per_split;
  };
  const Case cases[] = {
      {1280, 5120, 13, 20, 2},    // wq_a: 26 wanted, 40 steps -> 20 splits of 2; 13 x 20 CTAs
      {32768, 1280, 264, 1, 10},  // wq_b: 2,048 m16 tiles over 264 CTAs
      {5120, 8192, 44, 6, 11},    // wo_b: 320 m16 tiles over 44 x 6
      {25600, 6144, 264, 1, 48},  // engram.wkv: 1,600 m16 tiles over 264 (was 200 CTAs of 8)
      {4608, 5120, 37, 7, 6},     // shared w1|w3
      {5120, 2304, 44, 6, 3},     // shared w2
      {512, 5120, 13, 20, 2},     // wkv: 32 m16 tiles over 13 x 20
      {64, 4096, 4, 32, 1},       // tiny N: at most one m16 tile per CTA
  };
  for (const Case& c : cases) {
    for (int64_t m : {1, 7, 16}) {
      const LinearCudaPlan p = PlanLinearCuda(m, c.n, c.k, kLinearCudaStreamRows);
      SCOPED_TRACE(std::to_string(m) + " " + std::to_string(c.n) + "x" + std::to_string(c.k));
      EXPECT_EQ(p.kernel, LinearCudaKernel::kStream);
      EXPECT_EQ(p.tile_cols, kLinearCudaStreamCols);
      EXPECT_EQ(p.k_step, kLinearCudaKStep);
      EXPECT_EQ(p.m_tiles, 1);
      EXPECT_EQ(p.n_tiles, c.n_tiles);
      EXPECT_EQ(p.splits, c.splits);
      EXPECT_EQ(p.steps_per_split, c.steps_per_split);
      EXPECT_FALSE(p.warp_specialised);
      EXPECT_FALSE(p.expand_weights);
    }
  }
  // CTA c takes the m16 tiles c + n_tiles·w, w < 8 (its warps): every tile once, no CTA without
  // one, and the grid within 264 CTAs unless ceil(N / 128) alone exceeds it.
  for (int64_t n : {16, 64, 96, 1000, 1280, 2304, 5120, 25600, 32768, 100000}) {
    for (int64_t m : {1, 16, 17, 300}) {
      for (int64_t forced : {0, 1, 3, 32}) {
        const LinearCudaPlan p = PlanLinearCuda(m, n, 5120, kLinearCudaStreamRows, forced);
        SCOPED_TRACE(std::to_string(n) + " " + std::to_string(m) + " " + std::to_string(forced));
        const int64_t tiles16 = (n + 15) / 16, ctas128 = (n + 127) / 128;
        ASSERT_GE(8 * p.n_tiles, tiles16);
        ASSERT_LE(p.n_tiles, tiles16);
        ASSERT_GE(p.n_tiles, ctas128);
        if (p.n_tiles > ctas128) {
          ASSERT_LE(p.n_tiles * p.splits * p.m_tiles, 264);
        }
      }
    }
  }
  // Forced: tile_rows 8 at any M, split_k as asked.
  const LinearCudaPlan many = PlanLinearCuda(16 * 200, 128 * 10, 4096, 8, 4);
  EXPECT_EQ(many.m_tiles * many.n_tiles, 2000);
  EXPECT_EQ(many.splits, 4);
  EXPECT_EQ(PlanLinearCuda(16 * 200, 128 * 10, 4096, 8).splits, 1);  // 2000 tiles: no split
  // The plan depends on (M, N, K) only through m_tiles: every M <= 16 plans alike.
  for (int64_t m = 1; m <= 16; ++m) {
    const LinearCudaPlan p = PlanLinearCuda(m, 1000, 1312);
    const LinearCudaPlan one = PlanLinearCuda(1, 1000, 1312);
    EXPECT_EQ(p.splits, one.splits);
    EXPECT_EQ(p.steps_per_split, one.steps_per_split);
  }
}

// The TMA-ring plan (LinearCudaStreamTmaPays): the automatic choice at M <= 8 for weights of at
// least 64 MiB of codes with K <= 8192, 128-row tiles, the splits of the balance rule (the busiest
// of 132 CTAs: ceil(tiles · s / 132) items of K units per split + 1).
TEST(LinearCudaPlanTest, StreamTmaPlanAtDecodeShapes) {
  struct Case {
    int64_t n, k, splits, steps_per_split;
  };
  const Case cases[] = {
      {25600, 6144, 3, 16},  // engram.wkv: 200 x 3 = 600 items, <= 5 of 16 units per CTA
      {8192, 8192, 2, 32},   // 64 tiles x 2 = 128 items, one per CTA
      {16384, 4096, 1, 32},  // 128 tiles, one per CTA: no split
  };
  for (const Case& c : cases) {
    for (int64_t m = 1; m <= 8; ++m) {
      const LinearCudaPlan p = PlanLinearCuda(m, c.n, c.k);
      SCOPED_TRACE(std::to_string(m) + " " + std::to_string(c.n) + "x" + std::to_string(c.k));
      EXPECT_EQ(p.kernel, LinearCudaKernel::kStream);
      EXPECT_TRUE(p.tma_ring);
      EXPECT_EQ(p.tile_rows, kLinearCudaStreamRows);
      EXPECT_EQ(p.m_tiles, 1);
      EXPECT_EQ(p.n_tiles, (c.n + 127) / 128);
      EXPECT_EQ(p.splits, c.splits);
      EXPECT_EQ(p.steps_per_split, c.steps_per_split);
      // A forced split count is kept; a forced stream kernel never takes the ring.
      EXPECT_EQ(PlanLinearCuda(m, c.n, c.k, 0, 4).splits, 4);
      EXPECT_TRUE(PlanLinearCuda(m, c.n, c.k, 0, 4).tma_ring);
      EXPECT_FALSE(PlanLinearCuda(m, c.n, c.k, kLinearCudaStreamRows).tma_ring);
    }
    EXPECT_FALSE(PlanLinearCuda(9, c.n, c.k).tma_ring);
  }
  // Below 64 MiB of codes (wq_b and wo_b: 40 MiB; one 32-column block short of 64 MiB), or K
  // beyond 8192: the register-ring plan.
  const std::vector<std::pair<int64_t, int64_t>> ring_less = {
      {1280, 5120}, {32768, 1280}, {5120, 8192}, {4608, 5120},
      {8192, 8160}, {8192, 16384}, {2048, 65536}};
  for (const auto& [n, k] : ring_less) {
    EXPECT_FALSE(PlanLinearCuda(1, n, k).tma_ring) << n << "x" << k;
    EXPECT_EQ(PlanLinearCuda(1, n, k).kernel, LinearCudaKernel::kStream) << n << "x" << k;
  }
  // Every automatic ring plan covers K exactly once with at most 32 splits, none empty.
  for (int64_t n : {8192, 10000, 32768, 100000, 1000000}) {
    for (int64_t k : {4096, 4128, 6144, 8192}) {
      if (n * k < kLinearCudaStreamTmaMinBytes) continue;
      const LinearCudaPlan p = PlanLinearCuda(1, n, k);
      SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(k));
      ASSERT_TRUE(p.tma_ring);
      ASSERT_GE(p.splits, 1);
      ASSERT_LE(p.splits, kLinearCudaMaxSplits);
      ASSERT_EQ(p.k_steps, (k + 127) / 128);
      ASSERT_GE(p.splits * p.steps_per_split, p.k_steps);
      ASSERT_LT((p.splits - 1) * p.steps_per_split, p.k_steps);
    }
  }
}

// The register-sourced plan at the decode-batch shapes: 256 weight rows and up to 128 x rows per
// CTA, K steps of 128, split to about 132 CTAs (one per SM).
TEST(LinearCudaPlanTest, RsPlanAtDecodeBatchShapes) {
  struct Case {
    int64_t n, k, n_tiles, splits, steps_per_split;
  };
  const Case cases[] = {
      {1280, 5120, 5, 20, 2},     // wq_a: 26 wanted, 40 steps -> 20 splits of 2
      {32768, 1280, 128, 1, 10},  // wq_b: 128 tiles
      {5120, 8192, 20, 6, 11},    // wo_b
      {25600, 6144, 100, 1, 48},  // engram.wkv
      {4608, 5120, 18, 7, 6},     // shared w1|w3
      {5120, 2304, 20, 6, 3},     // shared w2
  };
  for (const Case& c : cases) {
    for (int64_t m : {17, 64, 128}) {
      const LinearCudaPlan p = PlanLinearCuda(m, c.n, c.k);
      SCOPED_TRACE(std::to_string(m) + " " + std::to_string(c.n) + "x" + std::to_string(c.k));
      EXPECT_EQ(p.kernel, LinearCudaKernel::kWgmmaRs);
      EXPECT_EQ(p.tile_rows, kLinearCudaRsRows);
      EXPECT_EQ(p.tile_cols, kLinearCudaRsCols);
      EXPECT_EQ(p.k_step, kLinearCudaKStep);
      EXPECT_EQ(p.m_tiles, 1);
      EXPECT_EQ(p.n_tiles, c.n_tiles);
      EXPECT_EQ(p.splits, c.splits);
      EXPECT_EQ(p.steps_per_split, c.steps_per_split);
      EXPECT_FALSE(p.warp_specialised);
      EXPECT_FALSE(p.expand_weights);
    }
  }
  // Two 128-row x tiles at M = 129 .. 256; forced at any M and split.
  EXPECT_EQ(PlanLinearCuda(256, 32768, 1280).m_tiles, 2);
  EXPECT_EQ(PlanLinearCuda(129, 5120, 8192).m_tiles, 2);
  EXPECT_EQ(PlanLinearCuda(129, 5120, 8192).splits, 3);  // 40 tiles
  EXPECT_EQ(PlanLinearCuda(4096, 1280, 5120, kLinearCudaRsRows).m_tiles, 32);
  EXPECT_EQ(PlanLinearCuda(1, 1280, 5120, kLinearCudaRsRows, 3).splits, 3);
}

// The warp-specialised main loop runs the bf16-expansion wgmma plan (same tiles, steps and
// splits) unless wgmma_ws is false; never the mma.sync or FP8 wgmma plans.
TEST(LinearCudaPlanTest, WarpSpecialisedOnlyForTheBf16WgmmaKernel) {
  const LinearCudaPlan ws = PlanLinearCuda(4096, 32768, 1280);
  EXPECT_EQ(ws.kernel, LinearCudaKernel::kWgmmaBf16);
  EXPECT_TRUE(ws.warp_specialised);
  const LinearCudaPlan cp = PlanLinearCuda(4096, 32768, 1280, 0, 0, true, false);
  EXPECT_EQ(cp.kernel, LinearCudaKernel::kWgmmaBf16);
  EXPECT_FALSE(cp.warp_specialised);
  EXPECT_EQ(cp.splits, ws.splits);
  EXPECT_EQ(cp.steps_per_split, ws.steps_per_split);
  EXPECT_EQ(cp.m_tiles, ws.m_tiles);
  EXPECT_EQ(cp.n_tiles, ws.n_tiles);
  // Forced split at small M: same plan, split partials included.
  const LinearCudaPlan split = PlanLinearCuda(130, 1000, 1312, 128, 3);
  EXPECT_TRUE(split.warp_specialised);
  EXPECT_EQ(split.splits, 3);
  EXPECT_FALSE(PlanLinearCuda(4096, 32768, 1280, 0, 0, false).warp_specialised);  // FP8 wgmma
  EXPECT_FALSE(PlanLinearCuda(64, 32768, 1280).warp_specialised);                 // mma.sync
  EXPECT_FALSE(PlanLinearCuda(4096, 32768, 1280, 64).warp_specialised);
}

TEST(LinearCudaPlanTest, SplitsCoverKWithoutEmptySplits) {
  for (int64_t m : {1, 7, 64, 300, 4096}) {
    for (int64_t n : {96, 512, 1280, 5120, 32768}) {
      for (int64_t k : {32, 96, 1280, 2304, 5120, 15360}) {
        for (int64_t forced : {0, 1, 3, 32}) {
          const LinearCudaPlan p = PlanLinearCuda(m, n, k, 0, forced);
          SCOPED_TRACE(std::to_string(m) + " " + std::to_string(n) + " " + std::to_string(k));
          ASSERT_GE(p.splits, 1);
          ASSERT_LE(p.splits, kLinearCudaMaxSplits);
          ASSERT_GE(p.k_steps * p.k_step, k);
          ASSERT_LT((p.k_steps - 1) * p.k_step, k);
          // Every split has at least one step and together they cover all steps.
          ASSERT_GE(p.splits * p.steps_per_split, p.k_steps);
          ASSERT_LT((p.splits - 1) * p.steps_per_split, p.k_steps);
          if (forced > 0) {
            ASSERT_LE(p.splits, forced);
          }
        }
      }
    }
  }
  // Decode of wq_a: 10 column tiles, K split to fill the GPU; a large prefill does not split.
  EXPECT_GT(PlanLinearCuda(1, 1280, 5120).splits, 8);
  EXPECT_EQ(PlanLinearCuda(4096, 2304, 5120).splits, 1);
}

// Replays the K range of every split the way LinearFp8GemmKernel / WgmmaLinearKernel derive it
// from the plan (K steps of the kernel's kBK: kLinearCudaKStep, or kLinearCudaWgmmaKStep for
// tile_rows 128; kt0 = z · steps_per_split, kt_end = min(kt0 + steps_per_split, ceil(K / kBK));
// 32-wide scale blocks below K / 32) and checks that every 32-wide K block is summed exactly
// once, at every tile size. (A plan counting 256-wide steps for the 16/32-row tiles made the
// kernel sum only half of K.)
TEST(LinearCudaPlanTest, KernelSplitsCoverEveryKBlockOnce) {
  for (int64_t tile : {0, 8, 16, 32, 64, 128, 256}) {
    for (int64_t m : {1, 7, 17, 64, 300}) {
      for (int64_t k : std::initializer_list<int64_t>{32, 64, 96, 256, 512, 640, 1280, 2304, 5120,
                                                      15360, kLinearCudaMaxK}) {
        for (int64_t forced : {0, 1, 3, 5, 32}) {
          for (bool bf16 : {false, true}) {
            const LinearCudaPlan p = PlanLinearCuda(m, 1000, k, tile, forced, bf16);
            SCOPED_TRACE(std::to_string(tile) + " " + std::to_string(m) + " " + std::to_string(k) +
                         " " + std::to_string(forced) + " " + std::to_string(bf16));
            const bool wgmma = p.tile_rows == kLinearCudaWgmmaRows;
            const bool stream = p.tile_rows == kLinearCudaStreamRows;
            const bool rs = p.tile_rows == kLinearCudaRsRows;
            ASSERT_EQ(stream, tile == 8 || (tile == 0 && m <= 8));
            ASSERT_EQ(rs, tile == kLinearCudaRsRows || (tile == 0 && LinearCudaRsPays(m, 1000, k)));
            ASSERT_EQ(p.kernel, stream   ? LinearCudaKernel::kStream
                                : rs     ? LinearCudaKernel::kWgmmaRs
                                : !wgmma ? LinearCudaKernel::kMmaSync
                                         : (bf16 ? LinearCudaKernel::kWgmmaBf16
                                                 : LinearCudaKernel::kWgmmaFp8));
            const int64_t step = !wgmma ? kLinearCudaKStep
                                        : (bf16 ? kLinearCudaWgmmaKStep : kLinearCudaWgmmaFp8KStep);
            ASSERT_EQ(p.k_step, step);
            const int64_t kBlocksPerStep = step / 32;
            // The kernel's scale strip: 4 (mma.sync, FP8 wgmma) or 8 (bf16 wgmma) rows of
            // steps_per_split · kBlocksPerStep bytes, at most 8192 / 16384 (what the launchers
            // reserve).
            const bool eight = wgmma && bf16;
            if (rs) {
              // LinearFp8RsKernel: blockIdx.x covers m in 128-row tiles; its scale strip is 8
              // rows of steps_per_split · 4 bytes, at most 8 · kLinearCudaMaxK / 32.
              ASSERT_EQ(p.m_tiles, (m + 127) / 128);
              ASSERT_EQ(p.tile_cols, kLinearCudaRsCols);
              ASSERT_LE(p.steps_per_split * kBlocksPerStep, kLinearCudaMaxK / 32);
              if (forced == 0) {  // one CTA per SM: automatic splits stay within 132 CTAs
                ASSERT_LE(p.splits * p.m_tiles * p.n_tiles,
                          std::max<int64_t>(132, p.m_tiles * p.n_tiles));
              }
            } else if (!stream) {
              ASSERT_LE((eight ? 8 : 4) * p.steps_per_split * kBlocksPerStep, eight ? 16384 : 8192);
            } else {
              // LinearFp8StreamKernel: blockIdx.z covers m in 16-row tiles; x.y the splits.
              ASSERT_EQ(p.m_tiles, (m + 15) / 16);
              ASSERT_EQ(p.tile_cols, kLinearCudaStreamCols);
            }
            const int64_t k_steps = (k + step - 1) / step;
            const int64_t k_blocks = k / 32;
            std::vector<int> seen(k_blocks, 0);
            for (int64_t z = 0; z < p.splits; ++z) {
              const int64_t kt0 = z * p.steps_per_split;
              const int64_t kt_end = std::min(kt0 + p.steps_per_split, k_steps);
              ASSERT_GE(kt_end - kt0, 1) << "empty split " << z;
              for (int64_t kt = kt0; kt < kt_end; ++kt) {
                const int64_t first = kt * kBlocksPerStep;
                const int64_t blocks = std::min(kBlocksPerStep, k_blocks - first);
                for (int64_t b = 0; b < blocks; ++b) ++seen[first + b];
              }
            }
            for (int64_t b = 0; b < k_blocks; ++b) ASSERT_EQ(seen[b], 1) << "K block " << b;
          }
        }
      }
    }
  }
}

TEST(LinearCudaPlanTest, WorkspaceCoversEveryM) {
  FakeWeight f;
  for (int64_t n : {96, 1280, 5120}) {
    const Fp8LinearDevice w = f.View(n, 2304);
    for (int64_t forced : {0, 4}) {
      for (int64_t tile : {int64_t{0}, int64_t{8}, kLinearCudaRsRows}) {
        for (bool bf16 : {false, true}) {
          SCOPED_TRACE(std::to_string(n) + " forced " + std::to_string(forced) + " tile " +
                       std::to_string(tile) + " bf16 " + std::to_string(bf16));
          const size_t max_bytes = LinearCudaWorkspaceBytes(w, 400, tile, forced, bf16);
          size_t prev = 0;
          for (int64_t m = 1; m <= 400; ++m) {
            const LinearCudaPlan p = PlanLinearCuda(m, n, 2304, tile, forced, bf16);
            // The QDQ bf16 values, or the codes (256-aligned) then the scales.
            const size_t qdq = static_cast<size_t>(2 * m * 2304);
            const size_t codes = static_cast<size_t>((m * 2304 + 255) / 256 * 256 +
                                                     m * LinearCudaActScaleStride(2304));
            ASSERT_LE(p.kernel == LinearCudaKernel::kWgmmaFp8 ? codes : qdq,
                      LinearCudaActivationBytes(m, 2304));
            ASSERT_EQ(LinearCudaActivationBytes(m, 2304) % 256, 0u);
            // The activations (none for the stream kernel), the partials, the stream kernel's
            // 8-byte arrival counters per tile, each region 256-byte aligned.
            const bool stream = p.kernel == LinearCudaKernel::kStream;
            ASSERT_EQ(stream, tile == 8 || (tile == 0 && m <= 8));
            const size_t partials = p.splits > 1 ? static_cast<size_t>(4 * p.splits * m * n) : 0;
            const size_t counters =
                stream && p.splits > 1 ? static_cast<size_t>(8 * p.m_tiles * p.n_tiles) : 0;
            const size_t need =
                (stream ? 0 : LinearCudaActivationBytes(m, 2304)) + partials + counters;
            ASSERT_LE(need, max_bytes) << m;
            const LinearCudaWorkspaceLayout l = LinearCudaLayout(p, m, n, 2304);
            ASSERT_EQ(l.activations, 0u);
            ASSERT_EQ(l.partials, stream ? 0 : LinearCudaActivationBytes(m, 2304));
            ASSERT_GE(l.counters, l.partials + partials);
            ASSERT_EQ(l.counters % 256, 0u);
            ASSERT_GE(l.end, l.counters + counters) << m;
            ASSERT_LE(l.end, max_bytes) << m;
            const size_t mono = LinearCudaWorkspaceBytes(w, m, tile, forced, bf16);
            ASSERT_GE(mono, prev) << m;
            ASSERT_GE(mono, l.end) << m;
            prev = mono;
          }
        }
      }
    }
  }
}

// From kLinearCudaExpandMinRows rows the warp-specialised bf16 plan expands the weight (and only
// that plan, only when asked); the workspace then ends with the 2·N·K-byte bf16 copy, after the
// activations and the split partials, every region 256-byte aligned; the validator asks for it.
TEST(LinearCudaPlanTest, ExpandsWeightsOnlyForLargeMWarpSpecialisedPlans) {
  const int64_t n = 32768, k = 1280;  // wq_b
  // (Forced tile_rows 128: the automatic plan takes the register-sourced kernel up to
  // kLinearCudaRsMaxM rows, which never expands.)
  EXPECT_FALSE(PlanLinearCuda(kLinearCudaExpandMinRows - 1, n, k, 128).expand_weights);
  EXPECT_FALSE(PlanLinearCuda(kLinearCudaExpandMinRows, n, k).expand_weights);
  EXPECT_TRUE(PlanLinearCuda(kLinearCudaRsMaxM + 1, n, k).expand_weights);
  const LinearCudaPlan x = PlanLinearCuda(kLinearCudaExpandMinRows, n, k, 128);
  EXPECT_TRUE(x.expand_weights);
  EXPECT_TRUE(x.warp_specialised);
  EXPECT_TRUE(PlanLinearCuda(4096, n, k).expand_weights);
  EXPECT_FALSE(PlanLinearCuda(4096, n, k, 0, 0, true, true, false).expand_weights);
  EXPECT_FALSE(PlanLinearCuda(4096, n, k, 0, 0, true, false).expand_weights);  // cp.async loop
  EXPECT_FALSE(PlanLinearCuda(4096, n, k, 0, 0, false).expand_weights);        // FP8 wgmma
  EXPECT_FALSE(PlanLinearCuda(4096, n, k, 64).expand_weights);                 // mma.sync
  // Expansion changes nothing else of wq_b's plan (unsplit either way; see below for splits).
  const LinearCudaPlan in_place = PlanLinearCuda(4096, n, k, 0, 0, true, true, false);
  const LinearCudaPlan expanded = PlanLinearCuda(4096, n, k);
  EXPECT_EQ(expanded.splits, in_place.splits);
  EXPECT_EQ(expanded.steps_per_split, in_place.steps_per_split);
  EXPECT_EQ(expanded.m_tiles, in_place.m_tiles);
  EXPECT_EQ(expanded.n_tiles, in_place.n_tiles);

  FakeWeight f;
  const Fp8LinearDevice w = f.View(n, k);
  const size_t with = LinearCudaWorkspaceBytes(w, 4096);
  const size_t without = LinearCudaWorkspaceBytes(w, 4096, 0, 0, true, true, false);
  EXPECT_EQ(with - without, static_cast<size_t>(2 * n * k));
  EXPECT_EQ(LinearCudaWorkspaceBytes(w, kLinearCudaExpandMinRows - 1),
            LinearCudaWorkspaceBytes(w, kLinearCudaExpandMinRows - 1, 0, 0, true, true, false));
  // A forced split at large M: activations, then partials, then the bf16 weight.
  for (int64_t m : {kLinearCudaExpandMinRows, int64_t{1000}, int64_t{4096}}) {
    const LinearCudaPlan p = PlanLinearCuda(m, 1000, 1312, 128, 3);
    ASSERT_TRUE(p.expand_weights);
    ASSERT_EQ(p.splits, 3);
    const LinearCudaWorkspaceLayout l = LinearCudaLayout(p, m, 1000, 1312);
    EXPECT_EQ(l.partials, LinearCudaActivationBytes(m, 1312));
    EXPECT_GE(l.expanded, l.partials + static_cast<size_t>(4 * 3 * m * 1000));
    EXPECT_EQ(l.expanded % 256, 0u);
    EXPECT_EQ(l.end, l.expanded + static_cast<size_t>(2 * 1000 * 1312));
    EXPECT_LE(l.end, LinearCudaWorkspaceBytes(f.View(1000, 1312), m, 128, 3));
  }
  // The validator wants the bf16 region when the call expands.
  LinearCudaParams q = CallFor(w, 4096, without);
  const absl::Status s = ValidateLinearCudaParams(q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s;
  q.expand_weights = false;
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
  q.expand_weights = true;
  q.workspace_bytes = with;
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
}

// On expanded weights the automatic plan drops its K splits once unsplit 128-column tiles fill
// half the SMs (kWgmmaTargetCtas / 2 = 66); elsewhere, and for a forced split_k, they stay.
TEST(LinearCudaPlanTest, ExpandedPlansDropSplitsOnceNarrowTilesFillHalfTheSms) {
  struct Case {
    int64_t m, n, k, splits;
  };
  for (const Case& c : {
           Case{1024, 1792, 5120, 1},   // wq_a | wkv: 112 tiles of 128 (2 splits of 56 before)
           Case{1024, 1280, 5120, 1},   // wq_a: 80 tiles (3 splits before)
           Case{4096, 512, 5120, 1},    // wkv: 128 tiles (2 splits before)
           Case{2048, 512, 5120, 4},    // wkv: 64 tiles, below half: the plan's 4 splits
           Case{1024, 512, 5120, 8},    // wkv: 32 tiles: 8 splits
           Case{4096, 32768, 1280, 1},  // never split
       }) {
    const LinearCudaPlan p = PlanLinearCuda(c.m, c.n, c.k);
    ASSERT_TRUE(p.expand_weights) << c.m << " x " << c.n;
    EXPECT_EQ(p.splits, c.splits) << c.m << " x " << c.n;
    EXPECT_EQ(p.steps_per_split * p.splits, p.k_steps) << c.m << " x " << c.n;
    // Without the expansion (the in-place decode) the plan keeps its splits to fill the SMs.
    const LinearCudaPlan in_place = PlanLinearCuda(c.m, c.n, c.k, 0, 0, true, true, false);
    EXPECT_GE(in_place.splits, p.splits) << c.m << " x " << c.n;
  }
  EXPECT_EQ(PlanLinearCuda(4096, 512, 5120, 0, 0, true, true, false).splits, 2);
  EXPECT_EQ(PlanLinearCuda(1024, 1792, 5120, 128, 2).splits, 2);  // forced
}

// The warp-specialised kernel's tile width by column-waves: the least waves × (cols + 64).
TEST(LinearCudaPlanTest, WsTileColsFillTheLastWave) {
  struct Case {
    int64_t m, n, splits, sms, cols;
  };
  for (const Case& c : {
           Case{4096, 1280, 1, 132, 160},   // wq_a: 256 tiles in 2 waves (160 in 2 at 256)
           Case{4096, 2304, 1, 132, 192},   // shared w1|w3: 384 in 3 (288 in 3 at 256)
           Case{4096, 5120, 1, 132, 256},   // wo_b / shared w2: 640 tiles, 5 waves
           Case{4096, 32768, 1, 132, 256},  // wq_b: 4,096 tiles
           Case{4096, 1792, 1, 132, 256},   // wq_a | wkv: 224 tiles in 2 waves (384 in 3 at 160)
           Case{2048, 5120, 1, 132, 160},   // wo_b: 512 tiles in 4 waves (320 in 3 at 256)
           Case{2048, 1280, 1, 132, 160},   // 128 tiles in one wave (80 at 256)
           Case{1024, 1280, 3, 132, 256},   // 120 tiles in one wave; 160 would need two
           Case{4096, 1280, 1, 114, 192},   // 114 SMs: 224 tiles in 2 waves; 160 would take 3
           Case{128, 64, 1, 132, 128},      // one tile: the narrowest, less of it past N
       }) {
    EXPECT_EQ(LinearCudaWsTileCols(c.m, c.n, c.splits, c.sms), c.cols)
        << "m " << c.m << " n " << c.n << " splits " << c.splits << " sms " << c.sms;
    EXPECT_EQ(LinearCudaWsTileColsFor(0, c.m, c.n, c.splits, c.sms), c.cols);  // the default
  }
  // A forced width runs as asked, 256 included (the width before session 63).
  EXPECT_EQ(LinearCudaWsTileColsFor(192, 4096, 1280, 1, 132), 192);
  EXPECT_EQ(LinearCudaWsTileColsFor(256, 4096, 1280, 1, 132), kLinearCudaWgmmaCols);
}

// The stream-K tail: whole tiles in full waves of 132, the last partial wave's tiles cut into K
// ranges by the split-K rule, at most 132 range items, at least 4 steps a range, at most 8 ranges.
TEST(LinearCudaPlanTest, StreamKTailSplitsOnlyTheLastWave) {
  struct Case {
    int64_t tiles, k_steps, begin, ranges, steps;
  };
  for (const Case& c : {
           Case{160, 80, 132, 4, 20},   // wq_a at M = 4,096: 28 tail tiles, 112 items
           Case{288, 80, 264, 5, 16},   // shared w1|w3 at 4,096: 24 tail tiles
           Case{160, 128, 132, 4, 32},  // wo_b at 1,024 (K 8,192)
           Case{264, 80, 264, 1, 0},    // whole waves: no tail
           Case{263, 80, 263, 1, 0},    // 131 tail tiles: one range each, no tail
           Case{133, 80, 132, 8, 10},   // one tail tile: kLinearCudaTailMaxRanges
           Case{160, 8, 132, 2, 4},     // short K: 4 steps a range at least
           Case{160, 7, 160, 1, 0},     //   ... or no tail
           Case{50, 80, 0, 2, 40},      // less than a wave: every tile is the tail
           Case{140, 13, 132, 3, 5},    // ragged: ranges of 5, 5 and 3 steps
       }) {
    const LinearCudaTail t = LinearCudaTailPlan(c.tiles, c.k_steps);
    EXPECT_EQ(t.begin, c.begin) << c.tiles << " tiles, " << c.k_steps << " steps";
    EXPECT_EQ(t.ranges, c.ranges) << c.tiles << " tiles, " << c.k_steps << " steps";
    EXPECT_EQ(t.steps, c.steps) << c.tiles << " tiles, " << c.k_steps << " steps";
  }
  for (int64_t tiles = 1; tiles <= 600; ++tiles) {
    for (int64_t k_steps = 1; k_steps <= 160; ++k_steps) {
      const LinearCudaTail t = LinearCudaTailPlan(tiles, k_steps);
      if (t.ranges == 1) {
        ASSERT_EQ(t.begin, tiles);
        continue;
      }
      ASSERT_EQ(t.begin % kLinearCudaTailSlots, 0);
      ASSERT_LT(t.begin, tiles);
      ASSERT_LE((tiles - t.begin) * t.ranges, kLinearCudaTailSlots);
      ASSERT_LE(t.ranges, kLinearCudaTailMaxRanges);
      ASSERT_GE(t.steps, kLinearCudaTailMinSteps);
      ASSERT_LT(t.steps * (t.ranges - 1), k_steps) << "an empty range";
      ASSERT_GE(t.steps * t.ranges, k_steps) << "K not covered";
    }
  }
}

// The plan has a tail only for the warp-specialised kernel without K splits, when asked; the tail
// ranges are the K splits the plan makes for split_k = ranges (so the tail tiles' bits are that
// plan's); the workspace holds the range partials and counters after the stream counters.
TEST(LinearCudaPlanTest, StreamKTailPlanAndWorkspace) {
  const int64_t k = 5120;
  const LinearCudaPlan wq_a = PlanLinearCuda(4096, 1280, k, 0, 0, true, true, true, true);
  ASSERT_TRUE(wq_a.warp_specialised);
  EXPECT_EQ(wq_a.tail.begin, 132);
  EXPECT_EQ(wq_a.tail.ranges, 4);
  EXPECT_EQ(wq_a.tail.steps, 20);
  const LinearCudaPlan split = PlanLinearCuda(4096, 1280, k, 128, wq_a.tail.ranges);
  EXPECT_EQ(split.splits, wq_a.tail.ranges);
  EXPECT_EQ(split.steps_per_split, wq_a.tail.steps);
  EXPECT_EQ(PlanLinearCuda(4096, 1280, k).tail.ranges, 1);   // not asked
  EXPECT_EQ(PlanLinearCuda(4096, 1280, k).tail.begin, 160);  // every tile
  EXPECT_EQ(PlanLinearCuda(4096, 1280, k, 0, 3, true, true, true, true).tail.ranges, 1);   // splits
  EXPECT_EQ(PlanLinearCuda(4096, 1280, k, 0, 0, false, true, true, true).tail.ranges, 1);  // FP8
  EXPECT_EQ(PlanLinearCuda(4096, 1280, k, 0, 0, true, false, true, true).tail.ranges,
            1);  // cp.async
  EXPECT_EQ(PlanLinearCuda(4096, 1280, k, 64, 0, true, true, true, true).tail.ranges, 1);  // mma
  // In place (no expansion) the same kernel walks the same tail.
  EXPECT_EQ(PlanLinearCuda(4096, 1280, k, 0, 0, true, true, false, true).tail.ranges, 4);

  const LinearCudaWorkspaceLayout l = LinearCudaLayout(wq_a, 4096, 1280, k);
  EXPECT_EQ(l.tail_partials, l.counters);  // no split partials or stream counters
  EXPECT_EQ(l.expanded - l.tail_partials, size_t{28 * 4} * 4 * 128 * 256);
  EXPECT_EQ(l.end, l.expanded + size_t{2} * 1280 * k);
  const LinearCudaWorkspaceLayout none =
      LinearCudaLayout(PlanLinearCuda(4096, 1280, k), 4096, 1280, k);
  EXPECT_EQ(none.tail_partials, none.expanded);

  FakeWeight f;
  const Fp8LinearDevice w = f.View(1280, k);
  const size_t with = LinearCudaWorkspaceBytes(w, 4096, 0, 0, true, true, true, true);
  const size_t without = LinearCudaWorkspaceBytes(w, 4096);
  EXPECT_EQ(with - without, size_t{132} * 4 * 128 * 256);  // the bound, for every m
  EXPECT_GE(with, l.end);
  LinearCudaParams q = CallFor(w, 4096, l.end - 1);  // the call's own layout, less a byte
  q.stream_k_tail = true;
  absl::Status s = ValidateLinearCudaParams(q);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s;
  q.workspace_bytes = l.end;
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
  q.workspace_bytes = with;
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
  q.ws_tile_cols = 256;
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
  q.ws_tile_cols = 160;
  s = ValidateLinearCudaParams(q);
  EXPECT_NE(s.message().find("ws_tile_cols"), std::string::npos) << s;
  // CTA pairs need no workspace of their own, and never run with the tail.
  q.ws_tile_cols = 0;
  q.ws_multicast = true;
  s = ValidateLinearCudaParams(q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ws_multicast"), std::string::npos) << s;
  q.stream_k_tail = false;
  q.workspace_bytes = without;
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
  q.x_qdq = true;  // a pre-QDQ'd x combines with every plan and needs the same workspace
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
  q.ws_multicast = false;
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
}

// A weight with a kept bf16 expansion (Fp8LinearDevice::expanded) needs no expansion region:
// the workspace size drops by it, the validator asks for the layout without it, and a misaligned
// expansion is refused.
TEST(LinearCudaParamsTest, KeptExpansionNeedsNoExpansionRegion) {
  FakeWeight f;
  alignas(16) static uint16_t kept[8];
  const int64_t n = 5120, k = 8192, m = 4096;  // wo_b
  const Fp8LinearDevice plain = f.View(n, k);
  Fp8LinearDevice w = plain;
  w.expanded = kept;
  const LinearCudaWorkspaceLayout l = LinearCudaLayout(PlanLinearCuda(m, n, k), m, n, k);
  ASSERT_EQ(l.end - l.expanded, size_t{2} * n * k);
  EXPECT_EQ(LinearCudaWorkspaceBytes(plain, m) - LinearCudaWorkspaceBytes(w, m),
            l.end - l.expanded);
  // Decode-size calls never expanded: the same workspace either way.
  EXPECT_EQ(LinearCudaWorkspaceBytes(plain, 8), LinearCudaWorkspaceBytes(w, 8));
  LinearCudaParams q = CallFor(w, m, l.expanded);
  EXPECT_TRUE(ValidateLinearCudaParams(q).ok()) << ValidateLinearCudaParams(q);
  q.workspace_bytes = l.expanded - 1;
  EXPECT_NE(ValidateLinearCudaParams(q).message().find("workspace"), std::string::npos);
  q = CallFor(plain, m, l.expanded);  // without the kept copy the region is needed
  EXPECT_NE(ValidateLinearCudaParams(q).message().find("workspace"), std::string::npos);
  w.expanded = kept + 1;  // 2-byte aligned
  EXPECT_NE(Validate(w).message().find("expanded"), std::string::npos) << Validate(w);
}

TEST(LinearCudaParamsTest, RejectsBadFields) {
  FakeWeight f;
  const Fp8LinearDevice w = f.View(256, 512);
  std::vector<uint16_t> x(512), y(256);
  alignas(16) static uint8_t ws[1 << 16];
  auto good = [&] {
    LinearCudaParams p;
    p.weight = &w;
    p.m = 1;
    p.x_bf16 = x.data();
    p.x_stride = 512;
    p.y_bf16 = y.data();
    p.y_stride = 256;
    p.workspace = ws;
    p.workspace_bytes = LinearCudaWorkspaceBytes(w, 1);
    return p;
  };
  ASSERT_TRUE(ValidateLinearCudaParams(good()).ok()) << ValidateLinearCudaParams(good());
  auto expect_field = [](const LinearCudaParams& p, const char* field) {
    const absl::Status s = ValidateLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  LinearCudaParams p = good();
  p.weight = nullptr;
  expect_field(p, "weight");
  p = good();
  p.m = -1;
  expect_field(p, "m ");
  p = good();
  p.x_bf16 = nullptr;
  expect_field(p, "x_bf16");
  p = good();
  p.x_stride = 511;
  expect_field(p, "x_stride");
  p = good();
  p.y_f32 = reinterpret_cast<float*>(ws);
  expect_field(p, "y_bf16/y_f32");
  p = good();
  p.y_stride = 255;
  expect_field(p, "y_stride");
  p = good();
  p.tile_rows = 48;
  expect_field(p, "tile_rows");
  p.tile_rows = 4;
  expect_field(p, "tile_rows");
  p.tile_rows = 512;
  expect_field(p, "tile_rows");
  for (int64_t cols :
       {int64_t{-2}, int64_t{-1}, int64_t{1}, int64_t{64}, int64_t{224}, int64_t{320}}) {
    p = good();
    p.ws_tile_cols = cols;
    expect_field(p, "ws_tile_cols");
  }
  for (int64_t cols : {int64_t{0}, int64_t{128}, int64_t{160}, int64_t{192}, int64_t{256}}) {
    p = good();
    p.ws_tile_cols = cols;
    EXPECT_TRUE(ValidateLinearCudaParams(p).ok()) << cols;
  }
  p = good();
  p.split_k = kLinearCudaMaxSplits + 1;
  expect_field(p, "split_k");
  p = good();
  p.workspace_bytes -= 1;
  expect_field(p, "workspace");
  p = good();
  p.workspace = ws + 8;
  expect_field(p, "workspace");
  // A weight the kernel cannot take: K not a multiple of 32, codes misaligned.
  const Fp8LinearDevice bad_k = f.View(256, 500);
  p = good();
  p.weight = &bad_k;
  expect_field(p, "weight");
  Fp8LinearDevice bad_codes = w;
  bad_codes.codes = f.codes + 1;
  EXPECT_FALSE(Validate(bad_codes).ok());
  // The stream kernel's grid.z: at most 65535 tiles of 16 rows.
  p = good();
  p.tile_rows = kLinearCudaStreamRows;
  ASSERT_TRUE(ValidateLinearCudaParams(p).ok()) << ValidateLinearCudaParams(p);
  p.m = 16 * 65535 + 1;
  p.x_stride = 512;
  expect_field(p, "m ");
  // m == 0 needs nothing else.
  LinearCudaParams empty;
  empty.weight = &w;
  EXPECT_TRUE(ValidateLinearCudaParams(empty).ok());
}

}  // namespace
}  // namespace flashserve::kernels
