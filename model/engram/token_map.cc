#include "model/engram/token_map.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace flashserve::model::engram {
namespace {

constexpr std::string_view kReplacementCharUtf8 = "\xEF\xBF\xBD";

bool IsValidUtf8(std::string_view s) {
  int32_t i = 0;
  const int32_t n = static_cast<int32_t>(s.size());
  while (i < n) {
    UChar32 c;
    U8_NEXT(s.data(), i, n, c);
    if (c < 0) return false;
  }
  return true;
}

absl::Status IcuError(const char* what, UErrorCode code) {
  return absl::InternalError(absl::StrCat("engram token map: ICU ", what, ": ", u_errorName(code)));
}

bool IsMark(UChar32 c) { return (U_GET_GC_MASK(c) & U_GC_M_MASK) != 0; }

// Rust's char::to_lowercase: the full (SpecialCasing) mapping of one code point, with no context,
// so no final-sigma rule. ICU's root-locale toLower on a lone code point gives exactly that: every
// context condition in SpecialCasing is either locale-bound or needs neighbours.
void AppendLowercase(UChar32 c, icu::UnicodeString& out) {
  if (c < 0x80) {
    out.append(static_cast<UChar32>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
    return;
  }
  icu::UnicodeString one(c);
  one.toLower(icu::Locale::getRoot());
  out.append(one);
}

bool IsCollapsible(UChar32 c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

absl::StatusOr<std::string> NormalizeTokenText(std::string_view text) {
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError("engram token map: text is not valid UTF-8");
  }
  UErrorCode code = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(code);
  if (U_FAILURE(code)) return IcuError("NFKC instance", code);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(code);
  if (U_FAILURE(code)) return IcuError("NFD instance", code);

  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  s = nfkc->normalize(s, code);
  if (U_FAILURE(code)) return IcuError("NFKC", code);
  s = nfd->normalize(s, code);
  if (U_FAILURE(code)) return IcuError("NFD", code);

  // StripAccents, Lowercase and the whitespace collapse in one pass. The order still holds: the
  // mark test sees the code point before lowercasing, so a mark that lowercasing created would be
  // kept, as in the pipeline; lowercasing never creates [ \t\r\n].
  icu::UnicodeString folded;
  bool in_space_run = false;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if (IsMark(c)) continue;
    if (IsCollapsible(c)) {
      if (!in_space_run) folded.append(static_cast<UChar32>(' '));
      in_space_run = true;
      continue;
    }
    in_space_run = false;
    AppendLowercase(c, folded);
  }

  // "^ $" -> sentinel, Strip, sentinel -> " ": a lone space survives the strip.
  if (!(folded.length() == 1 && folded.charAt(0) == u' ')) {
    int32_t begin = 0;
    int32_t end = folded.length();
    while (begin < end && u_isUWhiteSpace(folded.char32At(begin))) {
      begin += U16_LENGTH(folded.char32At(begin));
    }
    while (end > begin) {
      const int32_t last = folded.moveIndex32(end, -1);
      if (!u_isUWhiteSpace(folded.char32At(last))) break;
      end = last;
    }
    folded = icu::UnicodeString(folded, begin, end - begin);
  }
  std::string out;
  folded.toUTF8String(out);
  return out;
}

absl::StatusOr<CompressedTokenMap> BuildCompressedTokenMap(int32_t vocab_size, TokenTextFn decode,
                                                           TokenTextFn raw_token) {
  if (vocab_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("engram token map: vocab size must be >= 1, got ", vocab_size));
  }
  CompressedTokenMap map;
  map.class_of.resize(vocab_size);
  absl::flat_hash_map<std::string, int32_t> class_of_key;
  for (int32_t id = 0; id < vocab_size; ++id) {
    ASSIGN_OR_RETURN(std::string text, decode(id), absl::StrCat("decoding token id ", id));
    std::string key;
    if (text.find(kReplacementCharUtf8) != std::string::npos || !IsValidUtf8(text)) {
      ASSIGN_OR_RETURN(key, raw_token(id), absl::StrCat("raw string of token id ", id));
    } else {
      ASSIGN_OR_RETURN(key, NormalizeTokenText(text), absl::StrCat("normalising token id ", id));
      if (key.empty()) key = std::move(text);
    }
    auto [it, inserted] = class_of_key.try_emplace(std::move(key), map.num_classes);
    if (inserted) ++map.num_classes;
    map.class_of[id] = it->second;
  }
  return map;
}

}  // namespace flashserve::model::engram
