// Byte-level BPE: turns one pre-tokenized piece (raw bytes) into vocabulary ids by applying
// merges in rank order, exactly as Hugging Face `tokenizers` (BPE without dropout, unk, prefixes
// or byte fallback): the piece starts as one symbol per byte; the adjacent pair with the lowest
// merge rank (leftmost on ties) is merged until no pair has a merge.
//
// Cost: O(n log n) per piece of n bytes (a rank-ordered heap over a linked list of symbols);
// pieces up to kMaxCachedPieceBytes are memoised in a bounded per-thread cache (no locking; a
// thread that alternates between two models clears its cache on each switch).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/tokenizer/tokenizer_types.h"

namespace flashserve::tokenizer {

// One merge rule: `left` followed by `right` becomes `result`.
struct BpeMergeRule {
  TokenId left;
  TokenId right;
  TokenId result;
};

// Scratch reused across the pieces of one Encode call. Not thread-safe.
struct BpeScratch {
  struct Symbol {
    TokenId id;
    int32_t prev;
    int32_t next;
    uint32_t length;  // bytes covered; 0 once merged into its left neighbour
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;  // index of the left symbol
    TokenId result;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  static constexpr size_t kMaxCachedPieceBytes = 64;
  static constexpr size_t kCacheCapacity = 16384;

  // `byte_ids[b]` is the id of the single-byte token of byte b; `merges` are in rank order (the
  // rank of a rule is its index; a later rule for the same pair replaces an earlier one, as in
  // `tokenizers`). With `ignore_merges`, a piece that is itself in `piece_vocab` (raw bytes ->
  // id) is one token. The caller validated ids.
  BpeModel(const std::array<TokenId, 256>& byte_ids, const std::vector<BpeMergeRule>& merges,
           bool ignore_merges, absl::flat_hash_map<std::string, TokenId> piece_vocab);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of `piece` (non-empty raw bytes) to *out. Thread-safe (the cache is
  // thread-local).
  void Encode(std::string_view piece, BpeScratch* scratch, std::vector<TokenId>* out) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  struct MergeEntry {
    uint32_t rank;
    TokenId result;
  };
  static uint64_t PairKey(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const MergeEntry* FindMerge(TokenId left, TokenId right) const;
  void MergeSymbols(std::string_view piece, BpeScratch* scratch, std::vector<TokenId>* out) const;

  std::array<TokenId, 256> byte_ids_;
  absl::flat_hash_map<uint64_t, MergeEntry> merges_;
  bool ignore_merges_;
  absl::flat_hash_map<std::string, TokenId> piece_vocab_;
  uint64_t instance_id_;  // unique per model ever created: owner tag of the thread-local cache
};

}  // namespace flashserve::tokenizer
