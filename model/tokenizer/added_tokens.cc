#include "model/tokenizer/added_tokens.h"

namespace flashserve::tokenizer {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<Entry>& entries) : entries_(entries) {
  for (size_t e = 0; e < entries_.size(); ++e) {
    const std::string& content = entries_[e].content;
    if (content.empty()) continue;
    first_bytes_.set(static_cast<uint8_t>(content[0]));
    int32_t node = 0;
    for (char c : content) {
      auto [it, inserted] = edges_.try_emplace(EdgeKey(node, static_cast<uint8_t>(c)),
                                               static_cast<int32_t>(terminal_.size()));
      if (inserted) terminal_.push_back(-1);
      node = it->second;
    }
    terminal_[node] = static_cast<int32_t>(e);
  }
}

void AddedTokenMatcher::FindAll(std::string_view text, Span range, std::vector<Match>* out) const {
  if (empty()) return;
  uint32_t pos = range.begin;
  while (pos < range.end) {
    if (!first_bytes_.test(static_cast<uint8_t>(text[pos]))) {
      ++pos;
      continue;
    }
    int32_t node = 0;
    int32_t best = -1;
    uint32_t best_end = pos;
    for (uint32_t j = pos; j < range.end; ++j) {
      auto it = edges_.find(EdgeKey(node, static_cast<uint8_t>(text[j])));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) {
        best = terminal_[node];
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const Entry& entry = entries_[best];
    out->push_back({{pos, best_end}, entry.id, entry.special});
    pos = best_end;
  }
}

}  // namespace flashserve::tokenizer
