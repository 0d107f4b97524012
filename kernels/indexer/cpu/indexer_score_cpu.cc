// CPU body of the index scores (spec §4.5 step 4). Visible candidate positions are gathered into
// tiles of kTile keys, converted to fp32 and transposed, so the d-loop updates kTile independent
// accumulators (vectorisable) while each accumulator still sums its products in d order, exactly
// the scalar recipe. bf16·bf16 products are exact in fp32, so fused multiply-adds could not change
// the bits either; -ffp-contract=off keeps the build honest anyway. k_rows keys are decoded to bf16
// first (formats::DecodeIndexKRow), so they score exactly as `k` = their decode.
#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/kv_row.h"
#include "kernels/indexer/cpu/indexer_cpu_internal.h"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using formats::RoundToBf16;

constexpr int kTile = 16;
// Positions per work item: enough work per item that scheduling is cheap, small enough that one
// long decode row spreads over the pool.
constexpr int64_t kPositionsPerItem = 2048;

// Scores the `n` (<= kTile) key positions pos[0..n) of row `row`; writes them to `out`.
void ScoreTile(const IndexerScoreParams& p, int64_t row, const int64_t* pos, int n, uint16_t* out) {
  const int64_t dim = p.head_dim;
  // kt[d * kTile + j] = k[pos[j], d] as fp32; unused lanes are zero (computed, never stored).
  alignas(64) float kt[kMaxIndexHeadDim * kTile];
  uint16_t decoded[kMaxIndexHeadDim];  // a k_rows row as bf16 (its exact decode)
  for (int j = 0; j < kTile; ++j) {
    const uint16_t* krow = j < n ? p.k + pos[j] * p.k_stride : nullptr;
    if (j < n && p.k_rows != nullptr) {
      const int64_t row_bytes = formats::IndexKRowBytes(dim);
      CHECK(formats::DecodeIndexKRow(
                {p.k_rows + pos[j] * p.k_row_stride, static_cast<size_t>(row_bytes)},
                {decoded, static_cast<size_t>(dim)})
                .ok());  // sizes were validated
      krow = decoded;
    }
    for (int64_t d = 0; d < dim; ++d) kt[d * kTile + j] = krow ? Bf16BitsToFloat(krow[d]) : 0.0f;
  }
  const uint16_t* q = p.q + row * p.q_stride;
  const uint16_t* w = p.w + row * p.w_stride;
  float head_sum[kTile];
  std::fill(head_sum, head_sum + kTile, 0.0f);
  for (int64_t h = 0; h < p.heads; ++h) {
    const uint16_t* qh = q + h * dim;
    float dot[kTile];
    std::fill(dot, dot + kTile, 0.0f);
    for (int64_t d = 0; d < dim; ++d) {
      const float qv = Bf16BitsToFloat(qh[d]);
      const float* kd = kt + d * kTile;
      for (int j = 0; j < kTile; ++j) dot[j] += qv * kd[j];
    }
    const float wh = Bf16BitsToFloat(w[h]);
    for (int j = 0; j < kTile; ++j) {
      const float qk = RoundToBf16(dot[j]);
      const float relu = qk > 0.0f ? qk : 0.0f;
      head_sum[j] += RoundToBf16(wh * relu);
    }
  }
  for (int j = 0; j < n; ++j) out[pos[j]] = FloatToBf16Bits(head_sum[j]);
}

// Row `row`, positions [begin, end) of the score width.
void ScoreRange(const IndexerScoreParams& p, int64_t row, int64_t begin, int64_t end) {
  uint16_t* out = p.scores + row * p.scores_stride;
  const uint8_t* cand =
      p.candidates == nullptr ? nullptr : p.candidates + row * p.candidates_stride;
  const int64_t visible_end = std::clamp(indexer_cpu::Reach(p.start_pos, p.ratio, row), begin, end);
  int64_t pos[kTile];
  int n = 0;
  for (int64_t t = begin; t < visible_end; ++t) {
    if (cand != nullptr && cand[t] == 0) {
      out[t] = indexer_cpu::kBf16NegInf;
      continue;
    }
    pos[n++] = t;
    if (n == kTile) {
      ScoreTile(p, row, pos, n, out);
      n = 0;
    }
  }
  if (n > 0) ScoreTile(p, row, pos, n, out);
  std::fill(out + visible_end, out + end, indexer_cpu::kBf16NegInf);
}

}  // namespace

absl::Status IndexerScoreCpu(const IndexerScoreParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  const int64_t chunks = (p.width + kPositionsPerItem - 1) / kPositionsPerItem;
  const int64_t items = p.tokens * chunks;
  auto run = [&p, chunks](size_t begin, size_t end) {
    for (auto item = static_cast<int64_t>(begin); item < static_cast<int64_t>(end); ++item) {
      const int64_t row = item / chunks;
      const int64_t first = (item % chunks) * kPositionsPerItem;
      ScoreRange(p, row, first, std::min(p.width, first + kPositionsPerItem));
    }
  };
  if (pool == nullptr || pool->size() == 0 || items == 1) {
    run(0, static_cast<size_t>(items));
  } else {
    pool->ParallelFor(static_cast<size_t>(items), 1, run);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
