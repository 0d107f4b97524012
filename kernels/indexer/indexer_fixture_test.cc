// IndexerTopkCpu on the golden scores of the v41-tiny run (see indexer_fixture.h): exact on every
// row without a tie at the k-th value, equal modulo ties on the others.
#include "kernels/indexer/indexer_fixture.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/indexer/indexer.h"
#include "kernels/indexer/indexer_test_util.h"

namespace flashserve::kernels {
namespace {

using indexer_test::IndexerFixtureTest;
using indexer_test::kDecodeSteps;
using indexer_test::kIndexTopk;
using indexer_test::kPromptTokens;
using indexer_test::Problem;

struct TopkTally {
  int64_t rows = 0, tie_rows = 0, tie_rows_exact = 0;
};

// Runs the top-k on `p`, checks it against `golden` [rows, 16] and tallies the ties.
TopkTally CheckTopk(const Problem& p, const std::vector<int32_t>& golden) {
  const int64_t k = IndexerTopkK(kIndexTopk, p.width);
  EXPECT_EQ(k, kIndexTopk);
  std::vector<int32_t> got(p.rows * k);
  std::vector<uint64_t> ws(IndexerTopkWorkspaceBytes(p.width, 1) / 8);
  IndexerTopkParams params{.tokens = p.rows,
                           .width = p.width,
                           .start_pos = p.start_pos,
                           .ratio = p.ratio,
                           .index_topk = kIndexTopk,
                           .offset = p.offset,
                           .scores = p.scores.data(),
                           .scores_stride = p.width,
                           .indices = got.data(),
                           .indices_stride = k,
                           .workspace = ws.data(),
                           .workspace_bytes = ws.size() * 8};
  const absl::Status s = IndexerTopkCpu(params, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  TopkTally tally;
  for (int64_t i = 0; i < p.rows; ++i) {
    const std::vector<float> row = indexer_test::ToFloats(p.scores.data() + i * p.width, p.width);
    // A −1 golden entry stands for a position past the reach: those scores must all be −inf.
    const int64_t reach = indexer_test::ReachOf(p.start_pos, p.ratio, i);
    for (int64_t t = reach; t < p.width; ++t) EXPECT_EQ(row[t], -INFINITY) << "row " << i;
    const std::vector<int32_t> mine(got.begin() + i * k, got.begin() + (i + 1) * k);
    const std::vector<int32_t> want(golden.begin() + i * k, golden.begin() + (i + 1) * k);
    ++tally.rows;
    if (indexer_test::HasBoundaryTie(row, k)) {
      ++tally.tie_rows;
      tally.tie_rows_exact += mine == want;
      EXPECT_EQ(indexer_test::CompareModuloTies(mine, want, row, p.offset), "") << "row " << i;
    } else {
      EXPECT_EQ(mine, want) << "row " << i << " (no boundary tie)";
    }
  }
  return tally;
}

TEST_F(IndexerFixtureTest, TopkReproducesGoldenIndices) {
  const struct {
    int layer;
    int64_t ratio;
  } layers[] = {{2, 2}, {4, 1}, {6, 1}};
  for (const auto& l : layers) {
    SCOPED_TRACE(testing::Message() << "layer " << l.layer);
    const std::string key = absl::StrCat("L", l.layer, ".index");
    const std::vector<int32_t> golden_prefill =
        Load<int32_t>(absl::StrCat("a.topk_idxs.L", l.layer, ".prefill"), safetensors::DType::kI32);
    const TopkTally pre = CheckTopk(Prefill(l.layer, l.ratio), golden_prefill);
    EXPECT_EQ(pre.rows, kPromptTokens);
    EXPECT_EQ(pre.tie_rows, GoldenTieRows(key, "prefill_boundary_tie_rows"));
    const std::vector<int32_t> golden_decode =
        Load<int32_t>(absl::StrCat("a.topk_idxs.L", l.layer, ".decode"), safetensors::DType::kI32);
    TopkTally dec;
    for (int step = 1; step <= kDecodeSteps; ++step) {
      const std::vector<int32_t> want(golden_decode.begin() + (step - 1) * kIndexTopk,
                                      golden_decode.begin() + step * kIndexTopk);
      const TopkTally t = CheckTopk(Decode(l.layer, l.ratio, step), want);
      dec.rows += t.rows;
      dec.tie_rows += t.tie_rows;
      dec.tie_rows_exact += t.tie_rows_exact;
    }
    EXPECT_EQ(dec.tie_rows, GoldenTieRows(key, "decode_boundary_tie_rows"));
    std::printf(
        "[ info ] L%d top-k: prefill %lld tie rows (%lld also exact), decode %lld tie rows "
        "(%lld also exact); every other row exact\n",
        l.layer, static_cast<long long>(pre.tie_rows), static_cast<long long>(pre.tie_rows_exact),
        static_cast<long long>(dec.tie_rows), static_cast<long long>(dec.tie_rows_exact));
  }
}

}  // namespace
}  // namespace flashserve::kernels
