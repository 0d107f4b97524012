// UTF-8 helpers for the tokenizer: validation, code-point stepping, and lossy decoding that
// replaces invalid input by U+FFFD per maximal subpart (the Unicode "best practice" that Python's
// bytes.decode(errors="replace") and Rust's String::from_utf8_lossy both follow).
//
// All functions are pure and thread-safe; none allocates except by appending to `out`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flashserve::tokenizer {

// The replacement character U+FFFD in UTF-8.
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// What ExamineUtf8 found at the start of a byte range.
struct Utf8Step {
  enum Kind : uint8_t {
    kValid,      // `length` bytes form one well-formed character
    kInvalid,    // the first `length` bytes (a maximal subpart, >= 1) are replaced by one U+FFFD
    kTruncated,  // all `length` remaining bytes are a valid prefix of a longer character
  };
  Kind kind;
  uint8_t length;
};

// Classifies the sequence starting at p[0]; `n` >= 1 bytes are available.
Utf8Step ExamineUtf8(const uint8_t* p, size_t n);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
// On false, *error_offset (when non-null) receives the byte offset of the first bad sequence.
bool IsValidUtf8(std::string_view text, size_t* error_offset = nullptr);

// Appends `bytes` decoded as UTF-8 to *out, each invalid or truncated maximal subpart replaced by
// one U+FFFD.
void AppendLossyUtf8(std::string_view bytes, std::string* out);

// Length in bytes of the well-formed character whose lead byte is `lead` (1 for bytes that cannot
// start a character). For stepping through text already known to be valid.
inline size_t Utf8LeadLength(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point starting at text[0] of valid UTF-8 text.
uint32_t DecodeCodePoint(const char* text, size_t length);

// Appends the UTF-8 encoding of code point `cp` (<= 0x10FFFF, not a surrogate) to *out.
void AppendCodePoint(uint32_t cp, std::string* out);

}  // namespace flashserve::tokenizer
