// Host-side pieces of the CUDA bf16 / fp32 Linear (gemm_float_cuda.h): the plan, the workspace
// size and the params validation. No device needed.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"

namespace flashserve::kernels {
namespace {

FloatLinearCudaParams Shape(int64_t m, int64_t n, int64_t k, int64_t groups = 1) {
  FloatLinearCudaParams p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.groups = groups;
  return p;
}

// x rows that TMA cannot read (an odd x_stride): the automatic plan never takes the swapped-role
// kernel.
FloatLinearCudaParams NoTma(FloatLinearCudaParams p) {
  p.x_stride = p.k + 1;
  return p;
}

TEST(FloatLinearCudaPlanTest, TileRowsFollowMAndXDtype) {
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(1, 1024, 4096))).tile_rows, 16);
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(16, 1024, 4096))).tile_rows, 16);
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(17, 1024, 4096))).tile_rows, 32);
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(33, 1024, 4096))).tile_rows, 64);
  FloatLinearCudaParams f = Shape(4096, 512, 5120);
  const float marker = 0.f;
  f.x_f32 = &marker;
  EXPECT_EQ(PlanFloatLinearCuda(f).tile_rows, 32);  // fp32 x: at most 32 rows
  FloatLinearCudaParams s = Shape(300, 512, 5120);
  s.tile_rows = 64;
  const FloatLinearCudaPlan p = PlanFloatLinearCuda(s);
  EXPECT_EQ(p.k_steps, 80);
  EXPECT_EQ(p.m_tiles, 5);
  EXPECT_EQ(p.n_tiles, 4);
  EXPECT_EQ(p.tile_cols, 128);
}

TEST(FloatLinearCudaPlanTest, WgmmaForLargeMBf16Only) {
  const float marker = 0.f;
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(127, 1024, 4096))).tile_rows, 64);
  // wo_a (8 groups) at M = 128: 32 tiles, 4 splits of 1024 K: wgmma (measured 53 vs 71 us).
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(128, 1024, 4096, 8))).tile_rows, 128);
  // One group: 4 tiles, 32 splits of 128 K: mma.sync (kFloatLinearCudaWgmmaMinSplitK).
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(128, 1024, 4096))).tile_rows, 64);
  // The compressor's wkv (N 512, K 5120): mma.sync at M = 128 / 256 (2 / 3 K steps per split,
  // measured slower on wgmma), wgmma from M = 1024 (10 steps of 64).
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(128, 512, 5120))).tile_rows, 64);
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(256, 512, 5120))).tile_rows, 64);
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(1024, 512, 5120))).tile_rows, 128);
  EXPECT_EQ(PlanFloatLinearCuda(Shape(4096, 4096, 512)).tile_rows, 64);  // K < 640
  EXPECT_EQ(PlanFloatLinearCuda(Shape(4096, 255, 4096)).tile_rows, 64);  // N < one 256 tile
  FloatLinearCudaParams w = Shape(4096, 384, 5120);
  w.w_f32 = &marker;
  EXPECT_EQ(PlanFloatLinearCuda(w).tile_rows, 64);  // fp32 W: mma.sync
  FloatLinearCudaParams forced = Shape(300, 512, 5120);
  forced.tile_rows = 128;
  const FloatLinearCudaPlan p = PlanFloatLinearCuda(forced);
  EXPECT_EQ(p.tile_rows, 128);
  EXPECT_EQ(p.tile_cols, 256);
  EXPECT_EQ(p.k_steps, 80);
  EXPECT_EQ(p.m_tiles, 3);
  EXPECT_EQ(p.n_tiles, 2);
  // 6 tiles: 132 / 6 = 22 splits asked, ceil(80 / 22) = 4 steps each, so 20 splits.
  EXPECT_EQ(p.splits, 20);
  // wo_a prefill, 8 groups × 32 × 4 tiles: no split.
  EXPECT_EQ(PlanFloatLinearCuda(Shape(4096, 1024, 4096, 8)).splits, 1);
}

// The warp-specialised main loop runs the wgmma plan when wgmma_ws is set and TMA can read x
// (16-byte aligned base, x_stride and, with groups, x_group_stride); same tiles and splits.
TEST(FloatLinearCudaPlanTest, WarpSpecialisedNeedsAlignedXRows) {
  alignas(16) static const uint16_t x[16] = {};
  FloatLinearCudaParams p = Shape(4096, 1024, 4096, 8);  // wo_a: x [M, 8 · 4096]
  p.x_bf16 = x;
  p.x_stride = 8 * 4096;
  p.x_group_stride = 4096;
  const FloatLinearCudaPlan ws = PlanFloatLinearCuda(p);
  EXPECT_EQ(ws.tile_rows, 128);
  EXPECT_TRUE(ws.warp_specialised);
  FloatLinearCudaParams q = p;
  q.wgmma_ws = false;
  const FloatLinearCudaPlan cp = PlanFloatLinearCuda(q);
  EXPECT_FALSE(cp.warp_specialised);
  EXPECT_EQ(cp.splits, ws.splits);
  EXPECT_EQ(cp.steps_per_split, ws.steps_per_split);
  q = p;
  q.x_bf16 = x + 1;  // misaligned base
  EXPECT_FALSE(PlanFloatLinearCuda(q).warp_specialised);
  q = p;
  q.x_stride = 8 * 4096 + 4;  // row starts 8-byte aligned only
  EXPECT_FALSE(PlanFloatLinearCuda(q).warp_specialised);
  q = p;
  q.x_group_stride = 4100;
  q.x_stride = 8 * 4100;
  EXPECT_FALSE(PlanFloatLinearCuda(q).warp_specialised);
  q.groups = 1;  // one group: its stride is not used
  EXPECT_TRUE(PlanFloatLinearCuda(q).warp_specialised);
  EXPECT_FALSE(PlanFloatLinearCuda(Shape(33, 1024, 4096)).warp_specialised);  // mma.sync
}

// The automatic plan: the swapped-role kernel for bf16 x and W with TMA-able x rows up to 256
// rows, and up to 1024 where the wgmma plan does not qualify; never for fp32 operands.
TEST(FloatLinearCudaPlanTest, SwappedKernelForDecodeBatches) {
  const float marker = 0.f;
  for (int64_t m : {1, 16, 64, 128, 256}) {
    EXPECT_EQ(PlanFloatLinearCuda(Shape(m, 1024, 4096, 8)).tile_rows, kFloatLinearCudaSwapRows);
  }
  for (int64_t m : {5, 16, 64, 128, 256}) {  // small weights: the CUDA-core kernel up to 4 rows
    EXPECT_EQ(PlanFloatLinearCuda(Shape(m, 32, 5120)).tile_rows, kFloatLinearCudaSwapRows);
  }
  // wo_a from 257 rows: its wgmma plan (96+ tiles, no K split) wins.
  EXPECT_EQ(PlanFloatLinearCuda(Shape(384, 1024, 4096, 8)).tile_rows, 128);
  EXPECT_EQ(PlanFloatLinearCuda(Shape(1024, 1024, 4096, 8)).tile_rows, 128);
  // The compressor's wkv: the swapped-role kernel up to 1024 rows (the wgmma plan splits K in
  // 8 there), wgmma above.
  EXPECT_EQ(PlanFloatLinearCuda(Shape(512, 512, 5120)).tile_rows, kFloatLinearCudaSwapRows);
  EXPECT_EQ(PlanFloatLinearCuda(Shape(1024, 512, 5120)).tile_rows, kFloatLinearCudaSwapRows);
  EXPECT_EQ(PlanFloatLinearCuda(Shape(1025, 512, 5120)).tile_rows, 128);
  // K = 512 (indexer.wk): no wgmma plan; mma.sync above 1024 rows.
  EXPECT_EQ(PlanFloatLinearCuda(Shape(1024, 128, 512)).tile_rows, kFloatLinearCudaSwapRows);
  EXPECT_EQ(PlanFloatLinearCuda(Shape(1025, 128, 512)).tile_rows, 64);
  FloatLinearCudaParams f = Shape(16, 384, 5120);
  f.w_f32 = &marker;
  EXPECT_EQ(PlanFloatLinearCuda(f).tile_rows, 16);
  f = Shape(16, 384, 5120);
  f.x_f32 = &marker;
  EXPECT_EQ(PlanFloatLinearCuda(f).tile_rows, 16);
  alignas(16) static const uint16_t x[16] = {};
  FloatLinearCudaParams a = Shape(64, 1024, 4096, 8);
  a.x_bf16 = x;
  a.x_stride = 8 * 4096;
  a.x_group_stride = 4096;
  EXPECT_EQ(PlanFloatLinearCuda(a).tile_rows, kFloatLinearCudaSwapRows);
  a.x_bf16 = x + 1;  // misaligned: mma.sync
  EXPECT_EQ(PlanFloatLinearCuda(a).tile_rows, 64);
}

// The automatic plan's CUDA-core kernel (tile_rows 1): up to 4 rows with 16-byte aligned x rows,
// any dtypes, except bf16 x · bf16 W of 2^23 or more weights (wo_a: the swapped-role kernel).
TEST(FloatLinearCudaPlanTest, CudaCoreKernelForOneToFourRows) {
  alignas(16) static const float marker = 0.f;  // fp32 x at a 16-byte aligned base
  for (int64_t m : {1, 2, 3, 4}) {
    EXPECT_EQ(PlanFloatLinearCuda(Shape(m, 32, 5120)).tile_rows, kFloatLinearCudaGemvRows);
    EXPECT_EQ(PlanFloatLinearCuda(Shape(m, 128, 512)).tile_rows, kFloatLinearCudaGemvRows);
    EXPECT_EQ(PlanFloatLinearCuda(Shape(m, 512, 5120)).tile_rows, kFloatLinearCudaGemvRows);
    FloatLinearCudaParams gate = Shape(m, 384, 5120);
    gate.w_f32 = &marker;
    EXPECT_EQ(PlanFloatLinearCuda(gate).tile_rows, kFloatLinearCudaGemvRows);
    gate.x_f32 = &marker;
    gate.x_stride = 5124;  // fp32 rows: a multiple of 4 elements is 16-byte aligned
    EXPECT_EQ(PlanFloatLinearCuda(gate).tile_rows, kFloatLinearCudaGemvRows);
    FloatLinearCudaParams wo_a_f32 = Shape(m, 1024, 4096, 8);
    wo_a_f32.w_f32 = &marker;  // size limit applies to bf16 x · bf16 W only
    EXPECT_EQ(PlanFloatLinearCuda(wo_a_f32).tile_rows, kFloatLinearCudaGemvRows);
    EXPECT_EQ(PlanFloatLinearCuda(Shape(m, 1024, 4096, 8)).tile_rows, kFloatLinearCudaSwapRows);
    EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(m, 32, 5120))).tile_rows, 16);  // odd x_stride
  }
  FloatLinearCudaParams gate = Shape(5, 384, 5120);
  gate.w_f32 = &marker;
  EXPECT_EQ(PlanFloatLinearCuda(gate).tile_rows, 16);
  // Its plan: one launch over all rows, two weight rows per CTA, no split.
  FloatLinearCudaParams p = Shape(3, 385, 5120, 8);
  p.tile_rows = kFloatLinearCudaGemvRows;
  p.split_k = 7;  // ignored: the kernel never splits
  const FloatLinearCudaPlan plan = PlanFloatLinearCuda(p);
  EXPECT_EQ(plan.tile_rows, kFloatLinearCudaGemvRows);
  EXPECT_EQ(plan.m_tiles, 1);
  EXPECT_EQ(plan.n_tiles, 193);
  EXPECT_EQ(plan.tile_cols, kFloatLinearCudaGemvCols);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(FloatLinearCudaWorkspaceBytes(p, 4), 0u);
}

// The swapped-role kernel (tile_rows 256): 128 weight rows × up to 128 x rows per CTA, one CTA
// per SM; K splits only below kSwapTargetCtas = 64 tiles.
TEST(FloatLinearCudaPlanTest, SwappedKernelTiles) {
  FloatLinearCudaParams p = Shape(64, 1024, 4096, 8);  // wo_a at 64 tokens
  p.tile_rows = kFloatLinearCudaSwapRows;
  FloatLinearCudaPlan plan = PlanFloatLinearCuda(p);
  EXPECT_EQ(plan.tile_rows, kFloatLinearCudaSwapRows);
  EXPECT_EQ(plan.tile_cols, kFloatLinearCudaSwapCols);
  EXPECT_EQ(plan.m_tiles, 1);
  EXPECT_EQ(plan.n_tiles, 8);
  EXPECT_EQ(plan.k_steps, 64);
  EXPECT_EQ(plan.splits, 1);  // 64 tiles: no split
  EXPECT_EQ(plan.steps_per_split, 64);
  p.m = 256;  // two m tiles: 128 CTAs, no split
  plan = PlanFloatLinearCuda(p);
  EXPECT_EQ(plan.m_tiles, 2);
  EXPECT_EQ(plan.splits, 1);
  p = Shape(1, 32, 5120);  // indexer.weights_proj at one token: one tile, 64 splits of 80 steps
  p.tile_rows = kFloatLinearCudaSwapRows;
  plan = PlanFloatLinearCuda(p);
  EXPECT_EQ(plan.n_tiles, 1);
  EXPECT_EQ(plan.splits, 40);  // 64 asked, ceil(80 / 64) = 2 steps each
  EXPECT_EQ(plan.steps_per_split, 2);
  EXPECT_FALSE(plan.warp_specialised);
}

TEST(FloatLinearCudaPlanTest, SplitsCoverKWithoutEmptySplits) {
  for (int64_t m : {1, 3, 16, 130, 4096}) {
    for (int64_t n : {32, 128, 384, 512, 1024}) {
      for (int64_t k : {8, 64, 72, 512, 4096, 5120}) {
        for (int64_t groups : {1, 8, 3000}) {
          for (int64_t forced : {0, 1, 3, 64}) {
            for (int64_t tile : {int64_t{0}, kFloatLinearCudaSwapRows}) {
              FloatLinearCudaParams s = Shape(m, n, k, groups);
              s.split_k = forced;
              s.tile_rows = tile;
              const FloatLinearCudaPlan p = PlanFloatLinearCuda(s);
              SCOPED_TRACE(std::to_string(m) + " " + std::to_string(n) + " " + std::to_string(k) +
                           " " + std::to_string(groups) + " " + std::to_string(forced));
              ASSERT_GE(p.splits, 1);
              ASSERT_LE(p.splits, kFloatLinearCudaMaxSplits);
              ASSERT_LE(p.splits * groups, 65535);
              ASSERT_GE(p.k_steps * kFloatLinearCudaKStep, k);
              ASSERT_LT((p.k_steps - 1) * kFloatLinearCudaKStep, k);
              // Every split has at least one step and together they cover all steps (the kernel:
              // kt0 = s · steps_per_split, kt_end = min(kt0 + steps_per_split, k_steps)).
              ASSERT_GE(p.splits * p.steps_per_split, p.k_steps);
              ASSERT_LT((p.splits - 1) * p.steps_per_split, p.k_steps);
              if (forced > 0) {
                ASSERT_LE(p.splits, forced);
              }
            }
          }
        }
      }
    }
  }
  // Decode of wo_a (8 groups × 8 column tiles): 4 splits fill 256 CTAs; the MoE gate (3 tiles)
  // splits into 40 × 2 K steps (120 CTAs); a large prefill does not split.
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(1, 1024, 4096, 8))).splits, 4);
  EXPECT_EQ(PlanFloatLinearCuda(Shape(1, 1024, 4096, 8)).splits, 1);  // swapped-role: 64 tiles
  EXPECT_EQ(PlanFloatLinearCuda(NoTma(Shape(1, 384, 5120))).splits, 40);
  EXPECT_EQ(PlanFloatLinearCuda(Shape(4096, 1024, 4096, 8)).splits, 1);
  // The r = 1 compressor at 4096 tokens: 32 × 2 wgmma tiles, unsplit since session 67 (its
  // 128 tiles of 128 columns fill a wave; the cp.async loop keeps the 2 splits for 128 CTAs).
  EXPECT_EQ(PlanFloatLinearCuda(Shape(4096, 512, 5120)).splits, 1);
  FloatLinearCudaParams cp_async = Shape(4096, 512, 5120);
  cp_async.wgmma_ws = false;
  EXPECT_EQ(PlanFloatLinearCuda(cp_async).splits, 2);
}

TEST(FloatLinearCudaPlanTest, WorkspaceCoversEveryMAndIsMonotone) {
  for (int64_t n : {32, 384, 1024}) {
    for (int64_t groups : {1, 8}) {
      for (int64_t forced : {0, 4}) {
        FloatLinearCudaParams s = Shape(0, n, 4096, groups);
        s.split_k = forced;
        const size_t max_bytes = FloatLinearCudaWorkspaceBytes(s, 400);
        size_t prev = 0;
        for (int64_t m = 1; m <= 400; ++m) {
          FloatLinearCudaParams q = s;
          q.m = m;
          const FloatLinearCudaPlan p = PlanFloatLinearCuda(q);
          const size_t need = p.splits > 1 ? static_cast<size_t>(4 * groups * p.splits * m * n) : 0;
          ASSERT_LE(need, max_bytes) << m;
          const size_t mono = FloatLinearCudaWorkspaceBytes(s, m);
          ASSERT_GE(mono, prev) << m;
          prev = mono;
        }
      }
    }
  }
  EXPECT_EQ(FloatLinearCudaWorkspaceBytes(Shape(0, 512, 5120), 0), 0u);
}

TEST(FloatLinearCudaParamsTest, RejectsBadFields) {
  alignas(16) static uint16_t w[8 * 64 * 64];
  alignas(16) static uint16_t x[64 * 64];
  alignas(16) static float yf[64 * 64];
  alignas(16) static uint16_t y[64 * 64];
  alignas(16) static uint8_t ws[1 << 20];
  auto good = [&] {
    FloatLinearCudaParams p = Shape(1, 64, 256, 2);
    p.w_bf16 = w;
    p.w_group_stride = 64 * 256;
    p.x_bf16 = x;
    p.x_stride = 512;
    p.x_group_stride = 256;
    p.y_bf16 = y;
    p.y_stride = 128;
    p.y_group_stride = 64;
    p.workspace = ws;
    p.workspace_bytes = FloatLinearCudaWorkspaceBytes(p, 1);
    return p;
  };
  ASSERT_TRUE(ValidateFloatLinearCudaParams(good()).ok()) << ValidateFloatLinearCudaParams(good());
  ASSERT_GT(good().workspace_bytes, 0u);  // the plan splits K at M = 1
  auto expect_field = [](const FloatLinearCudaParams& p, const char* field) {
    const absl::Status s = ValidateFloatLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  FloatLinearCudaParams p = good();
  p.m = -1;
  expect_field(p, "m ");
  p = good();
  p.n = 0;
  expect_field(p, "n ");
  p = good();
  p.k = 60;
  expect_field(p, "k ");
  p = good();
  p.groups = 0;
  expect_field(p, "groups");
  p = good();
  p.tile_rows = 48;
  expect_field(p, "tile_rows");
  p.tile_rows = 2;
  expect_field(p, "tile_rows");
  // The CUDA-core kernel: at most 4 rows, x rows 16-byte aligned.
  p = good();
  p.tile_rows = kFloatLinearCudaGemvRows;
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  p.m = 5;
  expect_field(p, "tile_rows");
  p = good();
  p.tile_rows = kFloatLinearCudaGemvRows;
  p.x_stride = 516;  // 8-byte aligned rows
  expect_field(p, "tile_rows");
  p = good();
  p.tile_rows = kFloatLinearCudaGemvRows;
  p.x_bf16 = x + 4;
  expect_field(p, "tile_rows");
  p = good();
  p.x_bf16 = nullptr;
  p.x_f32 = yf;
  p.tile_rows = 64;
  expect_field(p, "tile_rows");
  p.tile_rows = 128;  // wgmma: bf16 x and W only
  expect_field(p, "tile_rows");
  p = good();
  p.w_bf16 = nullptr;
  p.w_f32 = yf;
  p.tile_rows = 128;
  expect_field(p, "tile_rows");
  // The swapped-role kernel: bf16 x and W, x rows 16-byte aligned (TMA).
  p = good();
  p.tile_rows = kFloatLinearCudaSwapRows;
  p.workspace_bytes = FloatLinearCudaWorkspaceBytes(p, 1);
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  FloatLinearCudaParams q = p;
  q.x_bf16 = x + 4;  // 8-byte aligned base
  expect_field(q, "tile_rows");
  q = p;
  q.x_stride = 516;
  expect_field(q, "tile_rows");
  q = p;
  q.x_group_stride = 260;
  q.x_stride = 520;
  expect_field(q, "tile_rows");
  q = p;
  q.w_bf16 = nullptr;
  q.w_f32 = yf;
  expect_field(q, "tile_rows");
  q = p;
  q.x_bf16 = nullptr;
  q.x_f32 = yf;
  expect_field(q, "tile_rows");
  p = good();
  p.split_k = kFloatLinearCudaMaxSplits + 1;
  expect_field(p, "split_k");
  p = good();
  p.w_bf16 = nullptr;
  expect_field(p, "w_bf16/w_f32");
  p = good();
  p.w_f32 = yf;
  expect_field(p, "w_bf16/w_f32");
  p = good();
  p.w_bf16 = w + 1;
  expect_field(p, "w_bf16");
  p = good();
  p.w_group_stride = 4;
  expect_field(p, "w_group_stride");
  p = good();
  p.bias = reinterpret_cast<const float*>(ws + 2);
  expect_field(p, "bias");
  p = good();
  p.x_bf16 = nullptr;
  expect_field(p, "x_bf16/x_f32");
  p = good();
  p.x_stride = 255;
  expect_field(p, "x_stride");
  p = good();
  p.x_group_stride = -1;
  expect_field(p, "x_group_stride");
  p = good();
  p.y_f32 = yf;
  expect_field(p, "y_bf16/y_f32");
  p = good();
  p.y_stride = 63;
  expect_field(p, "y_stride");
  p = good();
  p.y_group_stride = -64;
  expect_field(p, "y_group_stride");
  // The split mma.sync plan needs the workspace (at M = 1 the automatic plan, the CUDA-core
  // kernel, needs none).
  p = good();
  p.workspace = nullptr;
  p.workspace_bytes = 0;
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  p = good();
  p.tile_rows = 16;
  p.workspace_bytes -= 1;
  expect_field(p, "workspace");
  p = good();
  p.tile_rows = 16;
  p.workspace = ws + 8;
  expect_field(p, "workspace");
  p = good();
  p.tile_rows = 16;
  p.workspace = nullptr;
  expect_field(p, "workspace");
  // Odd strides and unaligned x are fine (the slow load path); no split needs no workspace.
  p = good();
  p.x_bf16 = x + 1;
  p.x_stride = 259;
  p.y_stride = 65;
  p.split_k = 1;
  p.workspace = nullptr;
  p.workspace_bytes = 0;
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  // m == 0 needs no pointers.
  EXPECT_TRUE(ValidateFloatLinearCudaParams(Shape(0, 64, 64)).ok());
  for (int64_t cols : {int64_t{-1}, int64_t{1}, int64_t{64}, int64_t{224}, int64_t{320}}) {
    p = good();
    p.ws_tile_cols = cols;
    expect_field(p, "ws_tile_cols");
  }
  for (int64_t cols : {int64_t{0}, int64_t{128}, int64_t{160}, int64_t{192}, int64_t{256}}) {
    p = good();
    p.ws_tile_cols = cols;
    EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << cols;
  }
}

// Above kSwapMaxM rows the warp-specialised plan drops its K splits once its 128-column tiles
// (every group's) fill half the SMs (LinearCudaWsUnsplitPays); a forced split stays.
TEST(FloatLinearCudaPlanTest, WsPlanDropsSplitsOnceNarrowTilesFillHalfTheSms) {
  struct Case {
    int64_t m, n, groups, splits;
  };
  for (const Case& c : {
           Case{4096, 384, 1, 1},  // the gate: 96 tiles of 128 (2 splits before)
           Case{2048, 384, 1, 4},  // 48: the plan's 4 splits
           Case{4096, 512, 1, 1},  // the compressor's wkv: 128 (2 splits before)
           Case{2048, 512, 2, 1},  // the ratio-2 pair: 128 (2 splits before)
           Case{2048, 512, 1, 4},  // 64: below half
       }) {
    const FloatLinearCudaPlan plan = PlanFloatLinearCuda(Shape(c.m, c.n, 5120, c.groups));
    ASSERT_TRUE(plan.warp_specialised) << c.m << " x " << c.n;
    EXPECT_EQ(plan.splits, c.splits) << c.m << " x " << c.n << " x " << c.groups;
    EXPECT_EQ(plan.steps_per_split * plan.splits, plan.k_steps);
  }
  FloatLinearCudaParams forced = Shape(4096, 384, 5120);
  forced.split_k = 2;
  EXPECT_EQ(PlanFloatLinearCuda(forced).splits, 2);
  // The shared rule itself: 66 tiles of 128 columns and up.
  EXPECT_TRUE(LinearCudaWsUnsplitPays(33, 256, 1));
  EXPECT_FALSE(LinearCudaWsUnsplitPays(32, 256, 1));
  EXPECT_TRUE(LinearCudaWsUnsplitPays(11, 384, 2));
  EXPECT_FALSE(LinearCudaWsUnsplitPays(8, 1024, 1));
}

// The warp-specialised kernel's width for the bf16 Linear: the by-waves rule over every group's
// tiles; a forced width as asked.
TEST(FloatLinearCudaPlanTest, WsTileColsCountEveryGroup) {
  FloatLinearCudaPlan plan;
  plan.m_tiles = 32;
  plan.splits = 1;
  FloatLinearCudaParams p = Shape(4096, 384, 5120);
  p.ws_tile_cols = 0;
  // The gate: 64 tiles of 256 columns (half of each second one past N) in one wave; 96 of 128.
  EXPECT_EQ(FloatLinearCudaWsTileCols(p, plan, 132), 128);
  // wo_a at 1,024 rows: 8 m tiles × 8 groups. 256 columns: 256 tiles, 2 waves; 128 columns
  // would take 4 (one group alone would have chosen 128: 64 tiles in one wave).
  plan.m_tiles = 8;
  p = Shape(1024, 1024, 4096, 8);
  p.ws_tile_cols = 0;
  EXPECT_EQ(FloatLinearCudaWsTileCols(p, plan, 132), 256);
  p.groups = 1;
  EXPECT_EQ(FloatLinearCudaWsTileCols(p, plan, 132), 128);
  p.ws_tile_cols = 192;
  EXPECT_EQ(FloatLinearCudaWsTileCols(p, plan, 132), 192);
}

// Every bf16 value widened to fp32 narrows back to itself (all 65,536 patterns, NaNs included:
// a NaN whose payload fits in bf16 has zero low halves); any set low bit refuses the whole weight.
TEST(NarrowFloatLinearWeightTest, KeepsBf16ValuesAndRefusesWiderOnes) {
  std::vector<float> w(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t bits = b << 16;
    std::memcpy(&w[b], &bits, 4);
  }
  std::vector<uint16_t> out(w.size(), 0xABCD);
  ASSERT_TRUE(NarrowFloatLinearWeight(w.data(), w.size(), out.data()));
  for (uint32_t b = 0; b < 65536; ++b) ASSERT_EQ(out[b], b) << b;
  for (uint32_t low : {1u, 0x8000u, 0xFFFFu}) {
    std::vector<float> v = w;
    const uint32_t bits = (0x3F80u << 16) | low;  // 1.0 plus low bits
    std::memcpy(&v[40000], &bits, 4);
    EXPECT_FALSE(NarrowFloatLinearWeight(v.data(), v.size(), out.data())) << low;
  }
  const float third = 1.f / 3.f;  // needs 24 significand bits
  EXPECT_FALSE(NarrowFloatLinearWeight(&third, 1, out.data()));
  EXPECT_TRUE(NarrowFloatLinearWeight(nullptr, 0, nullptr));
}

}  // namespace
}  // namespace flashserve::kernels
