// Router against a double reference and hand cases, the SwiGLU clamps, the accumulation order,
// and params validation (kernels_moe_test). The whole layer on real weights is in
// moe_fixture_test.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/gemm/prepared_linear.h"
#include "kernels/moe/moe.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

double SoftplusD(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

struct RefRoute {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  double margin;  // biased score gap between rank k-1 and rank k (inf if k == E)
};

// Double-precision router written plainly: sort all experts by (biased desc, id asc).
RefRoute RouteD(const float* logits, int64_t e_count, const float* bias, const MoeOptions& o) {
  std::vector<double> s(e_count), biased(e_count);
  for (int64_t e = 0; e < e_count; ++e) {
    s[e] = std::sqrt(SoftplusD(static_cast<double>(logits[e]) / o.gate_temp));
    biased[e] = s[e] + (bias != nullptr ? bias[e] : 0.0);
  }
  std::vector<int32_t> order(e_count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return biased[a] > biased[b]; });
  RefRoute r;
  double sum = 0;
  for (int64_t j = 0; j < o.top_k; ++j) {
    r.ids.push_back(order[j]);
    r.weights.push_back(s[order[j]]);
    sum += s[order[j]];
  }
  for (double& w : r.weights) {
    if (o.norm_topk_prob && o.top_k > 1) w /= sum + 1e-20;
    w *= o.route_scale;
  }
  r.margin = o.top_k < e_count ? biased[order[o.top_k - 1]] - biased[order[o.top_k]] : INFINITY;
  return r;
}

struct RouteOut {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

RouteOut Route(const std::vector<float>& logits, int64_t e_count, const MoeOptions& o,
               const float* bias, const float* bias_vl = nullptr,
               const uint8_t* is_image = nullptr) {
  const int64_t m = static_cast<int64_t>(logits.size()) / e_count;
  RouteOut out{std::vector<int32_t>(m * o.top_k), std::vector<float>(m * o.top_k)};
  MoeRouteParams p{o,       m,        e_count,        logits.data(),     bias,
                   bias_vl, is_image, out.ids.data(), out.weights.data()};
  EXPECT_TRUE(MoeRouteCpu(p, nullptr).ok());
  return out;
}

TEST(MoeRouteTest, MatchesDoubleReferenceOverShapes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 2.f);
  struct Shape {
    int64_t e, k;
    bool norm;
    float temp;
  };
  for (Shape sh : {Shape{8, 2, true, 1.f}, Shape{384, 6, true, 1.f}, Shape{128, 3, true, 1.f},
                   Shape{8, 1, true, 1.f}, Shape{16, 4, false, 2.f}}) {
    MoeOptions o;
    o.top_k = sh.k;
    o.norm_topk_prob = sh.norm;
    o.gate_temp = sh.temp;
    o.route_scale = 1.5f;
    const int64_t m = 37;
    std::vector<float> logits(m * sh.e), bias(sh.e);
    for (float& v : logits) v = nd(rng);
    for (float& v : bias) v = 0.3f * nd(rng);
    const RouteOut got = Route(logits, sh.e, o, bias.data());
    int checked = 0;
    for (int64_t t = 0; t < m; ++t) {
      const RefRoute ref = RouteD(&logits[t * sh.e], sh.e, bias.data(), o);
      if (ref.margin < 1e-5) continue;  // near tie at the boundary: fp32 may pick either
      ++checked;
      for (int64_t j = 0; j < sh.k; ++j) {
        EXPECT_EQ(got.ids[t * sh.k + j], ref.ids[j]) << "E=" << sh.e << " t=" << t;
        EXPECT_NEAR(got.weights[t * sh.k + j], ref.weights[j], 4e-7 * std::fabs(ref.weights[j]))
            << "E=" << sh.e << " t=" << t << " j=" << j;
      }
    }
    EXPECT_GT(checked, m - 3);
  }
}

TEST(MoeRouteTest, SoftplusThresholdAt20) {
  MoeOptions o;
  o.top_k = 1;
  o.norm_topk_prob = true;  // k == 1: no normalisation
  o.route_scale = 1.f;
  // Above 20 the score is sqrt(v) exactly (exp(200) would overflow fp32 to inf otherwise).
  for (float v : {200.f, 1000.f, 20.5f, 88.f, 89.f}) {
    const RouteOut r = Route({v, -5.f}, 2, o, nullptr);
    EXPECT_EQ(r.ids[0], 0);
    EXPECT_EQ(r.weights[0], std::sqrt(v)) << v;
    EXPECT_TRUE(std::isfinite(r.weights[0])) << v;
  }
  // At and below 20: log1p(exp(v)).
  for (float v : {20.f, 19.f, 0.f, -3.f}) {
    const RouteOut r = Route({v, -30.f}, 2, o, nullptr);
    EXPECT_EQ(r.weights[0], std::sqrt(std::log1p(std::exp(v)))) << v;
  }
  // softplus(0) = ln 2: hand value.
  EXPECT_NEAR(Route({0.f, -30.f}, 2, o, nullptr).weights[0], std::sqrt(std::log(2.0)), 1e-7);
}

TEST(MoeRouteTest, WeightsAreUnbiasedNormalisedAndScaled) {
  MoeOptions o;
  o.top_k = 2;
  o.route_scale = 1.5f;
  // logits 30, 25, 21, 40 -> s = sqrt(logit). Bias pushes expert 3 out and expert 2 in.
  const std::vector<float> logits = {30.f, 25.f, 21.f, 40.f};
  const std::vector<float> bias = {0.f, -10.f, 1.f, -10.f};
  RouteOut r = Route(logits, 4, o, bias.data());
  // Biased: e2 sqrt(21)+1 = 5.58 > e0 sqrt(30) = 5.48 > e3, e1 (−10).
  ASSERT_EQ(r.ids, (std::vector<int32_t>{2, 0}));
  const float s2 = std::sqrt(21.f), s0 = std::sqrt(30.f);
  const float denom = (s2 + s0) + 1e-20f;
  EXPECT_EQ(r.weights[0], s2 / denom * 1.5f);
  EXPECT_EQ(r.weights[1], s0 / denom * 1.5f);
  // Without normalisation: s · route_scale.
  o.norm_topk_prob = false;
  r = Route(logits, 4, o, bias.data());
  EXPECT_EQ(r.weights[0], s2 * 1.5f);
  EXPECT_EQ(r.weights[1], s0 * 1.5f);
  // k == 1 with norm_topk_prob: no normalisation either.
  o.norm_topk_prob = true;
  o.top_k = 1;
  r = Route(logits, 4, o, bias.data());
  EXPECT_EQ(r.ids[0], 2);
  EXPECT_EQ(r.weights[0], s2 * 1.5f);
}

TEST(MoeRouteTest, ImageTokensUseBiasVl) {
  MoeOptions o;
  o.top_k = 2;
  const std::vector<float> logits = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f,
                                     1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
  const std::vector<float> bias = {0.f, 0.f, 0.f, 0.f, 0.f, 3.f, 2.f, 0.f};
  const std::vector<float> bias_vl = {0.f, 5.f, 0.f, 4.f, 0.f, 0.f, 0.f, 0.f};
  const uint8_t image[2] = {0, 1};
  const RouteOut r = Route(logits, 8, o, bias.data(), bias_vl.data(), image);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{5, 6, 1, 3}));
  // Same unbiased s for all: weights 1.5 / 2 each, whatever bias chose them.
  for (float w : r.weights) EXPECT_FLOAT_EQ(w, 0.75f);
  // An image token without bias_vl is rejected.
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  MoeRouteParams p{o, 2, 8, logits.data(), bias.data(), nullptr, image, ids.data(), w.data()};
  EXPECT_EQ(MoeRouteCpu(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MoeRouteTest, TiesPickTheLowestExpertId) {
  MoeOptions o;
  o.top_k = 3;
  const RouteOut r = Route({2.f, 3.f, 2.f, 3.f, 2.f, 3.f}, 6, o, nullptr);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 5}));
  const RouteOut r2 = Route({2.f, 2.f, 2.f, 2.f}, 4, o, nullptr);
  EXPECT_EQ(r2.ids, (std::vector<int32_t>{0, 1, 2}));
}

// silu(g')·u'·w rounded once to bf16, computed in double.
float SwiGluD(float g, float u, float limit, double w) {
  double gd = g, ud = u;
  if (limit > 0) {
    ud = std::clamp(ud, -static_cast<double>(limit), static_cast<double>(limit));
    gd = std::min(gd, static_cast<double>(limit));
  }
  return static_cast<float>(w * gd / (1.0 + std::exp(-gd)) * ud);
}

TEST(MoeSwiGluTest, ClampsUpBothSidesAndGateAboveOnly) {
  // g: above the limit, far below -limit (must NOT be clamped), inside; u: both sides.
  const std::vector<float> g = {15.f, -15.f, 3.f, 10.5f, -12.f, 0.25f, 9.f};
  const std::vector<float> u = {12.f, -12.f, 0.5f, -11.f, 11.f, -40.f, 9.5f};
  std::vector<uint16_t> gb, ub;
  for (float v : g) gb.push_back(FloatToBf16Bits(v));
  for (float v : u) ub.push_back(FloatToBf16Bits(v));
  for (float limit : {10.f, 0.f}) {
    for (float w : {1.f, 0.375f}) {
      std::vector<uint16_t> out(g.size());
      MoeSwiGluRow(gb.data(), ub.data(), g.size(), limit, &w, out.data());
      for (size_t i = 0; i < g.size(); ++i) {
        const float want = SwiGluD(g[i], u[i], limit, w);
        const float got = Bf16BitsToFloat(out[i]);
        EXPECT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -8))
            << "i=" << i << " limit=" << limit << " w=" << w;
      }
    }
  }
  // Hand values with limit 10: g=15,u=12 -> silu(10)*10 = 99.9546 -> bf16 100.0;
  // g=-15,u=-12 -> silu(-15)*(-10) = 4.588e-5 (a lower clamp on g would give 4.54e-3).
  std::vector<uint16_t> out(g.size());
  MoeSwiGluRow(gb.data(), ub.data(), g.size(), 10.f, nullptr, out.data());
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 100.f);
  EXPECT_NEAR(Bf16BitsToFloat(out[1]), 4.5885e-5, 3e-7);
  // No clamp: silu(15)*12 = 179.99996 -> bf16 180.
  MoeSwiGluRow(gb.data(), ub.data(), g.size(), 0.f, nullptr, out.data());
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 180.f);
}

}  // namespace
}  // namespace flashserve::kernels
