// Batched and multi-token steps (issue 4 item 5) on the tiny model with exact GEMMs, so every
// equality is bit for bit:
// - sessions at different positions in one ForwardBatch give the logits and states each gives
//   alone, and sessions join and leave between steps;
// - k tokens of one session in one call equal k single steps (all rows' logits and the state);
// - such a call cut after the fact to its first j tokens (Truncate) equals j single steps, across
//   window wrap-around and odd/even compressor boundaries, and generation continues identically.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/runtime/runtime_fixture.h"

namespace flashserve::model {
namespace {

void ExpectSameState(const SessionState& a, const SessionState& b) {
  ASSERT_EQ(a.position, b.position);
  EXPECT_EQ(a.engram, b.engram);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    EXPECT_TRUE(a.layers[l].swa.bytes == b.layers[l].swa.bytes) << "SWA ring";
    EXPECT_TRUE(a.layers[l].swa.bf16 == b.layers[l].swa.bf16) << "SWA mirror";
    // Compressed rows up to the position (rows past it may hold dropped groups).
    for (const auto* rows : {&a.layers[l].main, &b.layers[l].main}) (void)rows;
    const KvRows& ma = a.layers[l].main;
    if (ma.capacity > 0) {
      const int64_t r = a.layers[l].compressor->ratio, valid = a.position / r;
      EXPECT_EQ(0, std::memcmp(ma.row(0), b.layers[l].main.row(0), valid * ma.row_bytes));
      const KvRows& ia = a.layers[l].index_k;
      if (ia.capacity > 0) {
        EXPECT_EQ(0, std::memcmp(ia.row(0), b.layers[l].index_k.row(0), valid * ia.row_bytes));
      }
      const auto& ca = *a.layers[l].compressor;
      const auto& cb = *b.layers[l].compressor;
      ASSERT_EQ(ca.pending, cb.pending);
      if (ca.pending > 0) {
        EXPECT_EQ(ca.next_pos, cb.next_pos);
        EXPECT_EQ(0, std::memcmp(ca.kv.data(), cb.kv.data(), ca.pending * ca.channels * 4));
        EXPECT_EQ(0, std::memcmp(ca.score.data(), cb.score.data(), ca.pending * ca.channels * 4));
      }
    }
  }
}

bool SameFloats(const std::vector<float>& a, const float* b, size_t n) {
  return a.size() >= n && std::memcmp(a.data(), b, n * 4) == 0;
}

class BatchForwardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::MakeTinyModel(kernels::LinearMode::kExact).release();
  }
  SessionState Prefilled(const std::vector<int32_t>& prompt) {
    auto s = model_->NewSession(256);
    EXPECT_TRUE(s.ok());
    ForwardOutput out;
    EXPECT_TRUE(model_->Forward(*s, {.tokens = prompt}, &out).ok());
    return *std::move(s);
  }
  static CpuModel* model_;
};
CpuModel* BatchForwardTest::model_ = nullptr;

TEST_F(BatchForwardTest, SessionsAtDifferentPositionsEqualEachAlone) {
  const std::vector<int32_t> a = testing::LoadPrompt("a").ids;  // 201 tokens
  const std::vector<int32_t> b = testing::LoadPrompt("b").ids;  // 26
  const std::vector<int32_t> c(a.begin(), a.begin() + 17);       // 17 (odd, ring just wrapped)
  SessionState sa = Prefilled(a), sb = Prefilled(b), sc = Prefilled(c);
  SessionState ra = Prefilled(a), rb = Prefilled(b), rc = Prefilled(c);
  // Step 1: all three, one token each plus a 3-token chunk for c; step 2: a and c (b left);
  // step 3: b rejoins with c.
  const std::vector<std::vector<size_t>> steps = {{0, 1, 2}, {0, 2}, {1, 2}};
  SessionState* batch_states[] = {&sa, &sb, &sc};
  SessionState* ref_states[] = {&ra, &rb, &rc};
  int32_t next = 100;
  for (const auto& members : steps) {
    std::vector<SessionState*> states;
    std::vector<ForwardInput> inputs;
    std::vector<std::vector<int32_t>> tokens;
    for (size_t who : members) tokens.push_back(std::vector<int32_t>(who == 2 ? 3 : 1, next++));
    for (size_t e = 0; e < members.size(); ++e) {
      states.push_back(batch_states[members[e]]);
      inputs.push_back({.tokens = tokens[e], .all_logits = true});
    }
    std::vector<ForwardOutput> outs(members.size());
    ASSERT_TRUE(model_->ForwardBatch(states, inputs, outs).ok());
    for (size_t e = 0; e < members.size(); ++e) {
      ForwardOutput alone;
      ASSERT_TRUE(model_->Forward(*ref_states[members[e]], inputs[e], &alone).ok());
      EXPECT_EQ(outs[e].logits, alone.logits) << "session " << members[e];
      EXPECT_EQ(outs[e].main_hidden, alone.main_hidden);
    }
  }
  ExpectSameState(sa, ra);
  ExpectSameState(sb, rb);
  ExpectSameState(sc, rc);
}

TEST_F(BatchForwardTest, BatchValidation) {
  SessionState s = Prefilled({0, 1, 2});
  const int32_t t = 5;
  SessionState* twice[] = {&s, &s};
  ForwardInput in[] = {{.tokens = {&t, 1}}, {.tokens = {&t, 1}}};
  ForwardOutput out[2];
  EXPECT_EQ(model_->ForwardBatch(twice, in, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.position, 3);
  SessionState* one[] = {&s};
  EXPECT_EQ(model_->ForwardBatch(one, in, out).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BatchForwardTest, MultiTokenStepEqualsSingleSteps) {
  const std::vector<int32_t> prompt = testing::LoadPrompt("b").ids;
  const std::vector<int32_t> draft = {11, 12, 13, 14, 15};
  SessionState multi = Prefilled(prompt), single = Prefilled(prompt);
  ForwardOutput all;
  ASSERT_TRUE(model_->Forward(multi, {.tokens = draft, .all_logits = true}, &all).ok());
  const int64_t V = model_->config().vocab_size;
  for (size_t k = 0; k < draft.size(); ++k) {
    ForwardOutput one;
    ASSERT_TRUE(model_->Forward(single, {.tokens = {&draft[k], 1}}, &one).ok());
    EXPECT_TRUE(SameFloats(one.logits, all.logits.data() + k * V, V)) << "row " << k;
  }
  ExpectSameState(multi, single);
}

// Prompt lengths around the window (16) and with both parities of the ratio-2 groups.
TEST_F(BatchForwardTest, CutAfterTheFactEqualsSingleSteps) {
  const std::vector<int32_t> base = testing::LoadPrompt("a").ids;
  const std::vector<int32_t> draft = {21, 22, 23, 24, 25};
  const std::vector<int32_t> after = {31, 32};
  for (int64_t n : {13, 15, 16, 17, 30, 31}) {
    const std::vector<int32_t> prompt(base.begin(), base.begin() + n);
    for (int64_t keep = 0; keep <= static_cast<int64_t>(draft.size()); ++keep) {
      SCOPED_TRACE(::testing::Message() << "prompt " << n << ", keep " << keep);
      SessionState cut = Prefilled(prompt), ref = Prefilled(prompt);
      StepJournal journal;
      ForwardOutput out, want;
      ASSERT_TRUE(model_->Forward(cut, {.tokens = draft, .journal = &journal}, &out).ok());
      ASSERT_TRUE(model_->Truncate(cut, journal, keep).ok());
      for (int64_t k = 0; k < keep; ++k) {
        ASSERT_TRUE(model_->Forward(ref, {.tokens = {&draft[k], 1}}, &want).ok());
      }
      ExpectSameState(cut, ref);
      // Generation continues identically (including the DSpark draft).
      ASSERT_TRUE(model_->Forward(cut, {.tokens = after}, &out).ok());
      ASSERT_TRUE(model_->Forward(ref, {.tokens = after}, &want).ok());
      EXPECT_EQ(out.logits, want.logits);
      DraftOutput d1, d2;
      ASSERT_TRUE(model_->Draft(cut, 7, &d1).ok());
      ASSERT_TRUE(model_->Draft(ref, 7, &d2).ok());
      EXPECT_EQ(d1.ids, d2.ids);
      EXPECT_EQ(d1.logits, d2.logits);
    }
  }
}

TEST_F(BatchForwardTest, TruncateRejectsAStaleJournal) {
  SessionState s = Prefilled({0, 5, 6});
  StepJournal journal;
  ForwardOutput out;
  const std::vector<int32_t> two = {7, 8};
  ASSERT_TRUE(model_->Forward(s, {.tokens = two, .journal = &journal}, &out).ok());
  EXPECT_EQ(model_->Truncate(s, journal, 3).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(model_->Forward(s, {.tokens = two}, &out).ok());  // a later call
  EXPECT_EQ(model_->Truncate(s, journal, 1).code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<int32_t> long_call(17, 3);
  EXPECT_EQ(model_->Forward(s, {.tokens = long_call, .journal = &journal}, &out).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::model
