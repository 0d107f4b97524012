// Regex splitting for the pre-tokenizer: tokenizer.json patterns are written for Oniguruma (the
// engine of Hugging Face `tokenizers`); we run them on PCRE2 (UTF + UCP, JIT when available)
// after a translation that keeps Oniguruma's meaning:
//   - `\s` becomes [\t-\r\x{85}\p{Z}] (Oniguruma: the White_Space property; PCRE2's own \s also
//     matches U+180E), `\S` its complement, `\v` the vertical tab, `\uHHHH` \x{HHHH};
//   - escapes and constructs whose meaning differs between the engines or that no DeepSeek pattern
//     uses (\d \w \h \b \R \K backreferences, ^ and $ (line anchors in Ruby syntax), {,n},
//     nested classes and class intersection, inline options, named groups) are rejected with an
//     InvalidArgument error naming the construct.
// Unicode properties come from PCRE2's tables (Unicode 14 for PCRE2 10.42); `tokenizers` 0.23's
// Oniguruma uses a newer Unicode version, so characters assigned after Unicode 14 are classified
// as unassigned here (see README.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer_types.h"

namespace flashserve::tokenizer {

// Translates an Oniguruma (Ruby syntax) pattern to an equivalent PCRE2 pattern, or explains why
// it cannot. Pure function.
absl::StatusOr<std::string> TranslateOnigurumaPattern(std::string_view pattern);

// Per-thread scratch for matching (owns a PCRE2 match block). Not thread-safe; one per caller.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  void* match_data() const { return match_data_; }

 private:
  void* match_data_;  // pcre2_match_data_8*
};

// One `Split` step with behaviour Isolated: every match becomes its own piece and so does every
// non-empty stretch between matches. Immutable after Create; Split is thread-safe given a scratch
// per thread.
class IsolatedSplitter {
 public:
  // Compiles `oniguruma_pattern` (translated as above). Errors: InvalidArgument for unsupported
  // or malformed patterns, with PCRE2's message and offset.
  static absl::StatusOr<std::unique_ptr<IsolatedSplitter>> Create(
      std::string_view oniguruma_pattern);
  ~IsolatedSplitter();
  IsolatedSplitter(const IsolatedSplitter&) = delete;
  IsolatedSplitter& operator=(const IsolatedSplitter&) = delete;

  // Splits text[piece.begin, piece.end) (the piece is the whole subject: lookarounds cannot see
  // outside it) and appends the pieces, as absolute byte spans of `text`, to *out. `text` must
  // be valid UTF-8. Errors: Internal when PCRE2 fails (e.g. a resource limit).
  absl::Status Split(std::string_view text, Span piece, RegexScratch* scratch,
                     std::vector<Span>* out) const;

  const std::string& pcre2_pattern() const { return pcre2_pattern_; }

 private:
  IsolatedSplitter(void* code, std::string pcre2_pattern)
      : code_(code), pcre2_pattern_(std::move(pcre2_pattern)) {}
  void* code_;  // pcre2_code_8*
  std::string pcre2_pattern_;
};

}  // namespace flashserve::tokenizer
