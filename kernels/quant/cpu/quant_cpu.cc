// CPU body of the block quantisers: row by row through common/formats, which is the bit-exact
// reference the CUDA kernels are tested against.
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/formats/block_quant.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::quant {
namespace {

using QuantizeRowFn = absl::Status (*)(std::span<const uint16_t>, std::span<uint8_t>,
                                       std::span<uint8_t>);
using DequantizeRowFn = absl::Status (*)(std::span<const uint8_t>, std::span<const uint8_t>,
                                         std::span<uint16_t>);
using QdqRowFn = absl::Status (*)(std::span<const uint16_t>, std::span<uint16_t>);

QuantizeRowFn QuantizeRow(BlockFormat f) {
  switch (f) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return formats::QuantizeFp8Ue8m0B32;
    case BlockFormat::kFp4E2m1E4m3B16:
      return formats::QuantizeFp4E4m3B16;
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return formats::QuantizeFp4Ue8m0B32;
  }
  return nullptr;  // unreachable after Validate
}

DequantizeRowFn DequantizeRow(BlockFormat f) {
  switch (f) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return formats::DequantizeFp8Ue8m0B32;
    case BlockFormat::kFp4E2m1E4m3B16:
      return formats::DequantizeFp4E4m3B16;
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return formats::DequantizeFp4Ue8m0B32;
  }
  return nullptr;
}

QdqRowFn QdqRow(BlockFormat f) {
  switch (f) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return formats::QdqFp8Ue8m0B32;
    case BlockFormat::kFp4E2m1E4m3B16:
      return formats::QdqFp4E4m3B16;
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return formats::QdqFp4Ue8m0B32;
  }
  return nullptr;
}

}  // namespace

absl::Status QuantizeCpu(const QuantizeParams& p) {
  RETURN_IF_ERROR(Validate(p));
  if (p.rows == 0 || p.cols == 0) return absl::OkStatus();
  const QuantizeRowFn fn = QuantizeRow(p.format);
  const auto cols = static_cast<size_t>(p.cols);
  const auto code_bytes = static_cast<size_t>(CodeBytes(p.format, p.cols));
  const auto scale_bytes = static_cast<size_t>(ScaleBytes(p.format, p.cols));
  for (int64_t r = 0; r < p.rows; ++r) {
    // Sizes were validated, so a per-row failure would be a broken invariant of formats.
    RETURN_IF_ERROR(fn(std::span(p.x + r * p.x_stride, cols),
                       std::span(p.codes + r * p.codes_stride, code_bytes),
                       std::span(p.scales + r * p.scales_stride, scale_bytes)))
        << "row " << r;
  }
  if (p.qdq_out == nullptr) return absl::OkStatus();
  // The mirror is the decode of what was just written (x is read in full first: in place works).
  return DequantizeCpu({.format = p.format,
                        .rows = p.rows,
                        .cols = p.cols,
                        .codes = p.codes,
                        .codes_stride = p.codes_stride,
                        .scales = p.scales,
                        .scales_stride = p.scales_stride,
                        .out = p.qdq_out,
                        .out_stride = p.qdq_stride});
}

absl::Status DequantizeCpu(const DequantizeParams& p) {
  RETURN_IF_ERROR(Validate(p));
  if (p.rows == 0 || p.cols == 0) return absl::OkStatus();
  const DequantizeRowFn fn = DequantizeRow(p.format);
  const auto cols = static_cast<size_t>(p.cols);
  const auto code_bytes = static_cast<size_t>(CodeBytes(p.format, p.cols));
  const auto scale_bytes = static_cast<size_t>(ScaleBytes(p.format, p.cols));
  for (int64_t r = 0; r < p.rows; ++r) {
    RETURN_IF_ERROR(fn(std::span(p.codes + r * p.codes_stride, code_bytes),
                       std::span(p.scales + r * p.scales_stride, scale_bytes),
                       std::span(p.out + r * p.out_stride, cols)))
        << "row " << r;
  }
  return absl::OkStatus();
}

absl::Status QdqCpu(const QdqParams& p) {
  RETURN_IF_ERROR(Validate(p));
  if (p.rows == 0 || p.cols == 0) return absl::OkStatus();
  const QdqRowFn fn = QdqRow(p.format);
  const auto cols = static_cast<size_t>(p.cols);
  for (int64_t r = 0; r < p.rows; ++r) {
    // In place, row r of out is exactly row r of x, which formats::Qdq* accepts.
    RETURN_IF_ERROR(
        fn(std::span(p.x + r * p.x_stride, cols), std::span(p.out + r * p.out_stride, cols)))
        << "row " << r;
  }
  return absl::OkStatus();
}

absl::Status EncodeRowsCpu(const EncodeRowsParams& p) {
  QuantizeParams q;
  RETURN_IF_ERROR(ToQuantizeParams(p, &q));
  return QuantizeCpu(q);
}

absl::Status DecodeRowsCpu(const DecodeRowsParams& p) {
  DequantizeParams d;
  RETURN_IF_ERROR(ToDequantizeParams(p, &d));
  return DequantizeCpu(d);
}

}  // namespace flashserve::kernels::quant
