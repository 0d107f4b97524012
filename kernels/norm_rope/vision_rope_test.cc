// The ViT's 2-D RoPE (half-split pairs, row/column angles): against the direct double formula,
// the exact fp32 recipe and layout, threads, in place and validation.
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/norm_rope_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using testing::Bf16Ulp;
using testing::RandomBf16;

struct Patches {
  int64_t n, heads, head_dim;
  std::vector<uint16_t> x;
  std::vector<int32_t> rows, cols;
};

Patches MakeGrid(int32_t n_h, int32_t n_w, int64_t heads, int64_t head_dim, uint32_t seed) {
  Patches p{n_h * n_w, heads, head_dim, RandomBf16(n_h * n_w * heads * head_dim, 1.5f, seed),
            {},        {}};
  for (int32_t r = 0; r < n_h; ++r) {
    for (int32_t c = 0; c < n_w; ++c) {
      p.rows.push_back(r);
      p.cols.push_back(c);
    }
  }
  return p;
}

std::vector<uint16_t> ApplyVision(const Patches& v, ThreadPool* pool = nullptr) {
  std::vector<uint16_t> out(v.x.size(), 0);
  VisionRope2dParams p;
  p.patches = v.n;
  p.heads = v.heads;
  p.head_dim = v.head_dim;
  p.theta = 10000.0;
  p.rows = v.rows.data();
  p.cols = v.cols.data();
  p.x = v.x.data();
  p.x_stride = v.heads * v.head_dim;
  p.x_head_stride = v.head_dim;
  p.out = out.data();
  p.out_stride = p.x_stride;
  p.out_head_stride = v.head_dim;
  const absl::Status s = VisionRope2dCpu(p, pool);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(VisionRopeTest, MatchesTheDirectFormula) {
  // ViT: 16 heads x 64 on a 32 x 32 grid corner; tiny ViT: 4 heads x 16 on the 5 x 7 grid.
  for (const Patches& v : {MakeGrid(6, 32, 16, 64, 3), MakeGrid(5, 7, 4, 16, 4)}) {
    const std::vector<uint16_t> out = ApplyVision(v);
    const int64_t half = v.head_dim / 2, quarter = v.head_dim / 4;
    for (int64_t i = 0; i < v.n; ++i) {
      for (int64_t h = 0; h < v.heads; ++h) {
        const int64_t base = (i * v.heads + h) * v.head_dim;
        for (int64_t j = 0; j < half; ++j) {
          // Direct formula in double: f_k = 10000^(-2k/half), angle row*f_j or col*f_(j-q).
          const int64_t k = j % quarter;
          const double f = std::pow(10000.0, -2.0 * k / half);
          const double angle = (j < quarter ? v.rows[i] : v.cols[i]) * f;
          const double x1 = Bf16BitsToFloat(v.x[base + j]),
                       x2 = Bf16BitsToFloat(v.x[base + j + half]);
          const double lo = x1 * std::cos(angle) - x2 * std::sin(angle);
          const double hi = x2 * std::cos(angle) + x1 * std::sin(angle);
          // fp32 frequency and angle: relative angle error ~2^-23, times |angle| <= 31.
          const double tol = 1e-5 * (std::fabs(x1) + std::fabs(x2));
          EXPECT_LE(std::fabs(Bf16BitsToFloat(out[base + j]) - lo), 0.5 * Bf16Ulp(lo) + tol)
              << i << " " << h << " " << j;
          EXPECT_LE(std::fabs(Bf16BitsToFloat(out[base + j + half]) - hi), 0.5 * Bf16Ulp(hi) + tol)
              << i << " " << h << " " << j;
        }
      }
    }
  }
}

TEST(VisionRopeTest, ExactRecipeAndLayout) {
  const Patches v = MakeGrid(4, 5, 2, 64, 8);
  const std::vector<uint16_t> out = ApplyVision(v);
  std::vector<float> f(16);
  ASSERT_TRUE(ComputeVisionRopeFrequencies(64, 10000.0, absl::MakeSpan(f)).ok());
  for (int64_t i = 0; i < v.n; ++i) {
    float cr[16], sr[16], cc[16], sc[16];
    RopeCosSin(f, v.rows[i], cr, sr);
    RopeCosSin(f, v.cols[i], cc, sc);
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t base = (i * 2 + h) * 64;
      for (int64_t j = 0; j < 32; ++j) {
        const float c = j < 16 ? cr[j] : cc[j - 16], s = j < 16 ? sr[j] : sc[j - 16];
        const float x1 = Bf16BitsToFloat(v.x[base + j]), x2 = Bf16BitsToFloat(v.x[base + j + 32]);
        ASSERT_EQ(out[base + j], FloatToBf16Bits(x1 * c - x2 * s)) << i << " " << j;
        ASSERT_EQ(out[base + j + 32], FloatToBf16Bits(x2 * c + x1 * s)) << i << " " << j;
      }
      // Patch (0, 0) is not rotated at all.
      if (v.rows[i] == 0 && v.cols[i] == 0) {
        for (int64_t j = 0; j < 64; ++j) EXPECT_EQ(out[base + j], v.x[base + j]);
      }
    }
  }
}

TEST(VisionRopeTest, ThreadsAndInPlaceAgreeAndBadParamsFail) {
  Patches v = MakeGrid(8, 8, 16, 64, 12);
  const std::vector<uint16_t> want = ApplyVision(v);
  ThreadPool pool(2);
  EXPECT_EQ(ApplyVision(v, &pool), want);
  VisionRope2dParams p;
  p.patches = v.n;
  p.heads = 16;
  p.head_dim = 64;
  p.rows = v.rows.data();
  p.cols = v.cols.data();
  p.x = v.x.data();
  p.out = v.x.data();
  p.x_stride = p.out_stride = 16 * 64;
  p.x_head_stride = p.out_head_stride = 64;
  ASSERT_TRUE(VisionRope2dCpu(p, nullptr).ok());
  EXPECT_EQ(v.x, want);
  VisionRope2dParams bad = p;
  bad.head_dim = 62;
  EXPECT_EQ(VisionRope2dCpu(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  v.cols[3] = -1;
  EXPECT_EQ(VisionRope2dCpu(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad.rows = nullptr;
  EXPECT_EQ(VisionRope2dCpu(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::kernels
