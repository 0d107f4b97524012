// MhcMixesCpu, HcPreCpu and HcPostCpu against double-precision references over a grid of shapes
// (the tiny fixture's D = 256 and the released model's D = 5120), hand-checkable cases, the fused
// collapse, in-place hc_post, threading and parameter validation. Tolerances are stated per test.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/mhc/mhc.h"
#include "kernels/mhc/mhc_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using mhc_test::MixesRef;
using mhc_test::RandomBf16;
using mhc_test::RandomSite;
using mhc_test::SiteMix;
using mhc_test::SplitSinkhornRecipe;

constexpr int kS = kMhcStreams;

struct Shape {
  int64_t tokens;
  int64_t dim;
  int64_t pad;  // extra elements per token row (strides > extent)
};
// 1 and 7: lane tail paths; 256: tiny fixture; 5120: released model.
const Shape kShapes[] = {{3, 1, 0}, {5, 7, 3}, {33, 256, 0}, {9, 256, 16}, {2, 5120, 0}};

// Mixes of token t with the kernel's fp32 error bound: |kernel − double| <= kMixRelTol ·
// sum|x·fn|·r. Eight lanes of ~width/8 sequential fp32 adds give ~sqrt(width/8)·2^-24 typical; the
// bound allows >20x that at width 20480.
constexpr double kMixRelTol = 2e-6;
// pre/post/comb from the kernel's fp32 mixes vs the double recipe on double mixes (values O(1)).
constexpr double kSplitAbsTol = 2e-5;

TEST(MhcMixesCpu, MatchesDoubleReferenceOverShapes) {
  std::mt19937_64 rng(41);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "tokens " << s.tokens << " dim " << s.dim);
    const int64_t stride = kS * s.dim + s.pad;
    const auto site = RandomSite(s.dim, 1.0, rng);
    const auto x = RandomBf16(s.tokens * stride, 1.1, rng);
    std::vector<float> pre(s.tokens * kS), post(s.tokens * kS), comb(s.tokens * 16),
        mixes(s.tokens * kMhcMixes);
    MhcMixesParams p{.tokens = s.tokens,
                     .dim = s.dim,
                     .x = x.data(),
                     .x_stride = stride,
                     .fn = site.fn.data(),
                     .base = site.base.data(),
                     .scale = site.scale.data(),
                     .pre = pre.data(),
                     .post = post.data(),
                     .comb = comb.data(),
                     .mixes = mixes.data()};
    ASSERT_TRUE(MhcMixesCpu(p, nullptr).ok());
    double worst_mix = 0, worst_split = 0;
    for (int64_t t = 0; t < s.tokens; ++t) {
      double ref[kMhcMixes], mag[kMhcMixes];
      MixesRef(x.data() + t * stride, s.dim, site.fn.data(), p.norm_eps, ref, mag);
      for (int m = 0; m < kMhcMixes; ++m) {
        const double err = std::fabs(mixes[t * kMhcMixes + m] - ref[m]);
        ASSERT_LE(err, kMixRelTol * mag[m]) << "token " << t << " mix " << m;
        worst_mix = std::max(worst_mix, err / mag[m]);
      }
      const SiteMix<double> want =
          SplitSinkhornRecipe<double>(ref, site.base.data(), site.scale.data(), 20, p.hc_eps);
      for (int c = 0; c < kS; ++c) {
        worst_split = std::max({worst_split, std::fabs(pre[t * kS + c] - want.pre[c]),
                                std::fabs(post[t * kS + c] - want.post[c])});
      }
      for (int k = 0; k < 16; ++k) {
        worst_split = std::max(worst_split, std::fabs(comb[t * 16 + k] - want.comb[k]));
      }
    }
    EXPECT_LE(worst_split, kSplitAbsTol);
    RecordProperty("worst_mix_rel_dim" + std::to_string(s.dim), std::to_string(worst_mix));
  }
}

// r = rsqrt(mean(X²)+eps) has no learned weight, so scaling X by 2^k leaves the mixes unchanged to
// the bit (power-of-two scaling commutes with fp32 rounding; eps 1e-20 is far below mean(X²)).
TEST(MhcMixesCpu, MixesAreInvariantToPowerOfTwoScaling) {
  std::mt19937_64 rng(7);
  const int64_t tokens = 4, dim = 256;
  const auto site = RandomSite(dim, 1.0, rng);
  auto x = RandomBf16(tokens * kS * dim, 1.0, rng);
  auto run = [&](const std::vector<uint16_t>& in) {
    std::vector<float> pre(tokens * kS), post(tokens * kS), comb(tokens * 16),
        mixes(tokens * kMhcMixes);
    MhcMixesParams p{.tokens = tokens,
                     .dim = dim,
                     .x = in.data(),
                     .x_stride = kS * dim,
                     .fn = site.fn.data(),
                     .base = site.base.data(),
                     .scale = site.scale.data(),
                     .pre = pre.data(),
                     .post = post.data(),
                     .comb = comb.data(),
                     .mixes = mixes.data()};
    EXPECT_TRUE(MhcMixesCpu(p, nullptr).ok());
    return mixes;
  };
  std::vector<uint16_t> scaled(x.size());
  for (size_t k = 0; k < x.size(); ++k) scaled[k] = FloatToBf16Bits(Bf16BitsToFloat(x[k]) * 8.0f);
  EXPECT_EQ(run(x), run(scaled));
}

// X = all ones and fn = 0: mixes 0, so pre = sigmoid(base)+eps, post = 2·sigmoid(base) and comb
// is the Sinkhorn of the base logits. base = 0: pre = 0.5 + 1e-6, post = 1, comb = 1/4 each.
// base with +40 on the comb diagonal: comb = identity (off-diagonal ~eps).
TEST(MhcMixesCpu, HandCheckedCases) {
  const int64_t dim = 2;
  const std::vector<uint16_t> x(kS * dim, FloatToBf16Bits(1.0f));
  const std::vector<float> fn(kMhcMixes * kS * dim, 0.0f);
  const std::vector<float> scale = {1.0f, 1.0f, 1.0f};
  std::vector<float> base(kMhcMixes, 0.0f);
  float pre[kS], post[kS], comb[16], mixes[kMhcMixes];
  MhcMixesParams p{.tokens = 1,
                   .dim = dim,
                   .x = x.data(),
                   .x_stride = kS * dim,
                   .fn = fn.data(),
                   .base = base.data(),
                   .scale = scale.data(),
                   .pre = pre,
                   .post = post,
                   .comb = comb,
                   .mixes = mixes};
  ASSERT_TRUE(MhcMixesCpu(p, nullptr).ok());
  for (int m = 0; m < kMhcMixes; ++m) EXPECT_EQ(mixes[m], 0.0f);
  for (int c = 0; c < kS; ++c) {
    EXPECT_EQ(pre[c], 0.5f + 1e-6f);
    EXPECT_EQ(post[c], 1.0f);
  }
  for (int k = 0; k < 16; ++k) EXPECT_NEAR(comb[k], 0.25, 1e-6);

  for (int i = 0; i < kS; ++i) base[2 * kS + kS * i + i] = 40.0f;
  base[0] = 2.0f;    // pre[0] = sigmoid(2) + eps
  base[kS] = -1.0f;  // post[0] = 2·sigmoid(-1)
  ASSERT_TRUE(MhcMixesCpu(p, nullptr).ok());
  EXPECT_NEAR(pre[0], 1.0 / (1.0 + std::exp(-2.0)) + 1e-6, 1e-7);
  EXPECT_NEAR(post[0], 2.0 / (1.0 + std::exp(1.0)), 1e-7);
  for (int i = 0; i < kS; ++i) {
    for (int j = 0; j < kS; ++j)
      EXPECT_NEAR(comb[kS * i + j], i == j ? 1.0 : 0.0, 1e-5);  // +eps terms: ~4e-6
  }
}

// The fused collapse of MhcMixesCpu equals HcPreCpu on the same X and pre, bit for bit.
TEST(MhcMixesCpu, FusedCollapseEqualsHcPre) {
  std::mt19937_64 rng(3);
  const int64_t tokens = 11, dim = 256, stride = kS * dim + 8;
  const auto site = RandomSite(dim, 1.0, rng);
  const auto x = RandomBf16(tokens * stride, 1.0, rng);
  std::vector<float> pre_in(tokens * kS);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : pre_in) v = u(rng);
  std::vector<float> pre(tokens * kS), post(tokens * kS), comb(tokens * 16);
  std::vector<uint16_t> fused(tokens * dim), plain(tokens * dim);
  MhcMixesParams p{.tokens = tokens,
                   .dim = dim,
                   .x = x.data(),
                   .x_stride = stride,
                   .fn = site.fn.data(),
                   .base = site.base.data(),
                   .scale = site.scale.data(),
                   .pre = pre.data(),
                   .post = post.data(),
                   .comb = comb.data(),
                   .pre_in = pre_in.data(),
                   .collapsed = fused.data(),
                   .collapsed_stride = dim};
  ASSERT_TRUE(MhcMixesCpu(p, nullptr).ok());
  HcPreParams q{.tokens = tokens,
                .dim = dim,
                .x = x.data(),
                .x_stride = stride,
                .pre = pre_in.data(),
                .out = plain.data(),
                .out_stride = dim};
  ASSERT_TRUE(HcPreCpu(q, nullptr).ok());
  EXPECT_EQ(fused, plain);
}

// Results do not depend on the pool (tokens are independent, the in-token order is fixed).
TEST(MhcMixesCpu, ThreadPoolGivesIdenticalBits) {
  std::mt19937_64 rng(5);
  const int64_t tokens = 64, dim = 256;
  const auto site = RandomSite(dim, 1.0, rng);
  const auto x = RandomBf16(tokens * kS * dim, 1.0, rng);
  auto run = [&](ThreadPool* pool) {
    std::vector<float> out(tokens * (kS + kS + 16));
    MhcMixesParams p{.tokens = tokens,
                     .dim = dim,
                     .x = x.data(),
                     .x_stride = kS * dim,
                     .fn = site.fn.data(),
                     .base = site.base.data(),
                     .scale = site.scale.data(),
                     .pre = out.data(),
                     .post = out.data() + tokens * kS,
                     .comb = out.data() + 2 * tokens * kS};
    EXPECT_TRUE(MhcMixesCpu(p, pool).ok());
    return out;
  };
  ThreadPool pool(2);
  EXPECT_EQ(run(nullptr), run(&pool));
}

TEST(MhcValidation, RejectsBadParamsNamingTheField) {
  float f[64] = {};
  uint16_t x[64] = {};
  uint16_t out[64] = {};
  MhcMixesParams m{.tokens = 1,
                   .dim = 2,
                   .x = x,
                   .x_stride = 8,
                   .fn = nullptr,
                   .base = f,
                   .scale = f,
                   .pre = f,
                   .post = f + 4,
                   .comb = f + 8};
  auto expect_invalid = [](const absl::Status& s, const char* field) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(field), absl::string_view::npos) << s;
  };
  expect_invalid(MhcMixesCpu(m, nullptr), "fn");
  std::vector<float> fn(kMhcMixes * 8);
  m.fn = fn.data();
  m.x_stride = 7;
  expect_invalid(MhcMixesCpu(m, nullptr), "x_stride");
  m.x_stride = 8;
  m.sinkhorn_iters = 0;
  expect_invalid(MhcMixesCpu(m, nullptr), "sinkhorn_iters");
  m.sinkhorn_iters = 20;
  m.small_batch_ctas = -1;
  expect_invalid(MhcMixesCpu(m, nullptr), "small_batch_ctas");
  m.small_batch_ctas = 0;
  m.post = f + 2;  // overlaps pre
  expect_invalid(MhcMixesCpu(m, nullptr), "pre");
  m.post = f + 4;
  m.pre_in = f + 40;  // collapsed missing
  expect_invalid(MhcMixesCpu(m, nullptr), "pre_in/collapsed");

  HcPreParams pre{
      .tokens = 2, .dim = 4, .x = x, .x_stride = 16, .pre = f, .out = x + 8, .out_stride = 4};
  expect_invalid(HcPreCpu(pre, nullptr), "out");  // overlaps x
  HcPostParams post{.tokens = 1,
                    .dim = 4,
                    .f = x,
                    .f_stride = 4,
                    .residual = x + 8,
                    .residual_stride = 16,
                    .post = f,
                    .comb = f + 4,
                    .out = x + 9,
                    .out_stride = 16};
  expect_invalid(HcPostCpu(post, nullptr), "residual");  // partial overlap, not in place
  post.out = out;
  post.dim = 0;
  expect_invalid(HcPostCpu(post, nullptr), "dim");
}

}  // namespace
}  // namespace flashserve::kernels
