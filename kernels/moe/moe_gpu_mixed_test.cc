// The steps between the up and down stages when the register-sourced GEMM runs the down
// projection after another up GEMM (MoeCudaParams::down_gemm), against host references:
// - LaunchMoeRegroupTiles: from the tile list at tile_rows 8, 16, 32, 64 and 128 (the permute's
//   rule), out of place and in place, the 128-row list the permute writes at tile_rows 128, byte
//   for byte; empty experts, experts of exactly 128 rows and lists longer than the kernel's
//   1,024-entry chunks included.
// - LaunchMoeToRsOperandOrder: every 32-column block's 16 words transposed (StoreQdqBlock's
//   rs_order), twice = the identity; its argument checks.
// The layer with it runs in moe_gpu_layer_test.cc (every case, every up GEMM).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using moe_test::Poisoned;

struct TileList {
  std::vector<int32_t> offsets;  // [E + 1]
  std::vector<int32_t> tiles;    // (expert, first slot row) per tile
};

// The permute's offsets and tile list for `counts` at `tile_rows` (SortOffsetsAndTiles' rule).
TileList MakeTiles(const std::vector<int32_t>& counts, int64_t tile_rows) {
  TileList l;
  int32_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    l.offsets.push_back(row);
    for (int32_t r = 0; r < counts[e]; r += static_cast<int32_t>(tile_rows)) {
      l.tiles.push_back(static_cast<int32_t>(e));
      l.tiles.push_back(row + r);
    }
    row += counts[e];
  }
  l.offsets.push_back(row);
  return l;
}

// Runs the regroup of `counts`' list at tile_rows (in place or not) and checks it against the
// 128-row list.
void CheckRegroup(const std::vector<int32_t>& counts, int64_t tile_rows, bool in_place) {
  SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows << (in_place ? " in place" : ""));
  const TileList in = MakeTiles(counts, tile_rows);
  const TileList want = MakeTiles(counts, kMoeCudaWgmmaTileRows);
  const int32_t n_in = static_cast<int32_t>(in.tiles.size() / 2);
  // No slot rows: nothing would be enqueued (slots 0); slots 1 runs the kernel on an empty list.
  const int64_t slots = std::max<int64_t>(in.offsets.back(), 1);
  DeviceBuffer d_offsets = ToDevice(in.offsets), d_tiles = ToDevice(in.tiles),
               d_num = ToDevice(std::vector<int32_t>{n_in});
  DeviceBuffer out = Poisoned<int32_t>(in.tiles.size() + 2), out_num = Poisoned<int32_t>(1);
  MoeRegroupTilesParams p;
  p.n_experts = static_cast<int64_t>(counts.size());
  p.slots = slots;
  p.tile_rows = tile_rows;
  p.offsets = d_offsets.get<int32_t>();
  p.tiles = d_tiles.get<int32_t>();
  p.num_tiles = d_num.get<int32_t>();
  p.tiles_out = in_place ? d_tiles.get<int32_t>() : out.get<int32_t>();
  p.num_tiles_out = in_place ? d_num.get<int32_t>() : out_num.get<int32_t>();
  ASSERT_TRUE(LaunchMoeRegroupTiles(p, nullptr).ok());
  const int32_t got_n = ToHost<int32_t>(in_place ? d_num : out_num, 1)[0];
  ASSERT_EQ(got_n, static_cast<int32_t>(want.tiles.size() / 2));
  const std::vector<int32_t> got =
      ToHost<int32_t>(in_place ? d_tiles : out, static_cast<size_t>(2 * got_n));
  EXPECT_EQ(got, want.tiles);
  if (!in_place) {  // the input list untouched, nothing written past the output's end
    EXPECT_EQ(ToHost<int32_t>(d_tiles, in.tiles.size()), in.tiles);
    const std::vector<int32_t> all = ToHost<int32_t>(out, in.tiles.size() + 2);
    for (size_t i = 2 * static_cast<size_t>(got_n); i < all.size(); ++i) {
      EXPECT_EQ(static_cast<uint32_t>(all[i]), 0xA5A5A5A5u) << i;
    }
  }
}

TEST(MoeGpuMixedTest, RegroupTilesGivesThe128RowList) {
  FS_SKIP_WITHOUT_GPU();
  // Empty experts, 1 row, exactly 128, 129, 256 + 1, and a long tail of small experts.
  std::vector<int32_t> counts = {0, 1, 128, 129, 0, 257, 17, 384, 5, 0, 64, 65};
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> rows(0, 300);
  for (int e = 0; e < 48; ++e) counts.push_back(rows(rng));
  for (const int64_t tile_rows : {8, 16, 32, 64, 128}) {
    for (const bool in_place : {false, true}) CheckRegroup(counts, tile_rows, in_place);
  }
  // More than the kernel's 1,024-entry chunk: ~3,000 8-row tiles, kept entries in every chunk.
  std::vector<int32_t> many(384);
  for (int32_t& c : many) c = rows(rng) / 5 + 20;
  for (const bool in_place : {false, true}) CheckRegroup(many, 8, in_place);
  // No tiles at all: the count written (0 over the poison out of place).
  for (const bool in_place : {false, true}) CheckRegroup(std::vector<int32_t>(4, 0), 16, in_place);
}

TEST(MoeGpuMixedTest, RegroupTilesValidates) {
  alignas(16) static int32_t buf[64];
  MoeRegroupTilesParams p;
  p.n_experts = 4;
  p.slots = 8;
  p.tile_rows = 16;
  p.offsets = buf;
  p.tiles = buf + 8;
  p.num_tiles = buf + 16;
  p.tiles_out = buf + 24;
  p.num_tiles_out = buf + 32;
  EXPECT_TRUE(Validate(p).ok());
  MoeRegroupTilesParams bad = p;
  bad.tile_rows = 24;
  EXPECT_EQ(LaunchMoeRegroupTiles(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // 48 / 80 / 96 do not divide the 128-row blocks it keeps.
  for (const int64_t rows : {kMoeCudaRs48TileRows, kMoeCudaRs80TileRows, kMoeCudaRsWideTileRows}) {
    bad.tile_rows = rows;
    EXPECT_EQ(LaunchMoeRegroupTiles(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
  bad = p;
  bad.tiles_out = nullptr;
  EXPECT_EQ(LaunchMoeRegroupTiles(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.n_experts = 0;
  EXPECT_EQ(LaunchMoeRegroupTiles(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MoeGpuMixedTest, ToRsOperandOrderTransposesEveryBlock) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 37, kCols = 96;
  std::vector<uint16_t> rows(kRows * kCols);
  std::mt19937 rng(9);
  for (uint16_t& v : rows) v = static_cast<uint16_t>(rng());
  DeviceBuffer d = ToDevice(rows);
  ASSERT_TRUE(LaunchMoeToRsOperandOrder(d.get<uint16_t>(), kRows, kCols, nullptr).ok());
  const std::vector<uint16_t> got = ToHost<uint16_t>(d, rows.size());
  for (int64_t b = 0; b < kRows * kCols / 32; ++b) {
    for (int j = 0; j < 4; ++j) {
      for (int t = 0; t < 4; ++t) {
        // Word 4j + t of the reordered block holds word 4t + j of the operand-order one.
        for (int h = 0; h < 2; ++h) {
          ASSERT_EQ(got[32 * b + 2 * (4 * j + t) + h], rows[32 * b + 2 * (4 * t + j) + h])
              << "block " << b << " word " << 4 * j + t;
        }
      }
    }
  }
  ASSERT_TRUE(LaunchMoeToRsOperandOrder(d.get<uint16_t>(), kRows, kCols, nullptr).ok());
  EXPECT_EQ(ToHost<uint16_t>(d, rows.size()), rows) << "twice is the identity";
}

TEST(MoeGpuMixedTest, ToRsOperandOrderValidates) {
  alignas(16) static uint16_t buf[64];
  EXPECT_EQ(LaunchMoeToRsOperandOrder(buf, 1, 33, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMoeToRsOperandOrder(buf + 1, 1, 32, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMoeToRsOperandOrder(nullptr, 1, 32, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMoeToRsOperandOrder(buf, -1, 32, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchMoeToRsOperandOrder(nullptr, 0, 32, nullptr).ok()) << "nothing to do";
}

}  // namespace
}  // namespace flashserve::kernels
