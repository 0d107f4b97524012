// SparseAttnCpu: bit-exact against the scalar transcription of the reference recipe, within the
// stated tolerance of a double-precision softmax with the sink, hand-checkable cases, -1 entries,
// empty rows, validation, pool independence, and the tiny-fixture and released-model dims.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/window_indices.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using testing::AttnCase;

// Runs the kernel (with and without a pool), the scalar transcription and the double reference.
void ExpectExactAndClose(const AttnCase& c) {
  std::vector<uint16_t> single;
  ASSERT_TRUE(testing::RunKernel(c, nullptr, &single).ok());
  ThreadPool pool(2);
  std::vector<uint16_t> multi;
  ASSERT_TRUE(testing::RunKernel(c, &pool, &multi).ok());
  EXPECT_EQ(testing::CountBitDiffs(single, multi), 0) << "result depends on the pool";
  EXPECT_EQ(testing::CountBitDiffs(single, testing::ScalarReference(c)), 0)
      << "differs from the scalar transcription of the reference recipe";
  std::vector<double> ref, mass;
  testing::DoubleReference(c, &ref, &mass);
  double worst = 0.0;
  EXPECT_EQ(testing::CountOutsideTolerance(single, ref, mass, &worst), 0)
      << "worst |err| / bound " << worst;
}

struct Shape {
  int64_t tokens, heads, head_dim, n_kv, width;
  double invalid_frac;
};

TEST(SparseAttnCpu, ExactAndWithinToleranceOverShapes) {
  const Shape shapes[] = {
      {3, 4, 128, 40, 32, 0.1},   // tiny fixture: 16 window + 16 top-k
      {2, 1, 1, 5, 3, 0.0},       // degenerate sizes
      {4, 3, 7, 300, 200, 0.2},   // odd head_dim, 3 full blocks + a partial one
      {2, 11, 33, 90, 64, 0.05},  // heads not a multiple of 8, exactly one block
      {2, 9, 64, 70, 65, 0.3},    // one entry into the second block
      {1, 16, 16, 1000, 700, 0.5},
  };
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "tokens " << s.tokens << " heads " << s.heads
                                      << " head_dim " << s.head_dim << " width " << s.width);
    const AttnCase c =
        testing::RandomCase(s.tokens, s.heads, s.head_dim, s.n_kv, s.width, s.invalid_frac, seed++);
    ExpectExactAndClose(c);
  }
}

// The tiny fixture's geometry: prefill of 40 tokens, window 16 (list width 16), top-k 16 over 20
// compressed rows at offset 40, through the real list builders.
TEST(SparseAttnCpu, TinyFixtureDimsWithRealLists) {
  constexpr int64_t kS = 40, kW = 16, kTopK = 16, kCompressed = 20;
  AttnCase c = testing::RandomCase(kS, 4, 128, kS + kCompressed, 0, 0.0, 7);
  auto window = BuildPrefillWindowIndices(kS, kW);
  ASSERT_TRUE(window.ok());
  // Ratio 2: position p sees compressed rows j < (p + 1) / 2; the top-k picks up to 16 of them,
  // ascending, -1 last (spec §4.5 step 6).
  IndexList topk{kS, kTopK, std::vector<int32_t>(kS * kTopK, -1)};
  std::mt19937 gen(8);
  for (int64_t p = 0; p < kS; ++p) {
    std::vector<int32_t> visible(static_cast<size_t>(std::min<int64_t>((p + 1) / 2, kCompressed)));
    std::iota(visible.begin(), visible.end(), 0);
    std::sample(visible.begin(), visible.end(), topk.ids.begin() + p * kTopK, kTopK, gen);
  }
  auto list = ConcatIndices(*window, topk, kS);
  ASSERT_TRUE(list.ok());
  c.width = list->width;
  c.indices = list->ids;
  ExpectExactAndClose(c);
}

// Released dims: 64 heads × 512, 128 window + 512 selected entries (10 blocks), a few tokens.
TEST(SparseAttnCpu, ReleasedModelDims) {
  AttnCase c = testing::RandomCase(3, 64, 512, 128 + 2048, 640, 0.0, 11);
  c.scale = 1.0f / std::sqrt(512.0f);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t e = 0; e < 128; ++e) c.indices[t * 640 + e] = static_cast<int32_t>(e);
    for (int64_t e = 0; e < 512; ++e) {
      c.indices[t * 640 + 128 + e] = static_cast<int32_t>(128 + (e * 4 + t) % 2048);
    }
  }
  // A decode step that is still filling its ring: leading -1 in the window part.
  for (int64_t e = 0; e < 100; ++e) c.indices[2 * 640 + e] = -1;
  ExpectExactAndClose(c);
}

// q = 0 makes every logit 0: p = 1 for each entry and exp(sink − 0) for the sink.
AttnCase ZeroQueryCase(const std::vector<std::vector<float>>& rows, float sink) {
  AttnCase c;
  c.tokens = 1;
  c.heads = 1;
  c.head_dim = static_cast<int64_t>(rows[0].size());
  c.n_kv = static_cast<int64_t>(rows.size());
  c.width = c.n_kv;
  c.scale = 0.125f;
  c.q.assign(c.head_dim, 0);
  for (const auto& r : rows) {
    for (float v : r) c.kv.push_back(FloatToBf16Bits(v));
  }
  for (int64_t e = 0; e < c.n_kv; ++e) c.indices.push_back(static_cast<int32_t>(e));
  c.sink = {sink};
  return c;
}

TEST(SparseAttnCpu, HandCheckableCases) {
  std::vector<uint16_t> out;
  // (1·v1 + 1·v2) / (1 + 1 + e^0) with v1 = 1, v2 = 2 → exactly 1; with v1 = -3, v2 = 1.5 → -0.5.
  ASSERT_TRUE(testing::RunKernel(ZeroQueryCase({{1, -3}, {2, 1.5}}, 0.0f), nullptr, &out).ok());
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 1.0f);
  EXPECT_EQ(Bf16BitsToFloat(out[1]), -0.5f);
  // One entry, sink 0: v / 2.
  ASSERT_TRUE(testing::RunKernel(ZeroQueryCase({{3, -5, 0.25}}, 0.0f), nullptr, &out).ok());
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 1.5f);
  EXPECT_EQ(Bf16BitsToFloat(out[1]), -2.5f);
  EXPECT_EQ(Bf16BitsToFloat(out[2]), 0.125f);
  // A sink far below every logit vanishes (exp underflows to 0): out = v exactly.
  ASSERT_TRUE(testing::RunKernel(ZeroQueryCase({{3, -5, 0.25}}, -200.0f), nullptr, &out).ok());
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 3.0f);
  EXPECT_EQ(Bf16BitsToFloat(out[1]), -5.0f);
  // Sink ln 3 with one entry: denom 1 + 3 = 4 (up to exp rounding), out = v / 4 after bf16.
  ASSERT_TRUE(testing::RunKernel(ZeroQueryCase({{8, 1}}, std::log(3.0f)), nullptr, &out).ok());
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 2.0f);
  EXPECT_EQ(Bf16BitsToFloat(out[1]), 0.25f);
}

// Logit scale and q·k: q = (2, 0), rows (1, 0) and (0, 1), scale 0.5 → logits 1 and 0, sink
// -inf-like: out = (e·(1,0) + 1·(0,1)) / (e + 1) with bf16(p): p = (1, e^-1) against the max 1.
TEST(SparseAttnCpu, HandCheckableLogits) {
  AttnCase c = ZeroQueryCase({{1, 0}, {0, 1}}, -200.0f);
  c.q = {FloatToBf16Bits(2.0f), 0};
  c.scale = 0.5f;
  std::vector<uint16_t> out;
  ASSERT_TRUE(testing::RunKernel(c, nullptr, &out).ok());
  const float p1 = std::exp(-1.0f);
  const float den = 1.0f + p1;
  EXPECT_EQ(out[0], FloatToBf16Bits(1.0f / den));
  EXPECT_EQ(out[1], FloatToBf16Bits(formats::RoundToBf16(p1) / den));
}

TEST(SparseAttnCpu, MinusOneEntriesAreIgnoredWithinABlock) {
  AttnCase a = testing::RandomCase(2, 4, 32, 50, 6, 0.0, 21);
  a.indices = {3, 7, 11, 40, 2, 9, /*row 1*/ 5, 6, 7, 8, 9, 10};
  AttnCase b = a;  // same valid entries in the same order, -1 slots interleaved and trailing
  b.width = 10;
  b.indices = {-1, 3, 7, -1, 11, 40, -1, 2, 9, -1, /*row 1*/ 5, 6, 7, 8, 9, 10, -1, -1, -1, -1};
  std::vector<uint16_t> out_a, out_b;
  ASSERT_TRUE(testing::RunKernel(a, nullptr, &out_a).ok());
  ASSERT_TRUE(testing::RunKernel(b, nullptr, &out_b).ok());
  EXPECT_EQ(testing::CountBitDiffs(out_a, out_b), 0);
  EXPECT_EQ(testing::CountBitDiffs(out_b, testing::ScalarReference(b)), 0);
}

TEST(SparseAttnCpu, RowWithoutValidEntryGivesPositiveZeros) {
  AttnCase c = testing::RandomCase(3, 5, 24, 30, 130, 0.0, 31);
  for (int64_t e = 0; e < 130; ++e) c.indices[1 * 130 + e] = -1;  // row 1: nothing valid
  std::vector<uint16_t> out;
  ASSERT_TRUE(testing::RunKernel(c, nullptr, &out).ok());
  const int64_t row = 5 * 24;
  int64_t nonzero_elsewhere = 0;
  for (int64_t i = 0; i < 3 * row; ++i) {
    if (i >= row && i < 2 * row) {
      EXPECT_EQ(out[i], 0u) << i;
    } else {
      nonzero_elsewhere += out[i] != 0;
    }
  }
  EXPECT_GT(nonzero_elsewhere, row);
  EXPECT_EQ(testing::CountBitDiffs(out, testing::ScalarReference(c)), 0);

  // Width 0 and an empty pool: every row is zeros.
  AttnCase empty = testing::RandomCase(2, 3, 8, 0, 0, 0.0, 32);
  ASSERT_TRUE(testing::RunKernel(empty, nullptr, &out).ok());
  for (uint16_t v : out) EXPECT_EQ(v, 0u);
}

TEST(SparseAttnCpu, RejectsBadParamsWithoutWriting) {
  const AttnCase good = testing::RandomCase(2, 3, 16, 10, 8, 0.0, 41);
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  auto expect_rejected = [&](auto mutate, const char* what) {
    AttnCase c = good;
    SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &ws);
    mutate(c, p);
    const absl::Status s = SparseAttnCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), absl::string_view::npos) << s.message();
    for (uint16_t v : out) ASSERT_EQ(v, 0xFFFFu) << what << " wrote the output";
  };
  expect_rejected(
      [](AttnCase& c, SparseAttnParams& p) {
        c.indices[5] = 10;
        p.indices = c.indices.data();
      },
      "indices[0, 5]");
  expect_rejected(
      [](AttnCase& c, SparseAttnParams& p) {
        c.indices[9] = -2;
        p.indices = c.indices.data();
      },
      "indices[1, 1]");
  expect_rejected([](AttnCase&, SparseAttnParams& p) { p.attn_sink = nullptr; }, "attn_sink");
  expect_rejected([](AttnCase&, SparseAttnParams& p) { p.workspace_bytes -= 1; }, "workspace");
  expect_rejected([](AttnCase&, SparseAttnParams& p) { p.q_head_stride = 15; }, "q_head_stride");
  expect_rejected([](AttnCase&, SparseAttnParams& p) { p.out_stride = 40; }, "out_stride");
  expect_rejected([](AttnCase&, SparseAttnParams& p) { p.head_dim = 0; }, "head_dim");
  expect_rejected([](AttnCase&, SparseAttnParams& p) { p.softmax_scale = NAN; }, "softmax_scale");
  expect_rejected([](AttnCase&, SparseAttnParams& p) { p.indices_stride = 7; }, "indices_stride");
  expect_rejected(
      [](AttnCase& c, SparseAttnParams& p) {
        c.sink[1] = INFINITY;
        p.attn_sink = c.sink.data();
      },
      "attn_sink");
  // out aliasing q
  AttnCase c = good;
  SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &ws);
  p.out = reinterpret_cast<uint16_t*>(c.q.data());
  EXPECT_EQ(SparseAttnCpu(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // A workspace sized for no pool is too small for a pool of 3.
  ThreadPool pool(3);
  p = testing::MakeParams(good, nullptr, &out, &ws);
  EXPECT_EQ(SparseAttnCpu(p, &pool).code(), absl::StatusCode::kInvalidArgument);
  // tokens == 0 is a no-op even with null pointers.
  SparseAttnParams empty;
  empty.heads = 1;
  empty.head_dim = 4;
  empty.softmax_scale = 1.0f;
  EXPECT_TRUE(SparseAttnCpu(empty, nullptr).ok());
}

TEST(SparseAttnCpu, WorkspaceBytesFollowsTheDocumentedFormula) {
  ThreadPool pool(3);
  const size_t per_slot = 4 * (512 * (64 + 2 * 8 + 1) + 8 * 64 + 64);
  EXPECT_EQ(SparseAttnWorkspaceBytes(512, nullptr), per_slot + 64);
  EXPECT_EQ(SparseAttnWorkspaceBytes(512, &pool), 4 * per_slot + 64);
  EXPECT_EQ(SparseAttnWorkspaceBytes(0, nullptr), 0u);
}

}  // namespace
}  // namespace flashserve::kernels
