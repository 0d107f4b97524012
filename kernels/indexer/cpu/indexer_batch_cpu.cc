// CPU bodies of the batched decode ops (indexer.h "Batched decode"): each row is the single-row
// op over that row's keys and scores, so the bits are the single-row bodies' by construction.
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "kernels/indexer/cpu/indexer_cpu_internal.h"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

// Row b's width and reach from the host arrays, checked against the contract.
absl::Status RowExtent(const char* op, int64_t b, int64_t max_width, const int32_t* widths,
                       const int32_t* reaches, int64_t* width, int64_t* reach) {
  *width = widths[b];
  *reach = reaches != nullptr ? reaches[b] : widths[b];
  if (*width < 0 || *width > max_width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: widths[%d] = %d is outside 0..max_width (%d)", op, b, *width, max_width));
  }
  if (*reach < 0 || *reach > *width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: reaches[%d] = %d is outside 0..widths[%d] (%d)", op, b, *reach, b, *width));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status IndexerScoreBatchCpu(const IndexerScoreBatchParams& p, ThreadPool* pool) {
  constexpr const char* kOp = "IndexerScoreBatch";
  RETURN_IF_ERROR(Validate(p));
  if (p.batch == 0 || p.max_width == 0) return absl::OkStatus();
  for (int64_t b = 0; b < p.batch; ++b) {  // every row checked before anything is written
    int64_t width = 0, reach = 0;
    RETURN_IF_ERROR(RowExtent(kOp, b, p.max_width, p.widths, p.reaches, &width, &reach));
    if (p.k_row_offsets[b] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: k_row_offsets[%d] = %d is negative", kOp, b, p.k_row_offsets[b]));
    }
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t width = 0, reach = 0;
    RETURN_IF_ERROR(RowExtent(kOp, b, p.max_width, p.widths, p.reaches, &width, &reach));
    uint16_t* out = p.scores + b * p.scores_stride;
    if (reach == 0) {  // nothing visible (the single-row op needs reach >= 1 via start_pos)
      for (int64_t t = 0; t < width; ++t) out[t] = indexer_cpu::kBf16NegInf;
      continue;
    }
    IndexerScoreParams r;
    r.tokens = 1;
    r.heads = p.heads;
    r.head_dim = p.head_dim;
    r.width = width;
    r.start_pos = reach - 1;
    r.ratio = 1;
    r.q = p.q + b * p.q_stride;
    r.q_stride = p.heads * p.head_dim;
    r.k_rows = p.k_rows + p.k_row_offsets[b] * p.k_row_stride;
    r.k_row_stride = p.k_row_stride;
    r.w = p.w + b * p.w_stride;
    r.w_stride = p.heads;
    if (p.candidates != nullptr) r.candidates = p.candidates + b * p.candidates_stride;
    r.scores = out;
    r.scores_stride = width;
    RETURN_IF_ERROR(IndexerScoreCpu(r, pool));
  }
  return absl::OkStatus();
}

absl::Status IndexerTopkBatchCpu(const IndexerTopkBatchParams& p, ThreadPool* pool) {
  constexpr const char* kOp = "IndexerTopkBatch";
  RETURN_IF_ERROR(Validate(p));
  if (p.batch == 0 || p.max_width == 0) return absl::OkStatus();
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t width = 0, reach = 0;
    RETURN_IF_ERROR(RowExtent(kOp, b, p.max_width, p.widths, p.reaches, &width, &reach));
  }
  const int64_t k_max = IndexerTopkK(p.index_topk, p.max_width);
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t width = 0, reach = 0;
    RETURN_IF_ERROR(RowExtent(kOp, b, p.max_width, p.widths, p.reaches, &width, &reach));
    int32_t* out = p.indices + b * p.indices_stride;
    const int64_t k = IndexerTopkK(p.index_topk, width);
    for (int64_t i = k; i < k_max; ++i) out[i] = -1;
    if (width == 0) continue;
    // Reach r as the single-row op's (start_pos + 1) / ratio with ratio 1; reach 0 (start_pos −1)
    // is out of that op's domain, so run it at reach 1 and turn position 0 into −1 after.
    IndexerTopkParams r;
    r.tokens = 1;
    r.width = width;
    r.start_pos = reach > 0 ? reach - 1 : 0;
    r.ratio = 1;
    r.index_topk = p.index_topk;
    r.offset = p.offset;
    r.scores = p.scores + b * p.scores_stride;
    r.scores_stride = width;
    r.indices = out;
    r.indices_stride = k;
    r.workspace = p.workspace;
    r.workspace_bytes = p.workspace_bytes;
    RETURN_IF_ERROR(IndexerTopkCpu(r, pool));
    if (reach == 0) {
      for (int64_t i = 0; i < k; ++i) out[i] = -1;
    }
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
