// Validation shared by the CPU bodies and the CUDA launchers (cuda/), so both reject exactly the
// same params with the same messages.
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

// Keeps every extent computation below far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 30;
constexpr int64_t kMaxRows = int64_t{1} << 40;

absl::Status Invalid(const char* op, const char* field, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", op, field, what));
}

// A [rows, heads, width] bf16 tensor with element strides: its byte range [begin, end).
struct Extent {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool Overlaps(const Extent& o) const { return begin < o.end && o.begin < end; }
};

// Fails (instead of wrapping) when the extent does not fit the address space.
absl::Status MakeExtent(const char* op, const char* name, const void* base, int64_t rows,
                        int64_t heads, int64_t width, int64_t stride, int64_t head_stride,
                        Extent* out) {
  int64_t last_row = 0;
  int64_t elems = 0;
  int64_t bytes = 0;
  const auto b = reinterpret_cast<uintptr_t>(base);
  if (__builtin_mul_overflow(rows - 1, stride, &last_row) ||
      __builtin_add_overflow(last_row, (heads - 1) * head_stride + width, &elems) ||
      __builtin_mul_overflow(elems, static_cast<int64_t>(sizeof(uint16_t)), &bytes) ||
      b + static_cast<uintptr_t>(bytes) < b) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s extent overflows the address space", op, name));
  }
  *out = {b, b + static_cast<uintptr_t>(bytes)};
  return absl::OkStatus();
}

// Checks the strides of one [rows, heads, width] operand (heads == 1: a plain matrix).
absl::Status CheckStrides(const char* op, const char* name, int64_t heads, int64_t width,
                          int64_t stride, int64_t head_stride) {
  if (head_stride < width || head_stride > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s head stride %d must be in [%d, 2^30]",
                                                      op, name, head_stride, width));
  }
  const int64_t row_extent = (heads - 1) * head_stride + width;
  if (stride < row_extent) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s stride %d is smaller than a row's %d elements", op, name, stride, row_extent));
  }
  return absl::OkStatus();
}

// In place (same pointer and strides) or disjoint; anything else is rejected.
absl::Status CheckAliasing(const char* op, const void* x, int64_t x_stride, int64_t x_head_stride,
                           const void* out, int64_t out_stride, int64_t out_head_stride,
                           int64_t rows, int64_t heads, int64_t width) {
  if (x == out) {
    if (x_stride != out_stride || x_head_stride != out_head_stride) {
      return Invalid(op, "out", "equals x but its strides differ");
    }
    Extent e;
    return MakeExtent(op, "x", x, rows, heads, width, x_stride, x_head_stride, &e);
  }
  Extent ex;
  Extent eo;
  RETURN_IF_ERROR(MakeExtent(op, "x", x, rows, heads, width, x_stride, x_head_stride, &ex));
  RETURN_IF_ERROR(MakeExtent(op, "out", out, rows, heads, width, out_stride, out_head_stride, &eo));
  if (ex.Overlaps(eo)) return Invalid(op, "out", "partially overlaps x");
  return absl::OkStatus();
}

// The parts RopeParams and VisionRope2dParams share.
absl::Status CheckHeadTensors(const char* op, int64_t rows, int64_t heads, int64_t head_dim,
                              const uint16_t* x, int64_t x_stride, int64_t x_head_stride,
                              const uint16_t* out, int64_t out_stride, int64_t out_head_stride) {
  if (rows < 0 || rows > kMaxRows) return Invalid(op, "tokens", "is negative or too large");
  if (heads < 1 || heads > kMaxDim) return Invalid(op, "heads", "must be >= 1");
  if (x == nullptr) return Invalid(op, "x", "is null");
  if (out == nullptr) return Invalid(op, "out", "is null");
  RETURN_IF_ERROR(CheckStrides(op, "x", heads, head_dim, x_stride, x_head_stride));
  RETURN_IF_ERROR(CheckStrides(op, "out", heads, head_dim, out_stride, out_head_stride));
  if (rows == 0) return absl::OkStatus();
  return CheckAliasing(op, x, x_stride, x_head_stride, out, out_stride, out_head_stride, rows,
                       heads, head_dim);
}

}  // namespace

absl::Status ValidateRmsNorm(const RmsNormParams& p) {
  constexpr const char* kOp = "RmsNorm";
  if (p.rows < 0 || p.rows > kMaxRows) return Invalid(kOp, "rows", "is negative or too large");
  if (p.cols < 1 || p.cols > kMaxDim) return Invalid(kOp, "cols", "must be in [1, 2^30]");
  if ((p.weight_bf16 == nullptr) == (p.weight_f32 == nullptr)) {
    return Invalid(kOp, "weight_bf16/weight_f32", "must have exactly one set");
  }
  if (!(p.eps > 0.0f) || !(p.eps < 1e30f)) return Invalid(kOp, "eps", "must be > 0 and finite");
  if (p.x == nullptr) return Invalid(kOp, "x", "is null");
  if (p.out == nullptr) return Invalid(kOp, "out", "is null");
  RETURN_IF_ERROR(CheckStrides(kOp, "x", 1, p.cols, p.x_stride, p.cols));
  RETURN_IF_ERROR(CheckStrides(kOp, "out", 1, p.cols, p.out_stride, p.cols));
  if (p.out_qdq != nullptr) {
    if (p.cols % 32 != 0) {
      return Invalid(kOp, "cols", "must be a multiple of 32 (the QDQ blocks) with out_qdq");
    }
    RETURN_IF_ERROR(CheckStrides(kOp, "out_qdq", 1, p.cols, p.out_qdq_stride, p.cols));
  }
  if (p.rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(
      CheckAliasing(kOp, p.x, p.x_stride, p.cols, p.out, p.out_stride, p.cols, p.rows, 1, p.cols));
  if (p.out_qdq != nullptr) {
    if (p.out_qdq == p.x || p.out_qdq == p.out) {
      return Invalid(kOp, "out_qdq", "must not be x or out");
    }
    RETURN_IF_ERROR(CheckAliasing(kOp, p.x, p.x_stride, p.cols, p.out_qdq, p.out_qdq_stride, p.cols,
                                  p.rows, 1, p.cols));
    RETURN_IF_ERROR(CheckAliasing(kOp, p.out, p.out_stride, p.cols, p.out_qdq, p.out_qdq_stride,
                                  p.cols, p.rows, 1, p.cols));
  }
  return absl::OkStatus();
}

absl::Status ValidateRopeLayout(const RopeParams& p) {
  constexpr const char* kOp = "Rope";
  if (p.table == nullptr) return Invalid(kOp, "table", "is null");
  if (p.head_dim < p.table->rope_dims() || p.head_dim > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Rope: head_dim %d is smaller than rope_dims %d", p.head_dim, p.table->rope_dims()));
  }
  RETURN_IF_ERROR(CheckHeadTensors(kOp, p.tokens, p.heads, p.head_dim, p.x, p.x_stride,
                                   p.x_head_stride, p.out, p.out_stride, p.out_head_stride));
  if (p.tokens == 0) return absl::OkStatus();
  if (p.positions == nullptr) return Invalid(kOp, "positions", "is null");
  return absl::OkStatus();
}

absl::Status ValidateRope(const RopeParams& p) {
  RETURN_IF_ERROR(ValidateRopeLayout(p));
  if (p.tokens == 0) return absl::OkStatus();
  for (int64_t t = 0; t < p.tokens; ++t) {
    if (p.positions[t] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Rope: positions[%d] = %d is negative", t, p.positions[t]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRopeCosSin(const RopeCosSinParams& p, bool host_values) {
  constexpr const char* kOp = "RopeCosSin";
  if (p.table == nullptr) return Invalid(kOp, "table", "is null");
  if (p.tokens < 0 || p.tokens >= (int64_t{1} << 31)) {
    return Invalid(kOp, "tokens", "must be in [0, 2^31)");
  }
  if (p.tokens == 0) return absl::OkStatus();
  if (p.positions == nullptr) return Invalid(kOp, "positions", "is null");
  if (p.out == nullptr) return Invalid(kOp, "out", "is null");
  if (!host_values) return absl::OkStatus();
  for (int64_t t = 0; t < p.tokens; ++t) {
    if (p.positions[t] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("RopeCosSin: positions[%d] = %d is negative", t, p.positions[t]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRmsNormRope(const RmsNormRopeParams& p) {
  constexpr const char* kOp = "RmsNormRope";
  RETURN_IF_ERROR(ValidateRmsNorm(p.norm));
  if (p.norm.out_qdq != nullptr) return Invalid(kOp, "norm.out_qdq", "is not supported with RoPE");
  if (p.table == nullptr) return Invalid(kOp, "table", "is null");
  if (p.norm.cols < p.table->rope_dims()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RmsNormRope: cols %d is smaller than rope_dims %d", p.norm.cols, p.table->rope_dims()));
  }
  if (p.norm.rows > 0 && p.positions == nullptr) return Invalid(kOp, "positions", "is null");
  return absl::OkStatus();
}

absl::Status ValidateVisionRope2d(const VisionRope2dParams& p) {
  constexpr const char* kOp = "VisionRope2d";
  if (p.head_dim < 4 || p.head_dim % 4 != 0 || p.head_dim > kMaxRopeDims) {
    return Invalid(kOp, "head_dim", "must be a multiple of 4 in [4, kMaxRopeDims]");
  }
  if (!(p.theta > 1.0) || !(p.theta < 1e300)) return Invalid(kOp, "theta", "must be > 1");
  RETURN_IF_ERROR(CheckHeadTensors(kOp, p.patches, p.heads, p.head_dim, p.x, p.x_stride,
                                   p.x_head_stride, p.out, p.out_stride, p.out_head_stride));
  if (p.patches == 0) return absl::OkStatus();
  if (p.rows == nullptr) return Invalid(kOp, "rows", "is null");
  if (p.cols == nullptr) return Invalid(kOp, "cols", "is null");
  for (int64_t i = 0; i < p.patches; ++i) {
    if (p.rows[i] < 0 || p.cols[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "VisionRope2d: rows/cols[%d] = (%d, %d) is negative", i, p.rows[i], p.cols[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
