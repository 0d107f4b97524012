// CPU body of the indexer top-k (spec §4.5 step 6): partial selection with nth_element over a
// caller workspace, then the chosen positions sorted ascending.
#include <algorithm>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "kernels/indexer/cpu/indexer_cpu_internal.h"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

// One row. `entries` is this slot's workspace (width entries).
void TopkRow(const IndexerTopkParams& p, int64_t row, int64_t k, uint64_t* entries) {
  const uint16_t* scores = p.scores + row * p.scores_stride;
  // The whole width takes part, as in the reference (which selects first and only then drops
  // positions past the row's reach); the scorer has set those to −inf.
  for (int64_t t = 0; t < p.width; ++t) {
    entries[t] = indexer_cpu::SelectionEntry(indexer_cpu::OrderKey(scores[t]), t);
  }
  if (k < p.width) {
    std::nth_element(entries, entries + (k - 1), entries + p.width, std::greater<uint64_t>());
  }
  int32_t* out = p.indices + row * p.indices_stride;
  for (int64_t i = 0; i < k; ++i) {
    out[i] = static_cast<int32_t>(indexer_cpu::EntryPosition(entries[i]));
  }
  std::sort(out, out + k);
  // Positions past the reach are the largest, so the −1s trail.
  const int64_t reach = indexer_cpu::Reach(p.start_pos, p.ratio, row);
  for (int64_t i = 0; i < k; ++i) {
    out[i] = out[i] >= reach ? -1 : static_cast<int32_t>(out[i] + p.offset);
  }
}

}  // namespace

absl::Status IndexerTopkCpu(const IndexerTopkParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  const int64_t k = IndexerTopkK(p.index_topk, p.width);
  const size_t slot_bytes = IndexerTopkWorkspaceBytes(p.width, 1);
  const int64_t slots = indexer_cpu::SlotCount(pool, p.tokens, p.workspace_bytes, slot_bytes);
  auto* workspace = static_cast<uint64_t*>(p.workspace);
  indexer_cpu::ForRowSlots(pool, p.tokens, slots, [&](int64_t slot, int64_t begin, int64_t end) {
    uint64_t* entries = workspace + slot * p.width;
    for (int64_t row = begin; row < end; ++row) TopkRow(p, row, k, entries);
  });
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
