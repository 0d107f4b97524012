// Each CUDA stage against its host reference, with inputs built on the host so that a failure
// points at one kernel:
// - route: MoeRouteCpu on the same logits; ids identical (inputs redrawn until no two of the
//   top_k + 1 biased scores are within 1e-5 relative), weights within 4 fp32 ulp (exp/log1p are
//   correctly rounded on the GPU, glibc's log1pf is not always: an ulp per score, a few after the
//   normalisation), per-expert counts identical; exact ties and the softplus threshold by hand.
// - permute: offsets, slot order (tokens ascending inside an expert), slot weights, token slots
//   and the tile list identical to MoeCpu's counting sort; FP8 codes and scales byte-identical to
//   formats::QuantizeFp8Ue8m0B32 (LinearCpu's rule), gathered rows bit-identical to its QDQ in
//   operand order; special values (subnormals, max bf16, zero blocks, Inf / NaN) included.
// - up (w1/w3 + SwiGLU + quantiser) and down (w2): exact-arithmetic inputs (moe_test_util.h), so
//   the GPU's sums equal LinearCpu's in any order: a, QDQ(a) and the expert outputs bit for bit,
//   for every tile configuration of the tiled GEMM (16, 32, 64 rows), each with the default and
//   the hoisted-address main loop, the weight-streaming GEMM (8 rows, and 16 / 32 rows as two /
//   four n8 tiles; one and two row tiles per warp, 128- and 256-wide units, experts spanning
//   several tiles; the 32-row kernel's K chunks only at the released dims of the layer tests)
//   and the wgmma GEMM (128
//   rows; hand-built tilings in moe_gpu_wgmma_test.cc), E2M1 scale bytes 123..129.
// - FP4 decoder: one-hot activations turn a w2 GEMM into a readout of every weight; all 16 codes
//   against every scale byte 2..252 and the NaN byte, exactly.
// - FP4 code order: LaunchMoeFp4ToDeviceOrder byte-identical to the host conversion; weights
//   in checkpoint order refused.
// - combine: bit for bit (the CPU's operations in its order), shared output or none.
// - the TMA-ring GEMM's persistent grid: one even wave (grid = resident CTAs per SM x SMs) for
//   both cuts; the ring stages at the static and the dynamic cut, the latter's work counters left
//   zero and a second call on them the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "common/formats/bf16.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/ue8m0.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using moe_test::DeviceExperts;
using moe_test::LayerSpec;
using moe_test::Poisoned;

// top_k distinct experts per token (uniform), weights in (0, 2).
void RandomRouting(int64_t m, int64_t k, int64_t n_experts, uint32_t seed,
                   std::vector<int32_t>* ids, std::vector<float>* weights) {
  std::mt19937 rng(seed);
  ids->resize(m * k);
  weights->resize(m * k);
  std::vector<int32_t> perm(n_experts);
  for (int64_t t = 0; t < m; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t j = 0; j < k; ++j) {
      std::swap(perm[j], perm[j + rng() % (n_experts - j)]);
      (*ids)[t * k + j] = perm[j];
      (*weights)[t * k + j] = std::ldexp(static_cast<float>(rng() % 4096 + 1), -11);
    }
  }
}

// ---- route -----------------------------------------------------------------------------------

struct RouteCase {
  int64_t n_experts, top_k, m;
  float gate_temp, route_scale;
  bool norm, image;
};

TEST(MoeGpuStageTest, RouteMatchesCpu) {
  FS_SKIP_WITHOUT_GPU();
  const RouteCase cases[] = {
      {8, 2, 64, 1.f, 1.5f, true, false},   {384, 6, 200, 1.f, 2.5f, true, true},
      {128, 3, 50, 2.f, 1.f, false, false}, {8, 1, 33, 1.f, 1.5f, true, false},
      {16, 4, 40, 1.f, 1.f, true, true},    {384, 6, 1, 1.f, 1.5f, true, false}};
  for (const RouteCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "E " << c.n_experts << " k " << c.top_k << " m " << c.m);
    MoeOptions o;
    o.top_k = c.top_k;
    o.gate_temp = c.gate_temp;
    o.route_scale = c.route_scale;
    o.norm_topk_prob = c.norm;
    const auto bias = moe_test::RandomBias(c.n_experts, 0.2f, 11);
    const auto bias_vl = moe_test::RandomBias(c.n_experts, 0.2f, 12);
    std::vector<uint8_t> image(c.m, 0);
    for (int64_t t = 0; t < c.m; t += 3) image[t] = c.image ? 1 : 0;
    const std::vector<float> logits =
        moe_test::ClearRouteLogits(c.m, c.n_experts, bias.data(), bias_vl.data(), image.data(), o,
                                   static_cast<uint32_t>(c.n_experts * 131 + c.m));
    std::vector<int32_t> ids(c.m * c.top_k);
    std::vector<float> wts(c.m * c.top_k);
    MoeRouteParams cpu{o,
                       c.m,
                       c.n_experts,
                       logits.data(),
                       bias.data(),
                       bias_vl.data(),
                       image.data(),
                       ids.data(),
                       wts.data()};
    ASSERT_TRUE(MoeRouteCpu(cpu, nullptr).ok());

    DeviceBuffer d_logits = ToDevice(logits), d_bias = ToDevice(bias), d_vl = ToDevice(bias_vl),
                 d_image = ToDevice(image);
    DeviceBuffer d_ids = Poisoned<int32_t>(ids.size()), d_wts = Poisoned<float>(wts.size());
    DeviceBuffer d_counts = Poisoned<int32_t>(c.n_experts, 0);
    MoeRouteParams gpu{o,
                       c.m,
                       c.n_experts,
                       d_logits.get<float>(),
                       d_bias.get<float>(),
                       d_vl.get<float>(),
                       d_image.get<uint8_t>(),
                       d_ids.get<int32_t>(),
                       d_wts.get<float>()};
    ASSERT_TRUE(LaunchMoeRoute(gpu, d_counts.get<int32_t>(), nullptr).ok());
    const auto g_ids = ToHost<int32_t>(d_ids, ids.size());
    const auto g_wts = ToHost<float>(d_wts, wts.size());
    const auto g_counts = ToHost<int32_t>(d_counts, c.n_experts);
    EXPECT_EQ(g_ids, ids);
    double worst = 0;
    for (size_t i = 0; i < wts.size(); ++i)
      worst = std::max(worst, moe_test::F32Ulps(g_wts[i], wts[i]));
    EXPECT_LE(worst, 4.0);
    std::printf("route E %ld k %ld m %ld: ids identical, weights within %.0f ulp\n",
                static_cast<long>(c.n_experts), static_cast<long>(c.top_k), static_cast<long>(c.m),
                worst);
    std::vector<int32_t> hist(c.n_experts, 0);
    for (int32_t id : ids) ++hist[id];
    EXPECT_EQ(g_counts, hist);
  }
}

TEST(MoeGpuStageTest, RouteTiesAndSoftplusThreshold) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kE = 40, kK = 4;
  // Row 0: all logits equal (ids 0..3 by the lower-id rule). Row 1: logits past the softplus
  // threshold (s = sqrt(v) exactly) with a tie between experts 7 and 3 at 1000.
  std::vector<float> logits(2 * kE, 0.5f);
  for (int64_t e = 0; e < kE; ++e) logits[kE + e] = 21.f + static_cast<float>(e % 5);
  logits[kE + 7] = 1000.f;
  logits[kE + 3] = 1000.f;
  logits[kE + 20] = 88.f;
  MoeOptions o;
  o.top_k = kK;
  std::vector<int32_t> ids(2 * kK);
  std::vector<float> wts(2 * kK);
  MoeRouteParams cpu{o, 2, kE, logits.data(), nullptr, nullptr, nullptr, ids.data(), wts.data()};
  ASSERT_TRUE(MoeRouteCpu(cpu, nullptr).ok());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(ids[4], 3);
  EXPECT_EQ(ids[5], 7);
  EXPECT_EQ(ids[6], 20);
  DeviceBuffer d_logits = ToDevice(logits);
  DeviceBuffer d_ids = Poisoned<int32_t>(ids.size()), d_wts = Poisoned<float>(wts.size());
  MoeRouteParams gpu{o,
                     2,
                     kE,
                     d_logits.get<float>(),
                     nullptr,
                     nullptr,
                     nullptr,
                     d_ids.get<int32_t>(),
                     d_wts.get<float>()};
  ASSERT_TRUE(LaunchMoeRoute(gpu, nullptr, nullptr).ok());
  EXPECT_EQ(ToHost<int32_t>(d_ids, ids.size()), ids);
  const auto g_wts = ToHost<float>(d_wts, wts.size());
  // Row 1's scores are sqrt of the logits (no exp / log1p): bit-identical weights.
  for (int j = 4; j < 8; ++j) EXPECT_EQ(g_wts[j], wts[j]) << j;
  for (int j = 0; j < 4; ++j) EXPECT_LE(moe_test::F32Ulps(g_wts[j], wts[j]), 4.0) << j;
}

// ---- permute ---------------------------------------------------------------------------------

struct PermuteCase {
  int64_t n_experts, top_k, m, dim;
  int mode;  // 0 random, 1 every token's first choice is expert 3, 2 all tokens to expert 3 (k 1)
};

bool SameBf16(uint16_t a, uint16_t b) {
  return a == b || (std::isnan(Bf16BitsToFloat(a)) && std::isnan(Bf16BitsToFloat(b)));
}

TEST(MoeGpuStageTest, PermuteIsAStableCountingSortWithTheLinearQuantiser) {
  FS_SKIP_WITHOUT_GPU();
  const PermuteCase cases[] = {{8, 2, 1, 256, 0},  {8, 2, 100, 256, 0}, {384, 6, 64, 5120, 0},
                               {8, 2, 70, 384, 1}, {8, 1, 50, 256, 2},  {16, 16, 20, 256, 0}};
  for (const PermuteCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "E " << c.n_experts << " k " << c.top_k << " m " << c.m << " mode " << c.mode);
    std::vector<int32_t> ids;
    std::vector<float> wts;
    RandomRouting(c.m, c.top_k, c.n_experts, static_cast<uint32_t>(c.m + c.dim), &ids, &wts);
    for (int64_t t = 0; c.mode != 0 && t < c.m; ++t) {
      int32_t* row = ids.data() + t * c.top_k;
      if (std::find(row, row + c.top_k, 3) != row + c.top_k) {
        std::swap(*std::find(row, row + c.top_k, 3), row[0]);
      } else {
        row[0] = 3;
      }
    }
    auto x = moe_test::RealisticActivations(c.m, c.dim, 77);
    // Token 0: a subnormal, the largest finite bf16, -0, a block of tiny values; the last token
    // (when m > 2): an Inf and a NaN in its second block.
    x[1] = 0x0001;
    x[2] = 0x7F7F;
    x[3] = 0x8000;
    for (int i = 32; i < 64; ++i) x[i] = static_cast<uint16_t>(0x3000 + i);  // ~1e-9
    if (c.m > 2) {
      x[(c.m - 1) * c.dim + 40] = 0x7F80;
      x[(c.m - 1) * c.dim + 41] = 0x7FC0;
    }
    const auto h = moe_test::CountingSort(ids, wts, c.m, c.top_k, c.n_experts);
    const int64_t slots = c.m * c.top_k;
    DeviceBuffer d_ids = ToDevice(ids), d_wts = ToDevice(wts), d_counts = ToDevice(h.counts),
                 d_x = ToDevice(x);
    // (tile rows, xg by token, the register-sourced GEMM's operand order)
    const std::tuple<int64_t, bool, bool> tilings[] = {
        {8, false, false},   {16, false, false}, {32, false, false}, {64, false, false},
        {128, false, false}, {8, true, false},   {128, true, false}, {128, true, true}};
    for (const auto& [tile_rows, by_token, rs_order] : tilings) {
      SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows << " by token " << by_token
                                      << " rs order " << rs_order);
      DeviceBuffer offsets = Poisoned<int32_t>(c.n_experts + 1),
                   slot_token = Poisoned<int32_t>(slots), slot_weight = Poisoned<float>(slots),
                   token_slot = Poisoned<int32_t>(slots), tiles = Poisoned<int32_t>(2 * slots),
                   num_tiles = Poisoned<int32_t>(1), xg = Poisoned<uint16_t>(slots * c.dim),
                   codes = Poisoned<uint8_t>(c.m * c.dim),
                   scales = Poisoned<uint8_t>(c.m * c.dim / 32);
      MoePermuteParams p;
      p.m = c.m;
      p.n_experts = c.n_experts;
      p.top_k = c.top_k;
      p.dim = c.dim;
      p.tile_rows = tile_rows;
      p.expert_ids = d_ids.get<int32_t>();
      p.expert_weights = d_wts.get<float>();
      p.expert_counts = d_counts.get<int32_t>();
      p.x = d_x.get<uint16_t>();
      p.x_stride = c.dim;
      p.offsets = offsets.get<int32_t>();
      p.slot_token = slot_token.get<int32_t>();
      p.slot_weight = slot_weight.get<float>();
      p.token_slot = token_slot.get<int32_t>();
      p.tiles = tiles.get<int32_t>();
      p.num_tiles = num_tiles.get<int32_t>();
      p.xg = xg.get<uint16_t>();
      p.xg_by_token = by_token;
      p.wgmma_rs_order = rs_order;
      p.x_codes = codes.get<uint8_t>();
      p.x_scales = scales.get<uint8_t>();
      ASSERT_TRUE(LaunchMoePermute(p, nullptr).ok());
      EXPECT_EQ(ToHost<int32_t>(offsets, c.n_experts + 1), h.offsets);
      EXPECT_EQ(ToHost<int32_t>(slot_token, slots), h.slot_token);
      EXPECT_EQ(ToHost<float>(slot_weight, slots), h.slot_weight);
      EXPECT_EQ(ToHost<int32_t>(token_slot, slots), h.token_slot);
      const auto want_tiles = moe_test::TileList(h.offsets, tile_rows);
      const int32_t n_tiles = ToHost<int32_t>(num_tiles, 1)[0];
      ASSERT_EQ(n_tiles * 2, static_cast<int64_t>(want_tiles.size()));
      EXPECT_EQ(ToHost<int32_t>(tiles, want_tiles.size()), want_tiles);
      const auto g_codes = ToHost<uint8_t>(codes, c.m * c.dim);
      const auto g_scales = ToHost<uint8_t>(scales, c.m * c.dim / 32);
      const auto g_xg = ToHost<uint16_t>(xg, slots * c.dim);
      int64_t bad_codes = 0, bad_rows = 0;
      for (int64_t t = 0; t < c.m; ++t) {
        std::vector<uint8_t> want_codes, want_scales;
        const auto qdq = moe_test::QdqRow(x.data() + t * c.dim, c.dim, &want_codes, &want_scales);
        bad_codes += !std::equal(want_codes.begin(), want_codes.end(), g_codes.begin() + t * c.dim);
        bad_codes +=
            !std::equal(want_scales.begin(), want_scales.end(), g_scales.begin() + t * c.dim / 32);
        const auto want_row = moe_test::ToOperandOrder(qdq.data(), c.dim, rs_order);
        for (int64_t j = 0; j < (by_token ? 1 : c.top_k); ++j) {
          const int64_t r = by_token ? t : h.token_slot[t * c.top_k + j];
          bad_rows +=
              !std::equal(want_row.begin(), want_row.end(), g_xg.begin() + r * c.dim, SameBf16);
        }
      }
      // By token: rows m .. slots - 1 are not written.
      const int64_t untouched = by_token ? (slots - c.m) * c.dim : 0;
      const int64_t poisoned = std::count(g_xg.end() - untouched, g_xg.end(), uint16_t{0xA5A5});
      EXPECT_EQ(bad_codes, 0);
      EXPECT_EQ(bad_rows, 0);
      EXPECT_EQ(poisoned, untouched);
    }
  }
}

// ---- up / down GEMMs on exact-arithmetic inputs ----------------------------------------------

struct GemmCase {
  int64_t n_experts, dim, inter, top_k, m;
  float swiglu_limit;
};

// Host-built permutation of a random routing, uploaded: the GEMM stages' inputs.
struct Slots {
  moe_test::HostPermutation h;
  std::vector<int32_t> tiles;
  DeviceBuffer offsets, d_tiles, num_tiles, slot_weight;
};

Slots MakeSlots(const GemmCase& c, int64_t tile_rows, uint32_t seed) {
  std::vector<int32_t> ids;
  std::vector<float> wts;
  RandomRouting(c.m, c.top_k, c.n_experts, seed, &ids, &wts);
  Slots s;
  s.h = moe_test::CountingSort(ids, wts, c.m, c.top_k, c.n_experts);
  s.tiles = moe_test::TileList(s.h.offsets, tile_rows);
  s.offsets = ToDevice(s.h.offsets);
  s.d_tiles = ToDevice(s.tiles);
  s.num_tiles = ToDevice(std::vector<int32_t>{static_cast<int32_t>(s.tiles.size() / 2)});
  s.slot_weight = ToDevice(s.h.slot_weight);
  return s;
}

int64_t ExpertOfRow(const std::vector<int32_t>& offsets, int64_t r) {
  return std::upper_bound(offsets.begin(), offsets.end(), static_cast<int32_t>(r)) -
         offsets.begin() - 1;
}

// K = 256 and 640 / 128 and 384 take 128-wide K steps where K is not a multiple of 256; D 1024 /
// I 1280 take 256-wide steps over 4 and 5 stages, so every ring (2, 3 and 4 stages) wraps.
// Streaming GEMM (tile_rows 8): m 1 and 3 (<= 16 slots) take one row tile per warp (ring of 4
// units; D 1024 / I 1280: 4 and 5 units of 256, the ring wraps), the others two (ring of 2) except
// the down projection at D 640 (not a multiple of the 256-column CTA); K 640 / 384 / 128 take
// 128-wide units; m 37, 90 and 40 put more than 8 rows on most experts (several tiles each).
// TMA-ring GEMM (ring variants): K a multiple of 256 only (up at D 256 / 1024, down at I 1280;
// the others stream), at every slot count (m 37, 90, 40: several tiles per expert); m 3 and 40
// cut pairs over 2-3 CTAs (ordinals >= 1 in the per-CTA partial blocks).
const GemmCase kGemmCases[] = {{8, 256, 128, 2, 1, 10.f},    {8, 256, 128, 2, 37, 10.f},
                               {6, 640, 384, 3, 50, 0.f},    {8, 256, 128, 1, 90, 10.f},
                               {4, 1024, 1280, 2, 40, 10.f}, {4, 1024, 1280, 2, 3, 10.f}};

// The GEMM variants each stage test runs: tile rows (8 = the streaming GEMM, 16 with stream its
// two-n8 form, 128 = the wgmma GEMM, or with rs the register-sourced wgmma GEMM), for the tiled
// GEMM the hoisted-address main
// loop (the same bits), and for the up stage the operand read by token (xg [m, D] once per token +
// slot_token, as MoeCuda runs it by default) instead of one gathered row per slot (the down stage
// skips those).
struct GemmVariant {
  int64_t tile_rows;
  bool hoist;
  bool by_token = false;
  bool rs = false;      // tile_rows 128: the register-sourced wgmma GEMM
  bool stream = false;  // tile_rows 16 / 32: the streaming GEMM (kStream16 / kStream32)
  bool ring = false;    // tile_rows 8: the TMA-ring GEMM (kStreamRing) where the call fits it
  MoeCudaRingCut cut = MoeCudaRingCut::kAuto;  // the ring's, each forced
};
const GemmVariant kGemmVariants[] = {
    {16, false},
    {32, false},
    {64, false},
    {16, true},
    {32, true},
    {64, true},
    {8, false},
    {128, false},
    {16, false, true},
    {64, true, true},
    {8, false, true},
    {128, false, true},
    {128, false, false, true},
    {128, false, true, true},
    {16, false, false, false, true},
    {16, false, true, false, true},
    {32, false, false, false, true},
    {32, false, true, false, true},
    {8, false, false, false, false, true, MoeCudaRingCut::kStatic},
    {8, false, true, false, false, true, MoeCudaRingCut::kStatic},
    {8, false, false, false, false, true, MoeCudaRingCut::kDynamic},
    {8, false, true, false, false, true, MoeCudaRingCut::kDynamic}};

// The TMA-ring GEMM's partials (any contents: poisoned) for a call of `slots` rows of `cols`
// (the stage launchers take any slot count).
DeviceBuffer RingPartials(int64_t slots, int64_t cols) {
  return Poisoned<float>(MoeCudaRingPartialBytes(slots, cols) / sizeof(float));
}

// The ring kernel is persistent: its grid must be one wave of exactly kRingCtasPerSm CTAs on
// every SM, for each cut's instantiation. When the dynamic cut's registers dropped to 71 the
// occupancy became 3 per SM and the 2-per-SM grid piled onto two thirds of the SMs (10 % slower at
// 256 tokens). The launcher's shared-memory request (RingSmemBytes) now keeps any build at
// kRingCtasPerSm: what the kernel uses where its registers already hold it there, more where not.
TEST(MoeGpuStageTest, RingGridIsOneEvenWave) {
  FS_SKIP_WITHOUT_GPU();
  LayerSpec spec{8, 1024, 1280, 5, moe_test::WeightKind::kExactArith};
  auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (const MoeCudaRingCut cut : {MoeCudaRingCut::kStatic, MoeCudaRingCut::kDynamic}) {
    for (const bool up : {true, false}) {
      const auto plan = MoeCudaDescribeGemm(dev->view, 4, 2, 0, up, MoeCudaGemm::kStreamRing, cut);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_TRUE(plan->ring);
      EXPECT_GT(plan->ctas_per_sm, 0);
      EXPECT_EQ(plan->grid_x, plan->ctas_per_sm * sms)
          << "up " << up << " cut " << static_cast<int>(cut);
    }
  }
}

TEST(MoeGpuStageTest, UpStageIsBitExactOnExactArithmetic) {
  FS_SKIP_WITHOUT_GPU();
  for (const GemmCase& c : kGemmCases) {
    LayerSpec spec{c.n_experts, c.dim, c.inter, 5, moe_test::WeightKind::kExactArith};
    auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
    auto cpu = moe_test::BuildCpuExperts(spec, {});
    const auto x = moe_test::SmallIntActivations(c.m, c.dim, 16, 9);
    const int64_t slots = c.m * c.top_k;
    for (const GemmVariant& v : kGemmVariants) {
      const int64_t tile_rows = v.tile_rows;
      const bool hoist = v.hoist;  // the hoisted-address main loop: the same bits
      SCOPED_TRACE(testing::Message()
                   << "D " << c.dim << " I " << c.inter << " m " << c.m << " tile_rows "
                   << tile_rows << " hoist " << hoist << " by token " << v.by_token << " rs "
                   << v.rs << " stream " << v.stream << " ring " << v.ring << " cut "
                   << static_cast<int>(v.cut));
      Slots s = MakeSlots(c, tile_rows, static_cast<uint32_t>(c.m));
      // By slot: row r = token slot_token[r]'s row; by token: row t = token t's row.
      const int64_t xg_rows = v.by_token ? c.m : slots;
      std::vector<uint16_t> xg(xg_rows * c.dim);
      for (int64_t r = 0; r < xg_rows; ++r) {
        const int64_t t = v.by_token ? r : s.h.slot_token[r];
        const auto row = moe_test::ToOperandOrder(x.data() + t * c.dim, c.dim, v.rs);
        std::copy(row.begin(), row.end(), xg.begin() + r * c.dim);
      }
      DeviceBuffer d_xg = ToDevice(xg), d_slot_token = ToDevice(s.h.slot_token),
                   ag = Poisoned<uint16_t>(slots * c.inter),
                   act = Poisoned<uint16_t>(slots * c.inter);
      MoeExpertUpParams p;
      p.weights = &dev->view;
      p.swiglu_limit = c.swiglu_limit;
      p.slots = slots;
      p.tile_rows = tile_rows;
      p.offsets = s.offsets.get<int32_t>();
      p.tiles = s.d_tiles.get<int32_t>();
      p.num_tiles = s.num_tiles.get<int32_t>();
      p.xg = d_xg.get<uint16_t>();
      p.slot_token = v.by_token ? d_slot_token.get<int32_t>() : nullptr;
      p.slot_weight = s.slot_weight.get<float>();
      p.ag = ag.get<uint16_t>();
      p.act = act.get<uint16_t>();
      p.hoisted_addresses = hoist;
      p.wgmma_rs = v.rs;
      p.stream = v.stream;
      DeviceBuffer partials = RingPartials(slots, 2 * c.inter);
      p.ring = v.ring;
      p.ring_cut = v.cut;
      p.ring_partials = partials.get<float>();
      p.ring_partials_bytes = static_cast<int64_t>(partials.bytes());
      ASSERT_TRUE(LaunchMoeExpertUp(p, nullptr).ok());
      const auto g_ag = ToHost<uint16_t>(ag, slots * c.inter);
      const auto g_act = ToHost<uint16_t>(act, slots * c.inter);
      int64_t bad_act = 0, bad_ag = 0, clamped = 0;
      for (int64_t r = 0; r < slots; ++r) {
        const int64_t e = ExpertOfRow(s.h.offsets, r);
        const uint16_t* xt = x.data() + s.h.slot_token[r] * c.dim;
        ASSERT_LT(moe_test::ExactSumBound(spec, moe_test::kW1, e, xt), 1 << 20) << "premise";
        ASSERT_LT(moe_test::ExactSumBound(spec, moe_test::kW3, e, xt), 1 << 20) << "premise";
        const auto g = moe_test::LinearRow(cpu->Get(moe_test::kW1, e), xt);
        const auto u = moe_test::LinearRow(cpu->Get(moe_test::kW3, e), xt);
        std::vector<uint16_t> a(c.inter);
        for (int64_t i = 0; i < c.inter; ++i) {
          a[i] = moe_test::SwiGluCr(g[i], u[i], c.swiglu_limit, &s.h.slot_weight[r]);
          clamped += c.swiglu_limit > 0 && Bf16BitsToFloat(g[i]) > c.swiglu_limit;
          bad_act += a[i] != g_act[r * c.inter + i];
        }
        const auto want =
            moe_test::ToOperandOrder(moe_test::QdqRow(a.data(), c.inter).data(), c.inter, v.rs);
        bad_ag += !std::equal(want.begin(), want.end(), g_ag.begin() + r * c.inter);
      }
      EXPECT_EQ(bad_act, 0) << "of " << slots * c.inter << " SwiGLU outputs";
      EXPECT_EQ(bad_ag, 0) << "of " << slots << " quantised rows";
      // Where the dynamic-cut ring ran (else the static cut, reading no counters, or the streaming
      // GEMM).
      if (v.ring && v.cut == MoeCudaRingCut::kDynamic && c.dim % 256 == 0) {
        // The launcher zeroed the poisoned work counters; the call leaves them zero, so a second
        // call told they are zero grabs every chunk again: the same bits.
        const auto counters = ToHost<int32_t>(partials, 4);
        EXPECT_EQ(counters, std::vector<int32_t>(4, 0));
        DeviceBuffer ag2 = Poisoned<uint16_t>(slots * c.inter),
                     act2 = Poisoned<uint16_t>(slots * c.inter);
        p.ag = ag2.get<uint16_t>();
        p.act = act2.get<uint16_t>();
        p.ring_counters_zeroed = true;
        ASSERT_TRUE(LaunchMoeExpertUp(p, nullptr).ok());
        EXPECT_EQ(ToHost<uint16_t>(ag2, slots * c.inter), g_ag);
        EXPECT_EQ(ToHost<uint16_t>(act2, slots * c.inter), g_act);
      }
      if (&v == &kGemmVariants[0]) {
        std::printf("up D %ld I %ld m %ld: %ld SwiGLU outputs bit-exact (%ld with g clamped)\n",
                    static_cast<long>(c.dim), static_cast<long>(c.inter), static_cast<long>(c.m),
                    static_cast<long>(slots * c.inter), static_cast<long>(clamped));
      }
    }
  }
}

TEST(MoeGpuStageTest, DownStageIsBitExactOnExactArithmetic) {
  FS_SKIP_WITHOUT_GPU();
  for (const GemmCase& c : kGemmCases) {
    LayerSpec spec{c.n_experts, c.dim, c.inter, 6, moe_test::WeightKind::kExactArith};
    auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
    auto cpu = moe_test::BuildCpuExperts(spec, {});
    const int64_t slots = c.m * c.top_k;
    const auto a = moe_test::SmallIntActivations(slots, c.inter, 8, 10);
    std::vector<uint16_t> ag(slots * c.inter), ag_rs(slots * c.inter);
    for (int64_t r = 0; r < slots; ++r) {
      const auto row = moe_test::ToOperandOrder(a.data() + r * c.inter, c.inter);
      std::copy(row.begin(), row.end(), ag.begin() + r * c.inter);
      const auto row_rs = moe_test::ToOperandOrder(a.data() + r * c.inter, c.inter, true);
      std::copy(row_rs.begin(), row_rs.end(), ag_rs.begin() + r * c.inter);
    }
    DeviceBuffer d_ag = ToDevice(ag), d_ag_rs = ToDevice(ag_rs);
    for (const GemmVariant& v : kGemmVariants) {
      if (v.by_token) continue;  // the down stage reads ag by slot
      const int64_t tile_rows = v.tile_rows;
      const bool hoist = v.hoist;  // the hoisted-address main loop: the same bits
      SCOPED_TRACE(testing::Message()
                   << "D " << c.dim << " I " << c.inter << " m " << c.m << " tile_rows "
                   << tile_rows << " hoist " << hoist << " rs " << v.rs << " stream " << v.stream
                   << " ring " << v.ring << " cut " << static_cast<int>(v.cut));
      Slots s = MakeSlots(c, tile_rows, static_cast<uint32_t>(c.m + 1));
      DeviceBuffer ye = Poisoned<uint16_t>(slots * c.dim);
      MoeExpertDownParams p;
      p.weights = &dev->view;
      p.slots = slots;
      p.tile_rows = tile_rows;
      p.offsets = s.offsets.get<int32_t>();
      p.tiles = s.d_tiles.get<int32_t>();
      p.num_tiles = s.num_tiles.get<int32_t>();
      p.ag = (v.rs ? d_ag_rs : d_ag).get<uint16_t>();
      p.ye = ye.get<uint16_t>();
      p.hoisted_addresses = hoist;
      p.wgmma_rs = v.rs;
      p.stream = v.stream;
      DeviceBuffer partials = RingPartials(slots, c.dim);
      p.ring = v.ring;
      p.ring_cut = v.cut;
      p.ring_partials = partials.get<float>();
      p.ring_partials_bytes = static_cast<int64_t>(partials.bytes());
      ASSERT_TRUE(LaunchMoeExpertDown(p, nullptr).ok());
      const auto g_ye = ToHost<uint16_t>(ye, slots * c.dim);
      int64_t bad = 0;
      for (int64_t r = 0; r < slots; ++r) {
        const int64_t e = ExpertOfRow(s.h.offsets, r);
        const uint16_t* ar = a.data() + r * c.inter;
        ASSERT_LT(moe_test::ExactSumBound(spec, moe_test::kW2, e, ar), 1 << 20) << "premise";
        const auto want = moe_test::LinearRow(cpu->Get(moe_test::kW2, e), ar);
        for (int64_t i = 0; i < c.dim; ++i) bad += want[i] != g_ye[r * c.dim + i];
      }
      EXPECT_EQ(bad, 0) << "of " << slots * c.dim << " expert outputs";
      // As in the up stage test: counters left zero, a second call the same bits.
      if (v.ring && v.cut == MoeCudaRingCut::kDynamic && c.inter % 256 == 0) {
        EXPECT_EQ(ToHost<int32_t>(partials, 4), std::vector<int32_t>(4, 0));
        DeviceBuffer ye2 = Poisoned<uint16_t>(slots * c.dim);
        p.ye = ye2.get<uint16_t>();
        p.ring_counters_zeroed = true;
        ASSERT_TRUE(LaunchMoeExpertDown(p, nullptr).ok());
        EXPECT_EQ(ToHost<uint16_t>(ye2, slots * c.dim), g_ye);
      }
    }
  }
}

// One-hot activation rows make each output one decoded weight: w2 row n has scale byte 2 + n
// (2^-125 .. 2^125, both decoder paths; larger bytes would overflow 6 · scale) or 255 (NaN), and
// element k the code (k + n) % 16, so every code meets every scale byte. Checks the FP4 decoder
// (bit placement, mul.bf16x2 with the E2M1 subnormal, the wide-scale path) on the hardware, in
// every GEMM (tile_rows 8: the streaming GEMM's A-operand decode; 128: the wgmma GEMM's decode
// into swizzled shared memory, and the register-sourced wgmma GEMM's decode into its A fragments,
// where a warp's rows mix scale bytes above and below 128: its wide path multiplies the others by
// 1.0).
TEST(MoeGpuStageTest, Fp4DecodeCoversEveryCodeAndScaleByte) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kD = 256, kI = 128, kRows = kI;  // one expert, slot row k = unit vector e_k
  std::vector<uint8_t> codes(kD * kI / 2), scales(kD * kI / 32);
  for (int64_t n = 0; n < kD; ++n) {
    for (int64_t k = 0; k < kI; k += 2) {
      codes[(n * kI + k) / 2] = static_cast<uint8_t>(((k + n) % 16) | (((k + 1 + n) % 16) << 4));
    }
    const uint8_t sb = n <= 250 ? static_cast<uint8_t>(2 + n) : (n == 251 ? 255 : 127);
    std::fill_n(scales.begin() + n * (kI / 32), kI / 32, sb);
  }
  moe_test::HostFp4 zero_up{std::vector<uint8_t>(kI * kD / 2, 0),
                            std::vector<uint8_t>(kI * kD / 32, 127)};
  std::vector<moe_test::HostFp4> proj[3] = {{zero_up}, {zero_up}, {{codes, scales}}};
  const auto dev = moe_test::UploadDeviceExperts(1, kD, kI, proj, {}, {});
  std::vector<uint16_t> ag(kRows * kI, 0), ag_rs(kRows * kI, 0);
  for (int64_t r = 0; r < kRows; ++r) {
    ag[r * kI + MoeOperandColumn(r)] = 0x3F80;  // 1.0
    ag_rs[r * kI + MoeRsOperandColumn(r)] = 0x3F80;
  }
  DeviceBuffer d_ag = ToDevice(ag), d_ag_rs = ToDevice(ag_rs);
  const std::vector<int32_t> offsets = {0, static_cast<int32_t>(kRows)};
  // 129: the register-sourced wgmma GEMM at 128; 17 / 33: the streaming GEMM at 16 / 32.
  for (int64_t variant : {8, 16, 17, 32, 33, 64, 128, 129}) {
    const bool stream = variant == 17 || variant == 33;
    const int64_t tile_rows = variant == 129 ? 128 : (stream ? variant - 1 : variant);
    SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows << " rs " << (variant == 129)
                                    << " stream " << stream);
    const auto tiles = moe_test::TileList(offsets, tile_rows);
    DeviceBuffer d_off = ToDevice(offsets), d_tiles = ToDevice(tiles),
                 d_num = ToDevice(std::vector<int32_t>{static_cast<int32_t>(tiles.size() / 2)});
    DeviceBuffer ye = Poisoned<uint16_t>(kRows * kD);
    MoeExpertDownParams p;
    p.weights = &dev->view;
    p.slots = kRows;
    p.tile_rows = tile_rows;
    p.offsets = d_off.get<int32_t>();
    p.tiles = d_tiles.get<int32_t>();
    p.num_tiles = d_num.get<int32_t>();
    p.ag = (variant == 129 ? d_ag_rs : d_ag).get<uint16_t>();
    p.ye = ye.get<uint16_t>();
    p.wgmma_rs = variant == 129;
    p.stream = stream;
    ASSERT_TRUE(LaunchMoeExpertDown(p, nullptr).ok());
    const auto got = ToHost<uint16_t>(ye, kRows * kD);
    int64_t bad = 0;
    for (int64_t k = 0; k < kRows; ++k) {
      for (int64_t n = 0; n < kD; ++n) {
        const uint8_t byte = codes[(n * kI + k) / 2];
        const float want = formats::E2m1ToFloat(k % 2 == 0 ? (byte & 0xF) : (byte >> 4)) *
                           formats::Ue8m0ToFloat(scales[n * (kI / 32)]);
        const float g = Bf16BitsToFloat(got[k * kD + n]);
        const bool ok = std::isnan(want) ? std::isnan(g) : g == want;  // ±0 compare equal
        if (!ok && bad++ < 5) {
          ADD_FAILURE() << "k " << k << " n " << n << " scale byte " << int{scales[n * (kI / 32)]}
                        << ": got " << g << ", want " << want;
        }
      }
    }
    EXPECT_EQ(bad, 0) << "of " << kRows * kD << " decoded weights";
  }
}

TEST(MoeGpuStageTest, DeviceCodeOrderConversionIsTheHostOne) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  for (int64_t bytes : {int64_t{4}, int64_t{1020}, int64_t{4} << 20}) {
    std::vector<uint8_t> host(bytes);
    for (auto& b : host) b = static_cast<uint8_t>(rng());
    DeviceBuffer d = ToDevice(host);
    ASSERT_TRUE(LaunchMoeFp4ToDeviceOrder(d.get<uint8_t>(), bytes, nullptr).ok());
    MoeFp4CodesToDeviceOrder(host.data(), host.size());
    EXPECT_EQ(ToHost<uint8_t>(d, bytes), host) << bytes << " bytes";
  }
  EXPECT_FALSE(LaunchMoeFp4ToDeviceOrder(nullptr, 8, nullptr).ok());
  // Weights that were uploaded but not converted are refused by every stage.
  DeviceBuffer buf(4096);
  MoeCudaWeights w;
  w.n_experts = 1;
  w.dim = w.inter = 128;
  w.w1 = w.w3 = w.w2 = buf.get<uint8_t>();
  w.w1_scale = w.w3_scale = w.w2_scale = buf.get<uint8_t>() + 2048;
  MoeExpertDownParams p;
  p.weights = &w;
  const absl::Status s = LaunchMoeExpertDown(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("code_order"), std::string::npos) << s;
}

// ---- combine ---------------------------------------------------------------------------------

TEST(MoeGpuStageTest, CombineSumsInAscendingExpertIdBitForBit) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kM = 33, kK = 6, kE = 16, kD = 384, kStride = kD + 8;
  std::vector<int32_t> ids;
  std::vector<float> wts;
  RandomRouting(kM, kK, kE, 3, &ids, &wts);
  std::vector<int32_t> token_slot(kM * kK);
  std::iota(token_slot.begin(), token_slot.end(), 0);
  std::shuffle(token_slot.begin(), token_slot.end(), std::mt19937(4));
  // Outputs of very different magnitudes, so the summation order shows in the bits.
  auto ye = moe_test::RealisticActivations(kM * kK, kD, 21);
  for (size_t i = 0; i < ye.size(); i += 3) {
    if ((ye[i] & 0x7F80) >= 0x1000) ye[i] = static_cast<uint16_t>(ye[i] - 0x0C00);  // × 2^-24
  }
  const auto shared = moe_test::RealisticActivations(kM, kD, 22);
  std::vector<uint16_t> shared_padded(kM * kStride, 0);
  for (int64_t t = 0; t < kM; ++t) {
    std::copy_n(shared.begin() + t * kD, kD, shared_padded.begin() + t * kStride);
  }
  DeviceBuffer d_ids = ToDevice(ids), d_slot = ToDevice(token_slot), d_ye = ToDevice(ye),
               d_shared = ToDevice(shared_padded);
  for (bool with_shared : {false, true}) {
    DeviceBuffer y = Poisoned<uint16_t>(kM * kStride);
    MoeCombineParams p;
    p.m = kM;
    p.top_k = kK;
    p.dim = kD;
    p.expert_ids = d_ids.get<int32_t>();
    p.token_slot = d_slot.get<int32_t>();
    p.ye = d_ye.get<uint16_t>();
    p.shared_y = with_shared ? d_shared.get<uint16_t>() : nullptr;
    p.shared_y_stride = kStride;
    p.y = y.get<uint16_t>();
    p.y_stride = kStride;
    ASSERT_TRUE(LaunchMoeCombine(p, nullptr).ok());
    const auto got = ToHost<uint16_t>(y, kM * kStride);
    int64_t bad = 0;
    for (int64_t t = 0; t < kM; ++t) {
      std::vector<std::pair<int32_t, int32_t>> order;
      for (int64_t j = 0; j < kK; ++j) order.emplace_back(ids[t * kK + j], token_slot[t * kK + j]);
      std::sort(order.begin(), order.end());
      for (int64_t c = 0; c < kStride; ++c) {
        if (c >= kD) {
          bad += got[t * kStride + c] != 0xA5A5;  // padding untouched
          continue;
        }
        float acc = 0.f;
        for (const auto& [id, row] : order) acc += Bf16BitsToFloat(ye[row * kD + c]);
        if (with_shared) acc += Bf16BitsToFloat(shared[t * kD + c]);
        bad += got[t * kStride + c] != formats::FloatToBf16Bits(acc);
      }
    }
    EXPECT_EQ(bad, 0) << (with_shared ? "with" : "without") << " the shared output";
  }
}

}  // namespace
}  // namespace flashserve::kernels
