// One forward for prefill and decode (cpu_model.h): the same prompt run in one call, in chunks of
// any size (1 included) and as prefill + single-token steps gives the same session state, byte for
// byte, and the same logits — bit-exact with the exact GEMM mode, within fp32 rounding and with
// the same greedy token in the fast mode.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/runtime/runtime_fixture.h"

namespace flashserve::model {
namespace {

// Runs `tokens` in calls of the given sizes (cycled); returns the last call's logits.
std::vector<float> RunChunked(CpuModel& model, SessionState& s, const std::vector<int32_t>& tokens,
                              const std::vector<int64_t>& sizes) {
  ForwardOutput out;
  size_t i = 0, next = 0;
  while (next < tokens.size()) {
    const int64_t n = std::min<int64_t>(sizes[i++ % sizes.size()], tokens.size() - next);
    const absl::Status st =
        model.Forward(s, {.tokens = std::span(tokens).subspan(next, size_t(n))}, &out);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    next += static_cast<size_t>(n);
  }
  return out.logits;
}

void ExpectSameState(const SessionState& a, const SessionState& b) {
  ASSERT_EQ(a.position, b.position);
  EXPECT_EQ(a.engram, b.engram);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    EXPECT_TRUE(a.layers[l].swa.bytes == b.layers[l].swa.bytes) << "SWA ring";
    EXPECT_TRUE(a.layers[l].main.bytes == b.layers[l].main.bytes) << "compressed KV";
    EXPECT_TRUE(a.layers[l].index_k.bytes == b.layers[l].index_k.bytes) << "index keys";
    ASSERT_EQ(a.layers[l].compressor.has_value(), b.layers[l].compressor.has_value());
    if (a.layers[l].compressor) {
      const auto& ca = *a.layers[l].compressor;
      const auto& cb = *b.layers[l].compressor;
      EXPECT_EQ(ca.pending, cb.pending);
      if (ca.pending > 0) {
        EXPECT_EQ(ca.next_pos, cb.next_pos);
        EXPECT_EQ(0, std::memcmp(ca.kv.data(), cb.kv.data(), ca.pending * ca.channels * 4));
        EXPECT_EQ(0, std::memcmp(ca.score.data(), cb.score.data(), ca.pending * ca.channels * 4));
      }
    }
  }
}

TEST(ChunkedForwardTest, ExactModeAnySplitIsBitIdentical) {
  auto model = testing::MakeTinyModel(kernels::LinearMode::kExact);
  const std::vector<int32_t> prompt = testing::LoadPrompt("a").ids;  // 201 tokens (odd)
  auto one = model->NewSession(256);
  ASSERT_TRUE(one.ok());
  const std::vector<float> want = RunChunked(*model, *one, prompt, {201});
  for (const std::vector<int64_t>& sizes :
       std::vector<std::vector<int64_t>>{{1}, {7}, {64}, {100, 1, 33}, {16, 15, 17}, {200, 1}}) {
    SCOPED_TRACE(::testing::Message() << "first chunk size " << sizes[0] << " of " << sizes.size());
    auto s = model->NewSession(256);
    ASSERT_TRUE(s.ok());
    const std::vector<float> got = RunChunked(*model, *s, prompt, sizes);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "logits differ";
    ExpectSameState(*one, *s);
  }
}

TEST(ChunkedForwardTest, FastModeSplitsAgreeWithinRounding) {
  auto model = testing::MakeTinyModel(kernels::LinearMode::kFast);
  const std::vector<int32_t> prompt = testing::LoadPrompt("b").ids;
  auto one = model->NewSession(256);
  auto split = model->NewSession(256);
  ASSERT_TRUE(one.ok() && split.ok());
  const std::vector<float> want = RunChunked(*model, *one, prompt, {26});
  const std::vector<float> got = RunChunked(*model, *split, prompt, {5, 1, 9});
  const testing::Compare c = testing::CompareRows(got.data(), want.data(), int64_t(want.size()));
  std::printf("fast mode, chunks 5/1/9 vs one call: rel-RMS %.2e, max abs %.3g\n", c.rel_rms,
              c.max_abs);
  EXPECT_LE(c.rel_rms, 2e-2);
  EXPECT_EQ(c.argmax_got, c.argmax_ref);
}

TEST(ChunkedForwardTest, PrefillThenDecodeEqualsLongerPrefill) {
  auto model = testing::MakeTinyModel(kernels::LinearMode::kExact);
  const testing::GoldenPrompt p = testing::LoadPrompt("b");
  std::vector<int32_t> longer = p.ids;
  longer.insert(longer.end(), p.greedy_tokens.begin(), p.greedy_tokens.begin() + 6);
  auto a = model->NewSession(256);
  auto b = model->NewSession(256);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<float> want = RunChunked(*model, *a, longer, {int64_t(longer.size())});
  RunChunked(*model, *b, p.ids, {int64_t(p.ids.size())});
  ForwardOutput out;
  for (int k = 0; k < 6; ++k) {
    ASSERT_TRUE(model->Forward(*b, {.tokens = {&p.greedy_tokens[k], 1}}, &out).ok());
  }
  EXPECT_EQ(0, std::memcmp(out.logits.data(), want.data(), want.size() * 4));
  ExpectSameState(*a, *b);
}

TEST(ChunkedForwardTest, AllLogitsMatchLastRowAndErrorsLeaveStateUsable) {
  auto model = testing::MakeTinyModel(kernels::LinearMode::kExact);
  const std::vector<int32_t> prompt = testing::LoadPrompt("b").ids;
  auto s = model->NewSession(32);
  ASSERT_TRUE(s.ok());
  ForwardOutput all;
  ASSERT_TRUE(model->Forward(*s, {.tokens = prompt, .all_logits = true}, &all).ok());
  const int64_t V = model->config().vocab_size, n = static_cast<int64_t>(prompt.size());
  ASSERT_EQ(all.logits.size(), size_t(n * V));
  auto t = model->NewSession(32);
  ForwardOutput last;
  ASSERT_TRUE(model->Forward(*t, {.tokens = prompt}, &last).ok());
  EXPECT_EQ(0, std::memcmp(all.logits.data() + (n - 1) * V, last.logits.data(), V * 4));
  // Rejected calls change nothing: a bad id, too many tokens for the capacity, an empty call.
  const int32_t bad = static_cast<int32_t>(V);
  EXPECT_EQ(model->Forward(*s, {.tokens = {&bad, 1}}, &last).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> seven(7, 5);
  EXPECT_EQ(model->Forward(*s, {.tokens = seven}, &last).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(model->Forward(*s, {.tokens = {}}, &last).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->position, n);
  EXPECT_FALSE(s->failed);
  const int32_t ok = 5;
  EXPECT_TRUE(model->Forward(*s, {.tokens = {&ok, 1}}, &last).ok());
  EXPECT_EQ(model->NewSession(model->max_context() + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::model
