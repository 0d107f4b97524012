// The GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable code point (bytes
// 33..126, 161..172 and 174..255 as themselves, the other 68 as U+0100.. in byte order), so that
// BPE vocabulary strings are text. Used to turn vocabulary strings back into bytes and to name
// the 256 single-byte tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashserve::tokenizer {

// Code point that stands for byte `b`.
uint32_t ByteToCodePoint(uint8_t b);

// The byte that code point `cp` stands for, or -1 when `cp` is not in the alphabet.
int CodePointToByte(uint32_t cp);

// UTF-8 string of the byte-level character of `b` (e.g. 0x20 -> "Ġ").
std::string ByteToToken(uint8_t b);

// The bytes a byte-level string stands for, or nullopt when some character of `text` (valid
// UTF-8) is outside the alphabet. "ĠHello" -> " Hello".
std::optional<std::string> ByteLevelToBytes(std::string_view text);

}  // namespace flashserve::tokenizer
