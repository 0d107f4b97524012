#include "model/tokenizer/byte_level.h"

#include <array>

#include "model/tokenizer/utf8.h"

namespace flashserve::tokenizer {
namespace {

bool IsPrintedAsItself(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> to_byte{};  // the alphabet's highest code point is U+0143
  Tables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = IsPrintedAsItself(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

uint32_t ByteToCodePoint(uint8_t b) { return GetTables().to_cp[b]; }

int CodePointToByte(uint32_t cp) {
  const Tables& t = GetTables();
  return cp < t.to_byte.size() ? t.to_byte[cp] : -1;
}

std::string ByteToToken(uint8_t b) {
  std::string out;
  AppendCodePoint(ByteToCodePoint(b), &out);
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view text) {
  std::string bytes;
  bytes.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = Utf8LeadLength(static_cast<uint8_t>(text[i]));
    if (i + len > text.size()) return std::nullopt;
    const int b = CodePointToByte(DecodeCodePoint(text.data() + i, len));
    if (b < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(b));
    i += len;
  }
  return bytes;
}

}  // namespace flashserve::tokenizer
