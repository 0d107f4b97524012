// Engram n-gram hashing (spec §4.8; the reference's NgramHashState): for every position, the hash
// ids (embedding-table rows) of the 2..max_ngram_size-grams that end there, for each Engram layer.
//
//   ASSIGN_OR_RETURN(NgramHasher hasher, NgramHasher::FromConfig(config, std::move(token_map)));
//   NgramLookback lookback;  // one per sequence, lives in the session state
//   std::vector<int64_t> ids(prompt.size() * hasher.ids_per_position());
//   RETURN_IF_ERROR(hasher.HashChunk(prompt, image_mask, lookback, ids));  // prefill chunk(s)
//   RETURN_IF_ERROR(hasher.HashNext(token, /*dead=*/false, lookback, step_ids));  // decode
//
// Output layout per position: [engram layer][column], column = (n - 2) * n_heads + head, with the
// layer's table offset already added (so each value is a row of that layer's engram.embed).
//
// Hash of one position p (int64 arithmetic exactly as the reference's torch int64 tensors):
// slot k = 0..max_ngram_size-1 holds the compressed id of the token at p - k; once k > p or a
// dead token (an image-span token) is met, that slot and every older one hold the pad class.
// rolling = t0 * m0; for n = 2..max: rolling ^= t_{n-1} * m_{n-1} (products wrap modulo 2^64 as
// signed int64), and column (n, head) = floor_mod(rolling, prime) + offset.
//
// Thread safety: NgramHasher is immutable after creation and safe to share; each NgramLookback
// belongs to one sequence and must not be used from two threads at once. Neither call allocates.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/config/model_config.h"
#include "model/engram/prime_layout.h"
#include "model/engram/token_map.h"

namespace flashserve::model::engram {

// Largest engram_max_ngram_size supported (the released model uses 4).
inline constexpr int kMaxNgramSize = 8;
// Compressed id of a token that takes no part in any n-gram (image-span tokens).
inline constexpr int64_t kDeadToken = -1;

// The per-sequence look-back that carries hashing across prefill chunks and decode steps. A plain
// value: copy it to snapshot a session, value-initialise it for a new sequence.
struct NgramLookback {
  int64_t position = 0;  // tokens of this sequence hashed so far (= position of the next one)
  // recent[j]: compressed id (or kDeadToken) of the token at position - 1 - j, newest first;
  // meaningful for j < min(position, max_ngram_size - 1).
  std::array<int64_t, kMaxNgramSize - 1> recent{};

  bool operator==(const NgramLookback&) const = default;
};

class NgramHasher {
 public:
  // Takes the tables as given (tests feed the fixture's). `multipliers` is flattened
  // [engram layer][slot] with max_ngram_size slots per layer (see hash_multipliers.h);
  // `pad_token_id` is a tokenizer id (engram_pad_id). Errors: InvalidArgument when
  // max_ngram_size > kMaxNgramSize, the multiplier count does not match, the token map is empty
  // or holds a class outside [0, num_classes), or pad_token_id is outside the token map.
  static absl::StatusOr<NgramHasher> Create(EngramLayout layout, std::vector<int64_t> multipliers,
                                            CompressedTokenMap token_map, int32_t pad_token_id);

  // The reference construction: the prime layout from the config (table rows checked against
  // engram_num_embeddings), multipliers from the token map's class count, which must equal
  // engram_compressed_vocab_size (the reference asserts it: every multiplier derives from it).
  // Errors: InvalidArgument naming the mismatch; BuildEngramLayout's and Create's errors.
  static absl::StatusOr<NgramHasher> FromConfig(const ModelConfig& config,
                                                CompressedTokenMap token_map);

  const EngramLayout& layout() const { return layout_; }
  // Flattened [engram layer][slot].
  std::span<const int64_t> multipliers() const { return multipliers_; }
  const CompressedTokenMap& token_map() const { return token_map_; }
  // The class that fills slots with no usable history.
  int64_t pad_class() const { return pad_class_; }
  // Hash ids per position: num_layers * num_columns.
  int ids_per_position() const { return layout_.num_layers() * layout_.num_columns(); }

  // Hashes one new token (decode) at position lookback.position and advances the look-back.
  // `out` must hold ids_per_position() values. Errors: InvalidArgument for a token id outside the
  // token map or a wrong `out` size; on error nothing is written and `lookback` is unchanged.
  // Cost: O(ids_per_position()).
  absl::Status HashNext(int32_t token_id, bool dead, NgramLookback& lookback,
                        std::span<int64_t> out) const;

  // Hashes a chunk of consecutive tokens starting at lookback.position and advances the
  // look-back past them, so any split of a sequence into chunks (and decode steps) gives the
  // same ids as one call. `dead` is empty (no dead tokens) or one flag per token (non-zero =
  // image-span token). `out` must hold token_ids.size() * ids_per_position() values, position
  // major. Errors: InvalidArgument for a token id outside the token map or wrong span sizes; on
  // error nothing is written and `lookback` is unchanged. Cost: O(tokens * ids_per_position()).
  absl::Status HashChunk(std::span<const int32_t> token_ids, std::span<const uint8_t> dead,
                         NgramLookback& lookback, std::span<int64_t> out) const;

 private:
  NgramHasher() = default;

  int64_t Compress(int32_t token_id, bool dead) const {
    return dead ? kDeadToken : token_map_.class_of[token_id];
  }
  // Hashes one position from its slots (pad already applied): writes ids_per_position() values.
  void HashSlots(const int64_t* slots, int64_t* out) const;

  EngramLayout layout_;
  std::vector<int64_t> multipliers_;
  CompressedTokenMap token_map_;
  int64_t pad_class_ = 0;
};

}  // namespace flashserve::model::engram
