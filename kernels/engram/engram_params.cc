// Validation shared by the CPU body and the CUDA launcher (same checks, same messages), the host
// id check and the scalar dequantiser.
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "kernels/engram/engram.h"

namespace flashserve::kernels {
namespace {

// Keeps every extent computation far from int64 overflow.
constexpr int64_t kMaxExtent = int64_t{1} << 40;

absl::Status Invalid(const char* field, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("EngramGather: %s %s", field, what));
}

absl::Status CheckStride(const char* field, int64_t rows, int64_t stride, int64_t min_stride) {
  if (stride < min_stride) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "EngramGather: %s %d is below the row extent %d", field, stride, min_stride));
  }
  if (stride > kMaxExtent || (rows > 1 && rows - 1 > (int64_t{1} << 60) / stride)) {
    return Invalid(field, "makes the tensor extent overflow");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateEngramGather(const EngramGatherParams& p) {
  if (p.tokens < 0 || p.tokens > kMaxExtent) return Invalid("tokens", "is out of range");
  if (p.ids_per_token < 1 || p.ids_per_token > (int64_t{1} << 20)) {
    return Invalid("ids_per_token", "must be in [1, 2^20]");
  }
  if (p.dim < kEngramScaleBlock || p.dim % kEngramScaleBlock != 0 || p.dim > (int64_t{1} << 20)) {
    return Invalid("dim", "must be a positive multiple of 32 (at most 2^20)");
  }
  if (p.rows < 1 || p.rows > kMaxExtent) return Invalid("rows", "must be in [1, 2^40]");
  if (p.row_begin < 0 || p.row_begin > std::numeric_limits<int64_t>::max() - p.rows) {
    return Invalid("row_begin", "must be >= 0 and row_begin + rows must not overflow");
  }
  if (p.codes == nullptr) return Invalid("codes", "is null");
  if (p.scales == nullptr) return Invalid("scales", "is null");
  if (absl::Status s = CheckStride("codes_stride", p.rows, p.codes_stride, p.dim); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckStride("scales_stride", p.rows, p.scales_stride, p.dim / kEngramScaleBlock);
      !s.ok()) {
    return s;
  }
  if (p.tokens == 0) return absl::OkStatus();
  if (p.ids == nullptr) return Invalid("ids", "is null");
  if (p.out == nullptr) return Invalid("out", "is null");
  if (absl::Status s = CheckStride("ids_stride", p.tokens, p.ids_stride, p.ids_per_token);
      !s.ok()) {
    return s;
  }
  const int64_t width = p.ids_per_token * p.dim;
  if (width > kMaxExtent) return Invalid("ids_per_token", "· dim is too large");
  return CheckStride("out_stride", p.tokens, p.out_stride, width);
}

absl::Status CheckEngramIds(const EngramGatherParams& p) {
  if (absl::Status s = ValidateEngramGather(p); !s.ok()) return s;
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t col = 0; col < p.ids_per_token; ++col) {
      const int64_t id = p.ids[t * p.ids_stride + col];
      if (id < p.row_begin || id - p.row_begin >= p.rows) {
        return absl::InvalidArgumentError(
            absl::StrFormat("EngramGather: ids[%d, %d] = %d is outside the table rows [%d, %d)", t,
                            col, id, p.row_begin, p.row_begin + p.rows));
      }
    }
  }
  return absl::OkStatus();
}

uint16_t EngramDequantValue(uint8_t code, uint8_t scale_byte) {
  const float value = formats::E4m3ToFloat(code);
  const float scale = formats::Ue8m0ToFloat(scale_byte);
  // x86 returns the first NaN operand of a product, but which operand comes first is the
  // compiler's choice; the rule is written out so that every backend agrees.
  if (value != value) return formats::FloatToBf16Bits(value);
  if (scale != scale) return formats::FloatToBf16Bits(scale);
  return formats::FloatToBf16Bits(value * scale);
}

}  // namespace flashserve::kernels
