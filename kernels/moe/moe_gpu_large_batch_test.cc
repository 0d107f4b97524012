// The two shapes of the route and permute stages (MoeCudaPath: kSmall = a block per token / the
// one-block sort, kLarge = a warp per token / the multi-block sort) must write the same bytes, at
// batch sizes on both sides of the automatic switch (1, 255, 256, 257, 1024, 4096, 5000):
// - route: ids, weights and counts byte for byte between the shapes, and against MoeRouteCpu as
//   in the stage test (ids identical on clear routes, weights within 4 ulp); exact ties (logits
//   from four values, so equal scores on CPU and GPU alike) with ids identical to the CPU's lower-
//   id rule; image tokens (bias_vl); E from 8 to 1024 (every experts-per-lane instantiation).
// - permute: every output buffer byte for byte between the shapes, poisoned tails included
//   (offsets, slot order, weights, token slots, the tile list, num_tiles, FP8 codes and scales,
//   gathered rows), and the large shape against MoeCpu's counting sort; uniform and skewed
//   routing (every token on the same few experts; all on one expert).
// - the whole layer: MoeCuda's y, ids and weights byte for byte across the shapes and with the
//   operand read by token or gathered per slot row (gather_slot_rows), for each expert GEMM.
// A failure prints the first differing element of each buffer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
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

const char* PathName(MoeCudaPath p) {
  return p == MoeCudaPath::kSmall ? "small" : p == MoeCudaPath::kLarge ? "large" : "auto";
}

// Byte-for-byte equality of two host arrays; on a mismatch, the count and the first few indices.
template <typename T>
void ExpectSameBytes(const char* what, const std::vector<T>& got, const std::vector<T>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (bad++ < 4) {
      ADD_FAILURE() << what << "[" << i << "]: " << +got[i] << " vs " << +want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": differing elements of " << got.size();
}

// ---- route -----------------------------------------------------------------------------------

struct RouteCase {
  int64_t n_experts, top_k, m;
  bool image, norm, ties;
  float gate_temp;
};

struct RouteOut {
  std::vector<int32_t> ids, counts;
  std::vector<float> weights;
};

RouteOut RunRoute(const MoeRouteParams& host, const DeviceBuffer& logits, const DeviceBuffer& bias,
                  const DeviceBuffer& bias_vl, const DeviceBuffer& image, bool has_bias,
                  MoeCudaPath path) {
  const int64_t k = host.options.top_k;
  DeviceBuffer ids = Poisoned<int32_t>(host.m * k), wts = Poisoned<float>(host.m * k),
               counts = Poisoned<int32_t>(host.n_experts, 0);
  MoeRouteParams p = host;
  p.logits = logits.get<float>();
  p.bias = has_bias ? bias.get<float>() : nullptr;
  p.bias_vl = bias_vl.get<float>();
  p.is_image = host.is_image != nullptr ? image.get<uint8_t>() : nullptr;
  p.expert_ids = ids.get<int32_t>();
  p.expert_weights = wts.get<float>();
  EXPECT_TRUE(LaunchMoeRoute(p, counts.get<int32_t>(), nullptr, path).ok());
  return RouteOut{ToHost<int32_t>(ids, host.m * k), ToHost<int32_t>(counts, host.n_experts),
                  ToHost<float>(wts, host.m * k)};
}

TEST(MoeGpuLargeBatchTest, RouteShapesAreByteIdenticalAndMatchTheCpu) {
  FS_SKIP_WITHOUT_GPU();
  std::vector<RouteCase> cases;
  for (int64_t m : {1, 255, 256, 257, 1024, 4096, 5000}) {
    cases.push_back({384, 6, m, true, true, false, 1.f});
  }
  cases.push_back({384, 6, 1024, false, true, true, 1.f});  // exact ties
  cases.push_back({8, 2, 1000, false, true, true, 1.f});    // ties, one expert per lane
  cases.push_back({40, 4, 600, true, true, false, 1.f});    // 4 per lane, lanes partly empty
  cases.push_back({128, 3, 513, false, false, false, 2.f});
  cases.push_back({100, 5, 300, true, true, false, 1.f});    // 12 per lane, partly empty
  cases.push_back({1024, 16, 300, true, true, false, 1.f});  // 32 per lane
  cases.push_back({8, 1, 257, false, true, false, 1.f});
  for (const RouteCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "E " << c.n_experts << " k " << c.top_k << " m " << c.m
                                    << (c.ties ? " ties" : "") << (c.image ? " image" : ""));
    MoeOptions o;
    o.top_k = c.top_k;
    o.gate_temp = c.gate_temp;
    o.route_scale = 2.5f;
    o.norm_topk_prob = c.norm;
    const auto bias = moe_test::RandomBias(c.n_experts, 0.2f, 21);
    const auto bias_vl = moe_test::RandomBias(c.n_experts, 0.2f, 22);
    std::vector<uint8_t> image(c.m, 0);
    for (int64_t t = 0; t < c.m; t += 3) image[t] = c.image ? 1 : 0;
    std::mt19937 rng(static_cast<uint32_t>(c.n_experts * 131 + c.m));
    std::normal_distribution<float> normal(0.f, 3.f);
    std::vector<float> logits(c.m * c.n_experts);
    for (int64_t t = 0; t < c.m; ++t) {
      float* row = logits.data() + t * c.n_experts;
      if (c.ties) {  // four values, no bias: many exactly equal scores
        for (int64_t e = 0; e < c.n_experts; ++e) row[e] = 0.5f * static_cast<float>(rng() % 4);
        continue;
      }
      do {
        for (int64_t e = 0; e < c.n_experts; ++e) row[e] = normal(rng);
      } while (!moe_test::RouteIsClear(row, c.n_experts,
                                       image[t] != 0 ? bias_vl.data() : bias.data(), o));
    }
    const bool has_bias = !c.ties;
    std::vector<int32_t> ids(c.m * c.top_k);
    std::vector<float> wts(c.m * c.top_k);
    MoeRouteParams host{o,
                        c.m,
                        c.n_experts,
                        logits.data(),
                        has_bias ? bias.data() : nullptr,
                        bias_vl.data(),
                        c.image ? image.data() : nullptr,
                        ids.data(),
                        wts.data()};
    ASSERT_TRUE(MoeRouteCpu(host, nullptr).ok());
    std::vector<int32_t> hist(c.n_experts, 0);
    for (int32_t id : ids) ++hist[id];

    DeviceBuffer d_logits = ToDevice(logits), d_bias = ToDevice(bias), d_vl = ToDevice(bias_vl),
                 d_image = ToDevice(image);
    const RouteOut small =
        RunRoute(host, d_logits, d_bias, d_vl, d_image, has_bias, MoeCudaPath::kSmall);
    const RouteOut large =
        RunRoute(host, d_logits, d_bias, d_vl, d_image, has_bias, MoeCudaPath::kLarge);
    ExpectSameBytes("large vs small ids", large.ids, small.ids);
    ExpectSameBytes("large vs small weights", large.weights, small.weights);
    ExpectSameBytes("large vs small counts", large.counts, small.counts);
    ExpectSameBytes("large vs cpu ids", large.ids, ids);
    EXPECT_EQ(large.counts, hist);
    double worst = 0;
    for (size_t i = 0; i < wts.size(); ++i) {
      worst = std::max(worst, moe_test::F32Ulps(large.weights[i], wts[i]));
    }
    EXPECT_LE(worst, 4.0);
    if (c.m >= kMoeCudaRouteWarpMinTokens) {  // kAuto takes the large shape here
      const RouteOut automatic =
          RunRoute(host, d_logits, d_bias, d_vl, d_image, has_bias, MoeCudaPath::kAuto);
      ExpectSameBytes("auto vs large weights", automatic.weights, large.weights);
    }
    std::printf(
        "route E %ld k %ld m %ld%s: shapes byte-identical, ids = CPU, weights within %.0f "
        "ulp of the CPU\n",
        static_cast<long>(c.n_experts), static_cast<long>(c.top_k), static_cast<long>(c.m),
        c.ties ? " (ties)" : "", worst);
  }
}

// ---- permute ---------------------------------------------------------------------------------

struct PermuteCase {
  int64_t n_experts, top_k, m, dim;
  int mode;  // 0 uniform; 1 every token on experts 0..k-1 (skewed); 2 all on expert 3 (k 1)
};

struct PermuteOut {
  std::vector<int32_t> offsets, slot_token, token_slot, tiles, num_tiles;
  std::vector<float> slot_weight;
  std::vector<uint16_t> xg;
  std::vector<uint8_t> codes, scales;
};

PermuteOut RunPermute(const PermuteCase& c, int64_t tile_rows, const DeviceBuffer& ids,
                      const DeviceBuffer& wts, const DeviceBuffer& x, MoeCudaPath path,
                      bool scratch) {
  const int64_t slots = c.m * c.top_k;
  DeviceBuffer offsets = Poisoned<int32_t>(c.n_experts + 1), slot_token = Poisoned<int32_t>(slots),
               slot_weight = Poisoned<float>(slots), token_slot = Poisoned<int32_t>(slots),
               tiles = Poisoned<int32_t>(2 * slots), num_tiles = Poisoned<int32_t>(1),
               xg = Poisoned<uint16_t>(slots * c.dim), codes = Poisoned<uint8_t>(c.m * c.dim),
               scales = Poisoned<uint8_t>(c.m * c.dim / 32),
               sort_scratch = Poisoned<uint8_t>(MoeCudaSortScratchBytes(c.n_experts));
  MoePermuteParams p;
  p.m = c.m;
  p.n_experts = c.n_experts;
  p.top_k = c.top_k;
  p.dim = c.dim;
  p.tile_rows = tile_rows;
  p.expert_ids = ids.get<int32_t>();
  p.expert_weights = wts.get<float>();
  p.x = x.get<uint16_t>();
  p.x_stride = c.dim;
  p.offsets = offsets.get<int32_t>();
  p.slot_token = slot_token.get<int32_t>();
  p.slot_weight = slot_weight.get<float>();
  p.token_slot = token_slot.get<int32_t>();
  p.tiles = tiles.get<int32_t>();
  p.num_tiles = num_tiles.get<int32_t>();
  p.xg = xg.get<uint16_t>();
  p.x_codes = codes.get<uint8_t>();
  p.x_scales = scales.get<uint8_t>();
  p.path = path;
  p.sort_scratch = scratch ? sort_scratch.get<int32_t>() : nullptr;
  EXPECT_TRUE(LaunchMoePermute(p, nullptr).ok());
  PermuteOut o;
  o.offsets = ToHost<int32_t>(offsets, c.n_experts + 1);
  o.slot_token = ToHost<int32_t>(slot_token, slots);
  o.slot_weight = ToHost<float>(slot_weight, slots);
  o.token_slot = ToHost<int32_t>(token_slot, slots);
  o.tiles = ToHost<int32_t>(tiles, 2 * slots);
  o.num_tiles = ToHost<int32_t>(num_tiles, 1);
  o.xg = ToHost<uint16_t>(xg, slots * c.dim);
  o.codes = ToHost<uint8_t>(codes, c.m * c.dim);
  o.scales = ToHost<uint8_t>(scales, c.m * c.dim / 32);
  return o;
}

void ExpectSamePermutation(const char* what, const PermuteOut& a, const PermuteOut& b) {
  SCOPED_TRACE(what);
  ExpectSameBytes("offsets", a.offsets, b.offsets);
  ExpectSameBytes("slot_token", a.slot_token, b.slot_token);
  ExpectSameBytes("slot_weight", a.slot_weight, b.slot_weight);
  ExpectSameBytes("token_slot", a.token_slot, b.token_slot);
  ExpectSameBytes("tiles (whole buffer)", a.tiles, b.tiles);
  ExpectSameBytes("num_tiles", a.num_tiles, b.num_tiles);
  ExpectSameBytes("x codes", a.codes, b.codes);
  ExpectSameBytes("x scales", a.scales, b.scales);
  ExpectSameBytes("xg (whole buffer)", a.xg, b.xg);
}

TEST(MoeGpuLargeBatchTest, PermuteShapesAreByteIdentical) {
  FS_SKIP_WITHOUT_GPU();
  std::vector<PermuteCase> cases;
  for (int64_t m : {1, 255, 256, 257, 1024, 4096, 5000}) cases.push_back({384, 6, m, 256, 0});
  cases.push_back({384, 6, 4096, 256, 1});    // skewed: 6 experts hold every slot
  cases.push_back({8, 1, 5000, 256, 2});      // all on one expert
  cases.push_back({1024, 16, 2000, 128, 0});  // E 1024, 32,000 slots
  cases.push_back({384, 6, 1024, 5120, 0});   // the released D (the gather at full width)
  for (const PermuteCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "E " << c.n_experts << " k " << c.top_k << " m " << c.m
                                    << " D " << c.dim << " mode " << c.mode);
    std::mt19937 rng(static_cast<uint32_t>(c.m * 3 + c.n_experts));
    std::vector<int32_t> ids(c.m * c.top_k);
    std::vector<float> wts(c.m * c.top_k);
    std::vector<int32_t> perm(c.n_experts);
    for (int64_t t = 0; t < c.m; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t j = 0; j < c.top_k; ++j) {
        std::swap(perm[j], perm[j + rng() % (c.n_experts - j)]);
        int32_t id = perm[j];
        if (c.mode == 1) id = static_cast<int32_t>((j + t) % c.top_k);  // rank order rotates
        if (c.mode == 2) id = 3;
        ids[t * c.top_k + j] = id;
        wts[t * c.top_k + j] = std::ldexp(static_cast<float>(rng() % 4096 + 1), -11);
      }
    }
    auto x = moe_test::RealisticActivations(c.m, c.dim, 78);
    x[1] = 0x0001;  // a subnormal; the last token: Inf and NaN
    x[(c.m - 1) * c.dim + 40] = 0x7F80;
    x[(c.m - 1) * c.dim + 41] = 0x7FC0;
    const auto h = moe_test::CountingSort(ids, wts, c.m, c.top_k, c.n_experts);
    DeviceBuffer d_ids = ToDevice(ids), d_wts = ToDevice(wts), d_x = ToDevice(x);
    for (int64_t tile_rows : {8, 16, 64}) {
      SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows);
      const PermuteOut small =
          RunPermute(c, tile_rows, d_ids, d_wts, d_x, MoeCudaPath::kSmall, true);
      const PermuteOut large =
          RunPermute(c, tile_rows, d_ids, d_wts, d_x, MoeCudaPath::kLarge, true);
      ExpectSamePermutation("large vs small", large, small);
      // And both against MoeCpu's counting sort.
      ExpectSameBytes("offsets vs cpu", large.offsets, h.offsets);
      ExpectSameBytes("slot_token vs cpu", large.slot_token, h.slot_token);
      ExpectSameBytes("slot_weight vs cpu", large.slot_weight, h.slot_weight);
      ExpectSameBytes("token_slot vs cpu", large.token_slot, h.token_slot);
      const auto want_tiles = moe_test::TileList(h.offsets, tile_rows);
      ASSERT_EQ(int64_t{large.num_tiles[0]} * 2, static_cast<int64_t>(want_tiles.size()));
      ExpectSameBytes(
          "tiles vs cpu",
          std::vector<int32_t>(large.tiles.begin(), large.tiles.begin() + want_tiles.size()),
          want_tiles);
      // The gathered rows of the first and last tokens against the LinearCpu quantiser.
      for (int64_t t : {int64_t{0}, c.m - 1}) {
        const auto qdq = moe_test::QdqRow(x.data() + t * c.dim, c.dim);
        const auto want_row = moe_test::ToOperandOrder(qdq.data(), c.dim);
        for (int64_t j = 0; j < c.top_k; ++j) {
          const int64_t r = h.token_slot[t * c.top_k + j];
          const std::vector<uint16_t> got(large.xg.begin() + r * c.dim,
                                          large.xg.begin() + (r + 1) * c.dim);
          int64_t bad = 0;
          for (int64_t i = 0; i < c.dim; ++i) {
            const bool nan = (got[i] & 0x7FFF) > 0x7F80 && (want_row[i] & 0x7FFF) > 0x7F80;
            bad += got[i] != want_row[i] && !nan;
          }
          EXPECT_EQ(bad, 0) << "token " << t << " rank " << j;
        }
      }
      if (c.m * c.top_k >= kMoeCudaSortMultiBlockMinSlots) {
        // kAuto with scratch takes the large shape; without, the small one.
        ExpectSamePermutation("auto vs small",
                              RunPermute(c, tile_rows, d_ids, d_wts, d_x, MoeCudaPath::kAuto, true),
                              small);
        ExpectSamePermutation(
            "auto (no scratch) vs small",
            RunPermute(c, tile_rows, d_ids, d_wts, d_x, MoeCudaPath::kAuto, false), small);
      }
    }
    const MoeCudaSortPlan plan = MoeCudaPlanSort(c.m * c.top_k, MoeCudaPath::kLarge, true);
    std::printf(
        "permute E %ld k %ld m %ld D %ld mode %d: %ld blocks of %ld slots, shapes "
        "byte-identical\n",
        static_cast<long>(c.n_experts), static_cast<long>(c.top_k), static_cast<long>(c.m),
        static_cast<long>(c.dim), c.mode, static_cast<long>(plan.blocks),
        static_cast<long>(plan.chunk));
  }
}

// ---- the whole layer -------------------------------------------------------------------------

TEST(MoeGpuLargeBatchTest, LayerOutputDoesNotDependOnTheShapes) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kE = 16, kD = 256, kI = 128, kK = 4;
  const auto bias = moe_test::RandomBias(kE, 0.2f, 31);
  const auto bias_vl = moe_test::RandomBias(kE, 0.2f, 32);
  const moe_test::LayerSpec spec{kE, kD, kI, 33, moe_test::WeightKind::kRealistic};
  const auto dev = moe_test::GenerateDeviceExperts(spec, bias, bias_vl);
  MoeOptions o;
  o.top_k = kK;
  for (int64_t m : {1, 257, 1024}) {
    SCOPED_TRACE(testing::Message() << "m " << m);
    std::mt19937 rng(static_cast<uint32_t>(m));
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> logits(m * kE);
    for (float& v : logits) v = normal(rng);
    std::vector<uint8_t> image(m, 0);
    for (int64_t t = 1; t < m; t += 3) image[t] = 1;
    DeviceBuffer d_logits = ToDevice(logits), d_image = ToDevice(image),
                 d_x = ToDevice(moe_test::RealisticActivations(m, kD, 34));
    DeviceBuffer ws(*MoeCudaWorkspaceBytes(dev->view, m, kK));
    // Per expert GEMM (their fp32 summation orders differ, so each has its own reference): the
    // small shapes first (the reference), then the large and automatic ones, then the automatic
    // ones with the operand gathered per slot row instead of read by token.
    struct Variant {
      MoeCudaGemm gemm;
      MoeCudaPath path;
      bool gather_slot_rows;
    };
    std::vector<Variant> variants;
    for (MoeCudaGemm gemm : {MoeCudaGemm::kTiled, MoeCudaGemm::kStream, MoeCudaGemm::kStream16,
                             MoeCudaGemm::kStream32, MoeCudaGemm::kWgmma, MoeCudaGemm::kWgmmaRs}) {
      variants.push_back({gemm, MoeCudaPath::kSmall, false});
      variants.push_back({gemm, MoeCudaPath::kLarge, false});
      variants.push_back({gemm, MoeCudaPath::kAuto, false});
      variants.push_back({gemm, MoeCudaPath::kAuto, true});
    }
    std::vector<uint16_t> y_ref;
    std::vector<int32_t> ids_ref;
    std::vector<float> wts_ref;
    for (const Variant& v : variants) {
      const MoeCudaPath path = v.path;
      SCOPED_TRACE(testing::Message() << PathName(path) << " gemm " << static_cast<int>(v.gemm)
                                      << " gather slot rows " << v.gather_slot_rows);
      DeviceBuffer y = Poisoned<uint16_t>(m * kD), ids = Poisoned<int32_t>(m * kK),
                   wts = Poisoned<float>(m * kK);
      CUDA_CHECK(cudaMemset(ws.get(), 0x5A, ws.bytes()));  // stale scratch must not matter
      MoeCudaParams p;
      p.weights = &dev->view;
      p.options = o;
      p.m = m;
      p.logits = d_logits.get<float>();
      p.x = d_x.get<uint16_t>();
      p.x_stride = kD;
      p.is_image = d_image.get<uint8_t>();
      p.y = y.get<uint16_t>();
      p.y_stride = kD;
      p.expert_ids = ids.get<int32_t>();
      p.expert_weights = wts.get<float>();
      p.workspace = ws.get();
      p.workspace_bytes = ws.bytes();
      p.route_path = path;
      p.sort_path = path;
      p.gemm = v.gemm;
      p.gather_slot_rows = v.gather_slot_rows;
      ASSERT_TRUE(MoeCuda(p, nullptr).ok());
      const auto g_y = ToHost<uint16_t>(y, m * kD);
      const auto g_ids = ToHost<int32_t>(ids, m * kK);
      const auto g_wts = ToHost<float>(wts, m * kK);
      if (path == MoeCudaPath::kSmall) {  // the first variant of each GEMM
        y_ref = g_y;
        ids_ref = g_ids;
        wts_ref = g_wts;
        continue;
      }
      ExpectSameBytes("y", g_y, y_ref);
      ExpectSameBytes("ids", g_ids, ids_ref);
      ExpectSameBytes("weights", g_wts, wts_ref);
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
