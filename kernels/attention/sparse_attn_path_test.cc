// The CUDA launcher's cut of a launch into units and the default-path rule that reads it
// (cuda/sparse_attn_path.h; header-only, so checked here without a device): the splits and blocks
// per unit at the bench's batches, and where the default switches from wgmma to wgmma-ws.
#include "kernels/attention/cuda/sparse_attn_path.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/attention/attention.h"

namespace flashserve::kernels::attention_internal {
namespace {

constexpr int64_t kReleasedHeads = 64;
constexpr int64_t kReleasedWidth = 640;  // 128 window + 512 selected = 10 blocks

struct CutCase {
  int64_t tokens, heads, width;
  int64_t groups, splits, blocks_per_split;
};

TEST(SparseAttnCudaCut, SplitsSmallBatchesIntoBlockRanges) {
  // items = tokens · groups; fewer than kSparseAttnCudaSplitCtas (128) items split the list into
  // min(blocks, 128 / items) ranges, rounded to whole ranges of blocks_per_split blocks.
  static_assert(kSparseAttnCudaSplitCtas == 128, "the expected cuts below assume 128");
  const CutCase cases[] = {
      {1, 64, 640, 1, 10, 1},  {8, 64, 640, 1, 10, 1},  {25, 64, 640, 1, 5, 2},
      {26, 64, 640, 1, 4, 3},  {32, 64, 640, 1, 4, 3},  {33, 64, 640, 1, 3, 4},
      {64, 64, 640, 1, 2, 5},  {65, 64, 640, 1, 1, 10}, {256, 64, 640, 1, 1, 10},
      {1, 128, 640, 2, 10, 1}, {32, 128, 640, 2, 2, 5}, {3, 65, 200, 2, 4, 1},
      {5, 64, 150, 1, 3, 1},   {2, 64, 2560, 1, 40, 1}, {1, 64, 24576, 1, 128, 3},
      {256, 64, 1, 1, 1, 1},   {1, 64, 7, 1, 1, 1},     {0, 64, 640, 1, 1, 10},
      {4, 0, 640, 0, 1, 10},   {4, 64, 0, 1, 1, 0},
  };
  for (const CutCase& c : cases) {
    const SparseAttnCudaCut cut = SparseAttnCudaCutFor(c.tokens, c.heads, c.width, 64);
    EXPECT_EQ(cut.groups, c.groups) << c.tokens << " " << c.heads << " " << c.width;
    EXPECT_EQ(cut.splits, c.splits) << c.tokens << " " << c.heads << " " << c.width;
    EXPECT_EQ(cut.blocks_per_split, c.blocks_per_split)
        << c.tokens << " " << c.heads << " " << c.width;
    // The split states fit the workspace, and the ranges cover the list exactly once.
    EXPECT_LE(c.tokens * cut.groups * (cut.splits > 1 ? cut.splits : 0), kSparseAttnCudaSplitCtas);
    const int64_t n_blocks = (c.width + kSparseAttnBlock - 1) / kSparseAttnBlock;
    EXPECT_GE(cut.splits * cut.blocks_per_split, n_blocks);
    EXPECT_LT((cut.splits - 1) * cut.blocks_per_split, n_blocks > 0 ? n_blocks : 1);
  }
}

TEST(SparseAttnCombineForm, SharedWeightsOnlyWhereTheGridIsOneWave) {
  // The shared-memory combine (116 registers: 2 CTAs per SM) runs where a launch has many splits
  // and few items: at the released width 1–12 tokens (10 splits, <= 192 combine CTAs, one wave);
  // from 13 tokens (<= 5 splits, up to 1,024 CTAs) the per-thread combine (42 registers).
  for (int64_t tokens = 1; tokens <= 64; ++tokens) {
    const SparseAttnCudaCut cut =
        SparseAttnCudaCutFor(tokens, kReleasedHeads, kReleasedWidth, kSparseAttnWgmmaHeads);
    EXPECT_EQ(SparseAttnCombineShared(cut.splits), tokens <= 12) << tokens;
    if (SparseAttnCombineShared(cut.splits)) {
      EXPECT_LE(tokens * cut.groups * 16, 2 * 132) << tokens;  // 16 combine CTAs per item
    }
  }
  EXPECT_FALSE(SparseAttnCombineShared(1));
  EXPECT_FALSE(SparseAttnCombineShared(5));
  EXPECT_TRUE(SparseAttnCombineShared(6));
  EXPECT_TRUE(SparseAttnCombineShared(128));
}

TEST(SparseAttnWsDefault, TakesWsWhereUnitsHaveBlocksToPipeline) {
  // The H200 measurements the rule rests on (README.md "wgmma-ws"): 1 and 8 tokens (1-block
  // units) lose 0.1–0.2 µs on wgmma-ws, 16 and 24 tokens (2 blocks) win 1 µs, 64 tokens (5
  // blocks) and 256 tokens (10 blocks) win more.
  EXPECT_FALSE(SparseAttnWsPays(1, kReleasedHeads, kReleasedWidth));
  EXPECT_FALSE(SparseAttnWsPays(8, kReleasedHeads, kReleasedWidth));
  EXPECT_TRUE(SparseAttnWsPays(16, kReleasedHeads, kReleasedWidth));
  EXPECT_TRUE(SparseAttnWsPays(64, kReleasedHeads, kReleasedWidth));
  EXPECT_TRUE(SparseAttnWsPays(256, kReleasedHeads, kReleasedWidth));
  // The switch at the released width: 1 block per unit up to 12 tokens (10 or more splits), 2
  // from 13 (9 splits).
  for (int64_t tokens = 1; tokens <= 12; ++tokens) {
    EXPECT_FALSE(SparseAttnWsPays(tokens, kReleasedHeads, kReleasedWidth)) << tokens;
  }
  for (int64_t tokens = 13; tokens <= 1024; ++tokens) {
    EXPECT_TRUE(SparseAttnWsPays(tokens, kReleasedHeads, kReleasedWidth)) << tokens;
  }
  // Other list widths: 1-block lists never pipeline, long ones do even at 1 token.
  EXPECT_FALSE(SparseAttnWsPays(256, kReleasedHeads, 64));  // 1 block
  EXPECT_TRUE(SparseAttnWsPays(256, kReleasedHeads, 128));  // 2 blocks
  EXPECT_FALSE(SparseAttnWsPays(1, kReleasedHeads, 2560));  // 40 splits of 1 block
  EXPECT_TRUE(SparseAttnWsPays(1, kReleasedHeads, 24576));  // 128 splits of 3 blocks
  // More head groups mean more items, fewer splits, longer units.
  EXPECT_FALSE(SparseAttnWsPays(8, 64, kReleasedWidth));
  EXPECT_TRUE(SparseAttnWsPays(8, 128, kReleasedWidth));
  // Degenerate dims (unvalidated params; constant evaluation would reject a division by zero).
  static_assert(SparseAttnCudaCutFor(0, 64, 640, 64).splits == 1);
  static_assert(SparseAttnCudaCutFor(4, 0, 640, 64).splits == 1);
  EXPECT_FALSE(SparseAttnWsPays(4, kReleasedHeads, 0));
}

// The decode-once rule (attention.h SparseAttnDecodeOncePays): a prefill chunk of one sequence
// (a shared 128-row window, 65,536 compressed rows) decodes once from 1,024 tokens (655,360 list
// entries, ~10 per row), not at 512 (~5 per row); a decode batch (each token its own window:
// 128 rows per token + the compressed rows) never does; nothing below 64 tokens.
TEST(SparseAttnDecodeOnceDefault, PaysWhereRowsAreReadOftenEnough) {
  constexpr int64_t kCompressed = 65536;
  EXPECT_FALSE(SparseAttnDecodeOncePays(512, kReleasedWidth, 128 + kCompressed));
  EXPECT_TRUE(SparseAttnDecodeOncePays(1024, kReleasedWidth, 128 + kCompressed));
  EXPECT_TRUE(SparseAttnDecodeOncePays(4096, kReleasedWidth, 128 + kCompressed));
  for (int64_t tokens :
       {int64_t{64}, int64_t{256}, int64_t{4096}, int64_t{65536}, int64_t{1} << 24}) {
    EXPECT_FALSE(SparseAttnDecodeOncePays(tokens, kReleasedWidth, 128 * tokens + kCompressed))
        << tokens;
  }
  EXPECT_FALSE(SparseAttnDecodeOncePays(63, kReleasedWidth, 128));
  EXPECT_TRUE(SparseAttnDecodeOncePays(64, kReleasedWidth, 128));
  // No overflow at the validator's limits (tokens and width up to 2^40).
  EXPECT_TRUE(SparseAttnDecodeOncePays(int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 31));
  EXPECT_FALSE(SparseAttnDecodeOncePays(64, 0, 1));
  EXPECT_EQ(SparseAttnDecodedBytes(128, 65536, 512), size_t{65664} * 1024);
}

}  // namespace
}  // namespace flashserve::kernels::attention_internal
