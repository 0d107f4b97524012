// Internal: parses and validates the header and layout of a safetensors byte image. Used by
// SafetensorsFile; exposed only for its implementation and tests.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/strings.h"
#include "common/safetensors/dtype.h"

namespace flashserve::safetensors::internal {

struct HeaderEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets relative to the data section
  uint64_t end = 0;
};

struct ParsedLayout {
  uint64_t header_size = 0;  // N, the JSON length; the data section starts at 8 + N
  std::map<std::string, std::string> metadata;
  std::vector<HeaderEntry> tensors;  // in header order
};

// Validates the whole image: length prefix, JSON header (no duplicate keys, nesting bounded),
// every tensor entry, and that the byte ranges fit the data section without overlapping.
// `label` (the path) prefixes every error message. Errors: DataLoss. Never reads outside
// `bytes`; memory use is bounded by the number of tensors, not by the header's nesting.
absl::StatusOr<ParsedLayout> ParseLayout(std::string_view label, std::span<const uint8_t> bytes);

// Debian's Abseil has its own string_view; this bridges std::string_view into StrCat & co.

// Quotes a tensor name for messages, escaping control and invalid bytes.
std::string QuoteName(std::string_view name);

}  // namespace flashserve::safetensors::internal
