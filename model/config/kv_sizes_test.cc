#include "model/config/kv_sizes.h"

#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/config/config_test_util.h"

namespace flashserve::model {
namespace {

using testing::RepoPath;

TEST(KvSizesTest, RowSizes) {
  EXPECT_EQ(formats::MainKvRowBytes(512), 288);  // 256 B of FP4 codes + 32 E4M3 scales
  EXPECT_EQ(formats::IndexKRowBytes(128), 68);   // 64 B of FP4 codes + 4 E8M0 scales
  EXPECT_EQ(formats::SwaKvRowBytes(512), 528);   // 512 E4M3 + 16 E8M0
  EXPECT_EQ(formats::MainKvRowBytes(128), 72);
  EXPECT_EQ(formats::IndexKRowBytes(64), 34);
  EXPECT_EQ(RowsPerCacheBlock(2), 32);
  EXPECT_EQ(RowsPerCacheBlock(1), 64);
}

TEST(KvSizesTest, ReleasedGlobalKvIs890BytesPerToken) {
  auto config = LoadModelConfig(RepoPath(testing::kReleasedFlat));
  ASSERT_TRUE(config.ok()) << config.status();
  // Per 64-token block: 3 ratio-2 sources x 32 rows x (288 + 68) + 1 ratio-1 source x 64 rows x
  // (288 + 68) = 34176 + 22784.
  EXPECT_EQ(GlobalKvBytesPerBlock(*config), 56960);
  EXPECT_EQ(GlobalKvBytesPerToken(*config), 890.0);
  EXPECT_EQ(SwaBytesPerTokenPerLayer(*config), 528);
  EXPECT_EQ(SwaBytesPerSession(*config), 528 * 128 * 40);  // ≈ 2.7 MB (DESIGN §3)
  EXPECT_EQ(DSparkWindowBytesPerSession(*config), 528 * 128 * 3);
}

TEST(KvSizesTest, TinyFixture) {
  auto config = LoadModelConfig(RepoPath(testing::kTinyConfig));
  ASSERT_TRUE(config.ok()) << config.status();
  // head_dim 128 -> 72 B main rows, index_head_dim 64 -> 34 B index rows; sources 2 (r=2), 4 (r=1).
  EXPECT_EQ(GlobalKvBytesPerBlock(*config), 32 * (72 + 34) + 64 * (72 + 34));
  EXPECT_EQ(GlobalKvBytesPerToken(*config), 159.0);
  EXPECT_EQ(SwaBytesPerTokenPerLayer(*config), 132);
  EXPECT_EQ(SwaBytesPerSession(*config), 132 * 16 * 8);
}

TEST(KvSizesTest, NonIntegralPerTokenIsExact) {
  auto config = LoadModelConfig(RepoPath(testing::kTinyConfig));
  ASSERT_TRUE(config.ok()) << config.status();
  config->kv_source_layers = {2};  // hypothetical: only the ratio-2 source
  config->compress_ratios = {0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(GlobalKvBytesPerBlock(*config), 32 * 106);
  EXPECT_EQ(GlobalKvBytesPerToken(*config), 53.0);
  config->compress_ratios[2] = 64;  // one row per block
  EXPECT_EQ(GlobalKvBytesPerBlock(*config), 106);
  EXPECT_EQ(GlobalKvBytesPerToken(*config), 106.0 / 64.0);
}

}  // namespace
}  // namespace flashserve::model
