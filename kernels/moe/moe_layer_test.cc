// The layer on hand-built bf16 weights: accumulation in ascending expert id (a case where the
// top-k rank order gives other bits), and params validation.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/gemm/prepared_linear.h"
#include "kernels/moe/moe.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

constexpr int64_t kDim = 32;
constexpr int64_t kInter = 32;

// A [n, k] bf16 Linear that is zero except weight[r][0] = first_col (row 0 only, or every row).
PreparedLinear Bf16Linear(int64_t n, int64_t k, float first_col, bool only_row0) {
  std::vector<uint16_t> w(n * k, 0);
  for (int64_t r = 0; r < n; ++r) {
    if (!only_row0 || r == 0) w[r * k] = FloatToBf16Bits(first_col);
  }
  LinearWeightView v{WeightFormat::kBf16,
                     n,
                     k,
                     {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 2},
                     {},
                     {}};
  auto l = PreparedLinear::Create(v);
  EXPECT_TRUE(l.ok()) << l.status();
  return std::move(l).value();
}

// Three routed experts all chosen (top-3), ranked 2, 1, 0 by the bias, each routing weight 8
// (logit 64 -> s = 8, no normalisation). Every expert's a = bf16(8 · silu(256) · 2^-11) = 1 in
// inter column 0, so expert e's output is its w2 column 0 value v_e in every dim:
// v = (2^-24, 2^-24, 1). The shared expert adds 2^-8 (a = 0.125, w2 = 2^-5).
//   id order:   ((2^-24 + 2^-24) + 1) + 2^-8 = 1 + 2^-8 + 2^-23 -> bf16 1 + 2^-7
//   rank order: ((1 + 2^-24) + 2^-24) + 2^-8 = 1 + 2^-8 (ties to even twice) -> bf16 1
struct OrderCase {
  std::vector<PreparedLinear> linears;
  std::vector<const PreparedLinear*> w1, w2, w3;
  std::vector<float> bias = {0.f, 0.5f, 1.f};
  std::unique_ptr<PreparedLinear> gate, sw1, sw2, sw3;
  MoeWeights weights;

  OrderCase() {
    std::vector<float> gw(3 * kDim, 0.f);
    for (int e = 0; e < 3; ++e) gw[e * kDim] = 64.f;
    LinearWeightView gv{WeightFormat::kF32,
                        3,
                        kDim,
                        {reinterpret_cast<const uint8_t*>(gw.data()), gw.size() * 4},
                        {},
                        {}};
    gate = std::make_unique<PreparedLinear>(PreparedLinear::Create(gv).value());
    const float v[3] = {std::ldexp(1.f, -24), std::ldexp(1.f, -24), 1.f};
    linears.reserve(9);
    for (int e = 0; e < 3; ++e) {
      linears.push_back(Bf16Linear(kInter, kDim, 256.f, true));
      w1.push_back(&linears.back());
      linears.push_back(Bf16Linear(kInter, kDim, std::ldexp(1.f, -11), true));
      w3.push_back(&linears.back());
      linears.push_back(Bf16Linear(kDim, kInter, v[e], false));
      w2.push_back(&linears.back());
    }
    sw1 = std::make_unique<PreparedLinear>(Bf16Linear(kInter, kDim, 256.f, true));
    sw3 = std::make_unique<PreparedLinear>(Bf16Linear(kInter, kDim, std::ldexp(1.f, -11), true));
    sw2 = std::make_unique<PreparedLinear>(Bf16Linear(kDim, kInter, std::ldexp(1.f, -5), false));
    weights = MoeWeights{3,         gate.get(), bias.data(), nullptr,   w1.data(),
                         w3.data(), w2.data(),  sw1.get(),   sw3.get(), sw2.get()};
  }
};

MoeOptions OrderOptions() {
  MoeOptions o;
  o.top_k = 3;
  o.norm_topk_prob = false;
  o.route_scale = 1.f;
  o.swiglu_limit = 0.f;
  return o;
}

TEST(MoeLayerTest, AccumulatesInAscendingExpertIdNotRankOrder) {
  OrderCase c;
  const int64_t m = 5;
  std::vector<uint16_t> x(m * kDim, 0), y(m * kDim, 0xFFFF);
  for (int64_t t = 0; t < m; ++t) x[t * kDim] = FloatToBf16Bits(1.f);
  ThreadPool pool(2);
  for (LinearMode mode : {LinearMode::kExact, LinearMode::kFast}) {
    for (ThreadPool* pl : {static_cast<ThreadPool*>(nullptr), &pool}) {
      auto bytes = MoeWorkspaceBytes(c.weights, m, 3, mode, pl);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      std::vector<uint8_t> ws(*bytes);
      std::vector<int32_t> ids(m * 3);
      std::vector<float> wts(m * 3);
      MoeParams p{&c.weights, OrderOptions(), m,          x.data(), kDim,      nullptr,  y.data(),
                  kDim,       ids.data(),     wts.data(), mode,     ws.data(), ws.size()};
      ASSERT_TRUE(MoeCpu(p, pl).ok());
      for (int64_t t = 0; t < m; ++t) {
        EXPECT_EQ(ids[t * 3], 2);  // rank order differs from id order
        EXPECT_EQ(ids[t * 3 + 1], 1);
        EXPECT_EQ(ids[t * 3 + 2], 0);
        EXPECT_EQ(wts[t * 3], 8.f);
      }
      // The rank-order sum, for the record: it rounds to 1.
      float rank = 0.f;
      for (float v : {1.f, std::ldexp(1.f, -24), std::ldexp(1.f, -24)}) rank += v;
      rank += std::ldexp(1.f, -8);
      ASSERT_EQ(Bf16BitsToFloat(FloatToBf16Bits(rank)), 1.f);
      for (int64_t i = 0; i < m * kDim; ++i) {
        ASSERT_EQ(Bf16BitsToFloat(y[i]), 1.f + std::ldexp(1.f, -7)) << "i=" << i;
      }
    }
  }
}

TEST(MoeLayerTest, RejectsBadParams) {
  OrderCase c;
  std::vector<uint16_t> x(2 * kDim, 0), y(2 * kDim);
  auto bytes = MoeWorkspaceBytes(c.weights, 2, 3, LinearMode::kExact, nullptr);
  ASSERT_TRUE(bytes.ok());
  std::vector<uint8_t> ws(*bytes);
  const MoeParams good{
      &c.weights, OrderOptions(), 2,       x.data(),           kDim,      nullptr,  y.data(),
      kDim,       nullptr,        nullptr, LinearMode::kExact, ws.data(), ws.size()};
  ASSERT_TRUE(MoeCpu(good, nullptr).ok());
  auto expect_bad = [&](MoeParams p, const char* what) {
    const absl::Status s = MoeCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(std::string(s.message()).find(what), std::string::npos) << s;
  };
  MoeParams p = good;
  p.workspace_bytes -= 1;
  expect_bad(p, "workspace");
  p = good;
  p.options.top_k = 4;
  expect_bad(p, "top_k");
  p = good;
  p.x_stride = kDim - 1;
  expect_bad(p, "x_stride");
  p = good;
  const uint8_t image[2] = {0, 1};
  p.is_image = image;
  expect_bad(p, "gate_bias_vl");
  MoeWeights bad = c.weights;
  bad.shared_w2 = nullptr;
  p = good;
  p.weights = &bad;
  expect_bad(p, "shared_w1/w2/w3");
  EXPECT_FALSE(MoeWorkspaceBytes(c.weights, 2, 0, LinearMode::kExact, nullptr).ok());
}

}  // namespace
}  // namespace flashserve::kernels
