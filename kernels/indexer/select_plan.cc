// The CUDA selections' split plan and GPU workspace sizes (select_plan.h); no CUDA here, so the
// host tests cover it.
#include "kernels/indexer/select_plan.h"

#include <cstddef>
#include <cstdint>

#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace indexer_plan {

SelectSplitPlan PlanSelectSplit(int64_t tokens, int64_t items, int64_t items_per_thread,
                                int64_t split_min_items) {
  SelectSplitPlan plan;
  if (tokens <= 0 || items <= 0) return plan;
  plan.items = items;
  if (items <= split_min_items) return plan;
  const int64_t tile = kSplitThreads * items_per_thread;
  const int64_t one_tile_ctas = (items + tile - 1) / tile;
  plan.chunk = one_tile_ctas <= kOneTileMaxCtas / tokens ? tile : tile * kTilesPerCta;
  plan.ctas_per_row = (items + plan.chunk - 1) / plan.chunk;
  const auto rows = static_cast<size_t>(tokens);
  plan.hist_bytes = rows * static_cast<size_t>(kHistWords) * sizeof(uint32_t);
  plan.workspace_bytes =
      plan.hist_bytes + rows * static_cast<size_t>(one_tile_ctas) * 2 * sizeof(uint32_t);
  return plan;
}

SelectSplitPlan PlanTopkSplit(int64_t tokens, int64_t width) {
  return PlanSelectSplit(tokens, width, kTopkItemsPerThread, kTopkSplitMinItems);
}

SelectSplitPlan PlanCandidateSplit(int64_t tokens, int64_t width, int64_t block_size) {
  return PlanSelectSplit(tokens, CandidateBlockCount(width, block_size), kCandidateItemsPerThread,
                         kCandidateSplitMinItems);
}

}  // namespace indexer_plan

size_t IndexerTopkCudaWorkspaceBytes(int64_t tokens, int64_t width) {
  return indexer_plan::PlanTopkSplit(tokens, width).workspace_bytes;
}

size_t CandidateBlocksCudaWorkspaceBytes(int64_t tokens, int64_t width, int64_t block_size) {
  return indexer_plan::PlanCandidateSplit(tokens, width, block_size).workspace_bytes;
}

}  // namespace flashserve::kernels
