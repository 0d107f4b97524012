// Matching of added-token strings in raw text: leftmost match first, longest at that position,
// non-overlapping (the LeftmostLongest Aho-Corasick semantics of `tokenizers`), over a byte trie.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/tokenizer/tokenizer_types.h"

namespace flashserve::tokenizer {

class AddedTokenMatcher {
 public:
  struct Entry {
    std::string content;  // non-empty UTF-8
    TokenId id;
    bool special;
  };
  struct Match {
    Span span;  // absolute byte span in the text
    TokenId id;
    bool special;
  };

  AddedTokenMatcher() = default;
  // Builds the trie. Contents must be distinct and non-empty (the loader checks).
  explicit AddedTokenMatcher(const std::vector<Entry>& entries);

  // Appends the matches inside text[range] to *out, in text order. Thread-safe.
  // Cost: O(range length x longest content) in the worst case; positions whose byte starts no
  // content are skipped by a 256-bit filter.
  void FindAll(std::string_view text, Span range, std::vector<Match>* out) const;

  bool empty() const { return terminal_.size() <= 1; }

 private:
  static uint64_t EdgeKey(int32_t node, uint8_t byte) {
    return (static_cast<uint64_t>(node) << 8) | byte;
  }
  std::bitset<256> first_bytes_;
  absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node, byte) -> child node
  std::vector<int32_t> terminal_{-1};             // node -> index into entries_, or -1
  std::vector<Entry> entries_;
};

}  // namespace flashserve::tokenizer
