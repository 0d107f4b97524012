// Validation and workspace sizing shared by the CPU body and the CUDA launcher, so both reject
// the same params with the same messages (the launcher reads no device values).
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/sparse_attn_internal.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::kernels {
namespace attention_internal {

SlotLayout ComputeSlotLayout(int64_t head_dim) {
  constexpr int64_t g = kSparseAttnHeadGroup;
  constexpr int64_t b = kSparseAttnBlock;
  SlotLayout l;
  l.kv_block = 0;
  l.q_t = l.kv_block + b * head_dim;
  l.acc = l.q_t + head_dim * g;
  l.part = l.acc + g * head_dim;
  l.logits = l.part + head_dim;
  l.rows = l.logits + g * b;
  const int64_t floats = l.rows + b;
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  l.slot_bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  return l;
}

size_t NumSlots(const ThreadPool* pool) { return pool == nullptr ? 1 : pool->size() + 1; }

}  // namespace attention_internal

namespace {

constexpr int64_t kMaxCount = int64_t{1} << 40;  // tokens, n_kv, width, strides

absl::Status Invalid(const char* field, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("SparseAttn: %s %s", field, what));
}

// Byte range [begin, end) of a buffer, for overlap checks.
struct Extent {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool Overlaps(const Extent& o) const {
    return begin < end && o.begin < o.end && begin < o.end && o.begin < end;
  }
};

Extent MakeExtent(const void* base, int64_t elems, size_t elem_bytes) {
  const auto b = reinterpret_cast<uintptr_t>(base);
  return {b, b + static_cast<uintptr_t>(elems) * elem_bytes};
}

// Elements spanned by `rows` rows of `row` elements, `stride` apart; fails instead of wrapping
// (the result times 4 bytes still fits the address space).
absl::Status RowsExtent(const char* name, int64_t rows, int64_t stride, int64_t row,
                        int64_t* elems) {
  if (__builtin_mul_overflow(rows - 1, stride, elems) ||
      __builtin_add_overflow(*elems, row, elems) || *elems > (int64_t{1} << 60)) {
    return Invalid(name, "extent overflows");
  }
  return absl::OkStatus();
}

// Checks a [tokens, heads, head_dim] operand's strides; returns its element extent.
absl::Status CheckHeadTensor(const char* name, const SparseAttnParams& p, int64_t stride,
                             int64_t head_stride, int64_t* elems) {
  if (head_stride < p.head_dim || head_stride > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SparseAttn: %s_head_stride %d must be in [head_dim = %d, 2^40]", name,
                        head_stride, p.head_dim));
  }
  const int64_t row = (p.heads - 1) * head_stride + p.head_dim;
  if (stride < row || stride > kMaxCount) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SparseAttn: %s_stride %d must be in [(heads-1)*head_stride + head_dim = %d, 2^40]", name,
        stride, row));
  }
  return RowsExtent(name, p.tokens, stride, row, elems);
}

absl::Status CheckDims(const SparseAttnParams& p) {
  if (p.tokens < 0 || p.tokens > kMaxCount) return Invalid("tokens", "must be in [0, 2^40]");
  if (p.heads < 1 || p.heads > (1 << 20)) return Invalid("heads", "must be in [1, 2^20]");
  if (p.head_dim < 1 || p.head_dim > kSparseAttnMaxHeadDim) {
    return Invalid("head_dim", "must be in [1, kSparseAttnMaxHeadDim]");
  }
  if (p.n_kv < 0 || p.n_kv > kMaxCount) return Invalid("n_kv", "must be in [0, 2^40]");
  if (p.width < 0 || p.width > kMaxCount) return Invalid("width", "must be in [0, 2^40]");
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0.0f) {
    return Invalid("softmax_scale", "must be finite and > 0");
  }
  return absl::OkStatus();
}

absl::Status CheckIndices(const SparseAttnParams& p) {
  const int64_t bound = attention_internal::KvIndexBound(p);
  for (int64_t t = 0; t < p.tokens; ++t) {
    const int32_t* row = p.indices + t * p.indices_stride;
    for (int64_t e = 0; e < p.width; ++e) {
      if (row[e] < -1 || row[e] >= bound) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "SparseAttn: indices[%d, %d] = %d is neither -1 nor in [0, %s = %d)", t, e, row[e],
            attention_internal::UsesKvRows(p) ? "n_window + n_compressed" : "n_kv", bound));
      }
    }
  }
  return absl::OkStatus();
}

// One pool of the row form: counts, pointer, stride (bytes) and extent.
absl::Status CheckRowPool(const char* name, const uint8_t* rows, int64_t n, int64_t stride,
                          int64_t row_bytes, Extent* extent) {
  if (n < 0 || n > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SparseAttn: kv_rows.n_%s must be in [0, 2^40]", name));
  }
  if (n == 0) return absl::OkStatus();
  if (rows == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("SparseAttn: kv_rows.%s is null", name));
  }
  if (stride < row_bytes || stride > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SparseAttn: kv_rows.%s_stride %d must be in [%d (row bytes), 2^40]", name,
                        stride, row_bytes));
  }
  int64_t bytes = 0;
  RETURN_IF_ERROR(RowsExtent("kv_rows", n, stride, row_bytes, &bytes));
  *extent = MakeExtent(rows, bytes, 1);
  return absl::OkStatus();
}

// The row form's fields (attention.h SparseAttnKvRows); extents of both pools.
absl::Status CheckKvRows(const SparseAttnParams& p, Extent* window, Extent* compressed) {
  if (p.kv != nullptr || p.n_kv != 0) {
    return Invalid("kv_rows",
                   "is set together with kv / n_kv (pass one form: kv must be null, "
                   "n_kv 0)");
  }
  if (p.head_dim % 32 != 0) return Invalid("kv_rows", "needs head_dim a multiple of 32");
  const SparseAttnKvRows& r = p.kv_rows;
  RETURN_IF_ERROR(CheckRowPool("window", r.window, r.n_window, r.window_stride,
                               p.head_dim + p.head_dim / 32, window));
  RETURN_IF_ERROR(CheckRowPool("compressed", r.compressed, r.n_compressed, r.compressed_stride,
                               p.head_dim / 2 + p.head_dim / 16, compressed));
  if (r.n_window + r.n_compressed > (int64_t{1} << 31)) {
    return Invalid("kv_rows", "n_window + n_compressed must be <= 2^31 (int32 indices)");
  }
  return absl::OkStatus();
}

// The decode-once scratch (SparseAttnKvRows::decoded): size and alignment; its extent.
absl::Status CheckDecoded(const SparseAttnParams& p, Extent* decoded) {
  const SparseAttnKvRows& r = p.kv_rows;
  if (r.decoded == nullptr) return absl::OkStatus();
  const size_t need = SparseAttnDecodedBytes(r.n_window, r.n_compressed, p.head_dim);
  if (r.decoded_bytes < need) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SparseAttn: kv_rows.decoded_bytes %d is smaller than the %d bytes the rows decode to",
        r.decoded_bytes, need));
  }
  if (reinterpret_cast<uintptr_t>(r.decoded) % 16 != 0) {
    return Invalid("kv_rows.decoded", "is not 16-byte aligned");
  }
  *decoded = MakeExtent(r.decoded, static_cast<int64_t>(need), 1);
  return absl::OkStatus();
}

}  // namespace

size_t SparseAttnWorkspaceBytes(int64_t head_dim, const ThreadPool* pool) {
  if (head_dim < 1 || head_dim > kSparseAttnMaxHeadDim) return 0;
  using namespace attention_internal;  // NOLINT(build/namespaces): this family's own internals
  return NumSlots(pool) * ComputeSlotLayout(head_dim).slot_bytes + kAlign;
}

namespace attention_internal {

absl::Status ValidateSparseAttnFor(const SparseAttnParams& p, size_t workspace_need,
                                   bool host_values) {
  RETURN_IF_ERROR(CheckDims(p));
  if (p.tokens == 0) return absl::OkStatus();
  if (p.q == nullptr) return Invalid("q", "is null");
  if (p.out == nullptr) return Invalid("out", "is null");
  if (p.attn_sink == nullptr) return Invalid("attn_sink", "is null");
  if (p.width > 0 && p.indices == nullptr) return Invalid("indices", "is null");
  if (p.indices_stride < p.width || p.indices_stride > kMaxCount) {
    return Invalid("indices_stride", "must be in [width, 2^40]");
  }
  Extent rows_window;
  Extent rows_compressed;
  Extent decoded;
  if (UsesKvRows(p)) {
    RETURN_IF_ERROR(CheckKvRows(p, &rows_window, &rows_compressed));
    RETURN_IF_ERROR(CheckDecoded(p, &decoded));
  } else if (p.kv_rows.decoded != nullptr) {
    return Invalid("kv_rows.decoded", "is set without kv_rows.window or kv_rows.compressed");
  }
  if (p.n_kv > 0 && p.kv == nullptr) return Invalid("kv", "is null");
  if (p.n_kv > 0 && (p.kv_stride < p.head_dim || p.kv_stride > kMaxCount)) {
    return Invalid("kv_stride", "must be in [head_dim, 2^40]");
  }
  int64_t q_elems = 0;
  int64_t out_elems = 0;
  RETURN_IF_ERROR(CheckHeadTensor("q", p, p.q_stride, p.q_head_stride, &q_elems));
  RETURN_IF_ERROR(CheckHeadTensor("out", p, p.out_stride, p.out_head_stride, &out_elems));
  for (int64_t h = 0; host_values && h < p.heads; ++h) {
    if (!std::isfinite(p.attn_sink[h])) return Invalid("attn_sink", "holds a non-finite value");
  }
  if ((p.rope == nullptr) != (p.rope_positions == nullptr)) {
    return Invalid(p.rope == nullptr ? "rope" : "rope_positions",
                   "is null while the other RoPE field is set");
  }
  if ((p.rope_q || p.rope_out) && p.rope == nullptr) {
    return Invalid("rope", "is null with rope_q or rope_out set");
  }
  if (p.rope_cos_sin != nullptr) {
    if (p.rope == nullptr) return Invalid("rope_cos_sin", "is set without rope");
    if (reinterpret_cast<uintptr_t>(p.rope_cos_sin) % 8 != 0) {
      return Invalid("rope_cos_sin", "is not 8-byte aligned");
    }
  }
  if (p.rope != nullptr) {
    if (!p.rope_q && !p.rope_out) return Invalid("rope", "is set without rope_q or rope_out");
    if (p.rope->rope_dims() > p.head_dim) {
      return Invalid("rope", "rotates more dims than head_dim");
    }
    for (int64_t t = 0; host_values && t < p.tokens; ++t) {
      if (p.rope_positions[t] < 0) return Invalid("rope_positions", "holds a negative position");
    }
  }
  const size_t need = workspace_need;
  if (need > 0 && (p.workspace == nullptr || p.workspace_bytes < need)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SparseAttn: workspace of %d bytes is missing or smaller than the %d bytes needed",
        p.workspace_bytes, need));
  }
  int64_t kv_elems = 0;
  int64_t idx_elems = 0;
  if (p.n_kv > 0) {
    RETURN_IF_ERROR(RowsExtent("kv", p.n_kv, p.kv_stride, p.head_dim, &kv_elems));
  }
  if (p.width > 0) {
    RETURN_IF_ERROR(RowsExtent("indices", p.tokens, p.indices_stride, p.width, &idx_elems));
  }
  const Extent out = MakeExtent(p.out, out_elems, sizeof(uint16_t));
  const Extent kv = MakeExtent(p.kv, kv_elems, sizeof(uint16_t));
  const Extent idx = MakeExtent(p.indices, idx_elems, sizeof(int32_t));
  const Extent ws = MakeExtent(p.workspace, static_cast<int64_t>(p.workspace_bytes), 1);
  const Extent q = MakeExtent(p.q, q_elems, sizeof(uint16_t));
  if (out.Overlaps(q)) return Invalid("out", "overlaps q");
  if (out.Overlaps(kv)) return Invalid("out", "overlaps kv");
  if (out.Overlaps(idx)) return Invalid("out", "overlaps indices");
  if (out.Overlaps(rows_window) || out.Overlaps(rows_compressed)) {
    return Invalid("out", "overlaps kv_rows");
  }
  if (out.Overlaps(MakeExtent(p.attn_sink, p.heads, sizeof(float)))) {
    return Invalid("out", "overlaps attn_sink");
  }
  if (out.Overlaps(ws)) return Invalid("out", "overlaps the workspace");
  if (ws.Overlaps(q) || ws.Overlaps(kv) || ws.Overlaps(idx) || ws.Overlaps(rows_window) ||
      ws.Overlaps(rows_compressed)) {
    return Invalid("workspace", "overlaps an input");
  }
  // The decode writes the scratch before the attention reads anything else.
  const Extent cos_sin =
      p.rope_cos_sin == nullptr
          ? Extent{}
          : MakeExtent(p.rope_cos_sin, p.tokens * p.rope->rope_dims(), sizeof(float));
  const Extent positions = MakeExtent(p.rope_positions, p.rope_positions ? p.tokens : 0, 8);
  if (decoded.Overlaps(q) || decoded.Overlaps(out) || decoded.Overlaps(idx) ||
      decoded.Overlaps(rows_window) || decoded.Overlaps(rows_compressed) || decoded.Overlaps(ws) ||
      decoded.Overlaps(MakeExtent(p.attn_sink, p.heads, sizeof(float))) ||
      decoded.Overlaps(cos_sin) || decoded.Overlaps(positions)) {
    return Invalid("kv_rows.decoded", "overlaps another buffer");
  }
  return host_values ? CheckIndices(p) : absl::OkStatus();
}

RopeParams OutputRopeParams(const SparseAttnParams& p) {
  RopeParams r;
  r.table = p.rope;
  r.tokens = p.tokens;
  r.heads = p.heads;
  r.head_dim = p.head_dim;
  r.positions = p.rope_positions;
  r.x = p.out;
  r.x_stride = p.out_stride;
  r.x_head_stride = p.out_head_stride;
  r.out = p.out;
  r.out_stride = p.out_stride;
  r.out_head_stride = p.out_head_stride;
  r.inverse = true;
  return r;
}

}  // namespace attention_internal

absl::Status ValidateSparseAttn(const SparseAttnParams& p, const ThreadPool* pool) {
  return attention_internal::ValidateSparseAttnFor(p, SparseAttnWorkspaceBytes(p.head_dim, pool),
                                                   /*host_values=*/true);
}

}  // namespace flashserve::kernels
