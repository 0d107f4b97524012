// IndexerScoreCpu: bit-exact against the scalar dtype recipe, close to a double reference, and
// hand-checkable cases (dtype roundings, causal reach in prefill, candidate masks).
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/kv_row.h"
#include "gtest/gtest.h"
#include "kernels/indexer/indexer.h"
#include "kernels/indexer/indexer_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using indexer_test::kNegInf;
using indexer_test::ScoreCase;

struct Shape {
  int64_t tokens, heads, head_dim, start_pos, ratio;
  double cand_density;  // < 0: no candidate mask
};

// Tiny fixture dims (4 heads x 64; prompt-a prefill at r = 2 and r = 1; decode rows), released
// model dims (32 heads x 128), odd sizes that leave partial tiles, and candidate masks.
const Shape kGrid[] = {
    {201, 4, 64, 0, 2, -1},    {201, 4, 64, 0, 1, -1},     {1, 4, 64, 201, 2, -1},
    {1, 4, 64, 212, 1, 0.15},  {37, 4, 64, 0, 1, 0.5},     {3, 32, 128, 4000, 1, -1},
    {1, 32, 128, 6000, 2, -1}, {5, 32, 128, 1200, 1, 0.1}, {9, 3, 5, 17, 3, -1},
    {1, 1, 1, 0, 1, -1},       {20, 2, 33, 5, 2, 0.9},
};

TEST(IndexerScoreTest, BitExactAgainstScalarRecipeAndCloseToDouble) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  for (const Shape& s : kGrid) {
    SCOPED_TRACE(testing::Message()
                 << "tokens " << s.tokens << " heads " << s.heads << " dim " << s.head_dim
                 << " start " << s.start_pos << " r " << s.ratio << " cand " << s.cand_density);
    const ScoreCase c = indexer_test::RandomScoreCase(rng, s.tokens, s.heads, s.head_dim,
                                                      s.start_pos, s.ratio, s.cand_density);
    const std::vector<uint16_t> want = indexer_test::RecipeScores(c);
    std::vector<double> ref, mag;
    indexer_test::DoubleScores(c, ref, mag);
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<uint16_t> got;
      ASSERT_TRUE(IndexerScoreCpu(indexer_test::ScoreParamsFor(c, got), tp).ok());
      int64_t mismatches = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        if (got[e] != want[e] && ++mismatches <= 5) {
          ADD_FAILURE() << "entry " << e << ": got " << Bf16BitsToFloat(got[e]) << " want "
                        << Bf16BitsToFloat(want[e]);
        }
        const double v = Bf16BitsToFloat(got[e]);
        if (std::isinf(ref[e])) {
          EXPECT_EQ(got[e], kNegInf) << "entry " << e;
          continue;
        }
        // Three bf16 roundings (q·k, w·ReLU, head sum), each <= 2^-8 (bf16 unit roundoff)
        // relative to its operand; the fp32 accumulations add far less.
        const double tol = 3.0 * std::ldexp(mag[e], -8) + 1e-30;
        EXPECT_LE(std::fabs(v - ref[e]), tol) << "entry " << e;
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

// One row, 2 heads, head_dim 2, hand-computed through every rounding.
TEST(IndexerScoreTest, HandCheckedRoundings) {
  ScoreCase c;
  c.tokens = 1;
  c.heads = 2;
  c.head_dim = 2;
  c.start_pos = 2;
  c.ratio = 1;
  c.width = 3;
  auto b = [](float x) { return FloatToBf16Bits(x); };
  // head 0: q = (1, 1); head 1: q = (1, -1).
  c.q = {b(1), b(1), b(1), b(-1)};
  // key 0: (1, 2^-8 + 2^-10): head0 dot 1.0048828125 -> bf16 1.0078125; head1 0.9951171875 ->
  //   bf16 0.99609375.
  // key 1: (-1, -1): head0 -2 -> ReLU 0; head1 0.
  // key 2: (3, 1): head0 4; head1 2.
  c.k = {b(1), b(0.0048828125f), b(-1), b(-1), b(3), b(1)};
  // w: head0 0.75, head1 -3.
  c.w = {b(0.75f), b(-3)};
  std::vector<uint16_t> got;
  ASSERT_TRUE(IndexerScoreCpu(indexer_test::ScoreParamsFor(c, got), nullptr).ok());
  // key 0: bf16(0.75·1.0078125 = 0.755859375) = 0.7578125 (tie to even);
  //   bf16(-3·0.99609375 = -2.98828125) = -2.984375; sum -2.2265625 -> bf16 -2.21875 (tie to even).
  //   Skipping the q·k rounding, or the w·ReLU rounding, would give -2.234375.
  EXPECT_EQ(Bf16BitsToFloat(got[0]), -2.21875f);
  // key 1: all ReLUs zero: +0 (never -0 even though w1 < 0).
  EXPECT_EQ(got[1], 0x0000);
  // key 2: 0.75·4 - 3·2 = -3.
  EXPECT_EQ(Bf16BitsToFloat(got[2]), -3.0f);
}

// Prefill at r = 2: row i sees t < (i + 1) / 2; the rest is −inf, including whole rows.
TEST(IndexerScoreTest, CausalReachInPrefill) {
  std::mt19937 rng(3);
  const ScoreCase c = indexer_test::RandomScoreCase(rng, 7, 2, 8, 0, 2);
  ASSERT_EQ(c.width, 3);
  std::vector<uint16_t> got;
  ASSERT_TRUE(IndexerScoreCpu(indexer_test::ScoreParamsFor(c, got), nullptr).ok());
  const int visible[7] = {0, 1, 1, 2, 2, 3, 3};
  for (int i = 0; i < 7; ++i) {
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(got[i * 3 + t] == kNegInf, t >= visible[i]) << "row " << i << " t " << t;
    }
  }
}

// A consumer's candidate mask: −inf exactly outside it; stride 0 broadcasts one decode row.
TEST(IndexerScoreTest, CandidateMaskAndBroadcast) {
  std::mt19937 rng(5);
  ScoreCase c = indexer_test::RandomScoreCase(rng, 3, 4, 16, 40, 1);
  // Make every unmasked score finite and nonzero: positive q, k and w.
  for (auto& v : c.q) v = FloatToBf16Bits(std::fabs(Bf16BitsToFloat(v)) + 0.5f);
  for (auto& v : c.k) v = FloatToBf16Bits(std::fabs(Bf16BitsToFloat(v)) + 0.5f);
  for (auto& v : c.w) v = FloatToBf16Bits(0.25f);
  std::vector<uint8_t> row(c.width, 0);
  for (int t : {0, 5, 6, 7, 41}) row[t] = 1;
  std::vector<uint16_t> got;
  IndexerScoreParams p = indexer_test::ScoreParamsFor(c, got);
  p.candidates = row.data();
  p.candidates_stride = 0;
  ASSERT_TRUE(IndexerScoreCpu(p, nullptr).ok());
  for (int64_t i = 0; i < c.tokens; ++i) {
    for (int64_t t = 0; t < c.width; ++t) {
      const bool open = row[t] != 0 && t < 41 + i;
      EXPECT_EQ(got[i * c.width + t] != kNegInf, open) << "row " << i << " t " << t;
      if (open) {
        EXPECT_GT(Bf16BitsToFloat(got[i * c.width + t]), 0.0f);
      }
    }
  }
}

TEST(IndexerScoreTest, RejectsBadParams) {
  std::mt19937 rng(1);
  const ScoreCase c = indexer_test::RandomScoreCase(rng, 4, 2, 8, 0, 1);
  std::vector<uint16_t> got;
  const IndexerScoreParams good = indexer_test::ScoreParamsFor(c, got);
  ASSERT_TRUE(IndexerScoreCpu(good, nullptr).ok());
  auto expect_bad = [&](IndexerScoreParams p, const char* field) {
    const absl::Status s = IndexerScoreCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), absl::string_view::npos) << s.message();
  };
  IndexerScoreParams p = good;
  p.width = 3;  // the last row reaches 4
  expect_bad(p, "width");
  p = good;
  p.q_stride = 15;
  expect_bad(p, "q_stride");
  p = good;
  p.head_dim = kMaxIndexHeadDim + 1;
  expect_bad(p, "head_dim");
  p = good;
  p.ratio = 0;
  expect_bad(p, "ratio");
  p = good;
  p.w = nullptr;
  expect_bad(p, "w");
  p = good;
  p.candidates_stride = 4;
  expect_bad(p, "candidates_stride");
}

// The keys as FP4 serving rows (k_rows): exactly one of k / k_rows, head_dim % 32, the row stride.
TEST(IndexerScoreTest, RejectsBadKRows) {
  std::mt19937 rng(2);
  const ScoreCase c = indexer_test::RandomScoreCase(rng, 4, 2, 64, 0, 1);
  std::vector<uint8_t> rows(static_cast<size_t>(c.width * formats::IndexKRowBytes(64)), 0);
  std::vector<uint16_t> got;
  IndexerScoreParams good = indexer_test::ScoreParamsFor(c, got);
  good.k = nullptr;
  good.k_stride = 0;
  good.k_rows = rows.data();
  good.k_row_stride = formats::IndexKRowBytes(64);
  ASSERT_TRUE(Validate(good).ok());
  auto expect_bad = [&](IndexerScoreParams p, const char* field) {
    const absl::Status s = IndexerScoreCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), absl::string_view::npos) << s.message();
  };
  IndexerScoreParams p = good;
  p.k = c.k.data();
  p.k_stride = 64;
  expect_bad(p, "k / k_rows");  // both set
  p = good;
  p.k_rows = nullptr;
  expect_bad(p, "k / k_rows");  // neither
  p = good;
  p.k_row_stride = formats::IndexKRowBytes(64) - 1;
  expect_bad(p, "k_row_stride");
  p = good;
  p.k_stride = 64;
  expect_bad(p, "k_stride");
  p = good;
  p.head_dim = 48;
  p.q_stride = 2 * 48;
  p.k_row_stride = 48;
  expect_bad(p, "head_dim");
  IndexerScoreParams with_k = indexer_test::ScoreParamsFor(c, got);
  with_k.k_row_stride = 68;
  expect_bad(with_k, "k_row_stride");
}

// k_rows scores equal the scalar recipe (indexer_test_util, independent of cpu/*.cc) on the
// decoded keys, with q FP4-QDQ'd and raw, padded rows and a candidate mask.
TEST(IndexerScoreTest, KRowsEqualRecipeOnDecodedKeys) {
  std::mt19937 rng(3);
  for (const int64_t dim : {64, 128}) {
    for (const int64_t pad : {0, 5}) {
      ScoreCase c = indexer_test::RandomScoreCase(rng, 6, 4, dim, 250, 2, pad == 0 ? -1.0 : 0.5);
      const int64_t rb = formats::IndexKRowBytes(dim), rs = rb + pad;
      std::vector<uint8_t> rows(static_cast<size_t>(c.width * rs), 0xEE);
      for (int64_t t = 0; t < c.width; ++t) {
        ASSERT_TRUE(formats::EncodeIndexKRow({c.k.data() + t * dim, static_cast<size_t>(dim)},
                                             {rows.data() + t * rs, static_cast<size_t>(rb)})
                        .ok());
      }
      if (pad != 0) {
        ASSERT_TRUE(formats::QdqFp4Ue8m0B32(std::vector<uint16_t>(c.q), c.q).ok());
      }
      std::vector<uint16_t> got;
      IndexerScoreParams p = indexer_test::ScoreParamsFor(c, got);
      p.k = nullptr;
      p.k_stride = 0;
      p.k_rows = rows.data();
      p.k_row_stride = rs;
      ThreadPool pool(3);
      ASSERT_TRUE(IndexerScoreCpu(p, &pool).ok());
      ScoreCase decoded = c;  // the recipe on the decoded keys
      for (int64_t t = 0; t < c.width; ++t) {
        ASSERT_TRUE(formats::DecodeIndexKRow({rows.data() + t * rs, static_cast<size_t>(rb)},
                                             {decoded.k.data() + t * dim, static_cast<size_t>(dim)})
                        .ok());
      }
      EXPECT_EQ(got, indexer_test::RecipeScores(decoded)) << "dim " << dim << " pad " << pad;
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
