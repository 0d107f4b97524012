#include "model/tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "model/tokenizer/utf8.h"

namespace flashserve::tokenizer {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  const int len = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return len < 0 ? absl::StrCat("PCRE2 error ", code)
                 : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(len));
}

pcre2_code* AsCode(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

RegexScratch::RegexScratch() : match_data_(pcre2_match_data_create(1, nullptr)) {
  CHECK(match_data_ != nullptr) << "out of memory creating a PCRE2 match block";
}

RegexScratch::~RegexScratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
}

absl::StatusOr<std::unique_ptr<IsolatedSplitter>> IsolatedSplitter::Create(
    std::string_view oniguruma_pattern) {
  ASSIGN_OR_RETURN(std::string pattern, TranslateOnigurumaPattern(oniguruma_pattern));
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  CHECK(context != nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &error_code,
                                   &error_offset, context);
  pcre2_compile_context_free(context);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex: PCRE2 rejects the translated pattern ",
                                                   pattern, " at offset ", error_offset, ": ",
                                                   Pcre2Message(error_code)));
  }
  // JIT is an optimisation only: without it (unsupported CPU, no executable memory) the
  // interpreter gives the same matches.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<IsolatedSplitter>(new IsolatedSplitter(code, std::move(pattern)));
}

IsolatedSplitter::~IsolatedSplitter() { pcre2_code_free(AsCode(code_)); }

absl::Status IsolatedSplitter::Split(std::string_view text, Span piece, RegexScratch* scratch,
                                     std::vector<Span>* out) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
  const size_t length = piece.end - piece.begin;
  auto* match_data = static_cast<pcre2_match_data*>(scratch->match_data());
  size_t prev = 0;  // end of the last emitted piece, relative to the subject
  size_t pos = 0;   // where the next search starts
  while (pos <= length) {
    const int rc =
        pcre2_match(AsCode(code_), subject, length, pos, PCRE2_NO_UTF_CHECK, match_data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InternalError(absl::StrCat("regex match failed: ", Pcre2Message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (start > prev)
      out->push_back(
          {piece.begin + static_cast<uint32_t>(prev), piece.begin + static_cast<uint32_t>(start)});
    if (end > start) {
      out->push_back(
          {piece.begin + static_cast<uint32_t>(start), piece.begin + static_cast<uint32_t>(end)});
      pos = end;
    } else {
      // An empty match yields no piece but still ends the stretch before it (as in `tokenizers`);
      // the search resumes after the next character.
      if (start >= length) {
        prev = start;
        break;
      }
      pos = start + Utf8LeadLength(static_cast<uint8_t>(text[piece.begin + start]));
    }
    prev = end;
  }
  if (prev < length) {
    out->push_back({piece.begin + static_cast<uint32_t>(prev), piece.end});
  }
  return absl::OkStatus();
}

}  // namespace flashserve::tokenizer
