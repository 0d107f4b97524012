// kernels_gemm_gpu_test, FloatLinearFp8OnlyGpuTest.*: a weight given only in its FP8 form
// (FloatLinearCudaParams::w_fp8 without w_bf16). Every plan must give the bits of the same plan
// on the bf16 weight: the FP8 form's kernels read the same values, and the plans that read bf16
// weights read the launcher's expansion of the codes in the workspace — which must hold the bf16
// weight byte for byte after the call (the workspace is poisoned before). Then the automatic
// plan's output against a float64 dot product (sampled rows at large M).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/gemm_float_cuda.h"
#include "kernels/gemm/gemm_float_fp8_test_util.h"

namespace flashserve::kernels {
namespace {

using fp8_form_test::Upload;

constexpr int64_t kB = kFloatLinearFp8Block;

struct Case {
  int64_t m, n, k, groups;
  bool shared_w, bias, x_f32, y_f32;
  int64_t x_pad;               // x_stride = G · K + x_pad (4: rows only 8-byte aligned in bf16)
  std::vector<int64_t> tiles;  // tile_rows to run besides the automatic plan (0)
};

void RunCase(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "M " << c.m << " N " << c.n << " K " << c.k << " G " << c.groups
               << (c.shared_w ? " shared" : "") << (c.bias ? " bias" : "")
               << (c.x_f32 ? " x f32" : "") << (c.y_f32 ? " y f32" : "") << " x pad " << c.x_pad);
  std::mt19937_64 rng(seed);
  const int64_t wg = c.shared_w ? 1 : c.groups;
  const std::vector<uint16_t> w = fp8_form_test::Fp8ValuedWeight(wg * c.n, c.k, rng);
  std::vector<uint8_t> codes(w.size()), scales(w.size() / (kB * kB));
  ASSERT_TRUE(NarrowFloatLinearWeightToFp8(w.data(), wg * c.n, c.k, codes.data(), scales.data()));
  const int64_t x_stride = c.groups * c.k + c.x_pad;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xv(c.m * x_stride, 0.f);
  for (float& v : xv) v = formats::RoundToBf16(normal(rng));
  std::vector<uint16_t> xb(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) xb[i] = formats::FloatToBf16Bits(xv[i]);
  std::vector<float> bias(c.n);
  for (float& v : bias) v = normal(rng);

  uint16_t* d_w = Upload(w);
  uint8_t* d_codes = Upload(codes);
  uint8_t* d_scales = Upload(scales);
  uint16_t* d_xb = Upload(xb);
  float* d_xf = Upload(xv);
  float* d_bias = Upload(bias);
  const int64_t outs = c.m * c.groups * c.n;
  void* d_y = nullptr;
  CUDA_CHECK(cudaMalloc(&d_y, outs * 4));

  auto params = [&](bool fp8_only, int64_t tile_rows) {
    FloatLinearCudaParams p;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.groups = c.groups;
    if (!fp8_only) p.w_bf16 = d_w;
    p.w_fp8 = d_codes;
    p.w_fp8_scales = d_scales;
    p.w_group_stride = c.shared_w ? 0 : c.n * c.k;
    p.bias = c.bias ? d_bias : nullptr;
    if (c.x_f32) {
      p.x_f32 = d_xf;
    } else {
      p.x_bf16 = d_xb;
    }
    p.x_stride = x_stride;
    p.x_group_stride = c.k;
    if (c.y_f32) {
      p.y_f32 = static_cast<float*>(d_y);
    } else {
      p.y_bf16 = static_cast<uint16_t*>(d_y);
    }
    p.y_stride = c.groups * c.n;
    p.y_group_stride = c.n;
    p.tile_rows = tile_rows;
    return p;
  };
  size_t ws_bytes = 16;
  for (int64_t tile : c.tiles) {
    ws_bytes = std::max(ws_bytes, FloatLinearCudaWorkspaceBytes(params(true, tile), c.m));
  }
  ws_bytes = std::max(ws_bytes, FloatLinearCudaWorkspaceBytes(params(true, 0), c.m));
  ws_bytes = std::max(ws_bytes, FloatLinearCudaWorkspaceBytes(params(false, 0), c.m));
  void* d_ws = nullptr;
  CUDA_CHECK(cudaMalloc(&d_ws, ws_bytes));

  auto run = [&](const FloatLinearCudaParams& p) {
    CUDA_CHECK(cudaMemset(d_y, 0xFF, outs * 4));
    CUDA_CHECK(cudaMemset(d_ws, 0xFF, ws_bytes));
    const absl::Status st = LaunchFloatLinear(p, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> y(outs);
    if (c.y_f32) {
      CUDA_CHECK(cudaMemcpy(y.data(), d_y, outs * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> yb(outs);
      CUDA_CHECK(cudaMemcpy(yb.data(), d_y, outs * 2, cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < outs; ++i) y[i] = yb[i];
    }
    return y;
  };

  std::vector<int64_t> tiles = c.tiles;
  tiles.insert(tiles.begin(), 0);
  std::vector<uint32_t> automatic;
  for (int64_t tile : tiles) {
    FloatLinearCudaParams only = params(true, tile);
    only.workspace = d_ws;
    only.workspace_bytes = ws_bytes;
    ASSERT_TRUE(ValidateFloatLinearCudaParams(only).ok()) << ValidateFloatLinearCudaParams(only);
    const FloatLinearCudaPlan plan = PlanFloatLinearCuda(only);
    SCOPED_TRACE(::testing::Message() << "tile_rows " << tile << " (plan " << plan.tile_rows << ", "
                                      << plan.splits << " splits)");
    const std::vector<uint32_t> y_only = run(only);
    // The expansion, where the plan reads one: the bf16 weight, byte for byte.
    const int64_t at = FloatLinearCudaExpansionOffset(only, plan);
    if (at >= 0) {
      std::vector<uint16_t> expanded(w.size());
      CUDA_CHECK(cudaMemcpy(expanded.data(), static_cast<unsigned char*>(d_ws) + at, w.size() * 2,
                            cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(expanded.data(), w.data(), w.size() * 2), 0) << "the expansion";
    }
    // The same plan with the bf16 weight beside the codes: forced to the FP8-only plan's kernel
    // (the automatic plans differ between 65 and 256 rows), with its K splits.
    FloatLinearCudaParams both = params(false, plan.tile_rows);
    both.split_k = plan.splits;
    both.workspace = d_ws;
    both.workspace_bytes = ws_bytes;
    ASSERT_EQ(PlanFloatLinearCuda(both).tile_rows, plan.tile_rows);
    ASSERT_EQ(PlanFloatLinearCuda(both).splits, plan.splits);
    const std::vector<uint32_t> y_both = run(both);
    int64_t differ = 0;
    for (int64_t i = 0; i < outs; ++i) {
      if (y_only[i] != y_both[i] && ++differ <= 5) {
        ADD_FAILURE() << "output " << i << ": FP8 only " << y_only[i] << ", bf16 weight "
                      << y_both[i] << " (bits)";
      }
    }
    EXPECT_EQ(differ, 0);
    if (tile == 0) automatic = y_only;
  }
  // The automatic plan against float64 (fp8_form_test::Float64Dot), on every row up to 16 rows,
  // else on 3.
  std::vector<int64_t> rows;
  if (c.m <= 16) {
    for (int64_t r = 0; r < c.m; ++r) rows.push_back(r);
  } else {
    rows = {0, c.m / 2, c.m - 1};
  }
  int64_t bad = 0;
  for (int64_t r : rows) {
    for (int64_t g = 0; g < c.groups; ++g) {
      for (int64_t col = 0; col < c.n; ++col) {
        const int64_t w_row = (c.shared_w ? 0 : g * c.n) + col;
        const uint32_t bits = automatic[(r * c.groups + g) * c.n + col];
        float y;
        if (c.y_f32) {
          std::memcpy(&y, &bits, 4);
        } else {
          y = formats::Bf16BitsToFloat(static_cast<uint16_t>(bits));
        }
        const fp8_form_test::Float64Ref ref = fp8_form_test::Float64Dot(
            &xv[r * x_stride + g * c.k], &w[w_row * c.k], c.k, c.bias ? bias[col] : 0.0, c.y_f32);
        if (!ref.Holds(y) && ++bad <= 5) {
          ADD_FAILURE() << "row " << r << " group " << g << " col " << col << ": " << y
                        << " vs float64 " << ref.ref;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  for (void* ptr : {static_cast<void*>(d_w), static_cast<void*>(d_codes),
                    static_cast<void*>(d_scales), static_cast<void*>(d_xb),
                    static_cast<void*>(d_xf), static_cast<void*>(d_bias), d_y, d_ws}) {
    CUDA_CHECK(cudaFree(ptr));
  }
}

// wo_a's shape through the automatic plan at every regime: the CUDA-core kernel on the codes (1
// row), the FP8 form's swapped-role kernel (8 rows resident, 70, 200 and 300 streamed in 128-row
// tiles), and from 385 rows the bf16 plans on the expansion (wgmma at 520 rows).
TEST(FloatLinearFp8OnlyGpuTest, WoAShapeEveryRegime) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t m : {1, 8, 70, 200, 300, 520}) {
    RunCase({m, 1024, 4096, 8, false, false, false, false, 0, {}}, 100 + m);
  }
}

// Forced plans that read bf16 weights expand at any M (mma.sync 16 / 32 / 64 rows, the
// swapped-role kernel, wgmma; with K splits at these sizes); the FP8 form's kernels do not.
TEST(FloatLinearFp8OnlyGpuTest, ForcedPlansOnTheExpansion) {
  FS_SKIP_WITHOUT_GPU();
  RunCase({40, 256, 512, 2, false, true, false, false, 0, {16, 32, 64, 128, 256, 8}}, 1);
  RunCase({3, 96, 256, 3, true, true, false, true, 0, {1, 8, 16, 256}}, 2);
  RunCase({130, 64, 1024, 1, false, false, false, true, 0, {8, 64, 128, 256}}, 3);
}

// Where the FP8 form's swapped-role kernel cannot run: fp32 x (the CUDA-core kernel on the codes
// up to 4 rows, mma.sync on the expansion above), x rows only 8-byte aligned (no CUDA-core
// kernel either: the expansion at every M), K not whole 128-K stages.
TEST(FloatLinearFp8OnlyGpuTest, WhereTheFp8KernelsCannotRun) {
  FS_SKIP_WITHOUT_GPU();
  RunCase({3, 64, 96, 3, true, true, true, true, 0, {}}, 11);
  RunCase({20, 64, 96, 2, false, false, true, false, 0, {}}, 12);
  RunCase({2, 96, 256, 2, false, true, false, false, 4, {}}, 13);
  RunCase({40, 96, 256, 2, false, false, false, true, 4, {}}, 14);
  RunCase({4, 64, 160, 1, false, false, false, false, 0, {}}, 15);
  RunCase({24, 64, 160, 1, false, true, false, false, 0, {}}, 16);
}

}  // namespace
}  // namespace flashserve::kernels
