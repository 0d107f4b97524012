// The pre-tokenizer of a byte-level BPE tokenizer: a sequence of Isolated regex splits applied in
// order (each to every piece the previous one produced). The ByteLevel step that follows in
// tokenizer.json is only a byte -> character relabelling, which the BPE model does implicitly by
// working on bytes; with `use_regex: true` it adds the GPT-2 split as a last step here.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/regex_split.h"
#include "model/tokenizer/tokenizer_types.h"

namespace flashserve::tokenizer {

// The pattern `tokenizers` uses for ByteLevel with use_regex (GPT-2's), in Oniguruma syntax.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Scratch reused across the pieces of one Encode call. Not thread-safe.
struct PreTokenizerScratch {
  RegexScratch regex;
  std::vector<Span> current;
  std::vector<Span> next;
};

class PreTokenizer {
 public:
  // Compiles the patterns, in order. Errors: InvalidArgument naming the failing pattern's index.
  static absl::StatusOr<PreTokenizer> Create(const std::vector<std::string>& patterns);

  PreTokenizer() = default;
  PreTokenizer(PreTokenizer&&) = default;
  PreTokenizer& operator=(PreTokenizer&&) = default;

  // Splits text[segment] and appends the final pieces (absolute byte spans, in text order,
  // non-empty) to *out. `text` must be valid UTF-8. Thread-safe given a scratch per thread.
  // Errors: Internal when the regex engine fails.
  absl::Status Split(std::string_view text, Span segment, PreTokenizerScratch* scratch,
                     std::vector<Span>* out) const;

  size_t num_steps() const { return splitters_.size(); }

 private:
  std::vector<std::unique_ptr<IsolatedSplitter>> splitters_;
};

}  // namespace flashserve::tokenizer
