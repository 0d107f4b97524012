#include "model/engram/ngram_hasher.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "model/engram/hash_multipliers.h"

namespace flashserve::model::engram {
namespace {

// torch/numpy int64 multiply: the product wraps modulo 2^64.
int64_t WrappingMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// torch's `%` on int64 (remainder): the result takes the divisor's sign.
int64_t FlooredMod(int64_t x, int64_t m) {
  const int64_t r = x % m;
  return r < 0 ? r + m : r;
}

}  // namespace

absl::StatusOr<NgramHasher> NgramHasher::Create(EngramLayout layout,
                                                std::vector<int64_t> multipliers,
                                                CompressedTokenMap token_map,
                                                int32_t pad_token_id) {
  if (layout.max_ngram_size < 2 || layout.max_ngram_size > kMaxNgramSize) {
    return absl::InvalidArgumentError(absl::StrCat("engram: max_ngram_size ", layout.max_ngram_size,
                                                   " not in [2, ", kMaxNgramSize, "]"));
  }
  const size_t columns = static_cast<size_t>(layout.num_layers()) * layout.num_columns();
  if (layout.n_heads < 1 || layout.num_layers() < 1 || layout.primes.size() != columns ||
      layout.offsets.size() != columns) {
    return absl::InvalidArgumentError("engram: malformed prime layout");
  }
  for (int64_t p : layout.primes) {
    if (p < 1) return absl::InvalidArgumentError(absl::StrCat("engram: bucket modulus ", p));
  }
  if (multipliers.size() != static_cast<size_t>(layout.num_layers()) * layout.max_ngram_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: ", multipliers.size(), " multipliers, expected ",
                     layout.num_layers() * layout.max_ngram_size, " (layers x max_ngram_size)"));
  }
  if (token_map.class_of.empty() || token_map.num_classes < 1) {
    return absl::InvalidArgumentError("engram: empty token map");
  }
  for (size_t id = 0; id < token_map.class_of.size(); ++id) {
    const int32_t c = token_map.class_of[id];
    if (c < 0 || c >= token_map.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat("engram: token id ", id, " maps to class ", c,
                                                     " outside [0, ", token_map.num_classes, ")"));
    }
  }
  if (pad_token_id < 0 || static_cast<size_t>(pad_token_id) >= token_map.class_of.size()) {
    return absl::InvalidArgumentError(absl::StrCat("engram: pad token id ", pad_token_id,
                                                   " outside the token map (",
                                                   token_map.class_of.size(), " ids)"));
  }
  NgramHasher hasher;
  hasher.pad_class_ = token_map.class_of[pad_token_id];
  hasher.layout_ = std::move(layout);
  hasher.multipliers_ = std::move(multipliers);
  hasher.token_map_ = std::move(token_map);
  return hasher;
}

absl::StatusOr<NgramHasher> NgramHasher::FromConfig(const ModelConfig& config,
                                                    CompressedTokenMap token_map) {
  if (token_map.num_classes != config.engram_compressed_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engram: the token map has ", token_map.num_classes,
        " classes but engram_compressed_vocab_size is ", config.engram_compressed_vocab_size));
  }
  ASSIGN_OR_RETURN(EngramLayout layout, BuildEngramLayout(config));
  ASSIGN_OR_RETURN(
      std::vector<int64_t> multipliers,
      ComputeHashMultipliers(layout.layer_ids, layout.max_ngram_size, token_map.num_classes));
  return Create(std::move(layout), std::move(multipliers), std::move(token_map),
                config.engram_pad_id);
}

void NgramHasher::HashSlots(const int64_t* slots, int64_t* out) const {
  const int max_n = layout_.max_ngram_size;
  const int heads = layout_.n_heads;
  const int columns = layout_.num_columns();
  for (int layer = 0; layer < layout_.num_layers(); ++layer) {
    const int64_t* mult = &multipliers_[static_cast<size_t>(layer) * max_n];
    const int64_t* primes = &layout_.primes[static_cast<size_t>(layer) * columns];
    const int64_t* offsets = &layout_.offsets[static_cast<size_t>(layer) * columns];
    int64_t* row = out + static_cast<size_t>(layer) * columns;
    int64_t rolling = WrappingMul(slots[0], mult[0]);
    for (int k = 1; k < max_n; ++k) {
      rolling ^= WrappingMul(slots[k], mult[k]);
      const int base = (k - 1) * heads;
      for (int head = 0; head < heads; ++head) {
        row[base + head] = FlooredMod(rolling, primes[base + head]) + offsets[base + head];
      }
    }
  }
}

absl::Status NgramHasher::HashNext(int32_t token_id, bool dead, NgramLookback& lookback,
                                   std::span<int64_t> out) const {
  if (token_id < 0 || static_cast<size_t>(token_id) >= token_map_.class_of.size()) {
    return absl::InvalidArgumentError(absl::StrCat("engram: token id ", token_id,
                                                   " outside the token map (",
                                                   token_map_.class_of.size(), " ids)"));
  }
  if (out.size() != static_cast<size_t>(ids_per_position())) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: output holds ", out.size(), " ids, expected ", ids_per_position()));
  }
  const int max_n = layout_.max_ngram_size;
  const int64_t current = Compress(token_id, dead);
  std::array<int64_t, kMaxNgramSize> slots{};
  bool blocked = false;
  for (int k = 0; k < max_n; ++k) {
    const int64_t source = k == 0 ? current : lookback.recent[k - 1];
    blocked = blocked || lookback.position < k || source == kDeadToken;
    slots[k] = blocked ? pad_class_ : source;
  }
  HashSlots(slots.data(), out.data());
  for (int j = max_n - 2; j > 0; --j) lookback.recent[j] = lookback.recent[j - 1];
  lookback.recent[0] = current;
  ++lookback.position;
  return absl::OkStatus();
}

absl::Status NgramHasher::HashChunk(std::span<const int32_t> token_ids,
                                    std::span<const uint8_t> dead, NgramLookback& lookback,
                                    std::span<int64_t> out) const {
  const size_t len = token_ids.size();
  if (!dead.empty() && dead.size() != len) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: ", dead.size(), " dead flags for ", len, " tokens"));
  }
  if (out.size() != len * ids_per_position()) {
    return absl::InvalidArgumentError(absl::StrCat("engram: output holds ", out.size(),
                                                   " ids, expected ", len * ids_per_position()));
  }
  for (size_t i = 0; i < len; ++i) {
    if (token_ids[i] < 0 || static_cast<size_t>(token_ids[i]) >= token_map_.class_of.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("engram: token id ", token_ids[i], " at chunk index ", i,
                       " outside the token map (", token_map_.class_of.size(), " ids)"));
    }
  }
  auto compressed_at = [&](size_t i) { return Compress(token_ids[i], !dead.empty() && dead[i]); };

  // Gather form: slot k of chunk index i reads the chunk itself or, before the chunk start, the
  // look-back (index i - k < 0 maps to recent[k - i - 1]).
  const int max_n = layout_.max_ngram_size;
  std::array<int64_t, kMaxNgramSize> slots{};
  for (size_t i = 0; i < len; ++i) {
    const int64_t position = lookback.position + static_cast<int64_t>(i);
    bool blocked = false;
    for (int k = 0; k < max_n; ++k) {
      blocked = blocked || position < k;
      if (!blocked) {
        const int64_t back = static_cast<int64_t>(i) - k;
        const int64_t source = back >= 0 ? compressed_at(static_cast<size_t>(back))
                                         : lookback.recent[static_cast<size_t>(-back - 1)];
        blocked = source == kDeadToken;
        slots[k] = source;
      }
      if (blocked) slots[k] = pad_class_;
    }
    HashSlots(slots.data(), out.data() + i * ids_per_position());
  }

  // New recent[j] = token at new_position - 1 - j: from the chunk when j < len, else the old
  // recent[j - len]. Descending j reads old entries before they are overwritten.
  for (int j = max_n - 2; j >= 0; --j) {
    const size_t uj = static_cast<size_t>(j);
    if (uj < len) {
      lookback.recent[uj] = compressed_at(len - 1 - uj);
    } else {
      lookback.recent[uj] = lookback.recent[uj - len];
    }
  }
  lookback.position += static_cast<int64_t>(len);
  return absl::OkStatus();
}

}  // namespace flashserve::model::engram
