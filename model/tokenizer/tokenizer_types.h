// Small value types shared by the tokenizer's public and internal headers.
#pragma once

#include <cstdint>

namespace flashserve::tokenizer {

// A token id: an index into the tokenizer's vocabulary (BPE entries and added tokens).
using TokenId = int32_t;

// A half-open range [begin, end) into a text, in UTF-8 bytes or in code points (the field or
// function that returns it says which).
struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
  friend bool operator==(const Span& a, const Span& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

}  // namespace flashserve::tokenizer
