// The batched decode ops' host side (indexer.h "Batched decode"): validation of the scalar
// fields, the CPU bodies' per-row checks (messages naming the row), and the CPU bodies against
// the single-row bodies row by row (scores bit for bit, untouched entries past each row's width;
// top-k equal plus the −1 padding, reach 0 and width 0 rows).
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/formats/bf16.h"
#include "common/formats/kv_row.h"
#include "gtest/gtest.h"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

constexpr uint16_t kPoison = 0x7FC1;
constexpr uint16_t kNegInf = 0xFF80;

void ExpectInvalid(const absl::Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(text), std::string::npos) << s;
}

// A small batch: 4 heads × 64, FP4 pool rows (random codes, scale bytes 120..126), rows in
// reverse order in the pool.
struct SmallBatch {
  static constexpr int64_t kHeads = 4, kDim = 64;
  std::vector<int32_t> widths, reaches;
  int64_t max_width = 0, row_bytes = formats::IndexKRowBytes(kDim);
  std::vector<uint16_t> q, w;
  std::vector<uint8_t> pool, mask;
  std::vector<int64_t> offsets;

  SmallBatch(std::vector<int32_t> w_in, std::vector<int32_t> r_in)
      : widths(std::move(w_in)), reaches(std::move(r_in)) {
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0.0f, 1.0f);
    int64_t at = 1;
    offsets.resize(widths.size());
    for (size_t b = widths.size(); b-- > 0;) {
      offsets[b] = at;
      at += widths[b] + 2;
      max_width = std::max<int64_t>(max_width, widths[b]);
    }
    pool.resize(static_cast<size_t>(at * row_bytes));
    for (auto& v : pool) v = static_cast<uint8_t>(rng());
    for (int64_t r = 0; r < at; ++r) {
      for (int64_t j = 0; j < kDim / 32; ++j) {
        pool[static_cast<size_t>(r * row_bytes + kDim / 2 + j)] =
            static_cast<uint8_t>(120 + rng() % 7);
      }
    }
    q.resize(widths.size() * kHeads * kDim);
    for (auto& v : q) v = formats::FloatToBf16Bits(n(rng));
    this->w.resize(widths.size() * kHeads);
    for (auto& v : this->w) v = formats::FloatToBf16Bits(n(rng) / 16);
    mask.resize(widths.size() * static_cast<size_t>(max_width));
    for (auto& v : mask) v = rng() % 3 != 0 ? 1 : 0;
  }

  IndexerScoreBatchParams Params(uint16_t* scores, bool use_mask) const {
    IndexerScoreBatchParams p;
    p.batch = static_cast<int64_t>(widths.size());
    p.heads = kHeads;
    p.head_dim = kDim;
    p.max_width = max_width;
    p.q = q.data();
    p.q_stride = kHeads * kDim;
    p.w = w.data();
    p.w_stride = kHeads;
    p.k_rows = pool.data();
    p.k_row_stride = row_bytes;
    p.k_row_offsets = offsets.data();
    p.widths = widths.data();
    p.reaches = reaches.empty() ? nullptr : reaches.data();
    p.candidates = use_mask ? mask.data() : nullptr;
    p.candidates_stride = use_mask ? max_width : 0;
    p.scores = scores;
    p.scores_stride = max_width + 3;
    return p;
  }
};

TEST(IndexerBatchTest, ValidatesScalarFields) {
  IndexerScoreBatchParams p;
  p.batch = -1;
  ExpectInvalid(Validate(p), "IndexerScoreBatch: batch is out of range");
  p.batch = 2;
  p.heads = 4;
  p.head_dim = 48;
  ExpectInvalid(Validate(p), "head_dim must be a multiple of 32");
  p.head_dim = 64;
  p.max_width = 0;
  EXPECT_TRUE(Validate(p).ok());  // empty: no pointers needed
  p.max_width = 10;
  ExpectInvalid(Validate(p), "q is null");
  SmallBatch s({5, 10}, {});
  std::vector<uint16_t> scores(100);
  p = s.Params(scores.data(), false);
  EXPECT_TRUE(Validate(p).ok());
  p.widths = nullptr;
  ExpectInvalid(Validate(p), "widths is null");
  p = s.Params(scores.data(), false);
  p.scores_stride = 9;
  ExpectInvalid(Validate(p), "scores_stride 9 is below the row extent 10");
  p = s.Params(scores.data(), false);
  p.k_row_stride = 33;
  ExpectInvalid(Validate(p), "k_row_stride 33 is below the row extent 34");
  p = s.Params(scores.data(), false);
  p.candidates_stride = 10;
  ExpectInvalid(Validate(p), "candidates_stride is set without candidates");
  p = s.Params(scores.data(), true);
  p.candidates_stride = 4;
  ExpectInvalid(Validate(p), "candidates_stride 4 is below the row extent 10");

  IndexerTopkBatchParams t;
  t.batch = 1;
  t.max_width = 100;
  t.index_topk = 0;
  ExpectInvalid(Validate(t), "IndexerTopkBatch: index_topk must be >= 1");
  t.index_topk = 16;
  t.offset = int64_t{0x7FFFFFFF} - 99;
  ExpectInvalid(Validate(t), "offset must be >= 0 with offset + max_width <= INT32_MAX");
  t.offset = 0;
  std::vector<int32_t> widths = {100}, idx(16);
  std::vector<uint16_t> sc(100);
  t.widths = widths.data();
  t.scores = sc.data();
  t.scores_stride = 100;
  t.indices = idx.data();
  t.indices_stride = 15;
  ExpectInvalid(Validate(t), "indices_stride 15 is below the row extent 16");
  t.indices_stride = 16;
  ExpectInvalid(Validate(t), "workspace is null");
}

TEST(IndexerBatchTest, CpuRejectsRowsOutOfContract) {
  SmallBatch s({5, 10}, {5, 11});
  std::vector<uint16_t> scores(100, kPoison);
  ExpectInvalid(IndexerScoreBatchCpu(s.Params(scores.data(), false), nullptr),
                "reaches[1] = 11 is outside 0..widths[1] (10)");
  EXPECT_EQ(scores[0], kPoison);  // nothing written
  s.reaches = {};
  s.widths[0] = 11;
  ExpectInvalid(IndexerScoreBatchCpu(s.Params(scores.data(), false), nullptr),
                "widths[0] = 11 is outside 0..max_width (10)");
  s.widths[0] = 5;
  s.offsets[1] = -1;
  ExpectInvalid(IndexerScoreBatchCpu(s.Params(scores.data(), false), nullptr),
                "k_row_offsets[1] = -1 is negative");
}

TEST(IndexerBatchTest, ScoresEqualSingleRowCalls) {
  for (bool use_mask : {false, true}) {
    SmallBatch s({37, 0, 300, 1, 128}, {20, 0, 300, 0, 128});
    const int64_t ss = s.max_width + 3;
    std::vector<uint16_t> got(s.widths.size() * static_cast<size_t>(ss), kPoison);
    ASSERT_TRUE(IndexerScoreBatchCpu(s.Params(got.data(), use_mask), nullptr).ok());
    for (size_t b = 0; b < s.widths.size(); ++b) {
      const int64_t width = s.widths[b], reach = s.reaches[b];
      std::vector<uint16_t> want(static_cast<size_t>(width), kNegInf);
      if (reach > 0) {
        IndexerScoreParams r;
        r.tokens = 1;
        r.heads = SmallBatch::kHeads;
        r.head_dim = SmallBatch::kDim;
        r.width = width;
        r.start_pos = reach - 1;
        r.q = s.q.data() + b * SmallBatch::kHeads * SmallBatch::kDim;
        r.q_stride = SmallBatch::kHeads * SmallBatch::kDim;
        r.w = s.w.data() + b * SmallBatch::kHeads;
        r.w_stride = SmallBatch::kHeads;
        r.k_rows = s.pool.data() + s.offsets[b] * s.row_bytes;
        r.k_row_stride = s.row_bytes;
        r.candidates = use_mask ? s.mask.data() + b * static_cast<size_t>(s.max_width) : nullptr;
        r.scores = want.data();
        r.scores_stride = width;
        ASSERT_TRUE(IndexerScoreCpu(r, nullptr).ok());
      }
      for (int64_t t = 0; t < ss; ++t) {
        const uint16_t v = got[b * static_cast<size_t>(ss) + static_cast<size_t>(t)];
        if (t < width) {
          EXPECT_EQ(v, want[static_cast<size_t>(t)]) << "row " << b << " pos " << t;
          if (t >= reach) {
            EXPECT_EQ(v, kNegInf) << "row " << b << " pos " << t;
          }
        } else {
          EXPECT_EQ(v, kPoison) << "row " << b << " pos " << t << " (past the width)";
        }
      }
    }
  }
}

TEST(IndexerBatchTest, TopkEqualsSingleRowCallsWithPadding) {
  std::mt19937 rng(5);
  const std::vector<int32_t> widths = {40, 0, 9, 16, 25}, reaches = {40, 0, 9, 0, 12};
  const int64_t max_width = 40, stride = 43, k_max = 16, is = 18;
  std::vector<uint16_t> scores(widths.size() * stride, kPoison);
  for (size_t b = 0; b < widths.size(); ++b) {
    for (int32_t t = 0; t < widths[b]; ++t) {
      scores[b * stride + static_cast<size_t>(t)] = static_cast<uint16_t>(0x3F80 + rng() % 4);
    }
  }
  std::vector<int32_t> got(widths.size() * is, -7);
  std::vector<uint64_t> ws(max_width);
  IndexerTopkBatchParams p;
  p.batch = static_cast<int64_t>(widths.size());
  p.max_width = max_width;
  p.index_topk = 16;
  p.offset = 100;
  p.widths = widths.data();
  p.reaches = reaches.data();
  p.scores = scores.data();
  p.scores_stride = stride;
  p.indices = got.data();
  p.indices_stride = is;
  p.workspace = ws.data();
  p.workspace_bytes = ws.size() * sizeof(uint64_t);
  ASSERT_TRUE(IndexerTopkBatchCpu(p, nullptr).ok());
  for (size_t b = 0; b < widths.size(); ++b) {
    const int64_t k = IndexerTopkK(16, widths[b]);
    std::vector<int32_t> want(static_cast<size_t>(k_max), -1);
    if (widths[b] > 0 && reaches[b] > 0) {
      IndexerTopkParams r;
      r.tokens = 1;
      r.width = widths[b];
      r.start_pos = reaches[b] - 1;
      r.index_topk = 16;
      r.offset = 100;
      r.scores = scores.data() + b * stride;
      r.scores_stride = widths[b];
      r.indices = want.data();
      r.indices_stride = k;
      r.workspace = ws.data();
      r.workspace_bytes = ws.size() * sizeof(uint64_t);
      ASSERT_TRUE(IndexerTopkCpu(r, nullptr).ok());
    }
    for (int64_t i = 0; i < is; ++i) {
      const int32_t v = got[b * is + static_cast<size_t>(i)];
      if (i < k_max) {
        EXPECT_EQ(v, want[static_cast<size_t>(i)]) << "row " << b << " slot " << i;
      } else {
        EXPECT_EQ(v, -7) << "row " << b << " slot " << i << " (past K)";
      }
    }
  }
  // Row 4 (reach 12 of 25): its −1s trail its picks.
  EXPECT_EQ(got[4 * is + 15], -1);
  EXPECT_GE(got[4 * is], 100);
}

}  // namespace
}  // namespace flashserve::kernels
