// flashserve score on the v41-tiny model: log-probabilities equal those computed from the
// runtime's own logits, CED scores only the decoder's rows and agrees with exact there, the
// logits file holds what was scored, and bad input is rejected.
#include "services/score/score.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"
#include "model/runtime/runtime_fixture.h"

namespace flashserve::score {
namespace {

constexpr char kDir[] = "tests/conformance/data/v41-tiny";

TEST(ScoreTest, ExactMatchesTheRuntimeLogits) {
  const std::vector<int32_t> ids = model::testing::LoadPrompt("b").ids;
  ScoreOptions o{.model_dir = kDir, .tokens = ids, .chunk = 7};
  const std::string path = ::testing::TempDir() + "/score_logits.safetensors";
  o.logits_out = path;
  auto r = Score(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->logprobs.size(), ids.size() - 1);
  EXPECT_EQ(r->first_scored, 0);
  // Reference: all logits from one call of the runtime.
  auto model = model::testing::MakeTinyModel();
  auto s = model->NewSession(64);
  model::ForwardOutput out;
  ASSERT_TRUE(model->Forward(*s, {.tokens = ids, .all_logits = true}, &out).ok());
  const int64_t V = model->config().vocab_size;
  double total = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* row = out.logits.data() + t * V;
    double mx = row[0], sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double{row[v]});
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    const double lp = row[ids[t + 1]] - mx - std::log(sum);
    EXPECT_NEAR(r->logprobs[t], lp, 1e-3) << "position " << t;
    total += lp;
  }
  EXPECT_NEAR(r->perplexity, std::exp(-total / (ids.size() - 1)), 1e-2);
  auto file = safetensors::SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto logits = (*file)->Get("logits");
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ(logits->shape, (std::vector<int64_t>{int64_t(ids.size()), V}));
}

TEST(ScoreTest, CedScoresTheDecoderRows) {
  const std::vector<int32_t> ids = model::testing::LoadPrompt("a").ids;  // 201 > window 16
  ScoreOptions exact{.model_dir = kDir, .tokens = ids, .chunk = 64};
  ScoreOptions ced = exact;
  ced.ced = true;
  auto e = Score(exact);
  auto c = Score(ced);
  ASSERT_TRUE(e.ok() && c.ok()) << e.status() << c.status();
  EXPECT_EQ(c->first_scored, static_cast<int64_t>(ids.size()) - 16);
  ASSERT_EQ(c->logprobs.size(), 15u);
  double worst = 0;
  for (size_t i = 0; i < c->logprobs.size(); ++i) {
    worst = std::max(worst, std::fabs(c->logprobs[i] - e->logprobs[c->first_scored + i]));
  }
  std::printf("CED vs exact log-probabilities over the last 15 transitions: max diff %.4f\n",
              worst);
  EXPECT_LT(worst, 1.0);
  // The last position's greedy choice, the quantity that starts generation, agrees.
  EXPECT_EQ(c->argmax.back(), e->argmax.back());
}

TEST(ScoreTest, BadInput) {
  ScoreOptions none{.model_dir = kDir};
  EXPECT_EQ(Score(none).status().code(), absl::StatusCode::kInvalidArgument);
  ScoreOptions one{.model_dir = kDir, .tokens = std::vector<int32_t>{5}};
  EXPECT_EQ(Score(one).status().code(), absl::StatusCode::kInvalidArgument);
  ScoreOptions bad{.model_dir = kDir, .tokens = std::vector<int32_t>{5, 99999}};
  EXPECT_EQ(Score(bad).status().code(), absl::StatusCode::kInvalidArgument);
  ScoreOptions missing{.model_dir = kDir, .text_file = std::string("/nonexistent.txt")};
  EXPECT_EQ(Score(missing).status().code(), absl::StatusCode::kNotFound);
}

TEST(ScoreTest, CommandLine) {
  const char* bin = std::getenv("FS_BINARY_DIR");
  ASSERT_NE(bin, nullptr);
  const std::string cmd = std::string(bin) + "/bin/flashserve score --model " + kDir +
                          " --tokens 0,2042,57,74,284 --json";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  ASSERT_EQ(pclose(f), 0) << out;
  EXPECT_NE(out.find("\"perplexity\""), std::string::npos) << out;
  EXPECT_NE(std::system((std::string(bin) + "/bin/flashserve score --model " + kDir +
                         " --tokens 1,2 --prefill-mode fast 2>/dev/null").c_str()),
            0);
}

}  // namespace
}  // namespace flashserve::score
