// Tier 3 of the fixture README's suggested tests: prompts a, b and c end to end on the CPU
// backend — prefill, twelve decode steps with the golden tokens forced, and the DSpark draft after
// each step — against the golden GPU run (b, c) and, for prompt a's decode, against
// variant_ownkeys.safetensors (our index-key owners score against their own keys; the golden run
// keeps the reference's stale-key quirk, docs/architecture.md). Bars: logits within rel-RMS 15 %;
// greedy tokens agreeing at least as often as the reference's own CPU run (cpu_run); DSpark ids
// and logits compared up to the first differing draft.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/runtime/runtime_fixture.h"

namespace flashserve::model {
namespace {

using testing::Compare;
using testing::CompareRows;

constexpr int kSteps = 12;

struct Run {
  std::vector<float> prefill;             // [V]
  std::vector<std::vector<float>> decode;  // [12][V]
  std::vector<DraftOutput> drafts;         // [12]
};

Run RunPrompt(CpuModel& model, const testing::GoldenPrompt& p) {
  Run r;
  auto session = model.NewSession(256);
  EXPECT_TRUE(session.ok()) << session.status();
  std::vector<uint16_t> rows;
  std::vector<uint8_t> image;
  if (!p.token_types.empty()) {
    testing::ImageSpanRows(p, &rows, &image);
  }
  ForwardOutput out;
  absl::Status st = model.Forward(
      *session, {.tokens = p.ids, .image = image, .embeddings = rows.empty() ? nullptr : rows.data()},
      &out);
  EXPECT_TRUE(st.ok()) << st;
  r.prefill = out.logits;
  for (int k = 1; k <= kSteps; ++k) {
    const int32_t token = p.greedy_tokens[k - 1];
    st = model.Forward(*session, {.tokens = {&token, 1}}, &out);
    EXPECT_TRUE(st.ok()) << st;
    r.decode.push_back(out.logits);
    DraftOutput draft;
    st = model.Draft(*session, p.greedy_tokens[k], &draft);
    EXPECT_TRUE(st.ok()) << st;
    r.drafts.push_back(std::move(draft));
  }
  return r;
}

struct Summary {
  double rel_rms = 0;  // over all 12 rows together, as the fixture README reports it
  double worst_row_rel_rms = 0, worst_max_abs = 0;
  int argmax_agree = 0;
  int near_tie_flips = 0;  // disagreements inside the reference CPU run's own error on that row
};

// `noise[k]`: the reference CPU run's max abs error against golden on decode row k. A token that
// differs where the reference's top-2 margin is below that noise is a near tie, not a defect.
Summary CompareDecode(const Run& run, const std::vector<float>& ref, int64_t V,
                      const std::vector<int32_t>& ref_tokens, const std::vector<double>& noise,
                      const char* what) {
  Summary s;
  std::vector<float> all;
  for (int k = 0; k < kSteps; ++k) all.insert(all.end(), run.decode[k].begin(), run.decode[k].end());
  s.rel_rms = CompareRows(all.data(), ref.data(), kSteps * V).rel_rms;
  for (int k = 0; k < kSteps; ++k) {
    const Compare c = CompareRows(run.decode[k].data(), ref.data() + k * V, V);
    s.worst_row_rel_rms = std::max(s.worst_row_rel_rms, c.rel_rms);
    s.worst_max_abs = std::max(s.worst_max_abs, c.max_abs);
    const float* r = ref.data() + k * V;
    const float margin = r[ref_tokens[k + 1]] - r[c.argmax_got];
    const bool agree = c.argmax_got == ref_tokens[k + 1];
    s.argmax_agree += agree;
    s.near_tie_flips += !agree && margin < noise[k];
    std::printf("  %s decode step %2d: rel-RMS %.4f max abs %.3f argmax %d (ref %d, margin %.3f, "
                "reference CPU run noise %.3f)\n",
                what, k + 1, c.rel_rms, c.max_abs, c.argmax_got, ref_tokens[k + 1], margin,
                noise[k]);
  }
  return s;
}

// Draft ids against a reference's [12, 6]; logits (when given) for the rows before the first
// differing draft. Returns the number of equal ids.
int CompareDrafts(const Run& run, const std::vector<int64_t>& ref_ids,
                  const std::vector<float>* ref_logits, int64_t V, double* worst_max_abs) {
  int equal = 0;
  for (int k = 0; k < kSteps; ++k) {
    const DraftOutput& d = run.drafts[k];
    bool diverged = false;
    for (int i = 0; i < 6; ++i) {
      const bool same = d.ids[i] == ref_ids[k * 6 + i];
      equal += same;
      if (i >= 1 && i <= 5 && !diverged && ref_logits != nullptr) {
        // Row i-1 predicted id i: compare it while every earlier draft agreed.
        const Compare c =
            CompareRows(d.logits.data() + (i - 1) * V, ref_logits->data() + (k * 5 + i - 1) * V, V);
        *worst_max_abs = std::max(*worst_max_abs, c.max_abs);
        EXPECT_LE(c.rel_rms, 0.15) << "step " << k + 1 << " block row " << i - 1;
      }
      if (!same) diverged = true;
    }
  }
  return equal;
}

// Prefill, decode and DSpark of one prompt against `ref` (golden, or the own-keys variant for
// prompt a's decode), with the reference CPU run's agreement with golden as the bar.
void CheckPrompt(CpuModel& model, const std::string& name, bool against_variant) {
  const int64_t V = model.config().vocab_size;
  const testing::GoldenPrompt p = testing::LoadPrompt(name);
  const Run run = RunPrompt(model, p);
  ASSERT_EQ(run.decode.size(), size_t(kSteps));
  const auto& golden = testing::Golden();
  const Compare pre = CompareRows(run.prefill.data(),
                                  testing::Floats(golden, name + ".prefill_logits").data(), V);
  const Compare cpu_pre =
      CompareRows(testing::Floats(testing::CpuRun(), name + ".prefill_logits").data(),
                  testing::Floats(golden, name + ".prefill_logits").data(), V);
  std::printf("prompt %s prefill: rel-RMS %.4f max abs %.3f (reference CPU run: %.4f / %.3f)\n",
              name.c_str(), pre.rel_rms, pre.max_abs, cpu_pre.rel_rms, cpu_pre.max_abs);
  EXPECT_LE(pre.rel_rms, 0.15);
  EXPECT_EQ(pre.argmax_got, p.greedy_tokens[0]);

  const auto& ref = against_variant ? testing::VariantOwnKeys() : golden;
  const std::vector<int32_t> ref_tokens =
      against_variant ? testing::VariantOwnKeysGreedyTokens() : p.greedy_tokens;
  const std::vector<float> golden_decode = testing::Floats(golden, name + ".decode_logits");
  const std::vector<float> cpu_decode = testing::Floats(testing::CpuRun(), name + ".decode_logits");
  std::vector<double> noise(kSteps);
  for (int k = 0; k < kSteps; ++k) {
    noise[k] = CompareRows(cpu_decode.data() + k * V, golden_decode.data() + k * V, V).max_abs;
  }
  const Summary s = CompareDecode(run, testing::Floats(ref, name + ".decode_logits"), V,
                                  ref_tokens, noise, name.c_str());
  const std::vector<int32_t> cpu_tokens = testing::CpuRunGreedyTokens(name);
  int cpu_agree = 0;
  for (int k = 1; k <= kSteps; ++k) cpu_agree += cpu_tokens[k] == p.greedy_tokens[k];
  std::printf("prompt %s decode vs %s: rel-RMS %.4f (worst row %.4f), max abs %.3f, argmax "
              "%d/12 with %d near-tie flips (reference CPU run vs golden: %d/12)\n",
              name.c_str(), against_variant ? "variant_ownkeys" : "golden", s.rel_rms,
              s.worst_row_rel_rms, s.worst_max_abs, s.argmax_agree, s.near_tie_flips, cpu_agree);
  EXPECT_LE(s.rel_rms, 0.15);
  // At least as many agreements as the reference's own CPU run, a flip counting as agreement
  // only where the reference's top-2 margin is inside that run's own error on the row.
  EXPECT_GE(s.argmax_agree + s.near_tie_flips, cpu_agree);

  double worst = 0;
  const std::vector<int64_t> ref_ids = testing::Ints(ref, name + ".spec_out_ids");
  std::vector<float> ref_logits;
  if (!against_variant) ref_logits = testing::Floats(golden, name + ".spec_logits");
  const int equal = CompareDrafts(run, ref_ids, against_variant ? nullptr : &ref_logits, V, &worst);
  const std::vector<int64_t> cpu_ids = testing::Ints(testing::CpuRun(), name + ".spec_out_ids");
  const std::vector<int64_t> golden_ids = testing::Ints(golden, name + ".spec_out_ids");
  int cpu_equal = 0;
  for (size_t i = 0; i < golden_ids.size(); ++i) cpu_equal += cpu_ids[i] == golden_ids[i];
  std::printf("prompt %s DSpark: %d/72 ids equal (reference CPU run: %d/72); logits before the "
              "first differing draft: max abs %.3f\n",
              name.c_str(), equal, cpu_equal, worst);
  // After a flipped draft the Markov bias changes and later drafts legitimately diverge, so ids
  // are held to the reference CPU run's count with a margin of one flipped block (5 ids).
  EXPECT_GE(equal, cpu_equal - 5);
}

// The golden run keeps the reference's stale-index-key quirk: reproduce it to compare b and c
// (and a) with golden; the serving default (own keys) is checked against the variant.
class EndToEndTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    own_keys_ = testing::MakeTinyModel(kernels::LinearMode::kExact).release();
    reference_ = testing::MakeTinyModel(kernels::LinearMode::kExact, 256, true).release();
  }
  static CpuModel* own_keys_;
  static CpuModel* reference_;
};
CpuModel* EndToEndTest::own_keys_ = nullptr;
CpuModel* EndToEndTest::reference_ = nullptr;

TEST_F(EndToEndTest, PromptAOwnKeysAgainstVariant) { CheckPrompt(*own_keys_, "a", true); }
TEST_F(EndToEndTest, PromptAAgainstGolden) { CheckPrompt(*reference_, "a", false); }
TEST_F(EndToEndTest, PromptBAgainstGolden) { CheckPrompt(*reference_, "b", false); }
TEST_F(EndToEndTest, PromptCAgainstGolden) { CheckPrompt(*reference_, "c", false); }

}  // namespace
}  // namespace flashserve::model
