#include "model/engram/prime_layout.h"

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flashserve::model::engram {
namespace {

uint64_t MulMod(uint64_t a, uint64_t b, uint64_t m) {
  return absl::Uint128Low64((absl::uint128(a) * b) % m);
}

uint64_t PowMod(uint64_t base, uint64_t exp, uint64_t m) {
  uint64_t result = 1 % m;
  base %= m;
  while (exp > 0) {
    if (exp & 1) result = MulMod(result, base, m);
    base = MulMod(base, base, m);
    exp >>= 1;
  }
  return result;
}

// One Miller-Rabin round: false when `a` proves n (odd, > a) composite.
bool PassesRound(uint64_t n, uint64_t d, int s, uint64_t a) {
  uint64_t x = PowMod(a, d, n);
  if (x == 1 || x == n - 1) return true;
  for (int r = 1; r < s; ++r) {
    x = MulMod(x, x, n);
    if (x == n - 1) return true;
  }
  return false;
}

}  // namespace

bool IsPrime(uint64_t n) {
  static constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (uint64_t p : kBases) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (uint64_t a : kBases) {
    if (!PassesRound(n, d, s, a)) return false;
  }
  return true;
}

absl::StatusOr<EngramLayout> BuildEngramLayout(std::span<const int> layer_ids, int max_ngram_size,
                                               int n_heads, int64_t engram_vocab_size) {
  if (layer_ids.empty()) return absl::InvalidArgumentError("engram: no Engram layers");
  if (max_ngram_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: engram_max_ngram_size must be >= 2, got ", max_ngram_size));
  }
  if (n_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: engram_n_heads must be >= 1, got ", n_heads));
  }
  if (engram_vocab_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: engram_vocab_size must be >= 1, got ", engram_vocab_size));
  }
  EngramLayout layout;
  layout.layer_ids.assign(layer_ids.begin(), layer_ids.end());
  layout.max_ngram_size = max_ngram_size;
  layout.n_heads = n_heads;
  absl::flat_hash_set<int64_t> taken;
  for (size_t layer = 0; layer < layer_ids.size(); ++layer) {
    int64_t rows = 0;
    for (int n = 2; n <= max_ngram_size; ++n) {
      // Each n-gram size restarts the search at the vocab size; `taken` keeps columns disjoint.
      int64_t candidate = engram_vocab_size - 1;
      for (int head = 0; head < n_heads; ++head) {
        do {
          ++candidate;
        } while (!IsPrime(static_cast<uint64_t>(candidate)) || taken.contains(candidate));
        taken.insert(candidate);
        layout.primes.push_back(candidate);
        layout.offsets.push_back(rows);
        rows += candidate;
      }
    }
    layout.table_rows.push_back(rows);
  }
  return layout;
}

absl::StatusOr<EngramLayout> BuildEngramLayout(const ModelConfig& config) {
  if (config.engram_num_embeddings.size() != config.engram_layer_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram: engram_num_embeddings has ", config.engram_num_embeddings.size(),
                     " entries but engram_layer_ids has ", config.engram_layer_ids.size()));
  }
  absl::StatusOr<EngramLayout> layout =
      BuildEngramLayout(config.engram_layer_ids, config.engram_max_ngram_size,
                        config.engram_n_heads, config.engram_vocab_size);
  if (!layout.ok()) return layout.status();
  for (int i = 0; i < layout->num_layers(); ++i) {
    if (layout->table_rows[i] != config.engram_num_embeddings[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("engram: layer ", config.engram_layer_ids[i], ": the prime layout gives ",
                       layout->table_rows[i], " table rows but engram_num_embeddings says ",
                       config.engram_num_embeddings[i]));
    }
  }
  return layout;
}

}  // namespace flashserve::model::engram
