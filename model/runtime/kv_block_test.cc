// Global KV blocks: the payload size is the config's 890 B/token at full size; export then import
// restores the rows byte for byte; a session rebuilt from blocks plus a bounded replay equals the
// same replay on the original state (the cache round trip loses nothing); bad payloads are
// rejected.
#include "model/runtime/kv_block.h"

#include <vector>

#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/config/kv_sizes.h"
#include "model/runtime/runtime_fixture.h"

namespace flashserve::model {
namespace {

TEST(KvBlockTest, ReleasedConfigBlockIs56960Bytes) {
  auto config = LoadModelConfig("configs/deepseek-v41-flash/inference_config.json");
  ASSERT_TRUE(config.ok());
  const LayerSchedule schedule = BuildSchedule(*config);
  auto s = MakeSessionState(*config, schedule, 128);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GlobalKvBlockBytes(*s, schedule), 56960);
  EXPECT_EQ(GlobalKvBlockBytes(*s, schedule), GlobalKvBytesPerBlock(*config));
}

TEST(KvBlockTest, BlocksRebuildASessionThatReplaysIdentically) {
  auto model = testing::MakeTinyModel(kernels::LinearMode::kExact);
  const LayerSchedule& schedule = model->schedule();
  const std::vector<int32_t> prompt = testing::LoadPrompt("a").ids;  // 201: 3 full blocks
  auto original = model->NewSession(256);
  ASSERT_TRUE(original.ok());
  ForwardOutput out;
  ASSERT_TRUE(model->Forward(*original, {.tokens = prompt}, &out).ok());
  const int64_t bytes = GlobalKvBlockBytes(*original, schedule);
  std::vector<std::vector<uint8_t>> blocks(3, std::vector<uint8_t>(size_t(bytes)));
  for (int64_t b = 0; b < 3; ++b) {
    ASSERT_TRUE(ExportGlobalKvBlock(*original, schedule, b, blocks[b]).ok());
  }
  std::vector<uint8_t> partial(static_cast<size_t>(bytes));
  EXPECT_EQ(ExportGlobalKvBlock(*original, schedule, 3, partial).code(),
            absl::StatusCode::kFailedPrecondition);  // positions 192..200 do not fill block 3

  // A fresh session from the blocks, then a bounded replay of the 192-token prefix.
  auto rebuilt = model->NewSession(256);
  ASSERT_TRUE(rebuilt.ok());
  for (int64_t b = 0; b < 3; ++b) {
    ASSERT_TRUE(ImportGlobalKvBlock(*rebuilt, schedule, b, blocks[b]).ok());
  }
  const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + 192);
  ForwardOutput from_cache, reference;
  ASSERT_TRUE(model->Replay(*rebuilt, prefix, &from_cache).ok());
  // Reference: the original state truncated to the same prefix's global KV, replayed.
  auto direct = model->NewSession(256);
  ASSERT_TRUE(direct.ok());
  ASSERT_TRUE(model->Forward(*direct, {.tokens = prefix}, &out).ok());
  ASSERT_TRUE(model->Replay(*direct, prefix, &reference).ok());
  EXPECT_EQ(from_cache.logits, reference.logits);
  // Both continue identically with the rest of the prompt.
  const std::span<const int32_t> rest = std::span(prompt).subspan(192);
  ASSERT_TRUE(model->Forward(*rebuilt, {.tokens = rest}, &from_cache).ok());
  ASSERT_TRUE(model->Forward(*direct, {.tokens = rest}, &reference).ok());
  EXPECT_EQ(from_cache.logits, reference.logits);

  // Bad payloads.
  std::vector<uint8_t> short_block(static_cast<size_t>(bytes - 1));
  EXPECT_EQ(ImportGlobalKvBlock(*rebuilt, schedule, 0, short_block).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ImportGlobalKvBlock(*rebuilt, schedule, 4, blocks[0]).code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace flashserve::model
