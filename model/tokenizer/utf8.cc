#include "model/tokenizer/utf8.h"

namespace flashserve::tokenizer {

Utf8Step ExamineUtf8(const uint8_t* p, size_t n) {
  const uint8_t lead = p[0];
  if (lead < 0x80) return {Utf8Step::kValid, 1};
  // Length of the character and the allowed range of its second byte (Unicode Table 3-7): the
  // narrowed ranges exclude overlongs (E0, F0), surrogates (ED) and values above U+10FFFF (F4).
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1};  // continuation byte, C0, C1 or F5..FF
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return {Utf8Step::kTruncated, static_cast<uint8_t>(n)};
    const uint8_t b = p[i];
    const uint8_t min = i == 1 ? lo : 0x80;
    const uint8_t max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Utf8Step::kInvalid, static_cast<uint8_t>(i)};
  }
  return {Utf8Step::kValid, static_cast<uint8_t>(need)};
}

bool IsValidUtf8(std::string_view text, size_t* error_offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = ExamineUtf8(p + i, n - i);
    if (step.kind != Utf8Step::kValid) {
      if (error_offset != nullptr) *error_offset = i;
      return false;
    }
    i += step.length;
  }
  return true;
}

void AppendLossyUtf8(std::string_view bytes, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    // Copy runs of valid characters in one append.
    size_t run = i;
    Utf8Step step{Utf8Step::kValid, 1};
    while (run < n) {
      step = p[run] < 0x80 ? Utf8Step{Utf8Step::kValid, 1} : ExamineUtf8(p + run, n - run);
      if (step.kind != Utf8Step::kValid) break;
      run += step.length;
    }
    out->append(bytes.data() + i, run - i);
    i = run;
    if (i < n) {  // an invalid or truncated subpart
      out->append(kReplacementUtf8);
      i += step.length;
    }
  }
}

uint32_t DecodeCodePoint(const char* text, size_t length) {
  const auto* p = reinterpret_cast<const uint8_t*>(text);
  const uint8_t lead = p[0];
  if (lead < 0x80 || length < 2) return lead;
  if (lead < 0xE0) return ((lead & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  if (lead < 0xF0 || length < 4) {
    return ((lead & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  }
  return ((lead & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
}

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace flashserve::tokenizer
