// The wgmma expert GEMMs (tile_rows 128: MoeCudaGemm::kWgmma, and the register-sourced
// kWgmmaRs, the stage params' wgmma_rs) on hand-built slot layouts, bit for bit against the host
// reference on exact-arithmetic inputs (moe_test_util.h). First a small case (one K stage, experts
// of 1, 8 and 100 rows, a single CTA column block) whose failures localise indexing bugs; then
// experts with 0, 1, 64, 65, 128, 130 and 200 slot rows, so that tiles end mid-expert, one
// warpgroup has no row (SS) / the n64 path runs (RS: a tile of <= 64 rows), the second warpgroup
// has a single row (65, 129 .. 130) and an expert spans two full and partial tiles; the down
// projection at a D that is not a multiple of the CTA's 256 weight rows (a partial last column
// block). The first mismatches are printed with their row, column, expert and tile, and for RS
// with the consumer warpgroup / m-block / warp / lane that owns the element. The layer-level
// checks (MoeCuda against MoeCpu) are in moe_gpu_layer_test.cc.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

using moe_test::LayerSpec;
using moe_test::Poisoned;

// Slot rows per expert: empty, single, one warpgroup full, one row into the second, a full tile,
// two rows into a second tile, a full tile plus 72.
const std::vector<int32_t> kCounts = {0, 1, 64, 65, 128, 130, 0, 200};
// The small first case: a single row, 8 rows (one n8 tile; both the RS kernel's n64 path) and 100
// rows (its n128 path, 28 rows past the expert's end).
const std::vector<int32_t> kSmallCounts = {1, 8, 100};
// More tile heights for the register-sourced kernel (its tile widths: n64 / n128, n16 / n32 / n96
// in the width sets): tiles of 3, 8, 9, 16, 17, 32, 33, 96 and 97 rows, and
// second tiles of 8 and 22 rows after a full one (kCounts and kSmallCounts add tiles of 64, 65, 72
// and 100 rows).
const std::vector<int32_t> kRsNarrowCounts = {3, 8, 9, 16, 17, 0, 32, 33, 136, 150, 96, 97};

// Slot counts whose mean rows per expert select each width set of the register-sourced GEMM
// (MoeRsWidthSetFor), each with tiles on both sides of its set's widths: {16, 32}
// (mean 17: tiles of 3 .. 33 rows), {32, 64} (mean 33.75: 3 .. 65) and {64, 96} (kRsNarrowCounts,
// mean 49.75: 3 .. 97 and second tiles); the up GEMM runs {64, 128} on the last two.
const std::vector<int32_t> kRsSetSmallCounts = {3, 8, 16, 17, 0, 32, 33, 20, 24};
const std::vector<int32_t> kRsSetMidCounts = {3, 16, 17, 32, 33, 64, 65, 40};

struct HandSlots {
  std::vector<int32_t> offsets, tiles;
  std::vector<float> slot_weight;
  DeviceBuffer d_offsets, d_tiles, d_num, d_weight;
  int64_t slots = 0;
};

HandSlots MakeHandSlots(const std::vector<int32_t>& counts, uint32_t seed,
                        int64_t tile_rows = kMoeCudaWgmmaTileRows) {
  HandSlots s;
  s.offsets.assign(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), s.offsets.begin() + 1);
  s.slots = s.offsets.back();
  s.tiles = moe_test::TileList(s.offsets, tile_rows);
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

// Where output (slot row, column) sits in the register-sourced kernel of `tile_rows`-row tiles:
// the CTA column block, the consumer warpgroup, m-block, warp and lane of its accumulator
// (cuda/moe_wgmma_rs_gemm.cuh; RsPlan: two consumer warpgroups of two m64 blocks at 128 rows, four
// of one below 128, FS_MOE_RS_NARROW_WGS's default), and the tile's n8 column of the row.
std::string RsOwner(int64_t in_expert, int64_t c, bool up, int64_t tile_rows) {
  // Up: 128 columns per CTA, slab = column / 8 (gate row lane/4); down: 256, slab = column / 16;
  // slab = 4 · m-blocks per warpgroup · warpgroup + 4 · m-block + warp.
  const int64_t cols = up ? 128 : 256, local = c % cols;
  const int64_t slab = up ? local / 8 : local / 16;
  const int64_t mbs = tile_rows == kMoeCudaWgmmaTileRows ? 2 : 1;
  const int64_t lane = 4 * (local % 8) + (in_expert % 8) / 2;  // row lane/4 (+ 8 for up / hr 1)
  return (testing::Message() << "; RS: CTA column block " << c / cols << ", consumer warpgroup "
                             << slab / (4 * mbs) << ", m-block " << (slab % (4 * mbs)) / 4
                             << ", warp " << slab % 4 << ", lane " << lane << ", n8 tile "
                             << (in_expert % tile_rows) / 8)
      .GetString();
}

// Reports the first few mismatching (row, column) pairs with where they sit in the tiling.
class MismatchLog {
 public:
  MismatchLog(const std::vector<int32_t>& offsets, bool rs, bool up, int64_t tile_rows)
      : offsets_(offsets), rs_(rs), up_(up), tile_rows_(tile_rows) {}
  void Check(int64_t r, int64_t c, uint16_t got, uint16_t want) {
    if (got == want) return;
    if (bad_++ < 8) {
      const int64_t e = ExpertOf(offsets_, r);
      const int64_t in_expert = r - offsets_[e];
      ADD_FAILURE() << "row " << r << " (expert " << e << ", row " << in_expert << " of "
                    << offsets_[e + 1] - offsets_[e] << ": tile " << in_expert / tile_rows_
                    << ") column " << c << ": got 0x" << std::hex << got << ", want 0x" << want
                    << std::dec
                    << (rs_ ? RsOwner(in_expert, c, up_, tile_rows_)
                            : (testing::Message()
                               << "; wgmma: warpgroup " << (in_expert % 128) / 64)
                                  .GetString());
    }
  }
  int64_t bad() const { return bad_; }

 private:
  const std::vector<int32_t>& offsets_;
  bool rs_, up_;
  int64_t tile_rows_;
  int64_t bad_ = 0;
};

struct Dims {
  int64_t dim, inter;
};
// D 640: the down projection's last CTA holds 128 of its 256 weight rows. D 1024 / I 1280: K
// loops of 16 and 20 stages (the 4-deep ring wraps).
const Dims kDims[] = {{256, 128}, {640, 384}, {1024, 1280}};
// The small first case: one 128-K stage for both projections, one up CTA column block, half a
// down one.
const Dims kSmallDims[] = {{128, 128}};

// Up stage on `counts` (the GEMM by `rs`; its tiles of tile_rows), bit for bit; the first
// mismatches reported.
void CheckUpHandBuilt(const std::vector<int32_t>& counts, const Dims* dims, size_t n_dims, bool rs,
                      int64_t rs_ctas = 0, bool rs_counters = true,
                      int64_t tile_rows = kMoeCudaWgmmaTileRows) {
  const int64_t n_experts = static_cast<int64_t>(counts.size());
  for (size_t di = 0; di < n_dims; ++di) {
    const Dims& dm = dims[di];
    SCOPED_TRACE(testing::Message() << "D " << dm.dim << " I " << dm.inter << (rs ? " RS" : " SS"));
    LayerSpec spec{n_experts, dm.dim, dm.inter, 11, moe_test::WeightKind::kExactArith};
    auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
    auto cpu = moe_test::BuildCpuExperts(spec, {});
    HandSlots s = MakeHandSlots(counts, 5, tile_rows);
    // One distinct activation row per slot row (the up stage reads xg by slot).
    const auto x = moe_test::SmallIntActivations(s.slots, dm.dim, 16, 12);
    std::vector<uint16_t> xg(s.slots * dm.dim);
    for (int64_t r = 0; r < s.slots; ++r) {
      const auto row = moe_test::ToOperandOrder(x.data() + r * dm.dim, dm.dim, rs);
      std::copy(row.begin(), row.end(), xg.begin() + r * dm.dim);
    }
    DeviceBuffer d_xg = ToDevice(xg), ag = Poisoned<uint16_t>(s.slots * dm.inter),
                 act = Poisoned<uint16_t>(s.slots * dm.inter);
    MoeCudaWeights w = dev->view;
    MoeExpertUpParams p;
    p.weights = &w;
    p.swiglu_limit = 10.f;
    p.slots = s.slots;
    p.tile_rows = tile_rows;
    p.offsets = s.d_offsets.get<int32_t>();
    p.tiles = s.d_tiles.get<int32_t>();
    p.num_tiles = s.d_num.get<int32_t>();
    p.xg = d_xg.get<uint16_t>();
    p.slot_weight = s.d_weight.get<float>();
    p.ag = ag.get<uint16_t>();
    p.act = act.get<uint16_t>();
    p.wgmma_rs = rs;
    p.wgmma_rs_ctas = rs_ctas;
    DeviceBuffer counters = ToDevice(std::vector<int32_t>{0, 0});
    p.wgmma_rs_counters = rs_counters ? counters.get<int32_t>() : nullptr;
    ASSERT_TRUE(LaunchMoeExpertUp(p, nullptr).ok());
    const auto g_ag = ToHost<uint16_t>(ag, s.slots * dm.inter);
    EXPECT_EQ(ToHost<int32_t>(counters, 2), (std::vector<int32_t>{0, 0})) << "left zero";
    const auto g_act = ToHost<uint16_t>(act, s.slots * dm.inter);
    MismatchLog act_log(s.offsets, rs, true, tile_rows), ag_log(s.offsets, rs, true, tile_rows);
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
          moe_test::ToOperandOrder(moe_test::QdqRow(a.data(), dm.inter).data(), dm.inter, rs);
      for (int64_t i = 0; i < dm.inter; ++i) ag_log.Check(r, i, g_ag[r * dm.inter + i], want[i]);
    }
    EXPECT_EQ(act_log.bad(), 0) << "of " << s.slots * dm.inter << " SwiGLU outputs";
    EXPECT_EQ(ag_log.bad(), 0) << "of " << s.slots * dm.inter << " quantised outputs";
    std::printf("wgmma%s up D %ld I %ld: %ld slot rows in %zu tiles checked\n", rs ? " RS" : "",
                static_cast<long>(dm.dim), static_cast<long>(dm.inter), static_cast<long>(s.slots),
                s.tiles.size() / 2);
  }
}

// Down stage on `counts` (the GEMM by `rs`; its tiles of tile_rows), bit for bit; the first
// mismatches reported.
void CheckDownHandBuilt(const std::vector<int32_t>& counts, const Dims* dims, size_t n_dims,
                        bool rs, int64_t rs_ctas = 0, bool rs_counters = true,
                        int64_t tile_rows = kMoeCudaWgmmaTileRows) {
  const int64_t n_experts = static_cast<int64_t>(counts.size());
  for (size_t di = 0; di < n_dims; ++di) {
    const Dims& dm = dims[di];
    SCOPED_TRACE(testing::Message() << "D " << dm.dim << " I " << dm.inter << (rs ? " RS" : " SS"));
    LayerSpec spec{n_experts, dm.dim, dm.inter, 13, moe_test::WeightKind::kExactArith};
    auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
    auto cpu = moe_test::BuildCpuExperts(spec, {});
    HandSlots s = MakeHandSlots(counts, 6, tile_rows);
    const auto a = moe_test::SmallIntActivations(s.slots, dm.inter, 8, 14);
    std::vector<uint16_t> ag(s.slots * dm.inter);
    for (int64_t r = 0; r < s.slots; ++r) {
      const auto row = moe_test::ToOperandOrder(a.data() + r * dm.inter, dm.inter, rs);
      std::copy(row.begin(), row.end(), ag.begin() + r * dm.inter);
    }
    DeviceBuffer d_ag = ToDevice(ag), ye = Poisoned<uint16_t>(s.slots * dm.dim);
    MoeCudaWeights w = dev->view;
    MoeExpertDownParams p;
    p.weights = &w;
    p.slots = s.slots;
    p.tile_rows = tile_rows;
    p.offsets = s.d_offsets.get<int32_t>();
    p.tiles = s.d_tiles.get<int32_t>();
    p.num_tiles = s.d_num.get<int32_t>();
    p.ag = d_ag.get<uint16_t>();
    p.ye = ye.get<uint16_t>();
    p.wgmma_rs = rs;
    p.wgmma_rs_ctas = rs_ctas;
    DeviceBuffer counters = ToDevice(std::vector<int32_t>{0, 0});
    p.wgmma_rs_counters = rs_counters ? counters.get<int32_t>() : nullptr;
    ASSERT_TRUE(LaunchMoeExpertDown(p, nullptr).ok());
    const auto g_ye = ToHost<uint16_t>(ye, s.slots * dm.dim);
    EXPECT_EQ(ToHost<int32_t>(counters, 2), (std::vector<int32_t>{0, 0})) << "left zero";
    MismatchLog log(s.offsets, rs, false, tile_rows);
    for (int64_t r = 0; r < s.slots; ++r) {
      const int64_t e = ExpertOf(s.offsets, r);
      const uint16_t* ar = a.data() + r * dm.inter;
      ASSERT_LT(moe_test::ExactSumBound(spec, moe_test::kW2, e, ar), 1 << 20) << "premise";
      const auto want = moe_test::LinearRow(cpu->Get(moe_test::kW2, e), ar);
      for (int64_t i = 0; i < dm.dim; ++i) log.Check(r, i, g_ye[r * dm.dim + i], want[i]);
    }
    EXPECT_EQ(log.bad(), 0) << "of " << s.slots * dm.dim << " expert outputs";
    std::printf("wgmma%s down D %ld I %ld: %ld slot rows in %zu tiles checked\n", rs ? " RS" : "",
                static_cast<long>(dm.dim), static_cast<long>(dm.inter), static_cast<long>(s.slots),
                s.tiles.size() / 2);
  }
}

// Small cases first: a failure here localises an indexing bug before the larger layouts run.
TEST(MoeGpuWgmmaTest, RsSmallFirstCaseIsBitExact) {
  FS_SKIP_WITHOUT_GPU();
  CheckUpHandBuilt(kSmallCounts, kSmallDims, std::size(kSmallDims), true);
  CheckDownHandBuilt(kSmallCounts, kSmallDims, std::size(kSmallDims), true);
}

TEST(MoeGpuWgmmaTest, UpStageIsBitExactOnHandBuiltTiles) {
  FS_SKIP_WITHOUT_GPU();
  CheckUpHandBuilt(kCounts, kDims, std::size(kDims), false);
}

TEST(MoeGpuWgmmaTest, DownStageIsBitExactOnHandBuiltTiles) {
  FS_SKIP_WITHOUT_GPU();
  CheckDownHandBuilt(kCounts, kDims, std::size(kDims), false);
}

TEST(MoeGpuWgmmaTest, RsUpStageIsBitExactOnHandBuiltTiles) {
  FS_SKIP_WITHOUT_GPU();
  CheckUpHandBuilt(kCounts, kDims, std::size(kDims), true);
}

TEST(MoeGpuWgmmaTest, RsDownStageIsBitExactOnHandBuiltTiles) {
  FS_SKIP_WITHOUT_GPU();
  CheckDownHandBuilt(kCounts, kDims, std::size(kDims), true);
}

TEST(MoeGpuWgmmaTest, RsNarrowTilesAreBitExact) {
  FS_SKIP_WITHOUT_GPU();
  CheckUpHandBuilt(kRsNarrowCounts, kSmallDims, std::size(kSmallDims), true);
  CheckDownHandBuilt(kRsNarrowCounts, kSmallDims, std::size(kSmallDims), true);
  CheckUpHandBuilt(kRsNarrowCounts, kDims, std::size(kDims), true);
  CheckDownHandBuilt(kRsNarrowCounts, kDims, std::size(kDims), true);
}

// Persistent CTAs walking many items: 1, 2 and 3 CTAs over the mixed tile heights, items drawn
// from the work counters and grid-stride, so that one CTA runs narrow (n64) and full items back to
// back, its ring's step counter wraps many times between K steps and epilogue steps, its item
// queue wraps, and (K loops of 1, 2, 3, 5, 8 and 10 stages + one epilogue step) an item's
// epilogue lands on every ring slot. The counters come back zero (the checks' "left zero").
TEST(MoeGpuWgmmaTest, RsFewCtasWalkEveryItem) {
  FS_SKIP_WITHOUT_GPU();
  for (const int64_t ctas : {1, 2, 3}) {
    for (const bool counters : {true, false}) {
      SCOPED_TRACE(testing::Message() << ctas << " CTAs, counters " << counters);
      CheckUpHandBuilt(kRsNarrowCounts, kSmallDims, std::size(kSmallDims), true, ctas, counters);
      CheckDownHandBuilt(kRsNarrowCounts, kSmallDims, std::size(kSmallDims), true, ctas, counters);
    }
  }
  CheckUpHandBuilt(kCounts, kDims, std::size(kDims), true, 3);
  CheckDownHandBuilt(kCounts, kDims, std::size(kDims), true, 2, false);
}

// The counts above select the sets they are named for (host only: runs without a device); the up
// GEMM runs {64, 128} above a mean of 20 rows.
TEST(MoeGpuWgmmaTest, RsWidthSetCountsSelectEachSet) {
  const auto set_of = [](const std::vector<int32_t>& counts, bool up) {
    return moe_cuda_internal::MoeRsWidthSetFor(
        std::accumulate(counts.begin(), counts.end(), int64_t{0}),
        static_cast<int64_t>(counts.size()), up);
  };
  const uint32_t small = moe_cuda_internal::kMoeRsN16 | moe_cuda_internal::kMoeRsN32;
  EXPECT_EQ(set_of(kRsSetSmallCounts, false), small);
  EXPECT_EQ(set_of(kRsSetSmallCounts, true), small);
  EXPECT_EQ(set_of(kRsSetMidCounts, false),
            moe_cuda_internal::kMoeRsN32 | moe_cuda_internal::kMoeRsN64);
  EXPECT_EQ(set_of(kRsNarrowCounts, false),
            moe_cuda_internal::kMoeRsN64 | moe_cuda_internal::kMoeRsN96);
  EXPECT_EQ(set_of(kRsSetMidCounts, true), moe_cuda_internal::kMoeRsN64);
  EXPECT_EQ(set_of(kRsNarrowCounts, true), moe_cuda_internal::kMoeRsN64);
}

// Each width set's kernel (the launcher picks it from the call's mean rows per expert) bit for
// bit, one and three CTAs; kRsNarrowCounts (the down GEMM's {64, 96} set) runs above.
TEST(MoeGpuWgmmaTest, RsWidthSetsAreBitExact) {
  FS_SKIP_WITHOUT_GPU();
  for (const auto* counts : {&kRsSetSmallCounts, &kRsSetMidCounts}) {
    SCOPED_TRACE(testing::Message() << counts->size() << " experts");
    CheckUpHandBuilt(*counts, kSmallDims, std::size(kSmallDims), true);
    CheckDownHandBuilt(*counts, kSmallDims, std::size(kSmallDims), true);
    CheckUpHandBuilt(*counts, kDims, std::size(kDims), true, 3);
    CheckDownHandBuilt(*counts, kDims, std::size(kDims), true, 1);
  }
}

// 32-row tiles (MoeCudaParams::rs_tile_rows, session 57): the {16, 32} kernels on the 8-stage ring
// of 32-row stages, where experts of 33 rows take a second tile of one row; one stage (the small
// dims) and K loops of 2–10 stages (the ring wraps on the larger), one to three CTAs with and
// without the work counters, so that a CTA's items cross the ring's and the 8-entry item queue's
// wrap. Bit for bit against the same host reference as the 128-row tiles.
TEST(MoeGpuWgmmaTest, RsThirtyTwoRowTilesAreBitExact) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = kMoeCudaRsNarrowTileRows;
  for (const int64_t ctas : {0, 1, 3}) {
    for (const bool counters : {true, false}) {
      SCOPED_TRACE(testing::Message() << ctas << " CTAs, counters " << counters);
      CheckUpHandBuilt(kRsSetSmallCounts, kSmallDims, std::size(kSmallDims), true, ctas, counters,
                       kRows);
      CheckDownHandBuilt(kRsSetSmallCounts, kSmallDims, std::size(kSmallDims), true, ctas, counters,
                         kRows);
    }
  }
  CheckUpHandBuilt(kRsSetSmallCounts, kDims, std::size(kDims), true, 0, true, kRows);
  CheckDownHandBuilt(kRsSetSmallCounts, kDims, std::size(kDims), true, 0, true, kRows);
  CheckUpHandBuilt(kRsSetSmallCounts, kDims, std::size(kDims), true, 2, false, kRows);
  CheckDownHandBuilt(kRsSetSmallCounts, kDims, std::size(kDims), true, 3, true, kRows);
}

// Both projections on `counts` in tiles of `rows`: the small dims on 0, 1 and 3 CTAs (with and
// without the work counters), then the larger dims.
void CheckRsTiles(const std::vector<int32_t>& counts, int64_t rows) {
  for (const int64_t ctas : {0, 1, 3}) {
    SCOPED_TRACE(testing::Message() << ctas << " CTAs");
    CheckUpHandBuilt(counts, kSmallDims, std::size(kSmallDims), true, ctas, ctas != 1, rows);
    CheckDownHandBuilt(counts, kSmallDims, std::size(kSmallDims), true, ctas, ctas != 3, rows);
  }
  CheckUpHandBuilt(counts, kDims, std::size(kDims), true, 0, true, rows);
  CheckDownHandBuilt(counts, kDims, std::size(kDims), true, 2, false, rows);
}

// 64-row tiles (rs_tile_rows 64): the {32, 64} kernels, both projections, on the 6-stage ring of
// 64-row stages (c % 6 slots: the ring's wrap is not a power of two), experts of 65 rows taking a
// second tile of one row.
TEST(MoeGpuWgmmaTest, RsSixtyFourRowTilesAreBitExact) {
  FS_SKIP_WITHOUT_GPU();
  CheckRsTiles(kRsSetMidCounts, kMoeCudaRsMidTileRows);
}

// 96-row tiles (rs_tile_rows 96; kAuto's at 41–80 slot rows per expert in session 60, at 65–80
// since session 61): the
// {64, 96} kernels, both projections,
// on the 5-stage ring of 96-row stages: tiles of 1 .. 96 rows, among them 65, 72 and 90 (a partial
// n96 tile: the up store's early break, the down store's partial second round), and experts of
// 97, 136 and 150 rows taking a second tile (of 1, 40 and 54 rows).
const std::vector<int32_t> kRsWideCounts = {3, 8, 33, 64, 65, 72, 90, 96, 97, 136, 150, 0};
TEST(MoeGpuWgmmaTest, RsNinetySixRowTilesAreBitExact) {
  FS_SKIP_WITHOUT_GPU();
  CheckRsTiles(kRsWideCounts, kMoeCudaRsWideTileRows);
}

// 48- and 80-row tiles (rs_tile_rows 48 / 80; 80 kAuto's at 41–64 slot rows per expert since
// session 61, 48 only where asked for): the
// {32, 48} kernels on 7 ring stages of 48 rows and the {64, 80} kernels on 6 of 80, both
// projections: tiles of every width's boundary (31 / 32 / 33, 47 / 48 partial and full n48
// tiles; 63 / 64 / 65, 72, 79 / 80 n80 ones), experts taking a second (49, 81, 130 rows) and a
// third tile (97 rows at 48: 48 + 48 + 1), empty experts; the means stay within the heights'
// limits (<= 32 / 64 slot rows per expert).
const std::vector<int32_t> kRs48Counts = {3, 16, 31, 32, 33, 40, 47, 48, 49, 0, 1, 97, 5, 2};
const std::vector<int32_t> kRs80Counts = {3, 8, 33, 63, 64, 65, 72, 79, 80, 81, 130, 0, 1};
TEST(MoeGpuWgmmaTest, RsFortyEightRowTilesAreBitExact) {
  FS_SKIP_WITHOUT_GPU();
  CheckRsTiles(kRs48Counts, kMoeCudaRs48TileRows);
}
TEST(MoeGpuWgmmaTest, RsEightyRowTilesAreBitExact) {
  FS_SKIP_WITHOUT_GPU();
  CheckRsTiles(kRs80Counts, kMoeCudaRs80TileRows);
}

// Which tile rows the launch takes (host only): 32 / 64 / 80 / 96 at <= 20 / 40 / 64 / 80 slot
// rows per expert, by default (0) the smallest that applies, asked for only that one; 48 only
// asked for (<= 32); the stage params accept them for the RS GEMM only there.
TEST(MoeGpuWgmmaTest, RsTileRowsFollowTheNarrowSet) {
  constexpr int64_t kE = 384;
  EXPECT_EQ(MoeCudaRsTileRows(1, kE, 0), kMoeCudaRsNarrowTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(20 * kE, kE, 0), kMoeCudaRsNarrowTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(20 * kE + 1, kE, 0), kMoeCudaRsMidTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(40 * kE, kE, 0), kMoeCudaRsMidTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(40 * kE + 1, kE, 0), kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaRsTileRows(64 * kE, kE, 0), kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaRsTileRows(64 * kE + 1, kE, 0), kMoeCudaRsWideTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(80 * kE, kE, 0), kMoeCudaRsWideTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(80 * kE + 1, kE, 0), kMoeCudaWgmmaTileRows);
  // 96-row tiles asked for: up to 80 slot rows per expert.
  EXPECT_EQ(MoeCudaRsTileRows(1, kE, 96), kMoeCudaRsWideTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(80 * kE, kE, 96), kMoeCudaRsWideTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(80 * kE + 1, kE, 96), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(1, kE, 128), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(20 * kE, kE, 128), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(20 * kE, kE, 32), 32);
  EXPECT_EQ(MoeCudaRsTileRows(20 * kE + 1, kE, 32), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(20 * kE, kE, 64), 64);
  EXPECT_EQ(MoeCudaRsTileRows(40 * kE, kE, 64), 64);
  EXPECT_EQ(MoeCudaRsTileRows(40 * kE + 1, kE, 64), kMoeCudaWgmmaTileRows);
  // 48 / 80 asked for: up to 32 / 64 slot rows per expert.
  EXPECT_EQ(MoeCudaRsTileRows(1, kE, 48), kMoeCudaRs48TileRows);
  EXPECT_EQ(MoeCudaRsTileRows(32 * kE, kE, 48), kMoeCudaRs48TileRows);
  EXPECT_EQ(MoeCudaRsTileRows(32 * kE + 1, kE, 48), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaRsTileRows(1, kE, 80), kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaRsTileRows(64 * kE, kE, 80), kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaRsTileRows(64 * kE + 1, kE, 80), kMoeCudaWgmmaTileRows);
  for (const int64_t slots : {int64_t{1}, 20 * kE + 1, 32 * kE, 40 * kE}) {
    EXPECT_NE(MoeCudaRsTileRows(slots, kE, 0), kMoeCudaRs48TileRows) << slots;
  }
  for (const auto* counts : {&kRs48Counts, &kRs80Counts}) {
    const int64_t rows = counts == &kRs48Counts ? kMoeCudaRs48TileRows : kMoeCudaRs80TileRows;
    const int64_t slots = std::accumulate(counts->begin(), counts->end(), int64_t{0});
    EXPECT_EQ(MoeCudaRsTileRows(slots, static_cast<int64_t>(counts->size()), rows), rows);
  }
  // Their widths per tile: MoeCudaLayoutTest.RsTileWidthIsTheNarrowestThatHoldsTheRows.
  EXPECT_LE(std::accumulate(kRsSetMidCounts.begin(), kRsSetMidCounts.end(), int64_t{0}),
            kMoeCudaRsMidMaxSlotsPerExpert * static_cast<int64_t>(kRsSetMidCounts.size()));
  EXPECT_LE(std::accumulate(kRsSetSmallCounts.begin(), kRsSetSmallCounts.end(), int64_t{0}),
            kMoeCudaRsNarrowMaxSlotsPerExpert * static_cast<int64_t>(kRsSetSmallCounts.size()));
  for (const int64_t slots : {int64_t{1}, 6 * kE, 20 * kE}) {
    for (const bool up : {true, false}) {
      EXPECT_EQ(moe_cuda_internal::MoeRsWidthSetFor(slots, kE, up),
                moe_cuda_internal::kMoeRsN16 | moe_cuda_internal::kMoeRsN32)
          << slots << " slots: the 32-row kernels are the {16, 32} set's";
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
