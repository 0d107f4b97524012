// kernels_gemm_gpu_test, FloatLinearFp8GpuTest.*: the FP8 form of a bf16 weight
// (FloatLinearCudaParams::w_fp8, NarrowFloatLinearWeightToFp8) on the CUDA-core kernel. Its
// values are the bf16 weight's and its fma order the bf16 path's, so the outputs must equal the
// CUDA-core kernel's on w_bf16 bit for bit — at wo_a's shape (8 groups of [1024, 4096] on o
// viewed [M, 8, 4096], M = 1 .. 4) and on a small shared weight with bias, fp32 x and fp32 y —
// and, as a check that both are right, a float64 dot product within fp32 summation error; the
// same for the kernel's wide geometry (gemv_wide: 8 rows per CTA, a warp per row). And the FP8
// form's swapped-role kernel (tile_rows 8; x resident up to M 8, streamed above): the bf16
// swapped-role kernel's bits on w_bf16, and the same float64 bound.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
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
};

// Runs `c` through the CUDA-core kernel on the bf16 weight and on its FP8 form (and through the
// automatic plan with the FP8 form), and compares.
void RunCase(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "M " << c.m << " N " << c.n << " K " << c.k << " G " << c.groups
               << (c.shared_w ? " shared" : "") << (c.bias ? " bias" : "")
               << (c.x_f32 ? " x f32" : "") << (c.y_f32 ? " y f32" : ""));
  std::mt19937_64 rng(seed);
  const int64_t wg = c.shared_w ? 1 : c.groups;
  // Weights: E4M3 codes times a per-block power of two (as attn.wo_a's checkpoint blocks).
  const std::vector<uint16_t> w = fp8_form_test::Fp8ValuedWeight(wg * c.n, c.k, rng);
  std::vector<uint8_t> codes(w.size()), scales(w.size() / (kB * kB));
  ASSERT_TRUE(NarrowFloatLinearWeightToFp8(w.data(), wg * c.n, c.k, codes.data(), scales.data()));
  // x: [M, G, K] interleaved (x_stride G·K, x_group_stride K), values ~N(0, 1) in bf16.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xv(c.m * c.groups * c.k);
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
  // The workspace (x in the fragment order where the FP8 swapped-role kernel streams it).
  size_t ws_bytes = 16;
  {
    FloatLinearCudaParams q;
    q.m = c.m;
    q.n = c.n;
    q.k = c.k;
    q.groups = c.groups;
    q.w_bf16 = d_w;
    q.w_group_stride = c.shared_w ? 0 : c.n * c.k;
    q.w_fp8 = d_codes;
    q.w_fp8_scales = d_scales;
    q.x_bf16 = d_xb;
    q.x_stride = c.groups * c.k;
    q.x_group_stride = c.k;
    for (int64_t tile : {int64_t{0}, kFloatLinearCudaSwapFp8Rows}) {
      q.tile_rows = tile;
      ws_bytes = std::max(ws_bytes, FloatLinearCudaWorkspaceBytes(q, c.m));
    }
  }
  void* d_ws = nullptr;
  CUDA_CHECK(cudaMalloc(&d_ws, ws_bytes));

  // form: the FP8 swapped-role kernel's consumer warpgroups · 10 + accumulator chains (0: the
  // defaults).
  auto run = [&](bool fp8, int64_t tile_rows, bool wide, int form = 11) {
    FloatLinearCudaParams p;
    p.gemv_wide = wide;
    if (form != 0) {
      p.swap_fp8_warpgroups = form / 10;
      p.swap_fp8_chains = form % 10;
    }
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.groups = c.groups;
    p.w_bf16 = d_w;
    p.w_group_stride = c.shared_w ? 0 : c.n * c.k;
    if (fp8) {
      p.w_fp8 = d_codes;
      p.w_fp8_scales = d_scales;
    }
    p.bias = c.bias ? d_bias : nullptr;
    if (c.x_f32) {
      p.x_f32 = d_xf;
    } else {
      p.x_bf16 = d_xb;
    }
    p.x_stride = c.groups * c.k;
    p.x_group_stride = c.k;
    if (c.y_f32) {
      p.y_f32 = static_cast<float*>(d_y);
    } else {
      p.y_bf16 = static_cast<uint16_t*>(d_y);
    }
    p.y_stride = c.groups * c.n;
    p.y_group_stride = c.n;
    p.tile_rows = tile_rows;
    if (tile_rows == kFloatLinearCudaSwapRows) p.split_k = 1;  // no K split
    p.workspace = d_ws;
    p.workspace_bytes = ws_bytes;
    CUDA_CHECK(cudaMemset(d_y, 0xFF, outs * 4));
    const absl::Status st = LaunchFloatLinear(p, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> y(outs);
    if (c.y_f32) {
      CUDA_CHECK(cudaMemcpy(y.data(), d_y, outs * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> yb(outs);
      CUDA_CHECK(cudaMemcpy(yb.data(), d_y, outs * 2, cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < outs; ++i) y[i] = formats::Bf16BitsToFloat(yb[i]);
    }
    return y;
  };
  auto expect_same_bits = [&](const std::vector<float>& u, const std::vector<float>& v,
                              const char* what) {
    int64_t differ = 0;
    for (int64_t i = 0; i < outs; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &u[i], 4);
      std::memcpy(&b, &v[i], 4);
      if (a != b && ++differ <= 5) {
        ADD_FAILURE() << what << ", output " << i << ": " << u[i] << " vs " << v[i];
      }
    }
    EXPECT_EQ(differ, 0) << what;
  };
  // The outputs checked against float64 below, with their names.
  std::vector<std::pair<const char*, std::vector<float>>> checked;
  if (c.m <= kFloatLinearCudaGemvMaxM) {
    const std::vector<float> bf16 = run(false, kFloatLinearCudaGemvRows, false);
    const std::vector<float> fp8 = run(true, kFloatLinearCudaGemvRows, false);
    expect_same_bits(bf16, fp8, "FP8 form vs bf16 weight");
    if (c.m <= kFloatLinearCudaGemvFp8MaxM) {  // the automatic plan takes the same kernel
      expect_same_bits(run(true, 0, false), fp8, "automatic plan vs the CUDA-core kernel");
    }
    // The wide geometry (FloatLinearCudaParams::gemv_wide): its own fma order, the same for
    // both forms.
    const std::vector<float> fp8_wide = run(true, kFloatLinearCudaGemvRows, true);
    expect_same_bits(run(false, kFloatLinearCudaGemvRows, true), fp8_wide,
                     "wide: FP8 form vs bf16 weight");
    checked.emplace_back("CUDA-core", fp8);
    checked.emplace_back("CUDA-core wide", fp8_wide);
  }
  // The swapped-role kernel on the FP8 form (tile_rows 8): the same exact products as the bf16
  // swapped-role kernel, summed by the tensor cores with the 16 products of each k16 step in
  // another slot order and in N = 8 instead of 64 columns — the same bits (kit s137, H100: 0 of
  // every output differed at wo_a's shape, M = 1 .. 8, and on the small shapes). Above 8 rows it
  // streams x (N = 16 / 32 / 64 per CTA), in one warpgroup the same order again.
  if (!c.x_f32 && (c.m > kFloatLinearCudaSwapFp8MaxM || c.k <= kFloatLinearCudaSwapFp8MaxK) &&
      c.k % kFloatLinearCudaSwapFp8KStep == 0) {
    const std::vector<float> swap8 = run(true, kFloatLinearCudaSwapFp8Rows, false);
    const std::vector<float> swap_bf16 = run(false, kFloatLinearCudaSwapRows, false);
    int64_t differ = 0;
    for (int64_t i = 0; i < outs; ++i) {
      differ += std::memcmp(&swap8[i], &swap_bf16[i], 4) != 0 ? 1 : 0;
    }
    EXPECT_EQ(differ, 0) << "swapped-role kernel: FP8 form vs bf16 weight";
    if (c.m > kFloatLinearCudaGemvFp8MaxM && c.m <= kFloatLinearCudaSwapFp8AutoMaxM) {
      // the automatic plan takes the same kernel
      expect_same_bits(run(true, 0, false, 0), run(true, kFloatLinearCudaSwapFp8Rows, false, 0),
                       "automatic plan vs the FP8 swapped-role kernel (default form)");
    }
    checked.emplace_back("swapped-role FP8", swap8);
    checked.emplace_back("swapped-role bf16", swap_bf16);
    // Its other forms (4 accumulator chains where x is resident, 2 warpgroups, both): another
    // fixed order.
    checked.emplace_back("swapped-role FP8, 2 warpgroups",
                         run(true, kFloatLinearCudaSwapFp8Rows, false, 21));
    checked.emplace_back("swapped-role FP8, 3 warpgroups",
                         run(true, kFloatLinearCudaSwapFp8Rows, false, 31));
    if (c.m <= kFloatLinearCudaSwapFp8MaxM) {
      checked.emplace_back("swapped-role FP8, 4 chains",
                           run(true, kFloatLinearCudaSwapFp8Rows, false, 14));
      checked.emplace_back("swapped-role FP8, 2 warpgroups, 4 chains",
                           run(true, kFloatLinearCudaSwapFp8Rows, false, 24));
    }
  }
  ASSERT_FALSE(checked.empty());
  // Against float64 (fp8_form_test::WithinFloat64Bound: fp32 sums of exact products).
  int64_t bad = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t g = 0; g < c.groups; ++g) {
      for (int64_t col = 0; col < c.n; ++col) {
        const int64_t w_row = (c.shared_w ? 0 : g * c.n) + col;
        const fp8_form_test::Float64Ref ref = fp8_form_test::Float64Dot(
            &xv[(r * c.groups + g) * c.k], &w[w_row * c.k], c.k, c.bias ? bias[col] : 0.0, c.y_f32);
        for (const auto& [name, out] : checked) {
          const float y = out[(r * c.groups + g) * c.n + col];
          if (!ref.Holds(y) && ++bad <= 5) {
            ADD_FAILURE() << name << ": row " << r << " group " << g << " col " << col << ": " << y
                          << " vs float64 " << ref.ref;
          }
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

TEST(FloatLinearFp8GpuTest, WoAShapeBitForBitAndWithinFloat64) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t m = 1; m <= 8; ++m) RunCase({m, 1024, 4096, 8, false, false, false, false}, 11 + m);
}

// The FP8 form's swapped-role kernel off wo_a's shape: a last CTA half past N (96 rows: its two
// upper warps' rows are zero-filled codes), a shared weight over 3 groups, bias, fp32 y, rows
// 5 .. 8, one 128-K stage, K past one ring of stages (12,288: 4 stages beside 192 KB of x).
TEST(FloatLinearFp8GpuTest, SwappedRoleKernelShapes) {
  FS_SKIP_WITHOUT_GPU();
  RunCase({5, 96, 256, 3, true, true, false, true}, 21);
  RunCase({8, 96, 128, 2, false, false, false, false}, 22);
  RunCase({7, 160, 384, 1, false, true, false, false}, 23);
  RunCase({6, 64, 12288, 1, false, false, false, true}, 24);
  RunCase({2, 64, 2560, 2, false, true, false, false}, 25);
}

// x streamed (M > 8): wo_a's shape at 9, 17, 40 and 70 rows (N = 16 / 32 / 64 / 128 per CTA),
// then two m tiles (260 rows: 128-row tiles, the last one ragged), a shared weight over 3 groups
// with bias and fp32 y, a last CTA half past N, one 128-K stage, and K past a ring of stages.
TEST(FloatLinearFp8GpuTest, SwappedRoleKernelStreamsX) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t m : {9, 17, 40}) RunCase({m, 1024, 4096, 8, false, false, false, false}, 40 + m);
  RunCase({70, 1024, 4096, 2, false, false, false, false}, 31);
  RunCase({260, 96, 2048, 1, false, true, false, false}, 32);
  RunCase({13, 96, 256, 3, true, true, false, true}, 33);
  RunCase({33, 64, 128, 2, false, false, false, false}, 34);
  RunCase({64, 128, 8192, 1, false, false, false, true}, 35);
}

TEST(FloatLinearFp8GpuTest, SharedWeightBiasAndFp32Operands) {
  FS_SKIP_WITHOUT_GPU();
  RunCase({3, 64, 96, 3, true, true, true, true}, 5);
  RunCase({2, 96, 160, 1, false, true, false, true}, 6);
  RunCase({1, 32, 32, 2, false, false, true, false}, 7);
  RunCase({4, 96, 64, 2, false, true, false, false}, 8);  // 96 rows: the wide CTAs 12 per group
}

// Exact sums: x in {-1, 0, 1}, weight values code · 2^s with code values multiples of 1/4 up to 2
// and s in [-2, 8] (scale bytes 125 .. 135: 135 takes the decode's second multiply), K 1,024, so
// every product is a multiple of 2^-4 and every partial sum, in any order, is below 2^19 in
// magnitude: an fp32 sum of them is exact whatever the tensor cores' order. So each kernel's fp32
// output (+ an integer bias) must equal the float64 sum bit for bit — an error anywhere in the
// decode, the scale bytes, the x permutation or the stores shows. The FP8 swapped-role kernel
// runs plainly, with trigger_dependents, as a programmatic launch on a stream, and in its other
// forms (4 accumulator chains, 2 warpgroups, both; exact whatever their order).
TEST(FloatLinearFp8GpuTest, SwappedRoleKernelExactSums) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 160, kK = 1024, kG = 2;
  std::mt19937_64 rng(99);
  std::vector<uint8_t> small_codes;  // |value| <= 2, value · 4 an integer
  for (int c = 0; c < 256; ++c) {
    const float v = formats::E4m3ToFloat(static_cast<uint8_t>(c));
    if (std::fabs(v) <= 2.f && std::floor(v * 4) == v * 4)
      small_codes.push_back(static_cast<uint8_t>(c));
  }
  ASSERT_EQ(small_codes.size(), 18u);  // 0, -0 and ±(1 .. 8) / 4
  std::vector<uint16_t> w(kG * kN * kK);
  for (int64_t rb = 0; rb < kG * kN / kB; ++rb) {
    for (int64_t cb = 0; cb < kK / kB; ++cb) {
      const int s = 10 + static_cast<int>(rng() % 9);
      for (int64_t r = rb * kB; r < (rb + 1) * kB; ++r) {
        for (int64_t col = cb * kB; col < (cb + 1) * kB; ++col) {
          const uint8_t code = small_codes[rng() % small_codes.size()];
          w[r * kK + col] = formats::FloatToBf16Bits(std::ldexp(formats::E4m3ToFloat(code), s));
        }
      }
    }
  }
  std::vector<uint8_t> codes(w.size()), scales(w.size() / (kB * kB));
  ASSERT_TRUE(NarrowFloatLinearWeightToFp8(w.data(), kG * kN, kK, codes.data(), scales.data()));
  bool wide = false;
  for (uint8_t b : scales) wide = wide || b > 134;
  ASSERT_TRUE(wide);
  uint16_t* d_w = Upload(w);
  uint8_t* d_codes = Upload(codes);
  uint8_t* d_scales = Upload(scales);
  std::vector<float> bias(kN);
  for (float& b : bias) b = static_cast<float>(256 * (static_cast<int>(rng() % 17) - 8));
  float* d_bias = Upload(bias);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 12, 40, 70, 140}) {  // x streamed from 12
    SCOPED_TRACE(::testing::Message() << "M " << m);
    FloatLinearCudaParams wq;  // the workspace: x in the fragment order above 8 rows
    wq.m = m;
    wq.n = kN;
    wq.k = kK;
    wq.groups = kG;
    wq.tile_rows = kFloatLinearCudaSwapFp8Rows;
    const size_t ws_bytes = std::max<size_t>(16, FloatLinearCudaWorkspaceBytes(wq, m));
    void* d_ws = nullptr;
    CUDA_CHECK(cudaMalloc(&d_ws, ws_bytes));
    // x [M, G, K] with a padded row (x_stride G·K + 8).
    const int64_t x_stride = kG * kK + 8;
    std::vector<uint16_t> xb(m * x_stride, 0);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < kG * kK; ++i) {
        xb[r * x_stride + i] =
            formats::FloatToBf16Bits(static_cast<float>(static_cast<int>(rng() % 3) - 1));
      }
    }
    uint16_t* d_x = Upload(xb);
    float* d_y = nullptr;
    const int64_t outs = m * kG * kN;
    CUDA_CHECK(cudaMalloc(&d_y, outs * 4));
    // The float64 sums, exact.
    std::vector<double> ref(outs);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t g = 0; g < kG; ++g) {
        for (int64_t col = 0; col < kN; ++col) {
          double acc = bias[col];
          for (int64_t kk = 0; kk < kK; ++kk) {
            acc += static_cast<double>(formats::Bf16BitsToFloat(xb[r * x_stride + g * kK + kk])) *
                   formats::Bf16BitsToFloat(w[(g * kN + col) * kK + kk]);
          }
          ref[(r * kG + g) * kN + col] = acc;
        }
      }
    }
    for (int variant = 0; variant < 8; ++variant) {
      SCOPED_TRACE(::testing::Message() << "variant " << variant);
      FloatLinearCudaParams p;
      p.m = m;
      p.n = kN;
      p.k = kK;
      p.groups = kG;
      p.w_bf16 = d_w;
      p.w_group_stride = kN * kK;
      p.w_fp8 = d_codes;
      p.w_fp8_scales = d_scales;
      p.bias = d_bias;
      p.x_bf16 = d_x;
      p.x_stride = x_stride;
      p.x_group_stride = kK;
      p.y_f32 = d_y;
      p.y_stride = kG * kN;
      p.y_group_stride = kN;
      // 0: plain; 1: trigger_dependents; 2: programmatic; 3: the bf16 swapped-role kernel;
      // 4 / 5 / 6: the FP8 kernel with 4 chains / 2 warpgroups / both; 7: 3 warpgroups.
      p.tile_rows = variant == 3 ? kFloatLinearCudaSwapRows : kFloatLinearCudaSwapFp8Rows;
      p.swap_fp8_chains = variant == 4 || variant == 6 ? 4 : 1;
      p.swap_fp8_warpgroups = variant == 7 ? 3 : variant >= 5 ? 2 : 1;
      p.split_k = 1;
      p.workspace = d_ws;
      p.workspace_bytes = ws_bytes;
      p.trigger_dependents = variant == 1;
      p.programmatic = variant == 2;
      CUDA_CHECK(cudaMemsetAsync(d_y, 0xFF, outs * 4, stream));
      const absl::Status st = LaunchFloatLinear(p, stream);
      ASSERT_TRUE(st.ok()) << st;
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<float> y(outs);
      CUDA_CHECK(cudaMemcpy(y.data(), d_y, outs * 4, cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (int64_t i = 0; i < outs; ++i) {
        if (static_cast<double>(y[i]) != ref[i] && ++bad <= 5) {
          ADD_FAILURE() << "output " << i << " (row " << i / (kG * kN) << ", group " << i / kN % kG
                        << ", col " << i % kN << "): " << y[i] << " vs " << ref[i];
        }
      }
      EXPECT_EQ(bad, 0);
    }
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_y));
    CUDA_CHECK(cudaFree(d_ws));
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  for (void* ptr : {static_cast<void*>(d_w), static_cast<void*>(d_codes),
                    static_cast<void*>(d_scales), static_cast<void*>(d_bias)}) {
    CUDA_CHECK(cudaFree(ptr));
  }
}

}  // namespace
}  // namespace flashserve::kernels
