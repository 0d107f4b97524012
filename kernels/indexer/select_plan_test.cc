// The CUDA selections' split plan and GPU workspace sizes (select_plan.h): thresholds, chunks,
// CTA counts, the workspace layout's size, and the public *CudaWorkspaceBytes. Host only.
#include "kernels/indexer/select_plan.h"

#include <cstdint>

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
  EXPECT_EQ(plan.chunk, 4096);  // 256 threads x 8 positions x 2 tiles
  EXPECT_EQ(plan.ctas_per_row, 5);
  EXPECT_EQ(plan.hist_bytes, 3u * 512 * 4);
  EXPECT_EQ(plan.workspace_bytes, Expected(3, 5));
  EXPECT_EQ(IndexerTopkCudaWorkspaceBytes(3, m + 1), Expected(3, 5));
}

TEST(SelectPlanTest, TopkLongRows) {
  const SelectSplitPlan mega = PlanTopkSplit(8, int64_t{1} << 20);
  EXPECT_EQ(mega.ctas_per_row, 256);
  EXPECT_EQ(mega.workspace_bytes, Expected(8, 256));  // 32 KiB
  const SelectSplitPlan odd = PlanTopkSplit(1, 3 * (int64_t{1} << 20) + 5);
  EXPECT_EQ(odd.ctas_per_row, 769);  // 768 full chunks + 5 positions
  EXPECT_EQ(odd.chunk * (odd.ctas_per_row - 1), 3 * (int64_t{1} << 20));
  // Every chunk's counts fit the kernels' packed 16-bit halves.
  EXPECT_LT(odd.chunk, 65536);
}

TEST(SelectPlanTest, CandidatesCountBlocks) {
  const int64_t m = indexer_plan::kCandidateSplitMinItems;
  EXPECT_FALSE(PlanCandidateSplit(1, 8 * m, 8).split());  // exactly 4096 blocks
  EXPECT_EQ(PlanCandidateSplit(1, 8 * m, 8).items, m);
  const SelectSplitPlan plan = PlanCandidateSplit(2, 8 * m + 1, 8);  // 4097 blocks
  ASSERT_TRUE(plan.split());
  EXPECT_EQ(plan.chunk, 1024);  // 256 threads x 2 blocks x 2 tiles
  EXPECT_EQ(plan.ctas_per_row, 5);
  EXPECT_EQ(CandidateBlocksCudaWorkspaceBytes(2, 8 * m + 1, 8), Expected(2, 5));
  EXPECT_EQ(PlanCandidateSplit(1, int64_t{1} << 20, 8).ctas_per_row, 128);
  EXPECT_EQ(PlanCandidateSplit(1, 40000, 7).items, 5715);  // ceil(40000 / 7)
  EXPECT_LT(plan.chunk, 65536);
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
