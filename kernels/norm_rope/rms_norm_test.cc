// RMSNorm: double-precision reference, the exact fp32 recipe bit for bit, hand-checkable rows,
// in place, threading and params validation.
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/norm_rope_test_util.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using testing::Bf16Ulp;
using testing::RandomBf16;
using testing::RandomFloats;

// The recipe written out once more, element by element: fp32 squares summed exactly (double),
// mean by the fp32 reciprocal of n, 1/sqrt in fp32, then x*r, then w*(x*r), one bf16 rounding.
// `weight_first` evaluates x*(r*w) instead, a plausible but wrong order.
std::vector<uint16_t> RecipeRow(const uint16_t* x, const std::vector<float>& w, float eps,
                                bool weight_first = false) {
  const int64_t n = static_cast<int64_t>(w.size());
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = Bf16BitsToFloat(x[i]);
    sum += v * v;
  }
  const float inv_n = 1.0f / static_cast<float>(n);
  const float var = static_cast<float>(sum) * inv_n;
  const float r = 1.0f / std::sqrt(var + eps);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float xi = Bf16BitsToFloat(x[i]);
    out[i] = FloatToBf16Bits(weight_first ? xi * (r * w[i]) : w[i] * (xi * r));
  }
  return out;
}

struct Case {
  int64_t rows;
  int64_t cols;
  bool bf16_weight;
  float eps;
  float x_scale;
};

// Tiny fixture dims (dim 256, q_lora 64, head_dim 128, index 64, ViT 64) and the released
// model's (dim 5120, q_lora 1280, kv 512, index 128, ViT 1024), plus odd widths.
const Case kCases[] = {
    {17, 256, true, 1e-20f, 3.0f}, {9, 64, true, 1e-20f, 0.01f},   {9, 128, true, 1e-20f, 50.0f},
    {6, 64, false, 1e-6f, 1.0f},   {4, 5120, true, 1e-20f, 0.05f}, {5, 1280, true, 1e-20f, 2.0f},
    {5, 512, true, 1e-20f, 1.0f},  {5, 1024, false, 1e-6f, 4.0f},  {3, 1, true, 1e-20f, 1.0f},
    {3, 7, false, 1e-6f, 1e-3f},
};

struct Data {
  std::vector<uint16_t> x;
  std::vector<uint16_t> w_bf16;
  std::vector<float> w;  // the weight as fp32 (exact for bf16 weights)
};

Data MakeData(const Case& c, uint32_t seed) {
  Data d;
  d.x = RandomBf16(c.rows * c.cols, c.x_scale, seed);
  if (c.bf16_weight) {
    d.w_bf16 = RandomBf16(c.cols, 1.0f, seed + 1);
    for (uint16_t b : d.w_bf16) d.w.push_back(Bf16BitsToFloat(b));
  } else {
    d.w = RandomFloats(c.cols, -2.0f, 2.0f, seed + 1);
  }
  return d;
}

RmsNormParams MakeParams(const Case& c, const Data& d, std::vector<uint16_t>* out) {
  RmsNormParams p;
  p.rows = c.rows;
  p.cols = c.cols;
  p.x = d.x.data();
  p.x_stride = c.cols;
  if (c.bf16_weight) {
    p.weight_bf16 = d.w_bf16.data();
  } else {
    p.weight_f32 = d.w.data();
  }
  p.eps = c.eps;
  out->assign(static_cast<size_t>(c.rows * c.cols), 0);
  p.out = out->data();
  p.out_stride = c.cols;
  return p;
}

TEST(RmsNormTest, MatchesDoubleReference) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const Data d = MakeData(c, seed++);
    std::vector<uint16_t> out;
    ASSERT_TRUE(RmsNormCpu(MakeParams(c, d, &out), nullptr).ok());
    for (int64_t r = 0; r < c.rows; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < c.cols; ++i) {
        const double v = Bf16BitsToFloat(d.x[r * c.cols + i]);
        sum += v * v;
      }
      const double rr = 1.0 / std::sqrt(sum / c.cols + c.eps);
      for (int64_t i = 0; i < c.cols; ++i) {
        const double ref = d.w[i] * (Bf16BitsToFloat(d.x[r * c.cols + i]) * rr);
        const double got = Bf16BitsToFloat(out[r * c.cols + i]);
        // One bf16 rounding (half an ulp) plus a few fp32 roundings before it.
        EXPECT_LE(std::fabs(got - ref), 0.5 * Bf16Ulp(ref) + 1e-6 * std::fabs(ref))
            << "cols " << c.cols << " row " << r << " col " << i;
      }
    }
  }
}

TEST(RmsNormTest, ExactRecipeBitForBit) {
  uint32_t seed = 100;
  for (const Case& c : kCases) {
    const Data d = MakeData(c, seed++);
    std::vector<uint16_t> out;
    ASSERT_TRUE(RmsNormCpu(MakeParams(c, d, &out), nullptr).ok());
    for (int64_t r = 0; r < c.rows; ++r) {
      const std::vector<uint16_t> want = RecipeRow(d.x.data() + r * c.cols, d.w, c.eps);
      for (int64_t i = 0; i < c.cols; ++i) {
        ASSERT_EQ(out[r * c.cols + i], want[i]) << "cols " << c.cols << " row " << r << " " << i;
      }
    }
  }
}

TEST(RmsNormTest, MultiplicationOrderIsPinned) {
  // w*(x*r) and x*(r*w) differ by an fp32 ulp at most. With bf16 x and bf16 w the bf16 results
  // agreed on every one of 655,360 probes, but fp32 (ViT) weights do tell them apart: pick, per
  // column, an fp32 weight for which the two orders round differently, so that the kernel's bits
  // show which order it uses.
  const Case c{1, 1024, false, 1e-6f, 1.0f};
  Data d = MakeData(c, 42);
  // r depends on x only, so one column at a time decides whether the orders round apart.
  const float r = RmsInverse(d.x.data(), c.cols, c.eps);
  const std::vector<float> candidates = RandomFloats(4096, 1.0f, 2.0f, 43);
  int64_t sensitive = 0;
  for (int64_t i = 0; i < c.cols; ++i) {
    const float x = Bf16BitsToFloat(d.x[i]);
    for (float w : candidates) {
      if (FloatToBf16Bits(w * (x * r)) != FloatToBf16Bits(x * (r * w))) {
        d.w[i] = w;
        ++sensitive;
        break;
      }
    }
  }
  ASSERT_GT(sensitive, 5);  // 14 of the 1024 columns with these seeds
  std::vector<uint16_t> out;
  ASSERT_TRUE(RmsNormCpu(MakeParams(c, d, &out), nullptr).ok());
  const std::vector<uint16_t> want = RecipeRow(d.x.data(), d.w, c.eps);
  const std::vector<uint16_t> wrong = RecipeRow(d.x.data(), d.w, c.eps, /*weight_first=*/true);
  int64_t differ = 0;
  for (int64_t i = 0; i < c.cols; ++i) {
    ASSERT_EQ(out[i], want[i]) << i;
    differ += want[i] != wrong[i];
  }
  EXPECT_EQ(differ, sensitive);
}

TEST(RmsNormTest, HandCheckedRows) {
  // x = [3, 4], w = [1, 2]: mean 12.5, r = 1/sqrt(12.5) = 0.28284273;
  // 3r = 0.8485281 -> bf16 0.84765625; 2 * 4r = 2.2627418 -> bf16 2.265625.
  const std::vector<uint16_t> x = {FloatToBf16Bits(3.0f), FloatToBf16Bits(4.0f)};
  const std::vector<uint16_t> w = {FloatToBf16Bits(1.0f), FloatToBf16Bits(2.0f)};
  std::vector<uint16_t> out(2);
  RmsNormParams p;
  p.rows = 1;
  p.cols = 2;
  p.x = x.data();
  p.x_stride = 2;
  p.weight_bf16 = w.data();
  p.out = out.data();
  p.out_stride = 2;
  ASSERT_TRUE(RmsNormCpu(p, nullptr).ok());
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 0.84765625f);
  EXPECT_EQ(Bf16BitsToFloat(out[1]), 2.265625f);

  // A zero row stays zero (eps keeps the rsqrt finite: 1e10), no NaN.
  const std::vector<uint16_t> zeros(2, 0);
  p.x = zeros.data();
  ASSERT_TRUE(RmsNormCpu(p, nullptr).ok());
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 0);

  // eps takes part: x = 1e-12 everywhere, mean 1e-24 << eps 1e-20, so out = 1e-12 * 1e10 = 0.01.
  const uint16_t tiny = FloatToBf16Bits(1e-12f);
  const std::vector<uint16_t> small = {tiny, tiny};
  const std::vector<uint16_t> ones = {FloatToBf16Bits(1.0f), FloatToBf16Bits(1.0f)};
  p.x = small.data();
  p.weight_bf16 = ones.data();
  ASSERT_TRUE(RmsNormCpu(p, nullptr).ok());
  const double expect =
      Bf16BitsToFloat(tiny) /
      std::sqrt(static_cast<double>(Bf16BitsToFloat(tiny)) * Bf16BitsToFloat(tiny) + 1e-20);
  EXPECT_NEAR(Bf16BitsToFloat(out[0]), expect, Bf16Ulp(expect));
  EXPECT_LT(Bf16BitsToFloat(out[0]), 0.02f);  // not the eps-free 1.0
}

TEST(RmsNormTest, InPlaceStridesAndThreadsGiveTheSameBits) {
  const Case c{37, 256, true, 1e-20f, 3.0f};
  const Data d = MakeData(c, 7);
  std::vector<uint16_t> want;
  ASSERT_TRUE(RmsNormCpu(MakeParams(c, d, &want), nullptr).ok());

  // Strided rows, in place, on a pool of 3 threads.
  const int64_t stride = c.cols + 5;
  std::vector<uint16_t> buf(static_cast<size_t>(c.rows * stride), 0xFFFF);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t i = 0; i < c.cols; ++i) buf[r * stride + i] = d.x[r * c.cols + i];
  }
  RmsNormParams p;
  p.rows = c.rows;
  p.cols = c.cols;
  p.x = buf.data();
  p.x_stride = stride;
  p.weight_bf16 = d.w_bf16.data();
  p.out = buf.data();
  p.out_stride = stride;
  ThreadPool pool(3);
  ASSERT_TRUE(RmsNormCpu(p, &pool).ok());
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t i = 0; i < c.cols; ++i) ASSERT_EQ(buf[r * stride + i], want[r * c.cols + i]);
    for (int64_t i = c.cols; i < stride; ++i) ASSERT_EQ(buf[r * stride + i], 0xFFFF);  // padding
  }
}

TEST(RmsNormTest, RmsInverseIsTheExactFp32Recipe) {
  // r = 1 / sqrt(fp32(sum x^2) * fp32(1/n) + eps), bit for bit. Two near-miss recipes (the mean
  // by a double division; r from a double rsqrt) give other bits on some of these rows, so this
  // pins the recipe at fp32 level, where the bf16 outputs above rarely can.
  int64_t alt_mean_differs = 0, alt_rsqrt_differs = 0;
  uint32_t seed = 300;
  for (int64_t n : {5120, 1280, 512, 1024}) {
    for (int row = 0; row < 32; ++row) {
      const std::vector<uint16_t> x = RandomBf16(n, 0.3f, seed++);
      double sum = 0;
      for (uint16_t b : x) {
        const float v = Bf16BitsToFloat(b);
        sum += v * v;
      }
      const float eps = 1e-20f;
      const float want =
          1.0f / std::sqrt(static_cast<float>(sum) * (1.0f / static_cast<float>(n)) + eps);
      const float alt_mean = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
      const float alt_rsqrt = static_cast<float>(
          1.0 / std::sqrt(static_cast<double>(
                    static_cast<float>(sum) * (1.0f / static_cast<float>(n)) + eps)));
      const float got = RmsInverse(x.data(), n, eps);
      ASSERT_EQ(testing::FloatBits(got), testing::FloatBits(want)) << n << " " << row;
      alt_mean_differs += alt_mean != want;
      alt_rsqrt_differs += alt_rsqrt != want;
      // The fp32 overload agrees with the bf16 one.
      std::vector<float> xf;
      for (uint16_t b : x) xf.push_back(Bf16BitsToFloat(b));
      ASSERT_EQ(testing::FloatBits(RmsInverse(xf.data(), n, eps)), testing::FloatBits(got));
      EXPECT_NEAR(got, 1.0 / std::sqrt(sum / n), 4e-7 * got);
    }
  }
  EXPECT_GT(alt_mean_differs, 0);
  EXPECT_GT(alt_rsqrt_differs, 0);
}

TEST(RmsNormTest, RejectsBadParams) {
  std::vector<uint16_t> x(64, 0), out(64, 0), w(32, 0);
  std::vector<float> wf(32, 1.0f);
  RmsNormParams good;
  good.rows = 2;
  good.cols = 32;
  good.x = x.data();
  good.x_stride = 32;
  good.weight_bf16 = w.data();
  good.out = out.data();
  good.out_stride = 32;
  ASSERT_TRUE(RmsNormCpu(good, nullptr).ok());

  auto expect_invalid = [](RmsNormParams p, const char* what) {
    const absl::Status s = RmsNormCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), absl::string_view::npos) << s.message();
  };
  RmsNormParams p = good;
  p.weight_f32 = wf.data();
  expect_invalid(p, "weight");
  p = good;
  p.weight_bf16 = nullptr;
  expect_invalid(p, "weight");
  p = good;
  p.x_stride = 31;
  expect_invalid(p, "stride");
  p = good;
  p.out = x.data() + 1;  // partial overlap
  p.out_stride = 32;
  expect_invalid(p, "overlaps");
  p = good;
  p.eps = 0.0f;
  expect_invalid(p, "eps");
  p = good;
  p.x = nullptr;
  expect_invalid(p, "x");
  p = good;
  p.out = x.data();
  p.out_stride = 33;
  expect_invalid(p, "strides differ");
  // The QDQ'd second output: whole 32-column blocks, a full stride, disjoint from x and out.
  std::vector<uint16_t> q(64, 0);
  p = good;
  p.out_qdq = q.data();
  p.out_qdq_stride = 32;
  ASSERT_TRUE(RmsNormCpu(p, nullptr).ok());
  p.out_qdq_stride = 31;
  expect_invalid(p, "out_qdq");
  p = good;
  p.cols = 16;
  p.out_qdq = q.data();
  p.out_qdq_stride = 32;
  expect_invalid(p, "multiple of 32");
  p = good;
  p.out_qdq = out.data();
  p.out_qdq_stride = 32;
  expect_invalid(p, "out_qdq");
  p.out_qdq = x.data() + 8;
  expect_invalid(p, "overlaps");
}

// out_qdq holds the FP8 activation QDQ of out (QdqCpu), and out is what it is without it: rows
// whose 32-value blocks span many binades, a NaN, a zero block, strides past cols.
TEST(RmsNormTest, QdqOutputIsTheActivationQdqOfOut) {
  constexpr int64_t kRows = 9, kCols = 96, kStride = 104;
  std::vector<uint16_t> x(kRows * kStride), w(kCols);
  uint32_t r = 5;
  auto next = [&r] {
    r = r * 1664525u + 1013904223u;
    return r >> 8;
  };
  for (uint16_t& v : x) v = static_cast<uint16_t>(0x3000 + next() % 0x1800) | (next() & 0x8000);
  for (uint16_t& v : w) v = static_cast<uint16_t>(0x3E00 + next() % 0x200);
  x[2 * kStride + 7] = 0x7FC0;                               // a NaN row
  for (int64_t c = 32; c < 64; ++c) x[4 * kStride + c] = 0;  // a zero block
  std::vector<uint16_t> plain(kRows * kStride, 0xDEAD), out(plain), q(plain), want(plain);
  RmsNormParams p;
  p.rows = kRows;
  p.cols = kCols;
  p.x = x.data();
  p.x_stride = kStride;
  p.weight_bf16 = w.data();
  p.out = plain.data();
  p.out_stride = kStride;
  ASSERT_TRUE(RmsNormCpu(p, nullptr).ok());
  p.out = out.data();
  p.out_qdq = q.data();
  p.out_qdq_stride = kStride;
  ASSERT_TRUE(RmsNormCpu(p, nullptr).ok());
  EXPECT_EQ(out, plain);
  ASSERT_TRUE(quant::QdqCpu({quant::BlockFormat::kFp8E4m3Ue8m0B32, kRows, kCols, plain.data(),
                             kStride, want.data(), kStride})
                  .ok());
  EXPECT_EQ(q, want);
  EXPECT_NE(q, out);  // the QDQ changed values (3 mantissa bits of 7)
}

}  // namespace
}  // namespace flashserve::kernels
