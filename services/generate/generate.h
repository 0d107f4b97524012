// `flashserve generate`: one prompt through the CPU backend of the runtime (model/runtime
// CpuModel), printing the generated text as it is produced and the timings. For checking a
// checkpoint and for `make run`; the serving path (disaggregated prefill/decode, batching,
// speculative decoding) lives in the serving services.
//
//   flashserve generate --model DIR (--prompt TEXT | --tokens IDS) [--image FILE]
//                       [--max-tokens N] [--temperature T] [--seed S] [--threads N] [--json]
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::generate {

struct GenerateOptions {
  std::string model_dir;               // checkpoint + config.json + tokenizer.json
  std::optional<std::string> prompt;   // text, tokenised (BOS prepended when the model has one)
  std::optional<std::vector<int32_t>> tokens;  // ids, used as given
  std::vector<std::string> images;     // image files, one per placeholder in the prompt
  int max_tokens = 64;                 // generated tokens (EOS stops earlier)
  double temperature = 0.0;            // 0 = greedy
  double top_p = 1.0;                  // nucleus (1 = off)
  int top_k = 0;                       // 0 = off
  double min_p = 0.0;                  // 0 = off
  double repetition_penalty = 1.0;     // 1 = off
  uint64_t seed = 0;                   // sampling seed (temperature > 0)
  int threads = 0;                     // 0 = hardware threads
  int64_t chunk = 256;                 // prefill tokens per forward call
  // Speculative decoding with the DSpark drafter: each step drafts block − 1 tokens after the
  // anchor, verifies anchor + drafts in one multi-token forward and keeps the accepted prefix
  // (model/sampling Verify: exact match when greedy, rejection sampling otherwise).
  bool speculative = false;
  bool exact_gemm = false;             // the reference's GEMM order (bit-reproducible, slower)
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;     // after image expansion
  std::vector<int32_t> output_ids;
  std::string text;                    // decoded output
  bool stopped_at_eos = false;
  double load_seconds = 0;
  double prefill_seconds = 0;          // prompt forward (time to first token)
  double decode_seconds = 0;           // the remaining steps
  int64_t decode_steps = 0;            // forward calls after the prefill
  int64_t drafted = 0;                 // speculative: draft tokens verified
  int64_t accepted = 0;                // speculative: draft tokens accepted
};

// Runs the prompt; writes the text to `stream` as it is produced (may be null).
// Errors: InvalidArgument for bad options (neither or both of prompt/tokens, ids outside the
// vocabulary, image count not matching the placeholders); loading and forward errors.
absl::StatusOr<GenerateResult> Generate(const GenerateOptions& options, std::ostream* stream);

// The command line front end; returns the process exit code (0 ok, 1 error, 2 usage).
int RunGenerateCommand(const std::vector<std::string>& args);

}  // namespace flashserve::generate
