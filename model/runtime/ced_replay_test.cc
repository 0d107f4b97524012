// CED prefill and bounded replay (issue 4 items 3 and 4) on the tiny model (window 16, decoder
// from layer 4), exact GEMMs:
// - a CED prefill of at most `window` tokens equals the exact prefill bit for bit; a longer one
//   leaves the encoder's state and every global KV row byte-identical to the exact prefill's and
//   changes only the decoder's view (figures printed; bounds are loose sanity limits — the
//   measurements live in docs/performance.md);
// - replaying a prefix of at most `window` tokens over its cached global KV equals the exact
//   prefill; a longer replay rewrites no global KV row, rebuilds the rings and the open groups
//   and decodes like the exact state up to the window truncation;
// - ring_from_layer leaves the rings below it untouched.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "model/runtime/runtime_fixture.h"

namespace flashserve::model {
namespace {

class CedReplayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::MakeTinyModel(kernels::LinearMode::kExact).release();
  }
  static SessionState Run(const std::vector<int32_t>& prompt, bool ced, ForwardOutput* out) {
    auto s = model_->NewSession(256);
    EXPECT_TRUE(s.ok());
    const absl::Status st = model_->Forward(*s, {.tokens = prompt, .ced = ced}, out);
    EXPECT_TRUE(st.ok()) << st;
    return *std::move(s);
  }
  static CpuModel* model_;
};
CpuModel* CedReplayTest::model_ = nullptr;

bool SameGlobalKv(const SessionState& a, const SessionState& b) {
  for (size_t l = 0; l < a.layers.size(); ++l) {
    if (a.layers[l].main.bytes != b.layers[l].main.bytes ||
        a.layers[l].index_k.bytes != b.layers[l].index_k.bytes) {
      return false;
    }
  }
  return true;
}

TEST_F(CedReplayTest, CedEqualsExactUpToTheWindow) {
  const std::vector<int32_t> a = testing::LoadPrompt("a").ids;
  const std::vector<int32_t> prompt(a.begin(), a.begin() + 16);
  ForwardOutput exact, ced;
  const SessionState se = Run(prompt, false, &exact);
  const SessionState sc = Run(prompt, true, &ced);
  EXPECT_EQ(exact.logits, ced.logits);
  EXPECT_TRUE(SameGlobalKv(se, sc));
}

TEST_F(CedReplayTest, CedKeepsEncoderAndGlobalKvExact) {
  const std::vector<int32_t> prompt = testing::LoadPrompt("a").ids;  // 201 tokens
  ForwardOutput exact, ced;
  SessionState se = Run(prompt, false, &exact);
  SessionState sc = Run(prompt, true, &ced);
  const int dec = model_->schedule().decoder_start_layer;
  ASSERT_EQ(dec, 4);
  EXPECT_TRUE(SameGlobalKv(se, sc)) << "global KV must not depend on the prefill mode";
  for (int l = 0; l < dec; ++l) {
    EXPECT_TRUE(se.layers[l].swa.bytes == sc.layers[l].swa.bytes) << "encoder ring " << l;
  }
  const testing::Compare cmp =
      testing::CompareRows(ced.logits.data(), exact.logits.data(), int64_t(exact.logits.size()));
  std::printf("CED vs exact, prompt a (201 tokens, window 16): last logits rel-RMS %.4f, max abs "
              "%.3f, argmax %d vs %d\n",
              cmp.rel_rms, cmp.max_abs, cmp.argmax_got, cmp.argmax_ref);
  EXPECT_LT(cmp.rel_rms, 0.5);
  // Both states decode; greedy continuations are compared (printed) over 8 steps.
  int agree = 0;
  int32_t te = cmp.argmax_ref, tc = cmp.argmax_got;
  for (int k = 0; k < 8; ++k) {
    ASSERT_TRUE(model_->Forward(se, {.tokens = {&te, 1}}, &exact).ok());
    ASSERT_TRUE(model_->Forward(sc, {.tokens = {&te, 1}}, &ced).ok());  // teacher-forced
    const testing::Compare d = testing::CompareRows(ced.logits.data(), exact.logits.data(),
                                                    int64_t(exact.logits.size()));
    agree += d.argmax_got == d.argmax_ref;
    te = d.argmax_ref;
    tc = d.argmax_got;
  }
  (void)tc;
  std::printf("CED vs exact, 8 teacher-forced decode steps: greedy agreement %d/8\n", agree);
}

TEST_F(CedReplayTest, ChunkedCedEqualsOneCall) {
  const std::vector<int32_t> prompt = testing::LoadPrompt("a").ids;
  ForwardOutput one, part;
  const SessionState s1 = Run(prompt, true, &one);
  auto s2 = model_->NewSession(256);
  ASSERT_TRUE(s2.ok());
  const std::span<const int32_t> all(prompt);
  ASSERT_TRUE(model_->Forward(*s2, {.tokens = all.first(77), .ced = true, .ced_skip_decoder = true},
                              &part).ok());
  EXPECT_TRUE(part.logits.empty());
  ASSERT_TRUE(model_->Forward(*s2, {.tokens = all.subspan(77, 60), .ced = true,
                                    .ced_skip_decoder = true},
                              &part).ok());
  ASSERT_TRUE(model_->Forward(*s2, {.tokens = all.subspan(137), .ced = true}, &part).ok());
  EXPECT_EQ(part.logits, one.logits);
  EXPECT_TRUE(SameGlobalKv(s1, *s2));
  // all_logits with ced: the decoder rows (the last window tokens).
  ForwardOutput rows;
  Run(prompt, true, &rows);
  auto s3 = model_->NewSession(256);
  ASSERT_TRUE(model_->Forward(*s3, {.tokens = prompt, .all_logits = true, .ced = true}, &rows).ok());
  const int64_t V = model_->config().vocab_size;
  ASSERT_EQ(rows.logits.size(), size_t(16 * V));
  EXPECT_EQ(0, std::memcmp(rows.logits.data() + 15 * V, one.logits.data(), V * 4));
}

TEST_F(CedReplayTest, ShortReplayEqualsExactPrefill) {
  const std::vector<int32_t> a = testing::LoadPrompt("a").ids;
  const std::vector<int32_t> prompt(a.begin(), a.begin() + 15);  // odd: an open ratio-2 group
  ForwardOutput exact, replayed;
  const SessionState se = Run(prompt, false, &exact);
  SessionState sr = se;
  for (LayerState& l : sr.layers) {  // the SWA state is gone
    std::fill(l.swa.bytes.begin(), l.swa.bytes.end(), 0);
    std::fill(l.swa.bf16.begin(), l.swa.bf16.end(), 0);
  }
  ResetSessionState(sr);
  ASSERT_TRUE(model_->Replay(sr, prompt, &replayed).ok());
  EXPECT_EQ(replayed.logits, exact.logits);
  for (size_t l = 0; l < se.layers.size(); ++l) {
    EXPECT_TRUE(se.layers[l].swa.bytes == sr.layers[l].swa.bytes) << "ring " << l;
  }
  EXPECT_TRUE(SameGlobalKv(se, sr));
  EXPECT_EQ(sr.position, se.position);
  EXPECT_EQ(sr.engram, se.engram);
}

TEST_F(CedReplayTest, LongReplayRebuildsRingsFromCachedGlobalKv) {
  const std::vector<int32_t> prompt = testing::LoadPrompt("a").ids;
  ForwardOutput exact, replayed;
  SessionState se = Run(prompt, false, &exact);
  SessionState sr = se;
  for (LayerState& l : sr.layers) std::fill(l.swa.bytes.begin(), l.swa.bytes.end(), 0);
  ResetSessionState(sr);
  ASSERT_TRUE(model_->Replay(sr, prompt, &replayed).ok());
  EXPECT_TRUE(SameGlobalKv(se, sr)) << "replay must not rewrite cached global KV";
  EXPECT_EQ(sr.position, se.position);
  EXPECT_EQ(sr.engram, se.engram);
  for (size_t l = 0; l < se.layers.size(); ++l) {
    if (se.layers[l].compressor) {
      EXPECT_EQ(se.layers[l].compressor->pending, sr.layers[l].compressor->pending);
    }
  }
  // Layer 0's ring only sees embeddings through a truncated window of the same tokens: its
  // newest row is exact; deeper layers drift with the truncation.
  double worst = 0;
  for (size_t l = 0; l < se.layers.size(); ++l) {
    double num = 0, den = 0;
    for (size_t e = 0; e < se.layers[l].swa.bf16.size(); ++e) {
      const double a = formats::Bf16BitsToFloat(se.layers[l].swa.bf16[e]);
      const double b = formats::Bf16BitsToFloat(sr.layers[l].swa.bf16[e]);
      num += (a - b) * (a - b);
      den += a * a;
    }
    const double rel = std::sqrt(num / den);
    worst = std::max(worst, rel);
    std::printf("replay vs exact ring, layer %zu: rel-RMS %.4f\n", l, rel);
  }
  const testing::Compare cmp = testing::CompareRows(replayed.logits.data(), exact.logits.data(),
                                                    int64_t(exact.logits.size()));
  std::printf("replay vs exact, prompt a: last logits rel-RMS %.4f, max abs %.3f, argmax %d vs "
              "%d\n",
              cmp.rel_rms, cmp.max_abs, cmp.argmax_got, cmp.argmax_ref);
  EXPECT_LT(cmp.rel_rms, 0.5);
  EXPECT_LT(worst, 0.5);
  // The truncated windows never read the dropped rings: garbage in them changes nothing.
  SessionState garbage = se;
  uint16_t v = 0x3f80;
  for (LayerState& l : garbage.layers) {
    for (uint16_t& x : l.swa.bf16) x = (v = static_cast<uint16_t>(v * 31 + 7)) & 0x3fff;
  }
  ResetSessionState(garbage);
  ForwardOutput replayed_garbage;
  ASSERT_TRUE(model_->Replay(garbage, prompt, &replayed_garbage).ok());
  EXPECT_EQ(replayed_garbage.logits, replayed.logits);
  // And it decodes.
  const int32_t next = cmp.argmax_ref;
  ASSERT_TRUE(model_->Forward(sr, {.tokens = {&next, 1}}, &replayed).ok());
}

TEST_F(CedReplayTest, RingFromLayerKeepsLowerRings) {
  const std::vector<int32_t> prompt = testing::LoadPrompt("b").ids;
  ForwardOutput out;
  SessionState s = Run(prompt, false, &out);
  const SessionState before = s;
  ASSERT_TRUE(model_->Replay(s, prompt, &out, /*ring_from_layer=*/4).ok());
  for (int l = 0; l < 4; ++l) {
    EXPECT_TRUE(before.layers[l].swa.bytes == s.layers[l].swa.bytes) << "ring " << l;
  }
  EXPECT_EQ(model_->Replay(s, {}, &out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::model
