#include "model/sampling/sampling_params.h"

#include <cmath>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace flashserve::sampling {
namespace {

TEST(SamplingParamsTest, DefaultsAndEdgesAreValid) {
  EXPECT_TRUE(Validate(SamplingParams()).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = 2.0f;
  p.logprobs = kMaxLogprobs;
  p.max_tokens = 1;
  p.stop_token_ids = {0, 7};
  EXPECT_TRUE(Validate(p).ok());
  p.temperature = 2.0f;
  p.logprobs = 0;
  EXPECT_TRUE(Validate(p).ok());
}

struct BadCase {
  std::string field;
  std::function<void(SamplingParams*)> mutate;
};

TEST(SamplingParamsTest, OutOfRangeNamesTheField) {
  const BadCase cases[] = {
      {"temperature", [](SamplingParams* p) { p->temperature = -0.1f; }},
      {"temperature", [](SamplingParams* p) { p->temperature = 2.01f; }},
      {"temperature", [](SamplingParams* p) { p->temperature = std::nanf(""); }},
      {"top_k", [](SamplingParams* p) { p->top_k = -1; }},
      {"top_p", [](SamplingParams* p) { p->top_p = 0.0f; }},
      {"top_p", [](SamplingParams* p) { p->top_p = 1.5f; }},
      {"top_p", [](SamplingParams* p) { p->top_p = std::nanf(""); }},
      {"min_p", [](SamplingParams* p) { p->min_p = -0.5f; }},
      {"min_p", [](SamplingParams* p) { p->min_p = 1.1f; }},
      {"presence_penalty", [](SamplingParams* p) { p->presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingParams* p) { p->frequency_penalty = -3.0f; }},
      {"repetition_penalty", [](SamplingParams* p) { p->repetition_penalty = 0.0f; }},
      {"repetition_penalty", [](SamplingParams* p) { p->repetition_penalty = 2.5f; }},
      {"stop_token_ids",
       [](SamplingParams* p) {
         p->stop_token_ids = {3, -1};
       }},
      {"logprobs", [](SamplingParams* p) { p->logprobs = 21; }},
      {"logprobs", [](SamplingParams* p) { p->logprobs = -1; }},
      {"max_tokens", [](SamplingParams* p) { p->max_tokens = 0; }},
  };
  for (const BadCase& c : cases) {
    SamplingParams p;
    c.mutate(&p);
    const absl::Status s = Validate(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(s.message(), "'" + c.field + "'")) << s.message();
  }
}

}  // namespace
}  // namespace flashserve::sampling
