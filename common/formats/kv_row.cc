#include "common/formats/kv_row.h"

#include "absl/strings/str_format.h"

namespace flashserve::formats {
namespace {

absl::Status CheckRow(const char* cache, size_t channels, int64_t block, size_t row_bytes,
                      int64_t expected) {
  if (channels % static_cast<size_t>(block) != 0 || row_bytes != static_cast<size_t>(expected)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s row: %d channels need a multiple of %d and a %d-byte row; got %d bytes",
                        cache, channels, block, expected, row_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EncodeSwaKvRow(std::span<const uint16_t> x, std::span<uint8_t> row) {
  const auto c = static_cast<int64_t>(x.size());
  if (auto s = CheckRow("SWA KV", x.size(), kFp8Ue8m0Block, row.size(), SwaKvRowBytes(c));
      !s.ok()) {
    return s;
  }
  return QuantizeFp8Ue8m0B32(x, row.first(SwaKvScaleOffset(c)), row.subspan(SwaKvScaleOffset(c)));
}

absl::Status EncodeMainKvRow(std::span<const uint16_t> x, std::span<uint8_t> row) {
  const auto c = static_cast<int64_t>(x.size());
  if (auto s = CheckRow("main KV", x.size(), kFp4E4m3Block, row.size(), MainKvRowBytes(c));
      !s.ok()) {
    return s;
  }
  return QuantizeFp4E4m3B16(x, row.first(MainKvScaleOffset(c)), row.subspan(MainKvScaleOffset(c)));
}

absl::Status EncodeIndexKRow(std::span<const uint16_t> x, std::span<uint8_t> row) {
  const auto c = static_cast<int64_t>(x.size());
  if (auto s = CheckRow("index K", x.size(), kFp4Ue8m0Block, row.size(), IndexKRowBytes(c));
      !s.ok()) {
    return s;
  }
  return QuantizeFp4Ue8m0B32(x, row.first(IndexKScaleOffset(c)), row.subspan(IndexKScaleOffset(c)));
}

absl::Status DecodeSwaKvRow(std::span<const uint8_t> row, std::span<uint16_t> out) {
  const auto c = static_cast<int64_t>(out.size());
  if (auto s = CheckRow("SWA KV", out.size(), kFp8Ue8m0Block, row.size(), SwaKvRowBytes(c));
      !s.ok()) {
    return s;
  }
  return DequantizeFp8Ue8m0B32(row.first(SwaKvScaleOffset(c)), row.subspan(SwaKvScaleOffset(c)),
                               out);
}

absl::Status DecodeMainKvRow(std::span<const uint8_t> row, std::span<uint16_t> out) {
  const auto c = static_cast<int64_t>(out.size());
  if (auto s = CheckRow("main KV", out.size(), kFp4E4m3Block, row.size(), MainKvRowBytes(c));
      !s.ok()) {
    return s;
  }
  return DequantizeFp4E4m3B16(row.first(MainKvScaleOffset(c)), row.subspan(MainKvScaleOffset(c)),
                              out);
}

absl::Status DecodeIndexKRow(std::span<const uint8_t> row, std::span<uint16_t> out) {
  const auto c = static_cast<int64_t>(out.size());
  if (auto s = CheckRow("index K", out.size(), kFp4Ue8m0Block, row.size(), IndexKRowBytes(c));
      !s.ok()) {
    return s;
  }
  return DequantizeFp4Ue8m0B32(row.first(IndexKScaleOffset(c)), row.subspan(IndexKScaleOffset(c)),
                               out);
}

}  // namespace flashserve::formats
