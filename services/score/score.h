// `flashserve score`: the log-probability of every token of a sequence under a checkpoint (CPU
// backend), its perplexity, and optionally every scored position's logits in a safetensors file —
// the instrument for comparing prefill modes (exact vs CED) and for evaluating checkpoints.
//
//   flashserve score --model DIR (--tokens IDS | --text-file FILE) [--prefill-mode exact|ced]
//                    [--logits-out FILE.safetensors] [--chunk N] [--threads N] [--json]
//
// exact: every layer on every token; token t+1 is scored with the logits of position t, so all
// n − 1 transitions are scored. ced: the decoder runs only on the last window_size tokens
// (DESIGN.md §3), so only the transitions out of those positions are scored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::score {

struct ScoreOptions {
  std::string model_dir;
  std::optional<std::vector<int32_t>> tokens;  // ids as given
  std::optional<std::string> text_file;        // tokenised, BOS prepended when the model has one
  bool ced = false;
  std::string logits_out;  // empty: none
  int64_t chunk = 512;
  int threads = 0;
};

struct ScoreResult {
  std::vector<int32_t> tokens;
  int64_t first_scored = 0;      // position whose logits score tokens[first_scored + 1]
  std::vector<double> logprobs;  // [n − 1 − first_scored]: log p(tokens[t + 1] | tokens[..t])
  std::vector<int32_t> argmax;   // greedy choice at each scored position
  double mean_logprob = 0;
  double perplexity = 0;
  double seconds = 0;            // forward time
};

// Errors: InvalidArgument for bad options (neither or both inputs, fewer than 2 tokens, ids
// outside the vocabulary, ced with a prompt shorter than 2); loading, forward and file errors.
absl::StatusOr<ScoreResult> Score(const ScoreOptions& options);

int RunScoreCommand(const std::vector<std::string>& args);

}  // namespace flashserve::score
