#include "model/sampling/sampling_params.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/base/strings.h"

namespace flashserve::sampling {
namespace {

absl::Status OutOfRange(std::string_view field, std::string_view range, double value) {
  return absl::InvalidArgumentError(absl::StrCat("sampling param '", ToAbsl(field), "': must be ",
                                                 ToAbsl(range), ", got ", value));
}

// Written as !(in range) so that NaN fails every check.
bool InClosed(float v, float lo, float hi) { return v >= lo && v <= hi; }

}  // namespace

absl::Status Validate(const SamplingParams& params) {
  if (!InClosed(params.temperature, 0.0f, 2.0f)) {
    return OutOfRange("temperature", "in [0, 2]", params.temperature);
  }
  if (params.top_k < 0) return OutOfRange("top_k", ">= 0 (0 = off)", params.top_k);
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return OutOfRange("top_p", "in (0, 1]", params.top_p);
  }
  if (!InClosed(params.min_p, 0.0f, 1.0f)) return OutOfRange("min_p", "in [0, 1]", params.min_p);
  if (!InClosed(params.presence_penalty, -2.0f, 2.0f)) {
    return OutOfRange("presence_penalty", "in [-2, 2]", params.presence_penalty);
  }
  if (!InClosed(params.frequency_penalty, -2.0f, 2.0f)) {
    return OutOfRange("frequency_penalty", "in [-2, 2]", params.frequency_penalty);
  }
  if (!(params.repetition_penalty > 0.0f && params.repetition_penalty <= 2.0f)) {
    return OutOfRange("repetition_penalty", "in (0, 2]", params.repetition_penalty);
  }
  for (TokenId id : params.stop_token_ids) {
    if (id < 0) return OutOfRange("stop_token_ids", "token ids >= 0", id);
  }
  if (params.logprobs.has_value() && (*params.logprobs < 0 || *params.logprobs > kMaxLogprobs)) {
    return OutOfRange("logprobs", absl::StrCat("in [0, ", kMaxLogprobs, "]"), *params.logprobs);
  }
  if (params.max_tokens.has_value() && *params.max_tokens < 1) {
    return OutOfRange("max_tokens", ">= 1", *params.max_tokens);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::sampling
