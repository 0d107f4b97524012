// The Engram hash multipliers (spec §4.8, fixture README quirk 7): for each Engram layer, one odd
// multiplier per look-back slot k = 0..max_ngram_size-1, drawn as
//   2 * np.random.default_rng(10007 * layer_id).integers(0, B, size=max_ngram_size, int64) + 1
// with B = max(1, (int64_max // compressed_vocab_size) // 2), which keeps every
// compressed_id * multiplier product inside int64.
//
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::model::engram {

// The bound B above. Errors: InvalidArgument when compressed_vocab_size < 1.
absl::StatusOr<int64_t> HashMultiplierBound(int64_t compressed_vocab_size);

// Multipliers, flattened [engram layer][slot] (slot count = max_ngram_size). Errors:
// InvalidArgument for compressed_vocab_size < 1, max_ngram_size < 1 or a negative layer id;
// Unimplemented when the bound falls in numpy's 32-bit path (compressed vocab above ~1e9).
absl::StatusOr<std::vector<int64_t>> ComputeHashMultipliers(std::span<const int> layer_ids,
                                                            int max_ngram_size,
                                                            int64_t compressed_vocab_size);

}  // namespace flashserve::model::engram
