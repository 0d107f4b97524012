// IndexerTopkCpu and CandidateBlocksCpu: hand cases (ties, all −inf rows, k > reach, causal rows,
// pinned block, −inf blocks, crop) and random grids against the full-sort references.
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/indexer/indexer.h"
#include "kernels/indexer/indexer_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::FloatToBf16Bits;
using indexer_test::kNegInf;
using indexer_test::kPosInf;
using ::testing::ElementsAre;

// Runs the top-k over `scores` [tokens, width]; returns [tokens, k].
std::vector<int32_t> Topk(const std::vector<uint16_t>& scores, int64_t tokens, int64_t width,
                          int64_t start_pos, int64_t ratio, int64_t index_topk, int64_t offset,
                          ThreadPool* pool = nullptr, int64_t slots = 1) {
  const int64_t k = IndexerTopkK(index_topk, width);
  std::vector<int32_t> out(tokens * k, 12345);
  std::vector<uint64_t> ws(IndexerTopkWorkspaceBytes(width, slots) / 8 + 1);
  IndexerTopkParams p;
  p.tokens = tokens;
  p.width = width;
  p.start_pos = start_pos;
  p.ratio = ratio;
  p.index_topk = index_topk;
  p.offset = offset;
  p.scores = scores.data();
  p.scores_stride = width;
  p.indices = out.data();
  p.indices_stride = k;
  p.workspace = ws.data();
  p.workspace_bytes = ws.size() * 8;
  const absl::Status s = IndexerTopkCpu(p, pool);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Runs the candidate selection; returns the mask [tokens, width] and the block scores.
std::vector<uint8_t> Candidates(const std::vector<uint16_t>& scores, int64_t tokens, int64_t width,
                                int64_t start_pos, int64_t topk_blocks,
                                std::vector<uint16_t>* blocks = nullptr, ThreadPool* pool = nullptr,
                                int64_t slots = 1, int64_t block_size = 8) {
  const int64_t n_blocks = CandidateBlockCount(width, block_size);
  std::vector<uint8_t> mask(tokens * width, 77);
  std::vector<uint16_t> block_scores(tokens * n_blocks);
  std::vector<uint64_t> ws(CandidateBlocksWorkspaceBytes(width, block_size, slots) / 8 + 1);
  CandidateBlocksParams p;
  p.tokens = tokens;
  p.width = width;
  p.start_pos = start_pos;
  p.ratio = 1;
  p.block_size = block_size;
  p.topk_blocks = topk_blocks;
  p.scores = scores.data();
  p.scores_stride = width;
  p.candidates = mask.data();
  p.candidates_stride = width;
  p.block_scores = block_scores.data();
  p.block_scores_stride = n_blocks;
  p.workspace = ws.data();
  p.workspace_bytes = ws.size() * 8;
  const absl::Status s = CandidateBlocksCpu(p, pool);
  EXPECT_TRUE(s.ok()) << s;
  if (blocks != nullptr) *blocks = block_scores;
  return mask;
}

std::vector<uint16_t> Bf16Row(std::initializer_list<float> v) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(FloatToBf16Bits(x));
  return out;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(IndexerTopkTest, TiesGoToLowestPositionsAndSignedZerosTie) {
  // k = 3: 5 is in; the 2s at 1, 3, 6 tie for two slots -> 1 and 3. Offset 100.
  EXPECT_THAT(Topk(Bf16Row({0, 2, -1, 2, 5, 1, 2}), 1, 7, 6, 1, 3, 100),
              ElementsAre(101, 103, 104));
  // −0 and +0 are equal values: the lower position (the −0 at 0) wins the last slot.
  EXPECT_THAT(Topk(Bf16Row({-0.0f, 0.0f, 1, -1}), 1, 4, 3, 1, 2, 0), ElementsAre(0, 2));
}

TEST(IndexerTopkTest, AllNegInfRowAndKBeyondReach) {
  // Prefill, r = 1, start 0: row 0 reaches 1 position, row 2 reaches 3; k = min(4, 5) = 4.
  std::vector<uint16_t> s(3 * 5, kNegInf);
  s[0] = FloatToBf16Bits(-7.0f);  // row 0 t0
  // row 1 left all −inf (a row whose every score is masked)
  s[10] = FloatToBf16Bits(1.0f);  // row 2: t0 1, t1 3, t2 2
  s[11] = FloatToBf16Bits(3.0f);
  s[12] = FloatToBf16Bits(2.0f);
  const std::vector<int32_t> got = Topk(s, 3, 5, 0, 1, 4, 5);
  EXPECT_THAT(std::vector<int32_t>(got.begin(), got.begin() + 4), ElementsAre(5, -1, -1, -1));
  // All −inf: the lowest positions are chosen; 0 and 1 are reachable (t < 2), so they stay.
  EXPECT_THAT(std::vector<int32_t>(got.begin() + 4, got.begin() + 8), ElementsAre(5, 6, -1, -1));
  EXPECT_THAT(std::vector<int32_t>(got.begin() + 8, got.end()), ElementsAre(5, 6, 7, -1));
}

TEST(IndexerTopkTest, CausalRatioTwoPrefillRows) {
  // r = 2, 6 tokens: width 3, reaches 0,1,1,2,2,3; k = min(16, 3) = 3; scores past the reach are
  // −inf as the scorer writes them.
  std::vector<uint16_t> s(6 * 3, kNegInf);
  for (int i = 0; i < 6; ++i) {
    for (int t = 0; t < (i + 1) / 2; ++t) s[i * 3 + t] = FloatToBf16Bits(static_cast<float>(t));
  }
  EXPECT_THAT(Topk(s, 6, 3, 0, 2, 16, 6),
              ElementsAre(-1, -1, -1, 6, -1, -1, 6, -1, -1, 6, 7, -1, 6, 7, -1, 6, 7, 8));
}

TEST(IndexerTopkTest, MatchesFullSortReferenceOnRandomRowsWithTies) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  struct Case {
    int64_t tokens, width, start_pos, ratio, index_topk, offset;
  };
  const Case cases[] = {{201, 100, 0, 2, 16, 201},    {201, 201, 0, 1, 16, 201},
                        {1, 106, 211, 2, 16, 16},     {1, 5000, 4999, 1, 512, 128},
                        {64, 1100, 1036, 1, 512, 64}, {7, 3, 0, 2, 512, 7}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " width " << c.width);
    // Coarse values (a few hundred distinct) so the k-th value is usually tied; −inf past reach.
    std::uniform_int_distribution<int> level(-200, 200);
    std::vector<uint16_t> s(c.tokens * c.width, kNegInf);
    for (int64_t i = 0; i < c.tokens; ++i) {
      const int64_t reach = indexer_test::ReachOf(c.start_pos, c.ratio, i);
      for (int64_t t = 0; t < reach; ++t) s[i * c.width + t] = FloatToBf16Bits(level(rng) / 8.0f);
    }
    const int64_t k = IndexerTopkK(c.index_topk, c.width);
    const std::vector<int32_t> serial =
        Topk(s, c.tokens, c.width, c.start_pos, c.ratio, c.index_topk, c.offset);
    EXPECT_EQ(Topk(s, c.tokens, c.width, c.start_pos, c.ratio, c.index_topk, c.offset, &pool, 8),
              serial);
    for (int64_t i = 0; i < c.tokens; ++i) {
      const int64_t reach = indexer_test::ReachOf(c.start_pos, c.ratio, i);
      const std::vector<int32_t> got(serial.begin() + i * k, serial.begin() + (i + 1) * k);
      const uint16_t* row = s.data() + i * c.width;
      EXPECT_EQ(got, indexer_test::ReferenceTopkRow(row, c.width, c.index_topk, reach, c.offset))
          << "row " << i;
      // The other tie rule selects a different set only on tied rows, and equal modulo ties.
      const auto high = indexer_test::ReferenceTopkRow(row, c.width, c.index_topk, reach, c.offset,
                                                       /*low_pos_wins=*/false);
      EXPECT_EQ(indexer_test::CompareModuloTies(got, high, indexer_test::ToFloats(row, c.width),
                                                c.offset),
                "")
          << "row " << i;
    }
  }
}

TEST(IndexerTopkTest, RejectsBadParams) {
  std::vector<uint16_t> s(4 * 4, 0);
  std::vector<int32_t> out(16);
  std::vector<uint64_t> ws(4);
  IndexerTopkParams p;
  p.tokens = 4;
  p.width = 4;
  p.index_topk = 4;
  p.scores = s.data();
  p.scores_stride = 4;
  p.indices = out.data();
  p.indices_stride = 4;
  p.workspace = ws.data();
  p.workspace_bytes = 32;
  ASSERT_TRUE(IndexerTopkCpu(p, nullptr).ok());
  IndexerTopkParams q = p;
  q.workspace_bytes = 31;
  EXPECT_EQ(IndexerTopkCpu(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  q = p;
  q.indices_stride = 3;
  EXPECT_EQ(IndexerTopkCpu(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  q = p;
  q.offset = int64_t{1} << 31;
  EXPECT_EQ(IndexerTopkCpu(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  q = p;
  q.start_pos = 1;  // the last row would reach 5 > width
  EXPECT_EQ(IndexerTopkCpu(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CandidateBlocksTest, PinnedNewestBlockWinsOverBetterBlocks) {
  // Decode row at position 19 (reach 20): newest block = 19 / 8 = 2, whose scores are the worst.
  std::vector<uint16_t> s(20);
  for (int t = 0; t < 20; ++t) s[t] = FloatToBf16Bits(t < 16 ? 10.0f + t : -50.0f);
  std::vector<uint16_t> blocks;
  const std::vector<uint8_t> m = Candidates(s, 1, 20, 19, 2, &blocks);
  EXPECT_EQ(blocks, Bf16Row({17, 25, kInf}));
  for (int t = 0; t < 20; ++t) EXPECT_EQ(m[t], t >= 8 ? 1 : 0) << t;  // blocks 1 and 2 (cropped)
}

TEST(CandidateBlocksTest, NegInfBlocksNotKeptEvenIfPicked) {
  // Prefill rows of width 24 with 3 blocks and topk_blocks 3: row 0 pins block 0, blocks 1 and 2
  // are all −inf (unreachable) and picked, but not kept.
  std::vector<uint16_t> s(2 * 24, kNegInf);
  s[0] = FloatToBf16Bits(1.0f);
  for (int t = 0; t < 10; ++t) s[24 + t] = FloatToBf16Bits(2.0f);
  std::vector<uint16_t> blocks;
  const std::vector<uint8_t> m = Candidates(s, 2, 24, 0, 3, &blocks);
  for (int t = 0; t < 24; ++t) EXPECT_EQ(m[t], t < 8 ? 1 : 0) << t;
  // Row 1 is position 1 here (start 0): reach 2 -> pins block 0; block 1 has finite scores
  // (written past the reach on purpose) so it is kept; block 2 is −inf.
  for (int t = 0; t < 24; ++t) EXPECT_EQ(m[24 + t], t < 16 ? 1 : 0) << t;
  EXPECT_EQ(blocks, Bf16Row({kInf, -kInf, -kInf, kInf, 2, -kInf}));
}

TEST(CandidateBlocksTest, TiesToLowerBlockAndCropAndFewBlocks) {
  // Width 21 (3 blocks, the last cropped to 5 positions), topk 2, newest block 2 pinned; blocks
  // 0 and 1 tie at 4 -> block 0 wins.
  std::vector<uint16_t> s(21, FloatToBf16Bits(1.0f));
  s[3] = s[12] = FloatToBf16Bits(4.0f);
  std::vector<uint8_t> m = Candidates(s, 1, 21, 20, 2);
  for (int t = 0; t < 21; ++t) EXPECT_EQ(m[t], (t < 8 || t >= 16) ? 1 : 0) << t;
  // topk_blocks above the block count: every finite block kept.
  m = Candidates(s, 1, 21, 20, 50);
  for (int t = 0; t < 21; ++t) EXPECT_EQ(m[t], 1) << t;
}

TEST(CandidateBlocksTest, MatchesReferenceOnRandomRows) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  struct Case {
    int64_t tokens, width, start_pos, topk_blocks, block_size;
  };
  const Case cases[] = {{201, 201, 0, 4, 8},
                        {1, 213, 212, 4, 8},
                        {40, 1000, 960, 16, 8},
                        {1, 20000, 19999, 2048, 8},
                        {30, 77, 47, 3, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " width " << c.width);
    std::uniform_int_distribution<int> level(-60, 60);
    std::vector<uint16_t> s(c.tokens * c.width, kNegInf);
    for (int64_t i = 0; i < c.tokens; ++i) {
      for (int64_t t = 0; t < c.start_pos + i + 1; ++t) {
        s[i * c.width + t] = FloatToBf16Bits(level(rng) / 4.0f);
      }
    }
    std::vector<uint16_t> blocks;
    const std::vector<uint8_t> serial = Candidates(s, c.tokens, c.width, c.start_pos, c.topk_blocks,
                                                   &blocks, nullptr, 1, c.block_size);
    EXPECT_EQ(Candidates(s, c.tokens, c.width, c.start_pos, c.topk_blocks, nullptr, &pool, 4,
                         c.block_size),
              serial);
    const int64_t n_blocks = CandidateBlockCount(c.width, c.block_size);
    for (int64_t i = 0; i < c.tokens; ++i) {
      std::vector<float> want_blocks;
      const std::vector<uint8_t> want =
          indexer_test::ReferenceCandidateRow(s.data() + i * c.width, c.width, c.start_pos + i + 1,
                                              c.block_size, c.topk_blocks, &want_blocks);
      EXPECT_EQ(
          std::vector<uint8_t>(serial.begin() + i * c.width, serial.begin() + (i + 1) * c.width),
          want)
          << "row " << i;
      EXPECT_EQ(indexer_test::ToFloats(blocks.data() + i * n_blocks, n_blocks), want_blocks)
          << "row " << i;
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
