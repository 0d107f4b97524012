// CandidateBlocksCpu on layer 4's golden (unmasked) scores of the v41-tiny run (see
// indexer_fixture.h): block maxima equal to the golden ones, the candidate mask equal to the
// published one on every row without a block-score tie (modulo ties on the others); and layer 6's
// golden scores −inf exactly outside that mask.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/indexer/indexer.h"
#include "kernels/indexer/indexer_fixture.h"
#include "kernels/indexer/indexer_test_util.h"

namespace flashserve::kernels {
namespace {

using indexer_test::IndexerFixtureTest;
using indexer_test::kBlockSize;
using indexer_test::kDecodeSteps;
using indexer_test::kPromptTokens;
using indexer_test::kTopkBlocks;
using indexer_test::Problem;

struct CandidateRun {
  std::vector<uint8_t> mask;     // [rows, width]
  std::vector<uint16_t> blocks;  // [rows, n_blocks]
  int64_t n_blocks = 0;
};

CandidateRun RunCandidates(const Problem& p) {
  CandidateRun run;
  run.n_blocks = CandidateBlockCount(p.width, kBlockSize);
  run.mask.assign(p.rows * p.width, 9);
  run.blocks.assign(p.rows * run.n_blocks, 0);
  std::vector<uint64_t> ws(CandidateBlocksWorkspaceBytes(p.width, kBlockSize, 1) / 8);
  CandidateBlocksParams params{.tokens = p.rows,
                               .width = p.width,
                               .start_pos = p.start_pos,
                               .ratio = p.ratio,
                               .block_size = kBlockSize,
                               .topk_blocks = kTopkBlocks,
                               .scores = p.scores.data(),
                               .scores_stride = p.width,
                               .candidates = run.mask.data(),
                               .candidates_stride = p.width,
                               .block_scores = run.blocks.data(),
                               .block_scores_stride = run.n_blocks,
                               .workspace = ws.data(),
                               .workspace_bytes = ws.size() * 8};
  const absl::Status s = CandidateBlocksCpu(params, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  return run;
}

// Sorted scores of the blocks a mask row keeps (a block is kept iff its first position is set).
std::vector<float> KeptBlockScores(const uint8_t* mask, const std::vector<float>& blocks) {
  std::vector<float> kept;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (mask[b * kBlockSize] != 0) kept.push_back(blocks[b]);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

struct CandidateTally {
  int64_t rows = 0, tie_rows = 0, tie_rows_exact = 0;
};

// Checks rows of `p` against the golden masks [rows, width] and block maxima [rows, n_blocks].
CandidateTally CheckRows(const Problem& p, const CandidateRun& run,
                         const std::vector<uint8_t>& golden_mask,
                         const std::vector<float>& golden_blocks) {
  CandidateTally tally;
  EXPECT_EQ(golden_blocks.size(), run.blocks.size());
  EXPECT_EQ(golden_mask.size(), run.mask.size());
  if (golden_blocks.size() != run.blocks.size() || golden_mask.size() != run.mask.size()) {
    return tally;
  }
  for (int64_t i = 0; i < p.rows; ++i) {
    const std::vector<float> blocks =
        indexer_test::ToFloats(run.blocks.data() + i * run.n_blocks, run.n_blocks);
    const std::vector<float> want_blocks(golden_blocks.begin() + i * run.n_blocks,
                                         golden_blocks.begin() + (i + 1) * run.n_blocks);
    EXPECT_EQ(blocks, want_blocks) << "block maxima, row " << i;
    const uint8_t* mine = run.mask.data() + i * p.width;
    const uint8_t* want = golden_mask.data() + i * p.width;
    const bool exact = std::equal(mine, mine + p.width, want);
    ++tally.rows;
    if (indexer_test::HasBoundaryTie(want_blocks, std::min(kTopkBlocks, run.n_blocks))) {
      ++tally.tie_rows;
      tally.tie_rows_exact += exact;
      EXPECT_EQ(KeptBlockScores(mine, want_blocks), KeptBlockScores(want, want_blocks))
          << "row " << i << " (modulo ties)";
    } else {
      EXPECT_TRUE(exact) << "row " << i << " (no block-score tie)";
    }
  }
  return tally;
}

TEST_F(IndexerFixtureTest, CandidateMaskReproducesLayer4) {
  const Problem pre = Prefill(4, 1);
  const CandidateRun run = RunCandidates(pre);
  const CandidateTally t =
      CheckRows(pre, run, Load<uint8_t>("a.candidates.L4.prefill", safetensors::DType::kU8),
                Load<float>("a.topk_input.L4.block.prefill", safetensors::DType::kF32));
  EXPECT_EQ(t.rows, kPromptTokens);
  EXPECT_EQ(t.tie_rows, GoldenTieRows("L4.block", "prefill_boundary_tie_rows"));
  CandidateTally dec;
  for (int step = 1; step <= kDecodeSteps; ++step) {
    SCOPED_TRACE(testing::Message() << "decode step " << step);
    const Problem p = Decode(4, 1, step);
    const CandidateTally d = CheckRows(
        p, RunCandidates(p),
        Load<uint8_t>(absl::StrCat("a.candidates.L4.decode.", step), safetensors::DType::kU8),
        Load<float>(absl::StrCat("a.topk_input.L4.block.decode.", step), safetensors::DType::kF32));
    dec.rows += d.rows;
    dec.tie_rows += d.tie_rows;
    dec.tie_rows_exact += d.tie_rows_exact;
  }
  EXPECT_EQ(dec.tie_rows, GoldenTieRows("L4.block", "decode_boundary_tie_rows"));
  std::printf(
      "[ info ] L4 candidates: prefill %lld block-tie rows (%lld also exact), decode %lld "
      "(%lld also exact); every other row exact\n",
      static_cast<long long>(t.tie_rows), static_cast<long long>(t.tie_rows_exact),
      static_cast<long long>(dec.tie_rows), static_cast<long long>(dec.tie_rows_exact));
}

// Layer 6 consumes layer 4's mask: its golden scores are finite exactly on reachable candidate
// positions (what IndexerScoreCpu's candidate masking must produce).
TEST_F(IndexerFixtureTest, Layer6ScoresMaskedExactlyOutsideCandidates) {
  const Problem l6 = Prefill(6, 1);
  const std::vector<uint8_t> golden =
      Load<uint8_t>("a.candidates.L4.prefill", safetensors::DType::kU8);
  ASSERT_EQ(golden.size(), l6.scores.size());
  int64_t finite = 0;
  for (int64_t i = 0; i < l6.rows; ++i) {
    for (int64_t t = 0; t < l6.width; ++t) {
      const size_t e = i * l6.width + t;
      const bool masked = l6.scores[e] == indexer_test::kNegInf;
      EXPECT_EQ(masked, golden[e] == 0 || t > i) << "row " << i << " t " << t;
      finite += !masked;
    }
  }
  EXPECT_GT(finite, 0);
  for (int step = 1; step <= kDecodeSteps; ++step) {
    const Problem p = Decode(6, 1, step);
    const std::vector<uint8_t> mask =
        Load<uint8_t>(absl::StrCat("a.candidates.L4.decode.", step), safetensors::DType::kU8);
    ASSERT_EQ(mask.size(), p.scores.size());
    for (int64_t t = 0; t < p.width; ++t) {
      EXPECT_EQ(p.scores[t] == indexer_test::kNegInf, mask[t] == 0)
          << "step " << step << " t " << t;
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
