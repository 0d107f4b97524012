// HcPreCpu and HcPostCpu: hand-checkable cases (one-hot collapse, a cyclic comb that tells source
// from destination) and a double-precision reference over shapes, including hc_post in place.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/mhc/mhc.h"
#include "kernels/mhc/mhc_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using mhc_test::RandomBf16;

constexpr int kS = kMhcStreams;

// bf16 output vs a double result y whose fp32 evaluation sums terms of total size `magnitude`: the
// kernel must return one of the two bf16 neighbours of y, i.e. |out − y| <= half a bf16 ulp of y
// plus the fp32 error (< 8·2^-24·magnitude for at most 5 terms).
void ExpectBf16Near(uint16_t out, double y, double magnitude, const char* what, int64_t index) {
  const double half_ulp = y == 0 ? 0 : std::ldexp(1.0, std::ilogb(y) - 8);
  const double tol = half_ulp + 8 * std::ldexp(magnitude, -24) + 1e-38;
  ASSERT_LE(std::fabs(Bf16BitsToFloat(out) - y), tol) << what << " element " << index;
}

struct Shape {
  int64_t tokens, dim, pad;
};
const Shape kShapes[] = {{3, 1, 0}, {5, 7, 3}, {33, 256, 0}, {4, 256, 16}, {3, 5120, 0}};

TEST(HcPreCpu, OneHotAndUniformCollapsesAreExact) {
  std::mt19937_64 rng(1);
  const int64_t dim = 256;
  auto x = RandomBf16(kS * dim, 1.0, rng);
  std::vector<uint16_t> out(dim);
  const float one_hot[kS] = {1.0f, 0.0f, 0.0f, 0.0f};  // block 0's incoming pre mix
  HcPreParams p{.tokens = 1,
                .dim = dim,
                .x = x.data(),
                .x_stride = kS * dim,
                .pre = one_hot,
                .out = out.data(),
                .out_stride = dim};
  ASSERT_TRUE(HcPreCpu(p, nullptr).ok());
  EXPECT_EQ(out, std::vector<uint16_t>(x.begin(), x.begin() + dim));
  // Four equal streams weighted 1/4 each give the stream back.
  for (int c = 1; c < kS; ++c) std::copy(x.begin(), x.begin() + dim, x.begin() + c * dim);
  const float quarter[kS] = {0.25f, 0.25f, 0.25f, 0.25f};
  p.pre = quarter;
  ASSERT_TRUE(HcPreCpu(p, nullptr).ok());
  EXPECT_EQ(out, std::vector<uint16_t>(x.begin(), x.begin() + dim));
  // One rounding at the end: 1 + 2^-8 + 2^-8 is 1 + 2^-7 (exact in bf16), whereas rounding after
  // each add would tie to even, back to 1, twice.
  const uint16_t v[kS] = {FloatToBf16Bits(1.0f), FloatToBf16Bits(0x1p-8f), FloatToBf16Bits(0x1p-8f),
                          0};
  const float ones[kS] = {1.0f, 1.0f, 1.0f, 1.0f};
  uint16_t o = 0;
  HcPreParams q{
      .tokens = 1, .dim = 1, .x = v, .x_stride = kS, .pre = ones, .out = &o, .out_stride = 1};
  ASSERT_TRUE(HcPreCpu(q, nullptr).ok());
  EXPECT_EQ(Bf16BitsToFloat(o), 1.0f + 0x1p-7f);
}

TEST(HcPreCpu, MatchesDoubleReferenceOverShapes) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "tokens " << s.tokens << " dim " << s.dim);
    const int64_t stride = kS * s.dim + s.pad, out_stride = s.dim + s.pad;
    const auto x = RandomBf16(s.tokens * stride, 1.1, rng);
    std::vector<float> pre(s.tokens * kS);
    for (float& v : pre) v = u(rng);
    std::vector<uint16_t> out(s.tokens * out_stride);
    HcPreParams p{.tokens = s.tokens,
                  .dim = s.dim,
                  .x = x.data(),
                  .x_stride = stride,
                  .pre = pre.data(),
                  .out = out.data(),
                  .out_stride = out_stride};
    ASSERT_TRUE(HcPreCpu(p, nullptr).ok());
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t d = 0; d < s.dim; ++d) {
        double y = 0, mag = 0;
        for (int c = 0; c < kS; ++c) {
          const double term =
              pre[t * kS + c] * double{Bf16BitsToFloat(x[t * stride + c * s.dim + d])};
          y += term;
          mag += std::fabs(term);
        }
        ExpectBf16Near(out[t * out_stride + d], y, mag, "hc_pre", t * s.dim + d);
      }
    }
  }
}

// comb is a cyclic permutation, source i -> destination i+1 (comb[i][i+1] = 1), and post sends f to
// stream 0 only: out[0] = f + R[3], out[j] = R[j−1]. The transposed reading (i as destination)
// would give out[j] = R[j+1]. Small integers keep every sum exact.
TEST(HcPostCpu, CombRowIsTheSourceStream) {
  const int64_t dim = 8;
  std::vector<uint16_t> f(dim), r(kS * dim), out(kS * dim);
  for (int64_t d = 0; d < dim; ++d) {
    f[d] = FloatToBf16Bits(100.0f + d);
    for (int i = 0; i < kS; ++i) r[i * dim + d] = FloatToBf16Bits(10.0f * i + d);
  }
  float comb[16] = {};
  for (int i = 0; i < kS; ++i) comb[kS * i + (i + 1) % kS] = 1.0f;
  const float post[kS] = {1.0f, 0.0f, 0.0f, 0.0f};
  HcPostParams p{.tokens = 1,
                 .dim = dim,
                 .f = f.data(),
                 .f_stride = dim,
                 .residual = r.data(),
                 .residual_stride = kS * dim,
                 .post = post,
                 .comb = comb,
                 .out = out.data(),
                 .out_stride = kS * dim};
  ASSERT_TRUE(HcPostCpu(p, nullptr).ok());
  for (int64_t d = 0; d < dim; ++d) {
    EXPECT_EQ(Bf16BitsToFloat(out[d]), (100.0f + d) + (30.0f + d)) << d;
    for (int j = 1; j < kS; ++j) {
      EXPECT_EQ(Bf16BitsToFloat(out[j * dim + d]), 10.0f * (j - 1) + d) << "stream " << j;
    }
  }
}

TEST(HcPostCpu, MatchesDoubleReferenceOverShapesAndInPlace) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "tokens " << s.tokens << " dim " << s.dim);
    const int64_t stride = kS * s.dim + s.pad, f_stride = s.dim + s.pad;
    const auto f = RandomBf16(s.tokens * f_stride, 0.1, rng);
    auto r = RandomBf16(s.tokens * stride, 1.1, rng);
    // Random, non-symmetric, not normalised: any mix-up of i and j shows.
    std::vector<float> post(s.tokens * kS), comb(s.tokens * 16);
    for (float& v : post) v = 2.0f * u(rng);
    for (float& v : comb) v = u(rng);
    std::vector<uint16_t> out(s.tokens * stride);
    HcPostParams p{.tokens = s.tokens,
                   .dim = s.dim,
                   .f = f.data(),
                   .f_stride = f_stride,
                   .residual = r.data(),
                   .residual_stride = stride,
                   .post = post.data(),
                   .comb = comb.data(),
                   .out = out.data(),
                   .out_stride = stride};
    ASSERT_TRUE(HcPostCpu(p, nullptr).ok());
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int j = 0; j < kS; ++j) {
        for (int64_t d = 0; d < s.dim; ++d) {
          double y = post[t * kS + j] * double{Bf16BitsToFloat(f[t * f_stride + d])};
          double mag = std::fabs(y);
          for (int i = 0; i < kS; ++i) {
            const double term =
                comb[t * 16 + kS * i + j] * double{Bf16BitsToFloat(r[t * stride + i * s.dim + d])};
            y += term;
            mag += std::fabs(term);
          }
          ExpectBf16Near(out[t * stride + j * s.dim + d], y, mag, "hc_post", d);
        }
      }
    }
    // In place (out == residual, same stride) gives the same bits, padding untouched.
    std::vector<uint16_t> expect_pad = r;
    p.out = r.data();
    ASSERT_TRUE(HcPostCpu(p, nullptr).ok());
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t k = 0; k < stride; ++k) {
        const int64_t at = t * stride + k;
        ASSERT_EQ(r[at], k < kS * s.dim ? out[at] : expect_pad[at]) << at;
      }
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
