// The wgmma expert GEMM (tile_rows 128, MoeCudaGemm::kWgmma) on hand-built slot layouts, bit for
// bit against the host reference on exact-arithmetic inputs (moe_test_util.h): experts with 0, 1,
// 64, 65, 128, 130 and 200 slot rows, so that tiles end mid-expert, one warpgroup has no row (a
// tile of <= 64 rows), the second warpgroup has a single row (65, 129 .. 130) and an expert spans
// two full and partial tiles; the down projection at a D that is not a multiple of the CTA's 256
// weight rows (a partial last column block). The first mismatches are printed with their row,
// column, expert and tile. The layer-level checks (MoeCuda against MoeCpu) are in
// moe_gpu_layer_test.cc.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

using moe_test::LayerSpec;
using moe_test::Poisoned;

// Slot rows per expert: empty, single, one warpgroup full, one row into the second, a full tile,
// two rows into a second tile, a full tile plus 72.
const std::vector<int32_t> kCounts = {0, 1, 64, 65, 128, 130, 0, 200};

struct HandSlots {
  std::vector<int32_t> offsets, tiles;
  std::vector<float> slot_weight;
  DeviceBuffer d_offsets, d_tiles, d_num, d_weight;
  int64_t slots = 0;
};

HandSlots MakeHandSlots(uint32_t seed) {
  HandSlots s;
  s.offsets.assign(kCounts.size() + 1, 0);
  std::partial_sum(kCounts.begin(), kCounts.end(), s.offsets.begin() + 1);
  s.slots = s.offsets.back();
  s.tiles = moe_test::TileList(s.offsets, kMoeCudaWgmmaTileRows);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.25f, 1.75f);
  s.slot_weight.resize(s.slots);
  for (float& w : s.slot_weight) w = u(rng);
  s.d_offsets = ToDevice(s.offsets);
  s.d_tiles = ToDevice(s.tiles);
  s.d_num = ToDevice(std::vector<int32_t>{static_cast<int32_t>(s.tiles.size() / 2)});
  s.d_weight = ToDevice(s.slot_weight);
  return s;
}

int64_t ExpertOf(const std::vector<int32_t>& offsets, int64_t r) {
  return std::upper_bound(offsets.begin(), offsets.end(), static_cast<int32_t>(r)) -
         offsets.begin() - 1;
}

// Reports the first few mismatching (row, column) pairs with where they sit in the tiling.
class MismatchLog {
 public:
  explicit MismatchLog(const std::vector<int32_t>& offsets) : offsets_(offsets) {}
  void Check(int64_t r, int64_t c, uint16_t got, uint16_t want) {
    if (got == want) return;
    if (bad_++ < 8) {
      const int64_t e = ExpertOf(offsets_, r);
      const int64_t in_expert = r - offsets_[e];
      ADD_FAILURE() << "row " << r << " (expert " << e << ", row " << in_expert << " of "
                    << offsets_[e + 1] - offsets_[e] << ": tile " << in_expert / 128
                    << ", warpgroup " << (in_expert % 128) / 64 << ") column " << c << ": got 0x"
                    << std::hex << got << ", want 0x" << want << std::dec;
    }
  }
  int64_t bad() const { return bad_; }

 private:
  const std::vector<int32_t>& offsets_;
  int64_t bad_ = 0;
};

struct Dims {
  int64_t dim, inter;
};
// D 640: the down projection's last CTA holds 128 of its 256 weight rows. D 1024 / I 1280: K
// loops of 16 and 20 stages (the 6-deep ring wraps).
const Dims kDims[] = {{256, 128}, {640, 384}, {1024, 1280}};

TEST(MoeGpuWgmmaTest, UpStageIsBitExactOnHandBuiltTiles) {
  FS_SKIP_WITHOUT_GPU();
  const int64_t n_experts = static_cast<int64_t>(kCounts.size());
  for (const Dims& dm : kDims) {
    SCOPED_TRACE(testing::Message() << "D " << dm.dim << " I " << dm.inter);
    LayerSpec spec{n_experts, dm.dim, dm.inter, 11, moe_test::WeightKind::kExactArith};
    auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
    auto cpu = moe_test::BuildCpuExperts(spec, {});
    HandSlots s = MakeHandSlots(5);
    // One distinct activation row per slot row (the up stage reads xg by slot).
    const auto x = moe_test::SmallIntActivations(s.slots, dm.dim, 16, 12);
    std::vector<uint16_t> xg(s.slots * dm.dim);
    for (int64_t r = 0; r < s.slots; ++r) {
      const auto row = moe_test::ToOperandOrder(x.data() + r * dm.dim, dm.dim);
      std::copy(row.begin(), row.end(), xg.begin() + r * dm.dim);
    }
    DeviceBuffer d_xg = ToDevice(xg), ag = Poisoned<uint16_t>(s.slots * dm.inter),
                 act = Poisoned<uint16_t>(s.slots * dm.inter);
    MoeExpertUpParams p;
    p.weights = &dev->view;
    p.swiglu_limit = 10.f;
    p.slots = s.slots;
    p.tile_rows = kMoeCudaWgmmaTileRows;
    p.offsets = s.d_offsets.get<int32_t>();
    p.tiles = s.d_tiles.get<int32_t>();
    p.num_tiles = s.d_num.get<int32_t>();
    p.xg = d_xg.get<uint16_t>();
    p.slot_weight = s.d_weight.get<float>();
    p.ag = ag.get<uint16_t>();
    p.act = act.get<uint16_t>();
    ASSERT_TRUE(LaunchMoeExpertUp(p, nullptr).ok());
    const auto g_ag = ToHost<uint16_t>(ag, s.slots * dm.inter);
    const auto g_act = ToHost<uint16_t>(act, s.slots * dm.inter);
    MismatchLog act_log(s.offsets), ag_log(s.offsets);
    for (int64_t r = 0; r < s.slots; ++r) {
      const int64_t e = ExpertOf(s.offsets, r);
      const uint16_t* xr = x.data() + r * dm.dim;
      ASSERT_LT(moe_test::ExactSumBound(spec, moe_test::kW1, e, xr), 1 << 20) << "premise";
      ASSERT_LT(moe_test::ExactSumBound(spec, moe_test::kW3, e, xr), 1 << 20) << "premise";
      const auto g = moe_test::LinearRow(cpu->Get(moe_test::kW1, e), xr);
      const auto u = moe_test::LinearRow(cpu->Get(moe_test::kW3, e), xr);
      std::vector<uint16_t> a(dm.inter);
      for (int64_t i = 0; i < dm.inter; ++i) {
        a[i] = moe_test::SwiGluCr(g[i], u[i], 10.f, &s.slot_weight[r]);
        act_log.Check(r, i, g_act[r * dm.inter + i], a[i]);
      }
      const auto want =
          moe_test::ToOperandOrder(moe_test::QdqRow(a.data(), dm.inter).data(), dm.inter);
      for (int64_t i = 0; i < dm.inter; ++i) ag_log.Check(r, i, g_ag[r * dm.inter + i], want[i]);
    }
    EXPECT_EQ(act_log.bad(), 0) << "of " << s.slots * dm.inter << " SwiGLU outputs";
    EXPECT_EQ(ag_log.bad(), 0) << "of " << s.slots * dm.inter << " quantised outputs";
    std::printf("wgmma up D %ld I %ld: %ld slot rows in %zu tiles checked\n",
                static_cast<long>(dm.dim), static_cast<long>(dm.inter), static_cast<long>(s.slots),
                s.tiles.size() / 2);
  }
}

TEST(MoeGpuWgmmaTest, DownStageIsBitExactOnHandBuiltTiles) {
  FS_SKIP_WITHOUT_GPU();
  const int64_t n_experts = static_cast<int64_t>(kCounts.size());
  for (const Dims& dm : kDims) {
    SCOPED_TRACE(testing::Message() << "D " << dm.dim << " I " << dm.inter);
    LayerSpec spec{n_experts, dm.dim, dm.inter, 13, moe_test::WeightKind::kExactArith};
    auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
    auto cpu = moe_test::BuildCpuExperts(spec, {});
    HandSlots s = MakeHandSlots(6);
    const auto a = moe_test::SmallIntActivations(s.slots, dm.inter, 8, 14);
    std::vector<uint16_t> ag(s.slots * dm.inter);
    for (int64_t r = 0; r < s.slots; ++r) {
      const auto row = moe_test::ToOperandOrder(a.data() + r * dm.inter, dm.inter);
      std::copy(row.begin(), row.end(), ag.begin() + r * dm.inter);
    }
    DeviceBuffer d_ag = ToDevice(ag), ye = Poisoned<uint16_t>(s.slots * dm.dim);
    MoeExpertDownParams p;
    p.weights = &dev->view;
    p.slots = s.slots;
    p.tile_rows = kMoeCudaWgmmaTileRows;
    p.offsets = s.d_offsets.get<int32_t>();
    p.tiles = s.d_tiles.get<int32_t>();
    p.num_tiles = s.d_num.get<int32_t>();
    p.ag = d_ag.get<uint16_t>();
    p.ye = ye.get<uint16_t>();
    ASSERT_TRUE(LaunchMoeExpertDown(p, nullptr).ok());
    const auto g_ye = ToHost<uint16_t>(ye, s.slots * dm.dim);
    MismatchLog log(s.offsets);
    for (int64_t r = 0; r < s.slots; ++r) {
      const int64_t e = ExpertOf(s.offsets, r);
      const uint16_t* ar = a.data() + r * dm.inter;
      ASSERT_LT(moe_test::ExactSumBound(spec, moe_test::kW2, e, ar), 1 << 20) << "premise";
      const auto want = moe_test::LinearRow(cpu->Get(moe_test::kW2, e), ar);
      for (int64_t i = 0; i < dm.dim; ++i) log.Check(r, i, g_ye[r * dm.dim + i], want[i]);
    }
    EXPECT_EQ(log.bad(), 0) << "of " << s.slots * dm.dim << " expert outputs";
  }
}

}  // namespace
}  // namespace flashserve::kernels
