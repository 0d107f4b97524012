// Oniguruma (Ruby syntax) -> PCRE2 pattern translation; see regex_split.h for the rules.
#include <cctype>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "model/tokenizer/regex_split.h"

namespace flashserve::tokenizer {
namespace {

// Oniguruma's \s for Unicode text: U+0009..U+000D, U+0085 and the Zs, Zl, Zp categories.
constexpr std::string_view kSpaceClassBody = "\\t-\\r\\x{85}\\p{Z}";

bool IsGeneralCategory(std::string_view name) {
  static const std::set<std::string_view> kNames = {
      "C",  "Cc", "Cf", "Cn", "Co", "Cs", "L",  "Ll", "Lm", "Lo", "Lt", "Lu", "M",
      "Mc", "Me", "Mn", "N",  "Nd", "Nl", "No", "P",  "Pc", "Pd", "Pe", "Pf", "Pi",
      "Po", "Ps", "S",  "Sc", "Sk", "Sm", "So", "Z",  "Zl", "Zp", "Zs"};
  return kNames.count(name) > 0;
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

absl::Status Unsupported(std::string_view what, size_t offset) {
  return absl::InvalidArgumentError(
      absl::StrCat("regex: unsupported ", ToAbsl(what), " at offset ", offset,
                   " (its Oniguruma and PCRE2 meanings differ or it is not implemented)"));
}

}  // namespace

absl::StatusOr<std::string> TranslateOnigurumaPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t i = 0;
  const size_t n = p.size();
  while (i < n) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= n) return absl::InvalidArgumentError("regex: trailing backslash");
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kSpaceClassBody)
                        : absl::StrCat("[", ToAbsl(kSpaceClassBody), "]");
        i += 2;
      } else if (e == 'S') {
        if (in_class) return Unsupported("\\S inside a character class", i);
        absl::StrAppend(&out, "[^", ToAbsl(kSpaceClassBody), "]");
        i += 2;
      } else if (e == 'p' || e == 'P') {
        const size_t close = p.find('}', i);
        if (i + 2 >= n || p[i + 2] != '{' || close == std::string_view::npos) {
          return Unsupported("\\p without {name}", i);
        }
        const std::string_view name = p.substr(i + 3, close - i - 3);
        if (!IsGeneralCategory(name)) {
          return Unsupported(absl::StrCat("property \\p{", ToAbsl(name), "}"), i);
        }
        out.append(p.substr(i, close + 1 - i));
        i = close + 1;
      } else if (e == 'v') {
        out += "\\x{0B}";  // Oniguruma: vertical tab; PCRE2: any vertical space
        i += 2;
      } else if (e == 'u') {
        if (i + 6 > n || !IsHex(p[i + 2]) || !IsHex(p[i + 3]) || !IsHex(p[i + 4]) ||
            !IsHex(p[i + 5])) {
          return Unsupported("\\u without four hex digits", i);
        }
        absl::StrAppend(&out, "\\x{", ToAbsl(p.substr(i + 2, 4)), "}");
        i += 6;
      } else if (e == 'x') {
        size_t end = i + 2;
        if (end < n && p[end] == '{') {
          end = p.find('}', end);
          if (end == std::string_view::npos) return Unsupported("unterminated \\x{", i);
          ++end;
        } else {
          while (end < n && end < i + 4 && IsHex(p[end])) ++end;
        }
        out.append(p.substr(i, end - i));
        i = end;
      } else if (e == 't' || e == 'n' || e == 'r' || e == 'f' || e == 'e' || e == 'a') {
        out.append(p.substr(i, 2));
        i += 2;
      } else if (static_cast<unsigned char>(e) < 0x80 &&
                 !std::isalnum(static_cast<unsigned char>(e))) {
        out.append(p.substr(i, 2));  // an escaped punctuation character: a literal in both
        i += 2;
      } else {
        return Unsupported(absl::StrCat("escape \\", std::string(1, e)), i);
      }
      continue;
    }
    if (in_class) {
      if (c == '[') return Unsupported("nested character class or POSIX bracket", i);
      if (c == '&' && i + 1 < n && p[i + 1] == '&') return Unsupported("class intersection &&", i);
      if (c == ']') in_class = false;
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      if (i < n && p[i] == '^') out.push_back(p[i++]);
      if (i < n && p[i] == ']') out.push_back(p[i++]);  // a leading ']' is a literal
      continue;
    }
    if (c == '^' || c == '$') return Unsupported(absl::StrCat("anchor ", std::string(1, c)), i);
    if (c == '{' && i + 1 < n && p[i + 1] == ',') return Unsupported("quantifier {,n}", i);
    if (c == '(' && i + 1 < n && p[i + 1] == '?') {
      const std::string_view rest = p.substr(i + 2);
      const bool ok = rest.rfind(":", 0) == 0 || rest.rfind("=", 0) == 0 ||
                      rest.rfind("!", 0) == 0 || rest.rfind("<=", 0) == 0 ||
                      rest.rfind("<!", 0) == 0 || rest.rfind(">", 0) == 0;
      if (!ok) return Unsupported("group syntax (?", i);
    }
    out.push_back(c);
    ++i;
  }
  if (in_class) return absl::InvalidArgumentError("regex: unterminated character class");
  return out;
}

}  // namespace flashserve::tokenizer
