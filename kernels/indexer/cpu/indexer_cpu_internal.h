// Helpers shared by the indexer's CPU bodies (cpu/*.cc only; not a public header).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/base/thread_pool.h"

namespace flashserve::kernels::indexer_cpu {

inline constexpr uint16_t kBf16NegInf = 0xFF80;
inline constexpr uint16_t kBf16PosInf = 0x7F80;

// Positions row i may see: the reference's compress_lens, (start_pos + i + 1) // ratio.
inline int64_t Reach(int64_t start_pos, int64_t ratio, int64_t row) {
  return (start_pos + row + 1) / ratio;
}

// A 16-bit key whose unsigned order is the numeric order of bf16 values, with −0 and +0 equal
// (torch compares values, so they tie). −inf maps to 0x007F, +inf to 0xFF80.
inline uint32_t OrderKey(uint16_t bf16_bits) {
  if (bf16_bits == 0x8000) bf16_bits = 0;
  return (bf16_bits & 0x8000) ? static_cast<uint32_t>(~bf16_bits & 0xFFFF)
                              : static_cast<uint32_t>(bf16_bits | 0x8000);
}

// Selection entry: larger = better value, and among equal values the lower position, so every
// entry is distinct and the selection deterministic (ties at the k-th value go to low positions).
inline uint64_t SelectionEntry(uint32_t order_key, int64_t pos) {
  return (static_cast<uint64_t>(order_key) << 32) |
         static_cast<uint64_t>(0xFFFFFFFFu - static_cast<uint32_t>(pos));
}
inline int64_t EntryPosition(uint64_t entry) {
  return static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(entry & 0xFFFFFFFFu));
}

// Runs fn(slot, row_begin, row_end) over [0, rows) split into `slots` contiguous ranges, on the
// pool (or inline). Each slot index is handed to exactly one call, so per-slot workspaces are
// never shared.
inline void ForRowSlots(ThreadPool* pool, int64_t rows, int64_t slots,
                        const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  auto run_slots = [&](size_t begin, size_t end) {
    for (auto s = static_cast<int64_t>(begin); s < static_cast<int64_t>(end); ++s) {
      fn(s, rows * s / slots, rows * (s + 1) / slots);
    }
  };
  if (pool == nullptr || slots <= 1) {
    run_slots(0, static_cast<size_t>(std::max<int64_t>(slots, 1)));
    return;
  }
  pool->ParallelFor(static_cast<size_t>(slots), 1, run_slots);
}

// How many row slots a call uses: bounded by the workspace, the rows and the pool.
inline int64_t SlotCount(ThreadPool* pool, int64_t rows, size_t workspace_bytes,
                         size_t slot_bytes) {
  int64_t slots = slot_bytes == 0 ? rows : static_cast<int64_t>(workspace_bytes / slot_bytes);
  const int64_t threads = pool == nullptr ? 1 : static_cast<int64_t>(pool->size()) + 1;
  return std::max<int64_t>(1, std::min({slots, rows, threads}));
}

}  // namespace flashserve::kernels::indexer_cpu
