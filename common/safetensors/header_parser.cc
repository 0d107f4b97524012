#include "common/safetensors/header_parser.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "common/safetensors/header_sax.h"
#include "common/safetensors/safetensors.h"

namespace flashserve::safetensors::internal {
namespace {

absl::Status Corrupt(std::string_view label, std::string_view message) {
  return absl::DataLossError(absl::StrCat("safetensors file ", ::flashserve::ToAbsl(label), ": ",
                                          ::flashserve::ToAbsl(message)));
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// Checks one raw entry and converts it; `data_size` bounds the offsets.
absl::StatusOr<HeaderEntry> ValidateEntry(std::string_view label, RawEntry& raw,
                                          uint64_t data_size) {
  const std::string tensor = absl::StrCat("tensor ", QuoteName(raw.name), ": ");
  if (!raw.has_dtype) return Corrupt(label, tensor + "missing \"dtype\"");
  if (!raw.has_shape) return Corrupt(label, tensor + "missing \"shape\"");
  if (!raw.has_offsets) return Corrupt(label, tensor + "missing \"data_offsets\"");
  absl::StatusOr<DType> dtype = ParseDType(raw.dtype);
  if (!dtype.ok()) {
    return Corrupt(label, absl::StrCat(tensor, "unknown dtype ", QuoteName(raw.dtype)));
  }
  if (raw.offsets.size() != 2) {
    return Corrupt(label, absl::StrCat(tensor, "\"data_offsets\" has ", raw.offsets.size(),
                                       " elements, expected [begin, end]"));
  }
  HeaderEntry entry{.name = std::move(raw.name),
                    .dtype = *dtype,
                    .shape = std::move(raw.shape),
                    .begin = raw.offsets[0],
                    .end = raw.offsets[1]};
  // Checked in the order TensorView::numel() multiplies, so numel() can never overflow.
  int64_t numel = 1;
  for (int64_t dim : entry.shape) {
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      return Corrupt(label, tensor + "element count overflows int64");
    }
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), DTypeSize(entry.dtype), &nbytes)) {
    return Corrupt(label, tensor + "byte size overflows uint64");
  }
  if (entry.begin > entry.end) {
    return Corrupt(label, absl::StrCat(tensor, "data_offsets [", entry.begin, ", ", entry.end,
                                       "] has begin > end"));
  }
  if (entry.end > data_size) {
    return Corrupt(label, absl::StrCat(tensor, "data_offsets end ", entry.end,
                                       " is beyond the data section (", data_size, " bytes)"));
  }
  if (entry.end - entry.begin != nbytes) {
    return Corrupt(label, absl::StrCat(tensor, "data_offsets span ", entry.end - entry.begin,
                                       " bytes but ", ::flashserve::ToAbsl(DTypeName(entry.dtype)),
                                       ShapeString(entry.shape), " needs ", nbytes));
  }
  return entry;
}

// Gaps between tensors are allowed; overlaps are not. Empty tensors overlap nothing.
absl::Status CheckNoOverlap(std::string_view label, const std::vector<HeaderEntry>& tensors) {
  std::vector<const HeaderEntry*> order;
  for (const HeaderEntry& t : tensors) {
    if (t.begin != t.end) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const HeaderEntry* a, const HeaderEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i]->begin < order[i - 1]->end) {
      return Corrupt(
          label, absl::StrCat("tensor ", QuoteName(order[i]->name), " [", order[i]->begin, ", ",
                              order[i]->end, ") overlaps tensor ", QuoteName(order[i - 1]->name),
                              " [", order[i - 1]->begin, ", ", order[i - 1]->end, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string QuoteName(std::string_view name) {
  return absl::StrCat("\"", absl::Utf8SafeCHexEscape(::flashserve::ToAbsl(name)), "\"");
}

absl::StatusOr<ParsedLayout> ParseLayout(std::string_view label, std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) {
    return Corrupt(label, absl::StrCat("file is ", bytes.size(),
                                       " bytes, shorter than the 8-byte header length"));
  }
  ParsedLayout layout;
  layout.header_size = ReadLe64(bytes.data());
  const uint64_t available = bytes.size() - 8;
  if (layout.header_size > kMaxHeaderBytes) {
    return Corrupt(label, absl::StrCat("header length ", layout.header_size, " exceeds the ",
                                       kMaxHeaderBytes, "-byte limit"));
  }
  if (layout.header_size > available) {
    return Corrupt(label, absl::StrCat("header length ", layout.header_size, " exceeds the ",
                                       available, " bytes after the prefix"));
  }
  const char* json_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  HeaderSax sax;
  bool parsed = false;
  try {
    parsed = nlohmann::json::sax_parse(json_begin, json_begin + layout.header_size, &sax);
  } catch (const std::exception& e) {  // the SAX path reports errors itself; this is a backstop
    return Corrupt(label, absl::StrCat("header parse failed: ", e.what()));
  }
  if (!parsed) return Corrupt(label, sax.error().empty() ? "header parse failed" : sax.error());

  const uint64_t data_size = available - layout.header_size;
  layout.metadata = std::move(sax.metadata());
  layout.tensors.reserve(sax.entries().size());
  for (RawEntry& raw : sax.entries()) {
    absl::StatusOr<HeaderEntry> entry = ValidateEntry(label, raw, data_size);
    if (!entry.ok()) return entry.status();
    layout.tensors.push_back(*std::move(entry));
  }
  if (absl::Status s = CheckNoOverlap(label, layout.tensors); !s.ok()) return s;
  return layout;
}

}  // namespace flashserve::safetensors::internal
