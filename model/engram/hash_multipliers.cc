#include "model/engram/hash_multipliers.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "model/engram/numpy_random.h"

namespace flashserve::model::engram {

absl::StatusOr<int64_t> HashMultiplierBound(int64_t compressed_vocab_size) {
  if (compressed_vocab_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: compressed vocab size must be >= 1, got ", compressed_vocab_size));
  }
  return std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
}

absl::StatusOr<std::vector<int64_t>> ComputeHashMultipliers(std::span<const int> layer_ids,
                                                            int max_ngram_size,
                                                            int64_t compressed_vocab_size) {
  ASSIGN_OR_RETURN(const int64_t bound, HashMultiplierBound(compressed_vocab_size));
  if (max_ngram_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: max_ngram_size must be >= 1, got ", max_ngram_size));
  }
  std::vector<int64_t> multipliers;
  multipliers.reserve(layer_ids.size() * max_ngram_size);
  for (int layer_id : layer_ids) {
    if (layer_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("engram: negative layer id ", layer_id));
    }
    Pcg64 rng = Pcg64::FromSeed(uint64_t{10007} * static_cast<uint64_t>(layer_id));
    for (int slot = 0; slot < max_ngram_size; ++slot) {
      ASSIGN_OR_RETURN(const int64_t u, NumpyIntegersInt64(rng, 0, bound),
                       absl::StrCat("engram multipliers of layer ", layer_id));
      // u < bound <= int64_max / 2, so 2u + 1 cannot overflow.
      multipliers.push_back(2 * u + 1);
    }
  }
  return multipliers;
}

}  // namespace flashserve::model::engram
