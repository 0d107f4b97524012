// The decode-size front of the MoE layer (LaunchMoeRoutePermute, cuda/moe_front.cuh): route +
// counting sort (+ the FP8 quantise) in one block must write exactly what LaunchMoeRoute followed
// by LaunchMoePermute write (each of those is checked against its host reference in
// moe_gpu_stage_test.cc); the ids are also checked against MoeRouteCpu and the slot order against
// MoeCpu's counting sort.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

using moe_test::Poisoned;

struct FrontCase {
  int64_t n_experts, top_k, m, dim;
  bool image, norm;
  // The token of the tie (the last) also gets a bias of three exact levels (e % 3 · 1/8), so its
  // biased scores tie in three large groups and only the lower-id rule picks its experts.
  bool three_level_bias = false;
};

// Every output of LaunchMoeRoutePermute byte for byte against LaunchMoeRoute + LaunchMoePermute
// on the same inputs (both start from poisoned buffers), over the four per-lane instantiations,
// 1 .. kMoeCudaFrontMaxTokens tokens (E 1024 × 8 tokens: the most shared memory), with the
// gather fused into the block and as its own grid,
// image tokens, exact ties (of the scores, and of the biased scores in three large groups), and
// the tilings / operand orders of every GEMM; the ids also against
// MoeRouteCpu and the slot order against MoeCpu's counting sort.
TEST(MoeGpuFrontTest, FusedFrontEqualsRouteThenPermute) {
  FS_SKIP_WITHOUT_GPU();
  const FrontCase cases[] = {
      {384, 6, 1, 5120, false, true},
      {384, 6, 2, 5120, true, true},
      {384, 6, 3, 5120, false, true},
      {384, 6, 4, 5120, false, true},
      {384, 6, 8, 5120, true, true},
      {8, 2, 5, 256, false, true},
      {16, 16, 8, 256, false, true},
      {1000, 3, 8, 256, true, true},
      {32, 1, 1, 256, false, true},
      {128, 4, 7, 384, true, false},
      {1024, 2, 8, 256, false, true},
      // One token with its biased scores tied in three groups (only the lower-id rule decides).
      {384, 6, 1, 5120, true, true, true},
      {512, 8, 1, 256, false, true, true},
      {64, 8, 1, 256, false, false, true},
      {96, 3, 1, 256, false, true, false},
      {1024, 6, 1, 256, false, true, true},
      {384, 9, 1, 256, false, true, true}};
  for (const FrontCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "E " << c.n_experts << " k " << c.top_k << " m " << c.m);
    MoeOptions o;
    o.top_k = c.top_k;
    o.route_scale = 2.5f;
    o.norm_topk_prob = c.norm;
    auto bias = moe_test::RandomBias(c.n_experts, 0.2f, 21);
    auto bias_vl = moe_test::RandomBias(c.n_experts, 0.2f, 22);
    if (c.three_level_bias) {
      for (int64_t e = 0; e < c.n_experts; ++e) bias[e] = bias_vl[e] = 0.125f * (e % 3);
    }
    std::vector<uint8_t> image(c.m, 0);
    for (int64_t t = 1; c.image && t < c.m; t += 2) image[t] = 1;
    std::vector<float> logits =
        moe_test::ClearRouteLogits(c.m, c.n_experts, bias.data(), bias_vl.data(), image.data(), o,
                                   static_cast<uint32_t>(c.n_experts * 7 + c.m));
    // The last token (when there are several): all logits equal, so its scores tie and the
    // bias alone ranks the experts.
    if (c.m > 1 || c.three_level_bias) {
      std::fill_n(logits.data() + (c.m - 1) * c.n_experts, c.n_experts, 0.25f);
    }
    const auto x = moe_test::RealisticActivations(c.m, c.dim, 91);
    const int64_t slots = c.m * c.top_k;
    DeviceBuffer d_logits = ToDevice(logits), d_bias = ToDevice(bias), d_vl = ToDevice(bias_vl),
                 d_image = ToDevice(image), d_x = ToDevice(x);

    struct Out {
      DeviceBuffer ids, wts, offsets, slot_token, slot_weight, token_slot, tiles, num_tiles, xg,
          codes, scales;
    };
    auto make_out = [&] {
      return Out{Poisoned<int32_t>(slots),
                 Poisoned<float>(slots),
                 Poisoned<int32_t>(c.n_experts + 1),
                 Poisoned<int32_t>(slots),
                 Poisoned<float>(slots),
                 Poisoned<int32_t>(slots),
                 Poisoned<int32_t>(2 * slots),
                 Poisoned<int32_t>(1),
                 Poisoned<uint16_t>(slots * c.dim),
                 Poisoned<uint8_t>(c.m * c.dim),
                 Poisoned<uint8_t>(c.m * c.dim / 32)};
    };
    auto params = [&](Out& b, int64_t tile_rows, bool by_token, bool rs_order) {
      MoeRouteParams rp{o,
                        c.m,
                        c.n_experts,
                        d_logits.get<float>(),
                        d_bias.get<float>(),
                        d_vl.get<float>(),
                        d_image.get<uint8_t>(),
                        b.ids.get<int32_t>(),
                        b.wts.get<float>()};
      MoePermuteParams pp;
      pp.m = c.m;
      pp.n_experts = c.n_experts;
      pp.top_k = c.top_k;
      pp.dim = c.dim;
      pp.tile_rows = tile_rows;
      pp.expert_ids = b.ids.get<int32_t>();
      pp.expert_weights = b.wts.get<float>();
      pp.x = d_x.get<uint16_t>();
      pp.x_stride = c.dim;
      pp.offsets = b.offsets.get<int32_t>();
      pp.slot_token = b.slot_token.get<int32_t>();
      pp.slot_weight = b.slot_weight.get<float>();
      pp.token_slot = b.token_slot.get<int32_t>();
      pp.tiles = b.tiles.get<int32_t>();
      pp.num_tiles = b.num_tiles.get<int32_t>();
      pp.xg = b.xg.get<uint16_t>();
      pp.xg_by_token = by_token;
      pp.wgmma_rs_order = rs_order;
      pp.x_codes = b.codes.get<uint8_t>();
      pp.x_scales = b.scales.get<uint8_t>();
      return std::make_pair(rp, pp);
    };
    const std::tuple<int64_t, bool, bool> tilings[] = {
        {8, true, false}, {8, false, false}, {16, true, false}, {128, true, true}};
    for (const auto& [tile_rows, by_token, rs_order] : tilings) {
      SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows << " by token " << by_token
                                      << " rs order " << rs_order);
      Out sep = make_out(), fused = make_out();
      const auto [rp_s, pp_s] = params(sep, tile_rows, by_token, rs_order);
      ASSERT_TRUE(LaunchMoeRoute(rp_s, nullptr, nullptr).ok());
      ASSERT_TRUE(LaunchMoePermute(pp_s, nullptr).ok());
      // The selection by warp reductions (the default) and by the shuffle merge (A/B): the same
      // bytes as the separate kernels, so as each other.
      for (const bool redux : {true, false}) {
        SCOPED_TRACE(testing::Message() << "route redux " << redux);
        fused = make_out();
        auto [rp_f, pp_f] = params(fused, tile_rows, by_token, rs_order);
        pp_f.route_redux = redux;
        const absl::Status st = LaunchMoeRoutePermute(rp_f, pp_f, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        const auto ids = ToHost<int32_t>(fused.ids, slots);
        EXPECT_EQ(ids, ToHost<int32_t>(sep.ids, slots));
        EXPECT_EQ(ToHost<uint32_t>(fused.wts, slots), ToHost<uint32_t>(sep.wts, slots));
        EXPECT_EQ(ToHost<int32_t>(fused.offsets, c.n_experts + 1),
                  ToHost<int32_t>(sep.offsets, c.n_experts + 1));
        EXPECT_EQ(ToHost<int32_t>(fused.slot_token, slots), ToHost<int32_t>(sep.slot_token, slots));
        EXPECT_EQ(ToHost<uint32_t>(fused.slot_weight, slots),
                  ToHost<uint32_t>(sep.slot_weight, slots));
        EXPECT_EQ(ToHost<int32_t>(fused.token_slot, slots), ToHost<int32_t>(sep.token_slot, slots));
        EXPECT_EQ(ToHost<int32_t>(fused.num_tiles, 1), ToHost<int32_t>(sep.num_tiles, 1));
        EXPECT_EQ(ToHost<int32_t>(fused.tiles, 2 * slots), ToHost<int32_t>(sep.tiles, 2 * slots));
        EXPECT_EQ(ToHost<uint16_t>(fused.xg, slots * c.dim),
                  ToHost<uint16_t>(sep.xg, slots * c.dim));
        EXPECT_EQ(ToHost<uint8_t>(fused.codes, c.m * c.dim),
                  ToHost<uint8_t>(sep.codes, c.m * c.dim));
        EXPECT_EQ(ToHost<uint8_t>(fused.scales, c.m * c.dim / 32),
                  ToHost<uint8_t>(sep.scales, c.m * c.dim / 32));
        // Against the host references too (not only the other kernels).
        std::vector<int32_t> cpu_ids(slots);
        std::vector<float> cpu_wts(slots);
        MoeRouteParams cpu{o,
                           c.m,
                           c.n_experts,
                           logits.data(),
                           bias.data(),
                           bias_vl.data(),
                           image.data(),
                           cpu_ids.data(),
                           cpu_wts.data()};
        ASSERT_TRUE(MoeRouteCpu(cpu, nullptr).ok());
        EXPECT_EQ(ids, cpu_ids);
        const auto h =
            moe_test::CountingSort(ids, ToHost<float>(fused.wts, slots), c.m, c.top_k, c.n_experts);
        EXPECT_EQ(ToHost<int32_t>(fused.offsets, c.n_experts + 1), h.offsets);
        EXPECT_EQ(ToHost<int32_t>(fused.token_slot, slots), h.token_slot);
      }
    }
  }
}

// A token whose logits hold NaNs takes the shuffle merge even with the warp reductions on (its
// order is not defined by the scores): both selections write the same bytes, its experts are
// top_k distinct ids in range, and the other tokens' ids are MoeRouteCpu's.
TEST(MoeGpuFrontTest, NanScoreTokenFallsBackToTheShuffleMerge) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kE = 384, kK = 6, kM = 3, kD = 256;
  MoeOptions o;
  o.top_k = kK;
  o.route_scale = 2.5f;
  const auto bias = moe_test::RandomBias(kE, 0.2f, 31);
  const std::vector<uint8_t> text(kM, 0);
  std::vector<float> logits =
      moe_test::ClearRouteLogits(kM, kE, bias.data(), bias.data(), text.data(), o, 77);
  for (int64_t e = 5; e < kE; e += 37) logits[kE + e] = std::nanf("");  // token 1
  const auto x = moe_test::RealisticActivations(kM, kD, 92);
  DeviceBuffer d_logits = ToDevice(logits), d_bias = ToDevice(bias), d_x = ToDevice(x);
  std::vector<std::vector<int32_t>> ids_of;
  std::vector<std::vector<uint32_t>> wts_of, tok_of;
  for (const bool redux : {true, false}) {
    DeviceBuffer ids = Poisoned<int32_t>(kM * kK), wts = Poisoned<float>(kM * kK),
                 offsets = Poisoned<int32_t>(kE + 1), slot_token = Poisoned<int32_t>(kM * kK),
                 slot_weight = Poisoned<float>(kM * kK), token_slot = Poisoned<int32_t>(kM * kK),
                 tiles = Poisoned<int32_t>(2 * kM * kK), num_tiles = Poisoned<int32_t>(1),
                 xg = Poisoned<uint16_t>(kM * kD);
    MoeRouteParams rp{o,
                      kM,
                      kE,
                      d_logits.get<float>(),
                      d_bias.get<float>(),
                      d_bias.get<float>(),
                      nullptr,
                      ids.get<int32_t>(),
                      wts.get<float>()};
    MoePermuteParams pp;
    pp.m = kM;
    pp.n_experts = kE;
    pp.top_k = kK;
    pp.dim = kD;
    pp.tile_rows = 8;
    pp.expert_ids = ids.get<int32_t>();
    pp.expert_weights = wts.get<float>();
    pp.x = d_x.get<uint16_t>();
    pp.x_stride = kD;
    pp.offsets = offsets.get<int32_t>();
    pp.slot_token = slot_token.get<int32_t>();
    pp.slot_weight = slot_weight.get<float>();
    pp.token_slot = token_slot.get<int32_t>();
    pp.tiles = tiles.get<int32_t>();
    pp.num_tiles = num_tiles.get<int32_t>();
    pp.xg = xg.get<uint16_t>();
    pp.xg_by_token = true;
    pp.route_redux = redux;
    const absl::Status st = LaunchMoeRoutePermute(rp, pp, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ids_of.push_back(ToHost<int32_t>(ids, kM * kK));
    wts_of.push_back(ToHost<uint32_t>(wts, kM * kK));
    tok_of.push_back(ToHost<uint32_t>(token_slot, kM * kK));
  }
  EXPECT_EQ(ids_of[0], ids_of[1]);
  EXPECT_EQ(wts_of[0], wts_of[1]);
  EXPECT_EQ(tok_of[0], tok_of[1]);
  std::vector<int32_t> nan_ids(ids_of[0].begin() + kK, ids_of[0].begin() + 2 * kK);
  for (const int32_t id : nan_ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, kE);
  }
  std::sort(nan_ids.begin(), nan_ids.end());
  EXPECT_EQ(std::unique(nan_ids.begin(), nan_ids.end()), nan_ids.end()) << "repeated expert";
  std::vector<int32_t> cpu_ids(kM * kK);
  std::vector<float> cpu_wts(kM * kK);
  MoeRouteParams cpu{
      o, kM, kE, logits.data(), bias.data(), bias.data(), nullptr, cpu_ids.data(), cpu_wts.data()};
  ASSERT_TRUE(MoeRouteCpu(cpu, nullptr).ok());
  for (const int64_t t : {int64_t{0}, int64_t{2}}) {
    EXPECT_TRUE(std::equal(cpu_ids.begin() + t * kK, cpu_ids.begin() + (t + 1) * kK,
                           ids_of[0].begin() + t * kK))
        << "token " << t;
  }
}

}  // namespace
}  // namespace flashserve::kernels
