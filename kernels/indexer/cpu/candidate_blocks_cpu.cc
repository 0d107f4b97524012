// CPU body of the candidate-block selection (spec §4.5 step 5, select_candidate_blocks).
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

using indexer_cpu::OrderKey;

// One row. `entries` is this slot's workspace (n_blocks entries).
void SelectRow(const CandidateBlocksParams& p, int64_t row, int64_t n_blocks, uint64_t* entries) {
  const uint16_t* scores = p.scores + row * p.scores_stride;
  const int64_t bs = p.block_size;
  const int64_t pinned = (indexer_cpu::Reach(p.start_pos, p.ratio, row) - 1) / bs;
  const uint32_t neg_inf_key = OrderKey(indexer_cpu::kBf16NegInf);
  for (int64_t b = 0; b < n_blocks; ++b) {
    // The max of the block; −inf padding past `width` never raises it. Keep the bits of the
    // first maximal element (only ±0 compare equal with different bits; both order alike).
    uint16_t best = indexer_cpu::kBf16NegInf;
    const int64_t end = std::min(p.width, (b + 1) * bs);
    for (int64_t t = b * bs; t < end; ++t) {
      if (OrderKey(scores[t]) > OrderKey(best)) best = scores[t];
    }
    if (b == pinned) best = indexer_cpu::kBf16PosInf;
    if (p.block_scores != nullptr) p.block_scores[row * p.block_scores_stride + b] = best;
    entries[b] = indexer_cpu::SelectionEntry(OrderKey(best), b);
  }
  const int64_t k = std::min(p.topk_blocks, n_blocks);
  if (k < n_blocks) {
    std::nth_element(entries, entries + (k - 1), entries + n_blocks, std::greater<uint64_t>());
  }
  uint8_t* mask = p.candidates + row * p.candidates_stride;
  std::fill(mask, mask + p.width, uint8_t{0});
  for (int64_t i = 0; i < k; ++i) {
    if ((entries[i] >> 32) <= neg_inf_key) continue;  // a picked block of −inf is not kept
    const int64_t b = indexer_cpu::EntryPosition(entries[i]);
    std::fill(mask + b * bs, mask + std::min(p.width, (b + 1) * bs), uint8_t{1});
  }
}

}  // namespace

absl::Status CandidateBlocksCpu(const CandidateBlocksParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0) return absl::OkStatus();
  const int64_t n_blocks = CandidateBlockCount(p.width, p.block_size);
  const size_t slot_bytes = CandidateBlocksWorkspaceBytes(p.width, p.block_size, 1);
  const int64_t slots = indexer_cpu::SlotCount(pool, p.tokens, p.workspace_bytes, slot_bytes);
  auto* workspace = static_cast<uint64_t*>(p.workspace);
  indexer_cpu::ForRowSlots(pool, p.tokens, slots, [&](int64_t slot, int64_t begin, int64_t end) {
    uint64_t* entries = workspace + slot * n_blocks;
    for (int64_t row = begin; row < end; ++row) SelectRow(p, row, n_blocks, entries);
  });
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
