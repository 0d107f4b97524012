// Sizes and validation shared by the CPU body and the CUDA launchers, so that both reject exactly
// the same params with the same messages.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/formats/block_quant.h"
#include "common/formats/kv_row.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::quant {
namespace {

bool ValidFormat(BlockFormat f) {
  return f == BlockFormat::kFp8E4m3Ue8m0B32 || f == BlockFormat::kFp4E2m1E4m3B16 ||
         f == BlockFormat::kFp4E2m1Ue8m0B32;
}

bool ValidKind(KvRowKind k) {
  return k == KvRowKind::kSwaKv || k == KvRowKind::kMainKv || k == KvRowKind::kIndexK;
}

// A strided matrix in memory: `rows` rows of `row_bytes` bytes, `stride_bytes` apart.
struct Extent {
  uintptr_t begin = 0;
  uintptr_t end = 0;  // one past the last byte touched
};

// Computes the byte extent of a strided matrix, failing on arithmetic overflow.
absl::Status MakeExtent(const char* what, const void* base, int64_t rows, int64_t row_bytes,
                        int64_t stride_bytes, Extent* out) {
  int64_t last_row_start = 0;
  int64_t total = 0;
  if (__builtin_mul_overflow(rows - 1, stride_bytes, &last_row_start) ||
      __builtin_add_overflow(last_row_start, row_bytes, &total)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d rows with a stride of %d bytes overflow", what, rows, stride_bytes));
  }
  out->begin = reinterpret_cast<uintptr_t>(base);
  if (out->begin + static_cast<uintptr_t>(total) < out->begin) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: extent wraps the address space", what));
  }
  out->end = out->begin + static_cast<uintptr_t>(total);
  return absl::OkStatus();
}

bool Overlap(const Extent& a, const Extent& b) { return a.begin < b.end && b.begin < a.end; }

// Checks the parts every params struct shares. Sets *empty when there is nothing to do.
absl::Status CheckShape(const char* op, BlockFormat format, int64_t rows, int64_t cols,
                        bool* empty) {
  if (!ValidFormat(format)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: invalid BlockFormat %d", op, static_cast<int>(static_cast<uint8_t>(format))));
  }
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: negative shape [%d, %d]", op, rows, cols));
  }
  if (cols % BlockSize(format) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cols=%d is not a multiple of the %s block (%d)", op, cols,
                        BlockFormatName(format), BlockSize(format)));
  }
  *empty = rows == 0 || cols == 0;
  return absl::OkStatus();
}

// Checks one strided operand (non-null, stride >= extent) and computes its byte extent.
absl::Status CheckOperand(const char* op, const char* name, const void* ptr, int64_t rows,
                          int64_t row_elems, int64_t stride, int64_t elem_bytes, Extent* out) {
  if (ptr == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s is null", op, name));
  }
  if (stride < row_elems) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s stride %d is smaller than the row's %d elements", op, name, stride, row_elems));
  }
  const std::string what = absl::StrFormat("%s %s", op, name);
  int64_t stride_bytes = 0;
  if (__builtin_mul_overflow(stride, elem_bytes, &stride_bytes)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: stride overflows", what));
  }
  return MakeExtent(what.c_str(), ptr, rows, row_elems * elem_bytes, stride_bytes, out);
}

absl::Status NoOverlap(const char* op, const char* a_name, const Extent& a, const char* b_name,
                       const Extent& b) {
  if (Overlap(a, b)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s and %s overlap in memory", op, a_name, b_name));
  }
  return absl::OkStatus();
}

}  // namespace

const char* BlockFormatName(BlockFormat format) {
  switch (format) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return "Fp8E4m3Ue8m0B32";
    case BlockFormat::kFp4E2m1E4m3B16:
      return "Fp4E2m1E4m3B16";
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return "Fp4E2m1Ue8m0B32";
  }
  return "invalid";
}

int64_t BlockSize(BlockFormat format) {
  switch (format) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return formats::kFp8Ue8m0Block;
    case BlockFormat::kFp4E2m1E4m3B16:
      return formats::kFp4E4m3Block;
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return formats::kFp4Ue8m0Block;
  }
  return 0;
}

int64_t CodeBytes(BlockFormat format, int64_t cols) {
  return format == BlockFormat::kFp8E4m3Ue8m0B32 ? cols : cols / 2;
}

int64_t ScaleBytes(BlockFormat format, int64_t cols) {
  const int64_t block = BlockSize(format);
  return block == 0 ? 0 : cols / block;
}

BlockFormat KvRowFormat(KvRowKind kind) {
  switch (kind) {
    case KvRowKind::kSwaKv:
      return BlockFormat::kFp8E4m3Ue8m0B32;
    case KvRowKind::kMainKv:
      return BlockFormat::kFp4E2m1E4m3B16;
    case KvRowKind::kIndexK:
      return BlockFormat::kFp4E2m1Ue8m0B32;
  }
  return BlockFormat::kFp8E4m3Ue8m0B32;
}

int64_t KvRowBytes(KvRowKind kind, int64_t channels) {
  switch (kind) {
    case KvRowKind::kSwaKv:
      return formats::SwaKvRowBytes(channels);
    case KvRowKind::kMainKv:
      return formats::MainKvRowBytes(channels);
    case KvRowKind::kIndexK:
      return formats::IndexKRowBytes(channels);
  }
  return 0;
}

int64_t KvRowScaleOffset(KvRowKind kind, int64_t channels) {
  switch (kind) {
    case KvRowKind::kSwaKv:
      return formats::SwaKvScaleOffset(channels);
    case KvRowKind::kMainKv:
      return formats::MainKvScaleOffset(channels);
    case KvRowKind::kIndexK:
      return formats::IndexKScaleOffset(channels);
  }
  return 0;
}

absl::Status Validate(const QuantizeParams& p) {
  constexpr const char* kOp = "Quantize";
  bool empty = false;
  if (auto s = CheckShape(kOp, p.format, p.rows, p.cols, &empty); !s.ok() || empty) return s;
  Extent x, codes, scales;
  if (auto s = CheckOperand(kOp, "x", p.x, p.rows, p.cols, p.x_stride, 2, &x); !s.ok()) return s;
  if (auto s = CheckOperand(kOp, "codes", p.codes, p.rows, CodeBytes(p.format, p.cols),
                            p.codes_stride, 1, &codes);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckOperand(kOp, "scales", p.scales, p.rows, ScaleBytes(p.format, p.cols),
                            p.scales_stride, 1, &scales);
      !s.ok()) {
    return s;
  }
  if (auto s = NoOverlap(kOp, "x", x, "codes", codes); !s.ok()) return s;
  if (auto s = NoOverlap(kOp, "x", x, "scales", scales); !s.ok()) return s;
  if (p.qdq_out == nullptr) return absl::OkStatus();
  Extent qdq;
  if (auto s = CheckOperand(kOp, "qdq_out", p.qdq_out, p.rows, p.cols, p.qdq_stride, 2, &qdq);
      !s.ok()) {
    return s;
  }
  if (auto s = NoOverlap(kOp, "qdq_out", qdq, "codes", codes); !s.ok()) return s;
  if (auto s = NoOverlap(kOp, "qdq_out", qdq, "scales", scales); !s.ok()) return s;
  if (p.qdq_out == p.x) {
    if (p.qdq_stride != p.x_stride && p.rows > 1) {
      return absl::InvalidArgumentError(
          "Quantize: in place (qdq_out == x) needs qdq_stride == x_stride");
    }
    return absl::OkStatus();
  }
  return NoOverlap(kOp, "x", x, "qdq_out", qdq);
}

absl::Status Validate(const DequantizeParams& p) {
  constexpr const char* kOp = "Dequantize";
  bool empty = false;
  if (auto s = CheckShape(kOp, p.format, p.rows, p.cols, &empty); !s.ok() || empty) return s;
  Extent codes, scales, out;
  if (auto s = CheckOperand(kOp, "codes", p.codes, p.rows, CodeBytes(p.format, p.cols),
                            p.codes_stride, 1, &codes);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckOperand(kOp, "scales", p.scales, p.rows, ScaleBytes(p.format, p.cols),
                            p.scales_stride, 1, &scales);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckOperand(kOp, "out", p.out, p.rows, p.cols, p.out_stride, 2, &out); !s.ok()) {
    return s;
  }
  if (auto s = NoOverlap(kOp, "out", out, "codes", codes); !s.ok()) return s;
  return NoOverlap(kOp, "out", out, "scales", scales);
}

absl::Status Validate(const QdqParams& p) {
  constexpr const char* kOp = "Qdq";
  bool empty = false;
  if (auto s = CheckShape(kOp, p.format, p.rows, p.cols, &empty); !s.ok() || empty) return s;
  Extent x, out;
  if (auto s = CheckOperand(kOp, "x", p.x, p.rows, p.cols, p.x_stride, 2, &x); !s.ok()) return s;
  if (auto s = CheckOperand(kOp, "out", p.out, p.rows, p.cols, p.out_stride, 2, &out); !s.ok()) {
    return s;
  }
  if (p.out == p.x) {
    if (p.out_stride != p.x_stride && p.rows > 1) {
      return absl::InvalidArgumentError("Qdq: in place (out == x) needs out_stride == x_stride");
    }
    return absl::OkStatus();
  }
  return NoOverlap(kOp, "x", x, "out", out);
}

namespace {

// The row-layout checks shared by EncodeRows and DecodeRows: a valid kind, a valid shape for its
// block format, and a row stride that holds a whole serving row (docs/kv_layout.md). Gives the
// format and the offset of the scale bytes inside a row.
absl::Status CheckRowLayout(const char* op, KvRowKind kind, int64_t rows, int64_t channels,
                            int64_t row_stride, BlockFormat* format, int64_t* scale_offset) {
  if (!ValidKind(kind)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: invalid KvRowKind %d", op, static_cast<int>(static_cast<uint8_t>(kind))));
  }
  *format = KvRowFormat(kind);
  bool empty = false;
  if (auto s = CheckShape(op, *format, rows, channels, &empty); !s.ok()) return s;
  const int64_t row_bytes = KvRowBytes(kind, channels);
  if (!empty && row_stride < row_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: row_stride %d is smaller than the %d-byte row", op, row_stride, row_bytes));
  }
  *scale_offset = KvRowScaleOffset(kind, channels);
  return absl::OkStatus();
}

}  // namespace

absl::Status ToQuantizeParams(const EncodeRowsParams& p, QuantizeParams* out) {
  BlockFormat format = BlockFormat::kFp8E4m3Ue8m0B32;  // set by CheckRowLayout
  int64_t scale_offset = 0;
  if (auto s = CheckRowLayout("EncodeRows", p.kind, p.rows, p.channels, p.row_stride, &format,
                              &scale_offset);
      !s.ok()) {
    return s;
  }
  *out = QuantizeParams{.format = format,
                        .rows = p.rows,
                        .cols = p.channels,
                        .x = p.x,
                        .x_stride = p.x_stride,
                        .codes = p.rows_out,
                        .codes_stride = p.row_stride,
                        .scales = p.rows_out == nullptr ? nullptr : p.rows_out + scale_offset,
                        .scales_stride = p.row_stride,
                        .qdq_out = p.decoded_out,
                        .qdq_stride = p.decoded_stride};
  return Validate(*out);
}

absl::Status ToDequantizeParams(const DecodeRowsParams& p, DequantizeParams* out) {
  BlockFormat format = BlockFormat::kFp8E4m3Ue8m0B32;  // set by CheckRowLayout
  int64_t scale_offset = 0;
  if (auto s = CheckRowLayout("DecodeRows", p.kind, p.rows, p.channels, p.row_stride, &format,
                              &scale_offset);
      !s.ok()) {
    return s;
  }
  *out = DequantizeParams{.format = format,
                          .rows = p.rows,
                          .cols = p.channels,
                          .codes = p.rows_in,
                          .codes_stride = p.row_stride,
                          .scales = p.rows_in == nullptr ? nullptr : p.rows_in + scale_offset,
                          .scales_stride = p.row_stride,
                          .out = p.out,
                          .out_stride = p.out_stride};
  return Validate(*out);
}

}  // namespace flashserve::kernels::quant
