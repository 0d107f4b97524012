// Index lists for SparseAttnCpu: the sliding-window entries of prefill, decode and chunked
// prefill, and their concatenation with the compressed top-k entries (model spec §4.3 steps 2–3).
// An index list is row-major int32 [rows, width]; each entry is a row of the KV pool handed to
// SparseAttnCpu, or -1 for an unused slot. The exact list — order, -1 slots and width — decides
// the bits of the attention output (its 64-entry blocking, §10 item 7), so these reproduce the
// reference's lists exactly.
//
// All functions are pure: no state, thread-safe. The Fill* forms write into caller memory and
// allocate nothing (for the hot path); the Build* forms return an owning IndexList.
// Errors: InvalidArgumentError naming the argument (negative sizes, window < 1, wrong span size,
// entries that would not fit int32).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace flashserve::kernels {

// An owning index list: entry (r, e) at ids[r * width + e].
struct IndexList {
  int64_t rows = 0;
  int64_t width = 0;
  std::vector<int32_t> ids;
};

// ---- Prefill from position 0 (the reference's only prefill) ----
// KV pool rows 0..s-1 hold the window KV of positions 0..s-1. width = min(s, window); row p lists
// max(0, p − window + 1) + i for i = 0..width−1, entries > p replaced by -1 (so -1s trail).
int64_t PrefillWindowWidth(int64_t s, int64_t window);
absl::Status FillPrefillWindowIndices(int64_t s, int64_t window, absl::Span<int32_t> out);
absl::StatusOr<IndexList> BuildPrefillWindowIndices(int64_t s, int64_t window);

// ---- Decode of one token at start_pos (its KV already written to ring slot start_pos % W) ----
// KV pool rows 0..window-1 are the ring slots. One row of width `window`: slots
// (start_pos+1) % W … W−1, 0 … start_pos % W (oldest first); while the ring is filling
// (start_pos < W − 1) slots > start_pos are -1 (so -1s lead).
absl::Status FillDecodeWindowIndices(int64_t start_pos, int64_t window, absl::Span<int32_t> out);
absl::StatusOr<IndexList> BuildDecodeWindowIndices(int64_t start_pos, int64_t window);

// ---- Chunked prefill on an existing ring (not in the reference; defined here) ----
// Positions start_pos .. start_pos+s−1, KV pool = [ring: `window` rows | chunk: s rows], where
// ring slot r holds the position q < start_pos with q % window == r (the ring as it was BEFORE
// this chunk; update it only after the attention) and chunk row i holds position start_pos + i.
// Row i (position p = start_pos + i) lists positions max(0, p − window + 1) … p in ascending
// order — ring slot q % window for q < start_pos, pool row window + (q − start_pos) otherwise —
// then -1 up to `width`. Valid entries thus sit at the same list positions as in the one-shot
// prefill list, so with width = PrefillWindowWidth(total_len, window) of the one-shot prompt the
// rows equal the one-shot rows (up to the pool renumbering) and, with the same compressed entries
// appended, the attention output is bit-identical. Requires
// min(start_pos + s, window) <= width <= window; width = window is the convention when the total
// length is unknown (then the output matches one-shot prefill of prompts ≥ window bit for bit).
absl::Status FillChunkWindowIndices(int64_t start_pos, int64_t s, int64_t window, int64_t width,
                                    absl::Span<int32_t> out);
absl::StatusOr<IndexList> BuildChunkWindowIndices(int64_t start_pos, int64_t s, int64_t window,
                                                  int64_t width);

// ---- Window ∪ compressed top-k ----
// Row r = window row r, then compressed row r with every entry c >= 0 replaced by c + offset
// (-1 stays -1). `offset` is the number of window rows in the KV pool in front of the compressed
// rows: s in prefill, window in decode, window + s in chunked prefill. The compressed lists are
// the indexer's top-k (positions in the compressed cache, ascending, -1 last); width may be 0.
// Spans are contiguous [rows, width] lists; out has rows * (window_width + compressed_width).
absl::Status FillConcatIndices(int64_t rows, absl::Span<const int32_t> window, int64_t window_width,
                               absl::Span<const int32_t> compressed, int64_t compressed_width,
                               int64_t offset, absl::Span<int32_t> out);
absl::StatusOr<IndexList> ConcatIndices(const IndexList& window, const IndexList& compressed,
                                        int64_t offset);

}  // namespace flashserve::kernels
