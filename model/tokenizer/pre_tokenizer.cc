#include "model/tokenizer/pre_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace flashserve::tokenizer {

absl::StatusOr<PreTokenizer> PreTokenizer::Create(const std::vector<std::string>& patterns) {
  PreTokenizer result;
  for (size_t i = 0; i < patterns.size(); ++i) {
    ASSIGN_OR_RETURN(auto splitter, IsolatedSplitter::Create(patterns[i]),
                     absl::StrCat("split pattern #", i));
    result.splitters_.push_back(std::move(splitter));
  }
  return result;
}

absl::Status PreTokenizer::Split(std::string_view text, Span segment, PreTokenizerScratch* scratch,
                                 std::vector<Span>* out) const {
  if (segment.end <= segment.begin) return absl::OkStatus();
  if (splitters_.empty()) {
    out->push_back(segment);
    return absl::OkStatus();
  }
  std::vector<Span>& current = scratch->current;
  std::vector<Span>& next = scratch->next;
  current.assign(1, segment);
  for (size_t step = 0; step < splitters_.size(); ++step) {
    const bool last = step + 1 == splitters_.size();
    std::vector<Span>* target = last ? out : &next;
    if (!last) next.clear();
    for (const Span& piece : current) {
      RETURN_IF_ERROR(splitters_[step]->Split(text, piece, &scratch->regex, target));
    }
    if (!last) std::swap(current, next);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::tokenizer
