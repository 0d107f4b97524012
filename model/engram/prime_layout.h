// The bucket layout of the Engram hash tables (spec §4.8): one prime-sized bucket range per
// (Engram layer, n-gram size, head), laid out back to back in that layer's embedding table.
//
//   ASSIGN_OR_RETURN(EngramLayout layout, BuildEngramLayout(config));
//   int64_t row = hash % layout.Prime(layer, col) + layout.Offset(layer, col);
//
// Column order inside a layer is (n, head): col = (n - 2) * n_heads + head, n = 2..max_ngram_size.
// All functions are pure and thread-safe; EngramLayout is an immutable value once built.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config/model_config.h"

namespace flashserve::model::engram {

// Deterministic primality test for every 64-bit value (Miller-Rabin with the first twelve primes
// as bases, which is exact below 3.3e24). Cost: O(log n) 128-bit multiplications.
bool IsPrime(uint64_t n);

struct EngramLayout {
  std::vector<int> layer_ids;  // model layer of each Engram layer, in config order
  int max_ngram_size = 0;      // n-gram sizes 2..max_ngram_size are hashed
  int n_heads = 0;             // heads per n-gram size
  // [engram layer][col], flattened row-major: the bucket modulus of each column.
  std::vector<int64_t> primes;
  // [engram layer][col]: exclusive prefix sum of the layer's primes in column order.
  std::vector<int64_t> offsets;
  // [engram layer]: sum of the layer's primes = rows of its embedding table.
  std::vector<int64_t> table_rows;

  int num_layers() const { return static_cast<int>(layer_ids.size()); }
  // Hash columns per layer: (max_ngram_size - 1) * n_heads.
  int num_columns() const { return (max_ngram_size - 1) * n_heads; }
  int64_t Prime(int layer, int col) const { return primes[layer * num_columns() + col]; }
  int64_t Offset(int layer, int col) const { return offsets[layer * num_columns() + col]; }
};

// Builds the layout the reference's EngramLayout.from_args computes: for each Engram layer in
// order, for each n-gram size, the search starts at engram_vocab_size - 1 and takes the next
// `n_heads` primes above it that no earlier (layer, n, head) took. Errors: InvalidArgument when
// layer_ids is empty, max_ngram_size < 2, n_heads < 1 or engram_vocab_size < 1. Cost: a few
// hundred primality tests per column near engram_vocab_size.
absl::StatusOr<EngramLayout> BuildEngramLayout(std::span<const int> layer_ids, int max_ngram_size,
                                               int n_heads, int64_t engram_vocab_size);

// BuildEngramLayout from the config's engram_* fields, then checks that each layer's table rows
// equal config.engram_num_embeddings. Errors: InvalidArgument for bad fields, a count mismatch
// between engram_layer_ids and engram_num_embeddings, or a row-count mismatch (the message names
// the layer and both numbers).
absl::StatusOr<EngramLayout> BuildEngramLayout(const ModelConfig& config);

}  // namespace flashserve::model::engram
