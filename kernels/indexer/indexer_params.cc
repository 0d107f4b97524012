// Validation shared by the CPU bodies and (later) the CUDA launchers, so both reject exactly the
// same params with the same messages; and the pure size helpers.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/formats/kv_row.h"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

// Keeps every size and extent computation far from int64 overflow; width also fits int32 output.
constexpr int64_t kMaxRows = int64_t{1} << 40;
constexpr int64_t kMaxWidth = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxStride = int64_t{1} << 40;

absl::Status Invalid(const char* op, const char* field, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", op, field, what));
}

absl::Status CheckNonNull(const char* op,
                          std::initializer_list<std::pair<const char*, const void*>> fields) {
  for (const auto& [name, ptr] : fields) {
    if (ptr == nullptr) return Invalid(op, name, "is null");
  }
  return absl::OkStatus();
}

absl::Status CheckStride(const char* op, const char* field, int64_t rows, int64_t stride,
                         int64_t min_stride) {
  if (stride < min_stride) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s %d is below the row extent %d", op, field, stride, min_stride));
  }
  if (stride > kMaxStride || (rows > 1 && (rows - 1) > (int64_t{1} << 60) / stride)) {
    return Invalid(op, field, "makes the tensor extent overflow");
  }
  return absl::OkStatus();
}

// tokens, width, start_pos, ratio and the causal reach of the last row.
absl::Status CheckRows(const char* op, int64_t tokens, int64_t width, int64_t start_pos,
                       int64_t ratio) {
  if (tokens < 0 || tokens > kMaxRows) return Invalid(op, "tokens", "is out of range");
  if (width < 0 || width > kMaxWidth) return Invalid(op, "width", "is out of range");
  if (start_pos < 0 || start_pos > kMaxRows) return Invalid(op, "start_pos", "is out of range");
  if (ratio < 1) return Invalid(op, "ratio", "must be >= 1");
  const int64_t last_reach = (start_pos + tokens) / ratio;
  if (tokens > 0 && last_reach > width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: width %d is below the last row's reach (start_pos + tokens) / ratio = %d", op, width,
        last_reach));
  }
  return absl::OkStatus();
}

absl::Status CheckWorkspace(const char* op, const void* workspace, size_t bytes, size_t needed) {
  if (workspace == nullptr) return Invalid(op, "workspace", "is null");
  if (reinterpret_cast<uintptr_t>(workspace) % 8 != 0) {
    return Invalid(op, "workspace", "is not 8-byte aligned");
  }
  if (bytes < needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: workspace_bytes %d is below the %d bytes one row needs", op, bytes, needed));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t IndexerTopkK(int64_t index_topk, int64_t width) {
  if (index_topk <= 0 || width <= 0) return 0;
  return index_topk < width ? index_topk : width;
}

int64_t CandidateBlockCount(int64_t width, int64_t block_size) {
  if (width <= 0 || block_size <= 0) return 0;
  return (width + block_size - 1) / block_size;
}

size_t IndexerTopkWorkspaceBytes(int64_t width, int64_t slots) {
  if (width <= 0 || slots <= 0) return 0;
  return static_cast<size_t>(width) * sizeof(uint64_t) * static_cast<size_t>(slots);
}

size_t CandidateBlocksWorkspaceBytes(int64_t width, int64_t block_size, int64_t slots) {
  if (slots <= 0) return 0;
  return static_cast<size_t>(CandidateBlockCount(width, block_size)) * sizeof(uint64_t) *
         static_cast<size_t>(slots);
}

absl::Status Validate(const IndexerScoreParams& p) {
  constexpr const char* kOp = "IndexerScore";
  RETURN_IF_ERROR(CheckRows(kOp, p.tokens, p.width, p.start_pos, p.ratio));
  if (p.heads < 1 || p.heads > (int64_t{1} << 20)) return Invalid(kOp, "heads", "is out of range");
  if (p.head_dim < 1 || p.head_dim > kMaxIndexHeadDim) {
    return Invalid(kOp, "head_dim", "must be in 1..kMaxIndexHeadDim (512)");
  }
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  RETURN_IF_ERROR((CheckNonNull(kOp, {{"q", p.q}, {"w", p.w}, {"scores", p.scores}})));
  if ((p.k == nullptr) == (p.k_rows == nullptr)) {
    return Invalid(
        kOp, "k / k_rows",
        p.k == nullptr ? "are both null (set exactly one)" : "are both set (set exactly one)");
  }
  RETURN_IF_ERROR(CheckStride(kOp, "q_stride", p.tokens, p.q_stride, p.heads * p.head_dim));
  if (p.k != nullptr) {
    if (p.k_row_stride != 0) return Invalid(kOp, "k_row_stride", "is set without k_rows");
    RETURN_IF_ERROR(CheckStride(kOp, "k_stride", p.width, p.k_stride, p.head_dim));
  } else {
    if (p.k_stride != 0) return Invalid(kOp, "k_stride", "is set without k (k_rows is set)");
    if (p.head_dim % formats::kFp4Ue8m0Block != 0) {
      return Invalid(kOp, "head_dim", "must be a multiple of 32 with k_rows");
    }
    RETURN_IF_ERROR(CheckStride(kOp, "k_row_stride", p.width, p.k_row_stride,
                                formats::IndexKRowBytes(p.head_dim)));
  }
  RETURN_IF_ERROR(CheckStride(kOp, "w_stride", p.tokens, p.w_stride, p.heads));
  RETURN_IF_ERROR(CheckStride(kOp, "scores_stride", p.tokens, p.scores_stride, p.width));
  if (p.candidates != nullptr && p.candidates_stride != 0) {
    RETURN_IF_ERROR(CheckStride(kOp, "candidates_stride", p.tokens, p.candidates_stride, p.width));
  }
  if (p.candidates == nullptr && p.candidates_stride != 0) {
    return Invalid(kOp, "candidates_stride", "is set without candidates");
  }
  return absl::OkStatus();
}

absl::Status Validate(const CandidateBlocksParams& p) {
  constexpr const char* kOp = "CandidateBlocks";
  RETURN_IF_ERROR(CheckRows(kOp, p.tokens, p.width, p.start_pos, p.ratio));
  if (p.block_size < 1 || p.block_size > kMaxWidth) {
    return Invalid(kOp, "block_size", "must be >= 1");
  }
  if (p.topk_blocks < 1) return Invalid(kOp, "topk_blocks", "must be >= 1");
  if (p.tokens == 0) return absl::OkStatus();
  if ((p.start_pos + 1) / p.ratio < 1) {
    return Invalid(kOp, "start_pos", "leaves row 0 with no reachable position (no block to pin)");
  }
  RETURN_IF_ERROR((CheckNonNull(kOp, {{"scores", p.scores}, {"candidates", p.candidates}})));
  RETURN_IF_ERROR(CheckStride(kOp, "scores_stride", p.tokens, p.scores_stride, p.width));
  RETURN_IF_ERROR(CheckStride(kOp, "candidates_stride", p.tokens, p.candidates_stride, p.width));
  const int64_t n_blocks = CandidateBlockCount(p.width, p.block_size);
  if (p.block_scores != nullptr) {
    RETURN_IF_ERROR(
        CheckStride(kOp, "block_scores_stride", p.tokens, p.block_scores_stride, n_blocks));
  }
  return CheckWorkspace(kOp, p.workspace, p.workspace_bytes,
                        CandidateBlocksWorkspaceBytes(p.width, p.block_size, 1));
}

absl::Status Validate(const IndexerTopkParams& p) {
  constexpr const char* kOp = "IndexerTopk";
  RETURN_IF_ERROR(CheckRows(kOp, p.tokens, p.width, p.start_pos, p.ratio));
  if (p.index_topk < 1) return Invalid(kOp, "index_topk", "must be >= 1");
  if (p.offset < 0 || p.offset > kMaxWidth - p.width) {
    return Invalid(kOp, "offset", "must be >= 0 with offset + width <= INT32_MAX");
  }
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  RETURN_IF_ERROR((CheckNonNull(kOp, {{"scores", p.scores}, {"indices", p.indices}})));
  RETURN_IF_ERROR(CheckStride(kOp, "scores_stride", p.tokens, p.scores_stride, p.width));
  RETURN_IF_ERROR(CheckStride(kOp, "indices_stride", p.tokens, p.indices_stride,
                              IndexerTopkK(p.index_topk, p.width)));
  return CheckWorkspace(kOp, p.workspace, p.workspace_bytes, IndexerTopkWorkspaceBytes(p.width, 1));
}

absl::Status Validate(const IndexerScoreBatchParams& p) {
  constexpr const char* kOp = "IndexerScoreBatch";
  if (p.batch < 0 || p.batch > kMaxRows) return Invalid(kOp, "batch", "is out of range");
  if (p.max_width < 0 || p.max_width > kMaxWidth) {
    return Invalid(kOp, "max_width", "is out of range");
  }
  if (p.heads < 1 || p.heads > (int64_t{1} << 20)) return Invalid(kOp, "heads", "is out of range");
  if (p.head_dim < 1 || p.head_dim > kMaxIndexHeadDim) {
    return Invalid(kOp, "head_dim", "must be in 1..kMaxIndexHeadDim (512)");
  }
  if (p.head_dim % formats::kFp4Ue8m0Block != 0) {
    return Invalid(kOp, "head_dim", "must be a multiple of 32 (k_rows)");
  }
  if (p.batch == 0 || p.max_width == 0) return absl::OkStatus();
  RETURN_IF_ERROR((CheckNonNull(kOp, {{"q", p.q},
                                      {"w", p.w},
                                      {"k_rows", p.k_rows},
                                      {"k_row_offsets", p.k_row_offsets},
                                      {"widths", p.widths},
                                      {"scores", p.scores}})));
  RETURN_IF_ERROR(CheckStride(kOp, "q_stride", p.batch, p.q_stride, p.heads * p.head_dim));
  RETURN_IF_ERROR(CheckStride(kOp, "w_stride", p.batch, p.w_stride, p.heads));
  if (p.k_row_stride < static_cast<int64_t>(formats::IndexKRowBytes(p.head_dim)) ||
      p.k_row_stride > kMaxStride) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: k_row_stride %d is below the row extent %d (or too large)", kOp,
                        p.k_row_stride, formats::IndexKRowBytes(p.head_dim)));
  }
  RETURN_IF_ERROR(CheckStride(kOp, "scores_stride", p.batch, p.scores_stride, p.max_width));
  if (p.candidates != nullptr) {
    RETURN_IF_ERROR(
        CheckStride(kOp, "candidates_stride", p.batch, p.candidates_stride, p.max_width));
  } else if (p.candidates_stride != 0) {
    return Invalid(kOp, "candidates_stride", "is set without candidates");
  }
  return absl::OkStatus();
}

absl::Status Validate(const IndexerTopkBatchParams& p) {
  constexpr const char* kOp = "IndexerTopkBatch";
  if (p.batch < 0 || p.batch > kMaxRows) return Invalid(kOp, "batch", "is out of range");
  if (p.max_width < 0 || p.max_width > kMaxWidth) {
    return Invalid(kOp, "max_width", "is out of range");
  }
  if (p.index_topk < 1) return Invalid(kOp, "index_topk", "must be >= 1");
  if (p.offset < 0 || p.offset > kMaxWidth - p.max_width) {
    return Invalid(kOp, "offset", "must be >= 0 with offset + max_width <= INT32_MAX");
  }
  if (p.batch == 0 || p.max_width == 0) return absl::OkStatus();
  RETURN_IF_ERROR(
      (CheckNonNull(kOp, {{"widths", p.widths}, {"scores", p.scores}, {"indices", p.indices}})));
  RETURN_IF_ERROR(CheckStride(kOp, "scores_stride", p.batch, p.scores_stride, p.max_width));
  RETURN_IF_ERROR(CheckStride(kOp, "indices_stride", p.batch, p.indices_stride,
                              IndexerTopkK(p.index_topk, p.max_width)));
  return CheckWorkspace(kOp, p.workspace, p.workspace_bytes,
                        IndexerTopkWorkspaceBytes(p.max_width, 1));
}

}  // namespace flashserve::kernels
