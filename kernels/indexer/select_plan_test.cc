// The CUDA selections' split plan and GPU workspace sizes (select_plan.h): thresholds, chunks,
// CTA counts, the workspace layout's size, and the public *CudaWorkspaceBytes. Host only.
#include "kernels/indexer/select_plan.h"

#include <cstdint>
#include <iterator>

#include "gtest/gtest.h"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

using indexer_plan::PlanCandidateSplit;
using indexer_plan::PlanTopkSplit;
using indexer_plan::SelectSplitPlan;

// Workspace of a split plan: 512 histogram words plus 2 count words per CTA, per row.
size_t Expected(int64_t tokens, int64_t ctas) {
  return static_cast<size_t>(tokens) * (512 + 2 * static_cast<size_t>(ctas)) * 4;
}

TEST(SelectPlanTest, TopkSplitsAboveTheThreshold) {
  const int64_t m = indexer_plan::kTopkSplitMinItems;
  EXPECT_EQ(m, 16384);
  for (int64_t width : {int64_t{1}, int64_t{512}, m - 1, m}) {
    const SelectSplitPlan plan = PlanTopkSplit(3, width);
    EXPECT_FALSE(plan.split()) << width;
    EXPECT_EQ(plan.items, width);
    EXPECT_EQ(plan.workspace_bytes, 0u);
    EXPECT_EQ(IndexerTopkCudaWorkspaceBytes(3, width), 0u);
  }
  const SelectSplitPlan plan = PlanTopkSplit(3, m + 1);
  ASSERT_TRUE(plan.split());
  EXPECT_EQ(plan.chunk, 2048);  // 256 threads x 8 positions x 1 tile: 27 CTAs in all
  EXPECT_EQ(plan.ctas_per_row, 9);
  EXPECT_EQ(plan.hist_bytes, 3u * 512 * 4);
  EXPECT_EQ(plan.workspace_bytes, Expected(3, 9));
  EXPECT_EQ(IndexerTopkCudaWorkspaceBytes(3, m + 1), Expected(3, 9));
}

TEST(SelectPlanTest, TopkLongRows) {
  // 2^20 positions: 512 one-tile CTAs per row are more than kOneTileMaxCtas, so two tiles; the
  // workspace counts the one-tile CTAs.
  const SelectSplitPlan mega = PlanTopkSplit(8, int64_t{1} << 20);
  EXPECT_EQ(mega.chunk, 4096);
  EXPECT_EQ(mega.ctas_per_row, 256);
  EXPECT_EQ(mega.workspace_bytes, Expected(8, 512));  // 48 KiB
  EXPECT_EQ(PlanTopkSplit(1, int64_t{1} << 20).ctas_per_row, 256);
  const SelectSplitPlan odd = PlanTopkSplit(1, 3 * (int64_t{1} << 20) + 5);
  EXPECT_EQ(odd.ctas_per_row, 769);  // 768 full chunks + 5 positions
  EXPECT_EQ(odd.chunk * (odd.ctas_per_row - 1), 3 * (int64_t{1} << 20));
  // Batched decode rows of 65,536 positions: 32 one-tile CTAs each, one tile up to 8 rows.
  EXPECT_EQ(PlanTopkSplit(8, 65536).chunk, 2048);
  EXPECT_EQ(PlanTopkSplit(8, 65536).ctas_per_row, 32);
  EXPECT_EQ(PlanTopkSplit(9, 65536).chunk, 4096);
  EXPECT_EQ(PlanTopkSplit(9, 65536).ctas_per_row, 16);
  EXPECT_EQ(PlanTopkSplit(64, 65536).ctas_per_row, 16);
  // Every chunk's counts fit the kernels' packed 16-bit halves.
  EXPECT_LT(odd.chunk, 65536);
}

TEST(SelectPlanTest, CandidatesCountBlocks) {
  const int64_t m = indexer_plan::kCandidateSplitMinItems;
  EXPECT_FALSE(PlanCandidateSplit(1, 8 * m, 8).split());  // exactly 4096 blocks
  EXPECT_EQ(PlanCandidateSplit(1, 8 * m, 8).items, m);
  const SelectSplitPlan plan = PlanCandidateSplit(2, 8 * m + 1, 8);  // 4097 blocks
  ASSERT_TRUE(plan.split());
  EXPECT_EQ(plan.chunk, 512);  // 256 threads x 2 blocks x 1 tile
  EXPECT_EQ(plan.ctas_per_row, 9);
  EXPECT_EQ(CandidateBlocksCudaWorkspaceBytes(2, 8 * m + 1, 8), Expected(2, 9));
  // 2^20 positions = 131,072 blocks: 256 one-tile CTAs for one row, 128 two-tile CTAs per row for
  // two.
  EXPECT_EQ(PlanCandidateSplit(1, int64_t{1} << 20, 8).ctas_per_row, 256);
  EXPECT_EQ(PlanCandidateSplit(2, int64_t{1} << 20, 8).ctas_per_row, 128);
  EXPECT_EQ(PlanCandidateSplit(2, int64_t{1} << 20, 8).chunk, 1024);
  EXPECT_EQ(PlanCandidateSplit(1, 40000, 7).items, 5715);  // ceil(40000 / 7)
  EXPECT_LT(plan.chunk, 65536);
}

// A workspace sized for the largest call holds every call with fewer rows or a shorter width,
// whichever tiling each call gets.
TEST(SelectPlanTest, WorkspaceGrowsWithRowsAndWidth) {
  const int64_t widths[] = {16385, 40000, 65536, 300000, 524288, 524289, 600000, int64_t{1} << 20};
  for (int64_t t = 1; t <= 12; ++t) {
    for (size_t i = 0; i < std::size(widths); ++i) {
      const size_t here = IndexerTopkCudaWorkspaceBytes(t, widths[i]);
      const size_t cand = CandidateBlocksCudaWorkspaceBytes(t, 8 * widths[i], 8);
      EXPECT_GE(IndexerTopkCudaWorkspaceBytes(t + 1, widths[i]), here) << t << " " << widths[i];
      EXPECT_GE(CandidateBlocksCudaWorkspaceBytes(t + 1, 8 * widths[i], 8), cand);
      if (i + 1 < std::size(widths)) {
        EXPECT_GE(IndexerTopkCudaWorkspaceBytes(t, widths[i + 1]), here) << t << " " << widths[i];
        EXPECT_GE(CandidateBlocksCudaWorkspaceBytes(t, 8 * widths[i + 1], 8), cand);
      }
      // And it holds the counts of the tiling the call gets.
      const SelectSplitPlan plan = PlanTopkSplit(t, widths[i]);
      EXPECT_GE(here, Expected(t, plan.ctas_per_row));
    }
  }
}

TEST(SelectPlanTest, EmptyCallsNeedNothing) {
  EXPECT_EQ(IndexerTopkCudaWorkspaceBytes(0, int64_t{1} << 20), 0u);
  EXPECT_EQ(IndexerTopkCudaWorkspaceBytes(4, 0), 0u);
  EXPECT_EQ(CandidateBlocksCudaWorkspaceBytes(0, int64_t{1} << 20, 8), 0u);
  EXPECT_EQ(CandidateBlocksCudaWorkspaceBytes(1, int64_t{1} << 20, 0), 0u);
  EXPECT_FALSE(PlanTopkSplit(-1, 100000).split());
}

}  // namespace
}  // namespace flashserve::kernels
