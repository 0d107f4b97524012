// The FP8 form of a bf16 weight (gemm_float_cuda.h: NarrowFloatLinearWeightToFp8, the w_fp8
// fields' validation and plan). No device needed; the GPU side is in gemm_float_gpu_fp8_test.cc.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "gtest/gtest.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kB = kFloatLinearFp8Block;

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// rows × cols bf16 weights that are E4M3 codes times one power of two per 32 × 32 block: random
// codes (subnormal ones, ±0 and ±448 included), per-block exponents in [lo, hi].
std::vector<uint16_t> Fp8ExactWeight(int64_t rows, int64_t cols, int lo, int hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> w(rows * cols);
  for (int64_t rb = 0; rb < rows / kB; ++rb) {
    for (int64_t cb = 0; cb < cols / kB; ++cb) {
      const int s = lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
      for (int64_t r = rb * kB; r < (rb + 1) * kB; ++r) {
        for (int64_t c = cb * kB; c < (cb + 1) * kB; ++c) {
          uint8_t code = static_cast<uint8_t>(rng());
          if ((code & 0x7F) == 0x7F) code ^= 1;  // no NaN codes
          const float v = std::ldexp(formats::E4m3ToFloat(code), s);
          w[r * cols + c] = formats::FloatToBf16Bits(v);
          EXPECT_EQ(formats::Bf16BitsToFloat(w[r * cols + c]), v);  // E4M3 · 2^s is a bf16
        }
      }
    }
  }
  return w;
}

TEST(NarrowFloatLinearWeightToFp8Test, Fp8ValuedWeightsComeBackExactlyWithTheLeastScale) {
  const int64_t rows = 96, cols = 128;
  for (const auto& [lo, hi] :
       std::vector<std::pair<int, int>>{{-20, 5}, {-119, -100}, {100, 119}}) {
    const std::vector<uint16_t> w = Fp8ExactWeight(rows, cols, lo, hi, 7 + lo);
    std::vector<uint8_t> codes(rows * cols), scales(rows / kB * cols / kB);
    ASSERT_TRUE(NarrowFloatLinearWeightToFp8(w.data(), rows, cols, codes.data(), scales.data()))
        << lo << " .. " << hi;
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t block = (i / cols) / kB * (cols / kB) + (i % cols) / kB;
      const float back = Fp8WeightValue(codes[i], scales[block]);
      ASSERT_EQ(Bits(back), Bits(formats::Bf16BitsToFloat(w[i]))) << i;
    }
    for (int64_t rb = 0; rb < rows / kB; ++rb) {
      for (int64_t cb = 0; cb < cols / kB; ++cb) {
        float amax = 0.0f;
        for (int64_t r = rb * kB; r < (rb + 1) * kB; ++r) {
          for (int64_t c = cb * kB; c < (cb + 1) * kB; ++c) {
            amax = std::fmax(amax, std::fabs(formats::Bf16BitsToFloat(w[r * cols + c])));
          }
        }
        const int s = scales[rb * (cols / kB) + cb] - 127;
        EXPECT_LE(amax, std::ldexp(448.0f, s));
        if (amax > 0.0f && s > -119) {
          EXPECT_GT(amax, std::ldexp(448.0f, s - 1));  // the least such scale
        }
      }
    }
  }
}

TEST(NarrowFloatLinearWeightToFp8Test, ZeroBlocksSignedZerosAndSubnormalCodes) {
  std::vector<uint16_t> w(32 * 64, 0);
  w[5] = 0x8000;                                                    // -0
  w[32 + 3] = formats::FloatToBf16Bits(std::ldexp(3.0f, -9 - 10));  // code 3 (subnormal) · 2^-10
  w[32 + 4] = formats::FloatToBf16Bits(std::ldexp(448.0f, -10));    // sets the block's scale
  std::vector<uint8_t> codes(w.size()), scales(2);
  ASSERT_TRUE(NarrowFloatLinearWeightToFp8(w.data(), 32, 64, codes.data(), scales.data()));
  EXPECT_EQ(scales[0], 127);  // an all-zero block (but -0) takes 2^0
  EXPECT_EQ(scales[1], 117);
  EXPECT_EQ(codes[5], 0x80);
  EXPECT_EQ(codes[32 + 3], 0x03);
  EXPECT_EQ(codes[32 + 4], 0x7E);
}

TEST(NarrowFloatLinearWeightToFp8Test, RefusesWhatFp8CannotHold) {
  const std::vector<uint16_t> base = Fp8ExactWeight(32, 32, -8, -8, 3);
  std::vector<uint8_t> codes(32 * 32), scales(1);
  ASSERT_TRUE(NarrowFloatLinearWeightToFp8(base.data(), 32, 32, codes.data(), scales.data()));
  auto refused = [&](int64_t i, float v) {
    std::vector<uint16_t> w = base;
    w[i] = formats::FloatToBf16Bits(v);
    return !NarrowFloatLinearWeightToFp8(w.data(), 32, 32, codes.data(), scales.data());
  };
  EXPECT_TRUE(refused(17, 1.0625f * std::ldexp(1.0f, -8)));  // 5 significant bits
  EXPECT_TRUE(refused(17, INFINITY));
  EXPECT_TRUE(refused(17, -NAN));
  // 448 · 2^-16 = 3.5 · 2^-9 beside 448 needs a bit below E4M3's subnormal step at that scale.
  std::vector<uint16_t> w(32 * 32, 0);
  w[0] = formats::FloatToBf16Bits(448.0f);
  w[1] = formats::FloatToBf16Bits(448.0f * std::ldexp(1.0f, -16));
  EXPECT_FALSE(NarrowFloatLinearWeightToFp8(w.data(), 32, 32, codes.data(), scales.data()));
  // Dims that are not whole blocks.
  EXPECT_FALSE(NarrowFloatLinearWeightToFp8(base.data(), 16, 32, codes.data(), scales.data()));
  EXPECT_FALSE(NarrowFloatLinearWeightToFp8(base.data(), 32, 24, codes.data(), scales.data()));
  // A block too small for scale byte 8 (2^-119) is refused rather than decoded inexactly.
  std::vector<uint16_t> tiny(32 * 32, 0);
  tiny[9] = formats::FloatToBf16Bits(std::ldexp(1.0f, -129));
  EXPECT_FALSE(NarrowFloatLinearWeightToFp8(tiny.data(), 32, 32, codes.data(), scales.data()));
}

TEST(FloatLinearCudaParamsTest, Fp8FormValidationAndPlan) {
  alignas(16) static uint16_t w[8 * 64 * 256];
  alignas(16) static float wf[8 * 64 * 256];
  alignas(16) static uint8_t w8[8 * 64 * 256 + 8];
  alignas(16) static uint8_t s8[8 * 2 * 8];
  alignas(16) static uint16_t x[4 * 8 * 256];
  alignas(16) static uint16_t y[4 * 8 * 64];
  auto good = [&] {
    FloatLinearCudaParams p;
    p.m = 1;
    p.n = 64;
    p.k = 256;
    p.groups = 8;
    p.w_bf16 = w;
    p.w_fp8 = w8;
    p.w_fp8_scales = s8;
    p.w_group_stride = 64 * 256;
    p.x_bf16 = x;
    p.x_stride = 8 * 256;
    p.x_group_stride = 256;
    p.y_bf16 = y;
    p.y_stride = 8 * 64;
    p.y_group_stride = 64;
    return p;
  };
  ASSERT_TRUE(ValidateFloatLinearCudaParams(good()).ok()) << ValidateFloatLinearCudaParams(good());
  auto expect_field = [](const FloatLinearCudaParams& p, const char* field) {
    const absl::Status s = ValidateFloatLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  FloatLinearCudaParams p = good();
  p.w_bf16 = nullptr;  // the FP8 form goes with a bf16 weight, not an fp32 one
  p.w_f32 = wf;
  expect_field(p, "w_fp8");
  p = good();
  p.w_fp8_scales = nullptr;
  expect_field(p, "w_fp8");
  p = good();
  p.w_fp8 = w8 + 4;
  expect_field(p, "w_fp8");
  p = good();
  p.n = 48;
  p.y_group_stride = 48;
  p.w_group_stride = 48 * 256;
  expect_field(p, "w_fp8");
  p = good();
  p.w_group_stride = 64 * 256 + 8;
  expect_field(p, "w_group_stride");
  p = good();
  p.w_group_stride = 0;  // one weight shared by the groups
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);

  // Plan: wo_a's size (8 × 1024 × 4096 bf16 weights, above kFloatLinearCudaGemvMaxBf16Weights)
  // takes the swapped-role kernel without its FP8 form; with it the CUDA-core kernel up to
  // kFloatLinearCudaGemvFp8MaxM rows, then the FP8 form's swapped-role kernel up to
  // kFloatLinearCudaSwapFp8AutoMaxM, then the bf16 swapped-role kernel again.
  FloatLinearCudaParams wo_a;
  wo_a.n = 1024;
  wo_a.k = 4096;
  wo_a.groups = 8;
  wo_a.w_bf16 = w;
  wo_a.x_bf16 = x;
  wo_a.x_stride = 8 * 4096;
  wo_a.x_group_stride = 4096;
  for (int64_t m = 1; m <= 16; ++m) {
    wo_a.m = m;
    wo_a.w_fp8 = nullptr;
    wo_a.w_fp8_scales = nullptr;
    EXPECT_EQ(PlanFloatLinearCuda(wo_a).tile_rows, kFloatLinearCudaSwapRows) << m;
    wo_a.w_fp8 = w8;
    wo_a.w_fp8_scales = s8;
    EXPECT_EQ(PlanFloatLinearCuda(wo_a).tile_rows,
              m <= kFloatLinearCudaGemvFp8MaxM       ? kFloatLinearCudaGemvRows
              : m <= kFloatLinearCudaSwapFp8AutoMaxM ? kFloatLinearCudaSwapFp8Rows
                                                     : kFloatLinearCudaSwapRows)
        << m;
  }
  // Where the FP8 swapped-role kernel cannot run, 2 .. 8 rows keep the bf16 swapped-role kernel:
  // K not whole 128-K stages, codes only 8-byte aligned.
  wo_a.m = 4;
  FloatLinearCudaParams q = wo_a;
  q.k = 4032;
  q.x_group_stride = 4032;
  EXPECT_EQ(PlanFloatLinearCuda(q).tile_rows, kFloatLinearCudaSwapRows);
  q = wo_a;
  q.w_fp8 = w8 + 8;
  EXPECT_EQ(PlanFloatLinearCuda(q).tile_rows, kFloatLinearCudaSwapRows);
}

// A weight given only in its FP8 form: its own requirements (each named), its automatic plan by
// M (the FP8 form's kernels up to kFloatLinearCudaSwapFp8OnlyMaxM rows, then the bf16 plans on
// the expansion), and the workspace, which holds the expansion after the plan's own region
// wherever a plan reads bf16 weights.
TEST(FloatLinearCudaParamsTest, Fp8OnlyWeightValidationPlanAndWorkspace) {
  alignas(16) static uint8_t w8[8 * 1024 * 4096 / 64 + 16];  // addresses only (never read)
  alignas(16) static uint8_t s8[64];
  alignas(16) static uint16_t x[16];
  alignas(16) static float xf[16];
  alignas(16) static float wf[16];
  alignas(16) static uint16_t y[16];
  FloatLinearCudaParams wo_a;  // wo_a: 8 groups of [1024, 4096] on o viewed [M, 8, 4096]
  wo_a.n = 1024;
  wo_a.k = 4096;
  wo_a.groups = 8;
  wo_a.w_fp8 = w8;
  wo_a.w_fp8_scales = s8;
  wo_a.w_group_stride = 1024 * 4096;
  wo_a.x_bf16 = x;
  wo_a.x_stride = 8 * 4096;
  wo_a.x_group_stride = 4096;
  wo_a.y_bf16 = y;
  wo_a.y_stride = 8 * 1024;
  wo_a.y_group_stride = 1024;
  const size_t expansion = size_t{2} * 8 * 1024 * 4096;
  EXPECT_EQ(FloatLinearCudaExpansionBytes(wo_a), expansion);
  for (int64_t m : {1, 2, 8, 9, 64, 65, 128, 200, 256, 257, 384, 385, 1024, 4096}) {
    SCOPED_TRACE(m);
    wo_a.m = m;
    const FloatLinearCudaPlan plan = PlanFloatLinearCuda(wo_a);
    FloatLinearCudaParams both = wo_a;  // the same weight beside its bf16 form
    both.w_bf16 = x;
    const FloatLinearCudaPlan plan_both = PlanFloatLinearCuda(both);
    if (m <= kFloatLinearCudaGemvFp8MaxM) {
      EXPECT_EQ(plan.tile_rows, kFloatLinearCudaGemvRows);
    } else if (m <= kFloatLinearCudaSwapFp8OnlyMaxM) {
      EXPECT_EQ(plan.tile_rows, kFloatLinearCudaSwapFp8Rows);
    } else {  // the bf16 weight's plan, on the expansion
      EXPECT_EQ(plan.tile_rows, plan_both.tile_rows);
      EXPECT_EQ(plan.splits, plan_both.splits);
      EXPECT_NE(plan.tile_rows, kFloatLinearCudaSwapFp8Rows);
    }
    const int64_t at = FloatLinearCudaExpansionOffset(wo_a, plan);
    const bool expands =
        plan.tile_rows != kFloatLinearCudaGemvRows && plan.tile_rows != kFloatLinearCudaSwapFp8Rows;
    EXPECT_EQ(at >= 0, expands);
    EXPECT_EQ(FloatLinearCudaExpansionOffset(both, plan_both), -1);  // w_bf16 given: never
    if (expands) {
      EXPECT_EQ(at % 256, 0);
    }
    // The call needs the plan's own region (x in the fragment order above 8 rows on the FP8
    // kernel, above 64 rows in whole 128-row tiles; no K split here) and, where it expands, the
    // expansion after it; one byte less is
    // refused, naming the workspace. FloatLinearCudaWorkspaceBytes covers it (and fp32 or
    // misaligned x, whose plans expand from 5 rows).
    const size_t call = expands ? static_cast<size_t>(at) + expansion
                        : m > kFloatLinearCudaSwapFp8MaxM && m <= kFloatLinearCudaSwapFp8OnlyMaxM
                            ? size_t{2} * 8 * FloatLinearCudaSwapFp8StreamPaddedRows(m) * 4096
                            : 0;
    EXPECT_GE(FloatLinearCudaWorkspaceBytes(wo_a, m), call);
    FloatLinearCudaParams p = wo_a;
    std::vector<unsigned char> ws(call + 16);
    p.workspace =
        call > 0 ? ws.data() + (16 - reinterpret_cast<uintptr_t>(ws.data()) % 16) % 16 : nullptr;
    p.workspace_bytes = call;
    EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
    if (call > 0) {
      p.workspace_bytes = call - 1;
      EXPECT_NE(ValidateFloatLinearCudaParams(p).message().find("workspace"), std::string::npos);
    }
  }
  // Sized once for 4,096 rows, the workspace covers every smaller M.
  EXPECT_GE(FloatLinearCudaWorkspaceBytes(wo_a, 4096), FloatLinearCudaWorkspaceBytes(wo_a, 300));
  // Misaligned x rows (no CUDA-core kernel) expand at any M, fp32 x from 5 rows.
  EXPECT_GE(FloatLinearCudaWorkspaceBytes(wo_a, 1), expansion);
  // A shared weight (w_group_stride 0) is expanded once.
  FloatLinearCudaParams shared = wo_a;
  shared.w_group_stride = 0;
  EXPECT_EQ(FloatLinearCudaExpansionBytes(shared), expansion / 8);
  // Forced plans that read bf16 weights expand at any M (mma.sync 16 rows, the swapped-role
  // kernel, wgmma); the forced CUDA-core kernel reads the codes.
  wo_a.m = 4;
  for (int64_t tile : {int64_t{16}, kFloatLinearCudaSwapRows, kFloatLinearCudaWgmmaRows}) {
    FloatLinearCudaParams p = wo_a;
    p.tile_rows = tile;
    EXPECT_GE(FloatLinearCudaExpansionOffset(p, PlanFloatLinearCuda(p)), 0) << tile;
    EXPECT_GE(FloatLinearCudaWorkspaceBytes(p, 4), expansion) << tile;
  }
  {
    FloatLinearCudaParams p = wo_a;
    p.tile_rows = kFloatLinearCudaGemvRows;
    EXPECT_EQ(FloatLinearCudaExpansionOffset(p, PlanFloatLinearCuda(p)), -1);
    EXPECT_EQ(FloatLinearCudaWorkspaceBytes(p, 4), 0u);
  }
  // Where the swapped-role FP8 kernel cannot run: up to 4 rows the CUDA-core kernel on the codes
  // (fp32 x; K not whole 128-K stages), above that the bf16 plans on the expansion.
  {
    FloatLinearCudaParams p = wo_a;
    p.x_bf16 = nullptr;
    p.x_f32 = xf;
    for (int64_t m : {2, 4}) {
      p.m = m;
      EXPECT_EQ(PlanFloatLinearCuda(p).tile_rows, kFloatLinearCudaGemvRows) << m;
    }
    p.m = 5;
    EXPECT_GE(FloatLinearCudaExpansionOffset(p, PlanFloatLinearCuda(p)), 0);
    p = wo_a;
    p.k = 4064;
    p.x_group_stride = 4064;
    p.w_group_stride = 1024 * 4064;
    p.m = 3;
    EXPECT_EQ(PlanFloatLinearCuda(p).tile_rows, kFloatLinearCudaGemvRows);
    p.m = 40;
    EXPECT_GE(FloatLinearCudaExpansionOffset(p, PlanFloatLinearCuda(p)), 0);
  }
  // Its requirements: codes 16-byte aligned, K at most kLinearCudaMaxK, the scales, no fp32
  // weight beside it; with none of the three forms the weight field is named.
  auto expect_field = [](const FloatLinearCudaParams& p, const char* field) {
    const absl::Status s = ValidateFloatLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  FloatLinearCudaParams p = wo_a;
  p.m = 1;
  ASSERT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  p.w_fp8 = w8 + 8;
  expect_field(p, "w_fp8");
  p = wo_a;
  p.m = 1;
  p.w_fp8_scales = nullptr;
  expect_field(p, "w_fp8");
  p = wo_a;
  p.m = 1;
  p.w_f32 = wf;
  expect_field(p, "w_fp8");
  p = wo_a;
  p.m = 1;
  p.w_fp8 = nullptr;
  p.w_fp8_scales = nullptr;
  expect_field(p, "w_bf16/w_f32");
  p = wo_a;
  p.m = 1;
  p.groups = 1;
  p.w_group_stride = 0;
  p.k = 2 * kLinearCudaMaxK;
  p.x_stride = p.k;
  expect_field(p, "w_fp8");
}

// tile_rows 8, the FP8 form's swapped-role kernel: its own requirements, each named, and its plan
// (one launch of 64-row CTAs over all of K, no split; no workspace up to 8 rows, x in the
// fragment order above).
TEST(FloatLinearCudaParamsTest, Fp8SwappedRoleKernelValidationAndPlan) {
  alignas(16) static uint16_t w[2 * 64 * 256];
  alignas(16) static uint8_t w8[2 * 64 * 256 + 16];
  alignas(16) static uint8_t s8[2 * 2 * 8 + 4];
  alignas(16) static uint16_t x[9 * 2 * 256 + 8];
  alignas(16) static float xf[9 * 2 * 256];
  alignas(16) static uint16_t y[9 * 2 * 64];
  auto good = [&] {
    FloatLinearCudaParams p;
    p.m = 8;
    p.n = 64;
    p.k = 256;
    p.groups = 2;
    p.w_bf16 = w;
    p.w_fp8 = w8;
    p.w_fp8_scales = s8;
    p.w_group_stride = 64 * 256;
    p.x_bf16 = x;
    p.x_stride = 2 * 256;
    p.x_group_stride = 256;
    p.y_bf16 = y;
    p.y_stride = 2 * 64;
    p.y_group_stride = 64;
    p.tile_rows = kFloatLinearCudaSwapFp8Rows;
    return p;
  };
  ASSERT_TRUE(ValidateFloatLinearCudaParams(good()).ok()) << ValidateFloatLinearCudaParams(good());
  const FloatLinearCudaPlan plan = PlanFloatLinearCuda(good());
  EXPECT_EQ(plan.tile_rows, kFloatLinearCudaSwapFp8Rows);
  EXPECT_EQ(plan.tile_cols, kFloatLinearCudaSwapFp8Cols);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.m_tiles, 1);
  EXPECT_EQ(plan.n_tiles, 1);
  EXPECT_EQ(FloatLinearCudaWorkspaceBytes(good(), 8), 0u);
  auto expect_invalid = [](const FloatLinearCudaParams& p, const char* what) {
    const absl::Status s = ValidateFloatLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find("tile_rows"), std::string::npos) << what << ": " << s;
  };
  // Above 8 rows x is streamed through the workspace: 2 · G · M' · K bytes (M' = M up to 64 rows,
  // above that M rounded up to whole 128-row tiles), named when short; K then has no
  // shared-memory limit, but still whole 128-K stages.
  FloatLinearCudaParams p = good();
  p.m = 9;
  EXPECT_EQ(FloatLinearCudaSwapFp8StreamPaddedRows(9), 9);
  EXPECT_EQ(FloatLinearCudaSwapFp8StreamPaddedRows(40), 40);
  EXPECT_EQ(FloatLinearCudaSwapFp8StreamPaddedRows(65), 128);
  EXPECT_EQ(FloatLinearCudaSwapFp8StreamPaddedRows(128), 128);
  EXPECT_EQ(FloatLinearCudaSwapFp8StreamPaddedRows(200), 256);
  EXPECT_EQ(FloatLinearCudaWorkspaceBytes(p, 9), size_t{2 * 2 * 9 * 256});
  EXPECT_EQ(FloatLinearCudaWorkspaceBytes(p, 200), size_t{2 * 2 * 256 * 256});
  EXPECT_EQ(PlanFloatLinearCuda(p).m_tiles, 1);
  p.m = 130;
  EXPECT_EQ(PlanFloatLinearCuda(p).m_tiles, 2);  // 128-row tiles
  p.m = 9;
  {
    const absl::Status s = ValidateFloatLinearCudaParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("workspace"), std::string::npos) << s;
  }
  alignas(16) static uint8_t ws[2 * 2 * 9 * 256];
  p.workspace = ws;
  p.workspace_bytes = sizeof(ws) - 16;
  EXPECT_NE(ValidateFloatLinearCudaParams(p).message().find("workspace"), std::string::npos);
  p.workspace_bytes = sizeof(ws);
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  p.k = 192;
  p.w_group_stride = 64 * 192;
  p.x_group_stride = 192;
  expect_invalid(p, "9 rows, K 192");
  p = good();
  p.w_fp8 = nullptr;
  p.w_fp8_scales = nullptr;
  expect_invalid(p, "no FP8 form");
  p = good();
  p.x_bf16 = nullptr;
  p.x_f32 = xf;
  expect_invalid(p, "fp32 x");
  p = good();
  p.k = 192;  // not a whole 128-K stage
  p.w_group_stride = 64 * 192;
  p.x_group_stride = 192;
  p.x_stride = 2 * 192;
  expect_invalid(p, "K 192");
  p = good();
  p.w_fp8 = w8 + 8;  // 8-byte aligned (enough for the CUDA-core kernel), not 16 (TMA)
  expect_invalid(p, "w_fp8 + 8");
  p = good();
  p.w_fp8_scales = s8 + 2;
  expect_invalid(p, "scales + 2");
  p = good();
  p.x_bf16 = x + 4;  // rows 8-byte aligned
  expect_invalid(p, "x + 4");
  // Its forms: 0 (automatic), 1, 2 or 3 warpgroups, 1 or 4 chains (the fields are named).
  p = good();
  EXPECT_EQ(p.swap_fp8_warpgroups, 0);
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  p.swap_fp8_warpgroups = -1;
  EXPECT_NE(ValidateFloatLinearCudaParams(p).message().find("swap_fp8_warpgroups"),
            std::string::npos);
  p.swap_fp8_warpgroups = 2;
  p.swap_fp8_chains = 4;
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  p.swap_fp8_warpgroups = 3;
  EXPECT_TRUE(ValidateFloatLinearCudaParams(p).ok()) << ValidateFloatLinearCudaParams(p);
  p.swap_fp8_warpgroups = 4;
  EXPECT_NE(ValidateFloatLinearCudaParams(p).message().find("swap_fp8_warpgroups"),
            std::string::npos);
  p.swap_fp8_warpgroups = 1;
  p.swap_fp8_chains = 2;
  EXPECT_NE(ValidateFloatLinearCudaParams(p).message().find("swap_fp8_chains"), std::string::npos);
}

// The automatic form: 3 warpgroups up to kFloatLinearCudaSwapFp8ThreeWgsMaxM rows with one chain,
// 2 above it or with 4 chains; a set field is taken as it is.
TEST(FloatLinearCudaParamsTest, Fp8SwappedRoleKernelWarpgroupsByRows) {
  FloatLinearCudaParams p;
  for (int64_t m : {1, 2, 8, 9, 16, 32}) {
    p.m = m;
    EXPECT_EQ(FloatLinearCudaSwapFp8Warpgroups(p), 3) << m;
  }
  for (int64_t m : {33, 64, 128}) {
    p.m = m;
    EXPECT_EQ(FloatLinearCudaSwapFp8Warpgroups(p), 2) << m;
  }
  p.m = 4;
  p.swap_fp8_chains = 4;
  EXPECT_EQ(FloatLinearCudaSwapFp8Warpgroups(p), 2);
  p.swap_fp8_chains = 1;
  for (int wgs : {1, 2, 3}) {
    p.swap_fp8_warpgroups = wgs;
    EXPECT_EQ(FloatLinearCudaSwapFp8Warpgroups(p), wgs);
  }
}

}  // namespace
}  // namespace flashserve::kernels
