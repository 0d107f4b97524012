// Sampler::Verify: speculative acceptance (see sampler.h for the rule and README.md for why the
// output distribution equals the target's).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "model/sampling/logits_processing.h"
#include "model/sampling/philox.h"
#include "model/sampling/sampler.h"

namespace flashserve::sampling {

absl::StatusOr<TokenId> Sampler::AcceptOrResample(const Row& row, TokenId draft,
                                                  std::span<const float> q, bool* accepted) const {
  // Normalise q as given (a float row sums to 1 only up to rounding); empty = one-hot.
  double q_total = 1.0;
  if (!q.empty()) {
    q_total = 0.0;
    for (size_t j = 0; j < q.size(); ++j) {
      if (!(q[j] >= 0.0f) || std::isinf(q[j])) {
        return absl::InvalidArgumentError(
            absl::StrCat("draft_probs: token ", j, " has ", q[j], " (need finite, >= 0)"));
      }
      q_total += q[j];
    }
    if (!(q[draft] > 0.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_probs: the draft token ", draft,
                       " has probability 0 in the row it was drawn from"));
    }
  }
  const auto q_at = [&](size_t j) -> double {
    if (q.empty()) return j == static_cast<size_t>(draft) ? 1.0 : 0.0;
    return q[j] / q_total;
  };
  const uint64_t position = history_.num_outputs();
  const double p_draft = work_[draft] / row.total;
  // Accept with probability min(1, p/q): u < p/q, written without the division.
  if (PhiloxUniform(seed_, position, RandomStream::kAccept) * q_at(draft) < p_draft) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  // Residual max(0, p - q), normalised by its sum; two passes so that work_ keeps p for the
  // logprobs.
  double residual_total = 0.0;
  for (size_t j = 0; j < work_.size(); ++j) {
    residual_total += std::max(0.0, work_[j] / row.total - q_at(j));
  }
  const double u = PhiloxUniform(seed_, position, RandomStream::kResidual);
  if (!(residual_total > 0.0)) {
    // Only reachable through rounding (a rejection implies p(d) < q(d), hence some p_j > q_j):
    // fall back to the target distribution.
    return SampleFromWeights(work_, row.total, u);
  }
  const double target = u * residual_total;
  double running = 0.0;
  TokenId last_positive = -1;
  for (size_t j = 0; j < work_.size(); ++j) {
    const double r = std::max(0.0, work_[j] / row.total - q_at(j));
    if (r <= 0.0) continue;
    running += r;
    last_positive = static_cast<TokenId>(j);
    if (running > target) break;
  }
  return last_positive;
}

absl::StatusOr<int32_t> Sampler::Verify(std::span<const TokenId> draft_tokens,
                                        std::span<const float> draft_probs,
                                        std::span<const float> target_logits,
                                        std::span<SampleResult> out) {
  const size_t k = draft_tokens.size();
  const size_t vocab = static_cast<size_t>(vocab_size_);
  if (target_logits.size() != (k + 1) * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("target_logits: expected (", k, " + 1) x ",
                                                   vocab, " values, got ", target_logits.size()));
  }
  if (!draft_probs.empty() && draft_probs.size() != k * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("draft_probs: expected 0 or ", k, " x ", vocab,
                                                   " values, got ", draft_probs.size()));
  }
  if (out.size() < k + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("out: room for ", out.size(), " results, need ", k + 1));
  }
  for (size_t i = 0; i < k; ++i) {
    if (draft_tokens[i] < 0 || draft_tokens[i] >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft_tokens: token ", draft_tokens[i], " at index ", i, " is outside the vocabulary"));
    }
  }

  int32_t emitted = 0;
  // Undo the commits of this call, so that an error leaves the sampler unchanged.
  const auto fail = [&](const absl::Status& status, size_t row) {
    for (int32_t j = emitted - 1; j >= 0; --j) history_.RemoveOutput(out[j].token);
    return internal::StatusContextBuilder::Annotate(status, absl::StrCat("verification row ", row));
  };
  for (size_t i = 0; i <= k; ++i) {
    const std::span<const float> row_logits = target_logits.subspan(i * vocab, vocab);
    absl::StatusOr<Row> row = Process(row_logits);
    if (!row.ok()) return fail(row.status(), i);
    TokenId token;
    bool accepted = false;
    if (params_.greedy()) {
      token = row->argmax;
      accepted = i < k && token == draft_tokens[i];
    } else if (i == k) {
      token = SampleFromWeights(
          work_, row->total, PhiloxUniform(seed_, history_.num_outputs(), RandomStream::kSample));
    } else {
      const std::span<const float> q =
          draft_probs.empty() ? std::span<const float>() : draft_probs.subspan(i * vocab, vocab);
      absl::StatusOr<TokenId> chosen = AcceptOrResample(*row, draft_tokens[i], q, &accepted);
      if (!chosen.ok()) return fail(chosen.status(), i);
      token = *chosen;
    }
    SampleResult& result = out[emitted];
    result = SampleResult();
    FillLogprobs(row_logits, *row, token, &result);
    Commit(token, &result);
    ++emitted;
    if (!accepted || result.finish != FinishReason::kNone) break;
  }
  return emitted;
}

}  // namespace flashserve::sampling
