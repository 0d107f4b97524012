#include "services/score/score.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/safetensors/writer.h"
#include "model/runtime/cpu_model.h"
#include "model/runtime/prepared_model.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights/loader.h"
#include "nlohmann/json.hpp"

namespace flashserve::score {
namespace {

// log softmax(row)[target] in double.
double LogProb(const float* row, int64_t vocab, int32_t target) {
  const float mx = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double{row[v]} - mx);
  return double{row[target]} - mx - std::log(sum);
}

}  // namespace

absl::StatusOr<ScoreResult> Score(const ScoreOptions& o) {
  if (o.tokens.has_value() == o.text_file.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --tokens and --text-file");
  }
  if (o.chunk < 1) return absl::InvalidArgumentError("--chunk must be at least 1");
  ASSIGN_OR_RETURN(auto checkpoint, model::LoadedCheckpoint::Open(o.model_dir));
  ASSIGN_OR_RETURN(auto prepared, model::PrepareModel(*checkpoint));
  const model::ModelConfig& config = checkpoint->config();
  ScoreResult r;
  if (o.text_file) {
    std::ifstream in(*o.text_file, std::ios::binary);
    if (!in.good()) return absl::NotFoundError(absl::StrCat("cannot read ", *o.text_file));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::Load(o.model_dir), "tokenizer of the model");
    if (tok->special_ids().bos) r.tokens.push_back(*tok->special_ids().bos);
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(text));
    r.tokens.insert(r.tokens.end(), ids.begin(), ids.end());
  } else {
    r.tokens = *o.tokens;
  }
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  if (n < 2) return absl::InvalidArgumentError("scoring needs at least 2 tokens");
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ThreadPool pool(static_cast<size_t>(std::max(1, threads - 1)));
  const int64_t W = config.window_size;
  // CED: every chunk but the last stops after the decoder's global KV; the last carries at least
  // the window (its decoder rows are the scored ones).
  const int64_t chunk = std::max<int64_t>(o.chunk, o.ced ? W : 1);
  model::CpuModelOptions mo{.max_tokens_per_call = std::max<int64_t>(
                                std::min(chunk, n), std::max(1, config.dspark_block_size)),
                            .max_context = std::max<int64_t>(n, 1),
                            .tokenizer_path = o.model_dir};
  ASSIGN_OR_RETURN(auto cpu, model::CpuModel::Create(*checkpoint, *prepared, mo, &pool));
  ASSIGN_OR_RETURN(model::SessionState state, cpu->NewSession(n));
  const int64_t V = config.vocab_size;
  std::vector<float> logits;  // [scored rows, V]
  const auto t0 = std::chrono::steady_clock::now();
  model::ForwardOutput out;
  if (o.ced) {
    const int64_t last_start = std::max<int64_t>(0, n - std::max(W, std::min(chunk, n)));
    for (int64_t at = 0; at < last_start; at += chunk) {
      const int64_t len = std::min(chunk, last_start - at);
      RETURN_IF_ERROR(cpu->Forward(state,
                                   {.tokens = std::span<const int32_t>(r.tokens).subspan(size_t(at), size_t(len)),
                                    .ced = true,
                                    .ced_skip_decoder = true},
                                   &out));
    }
    const int64_t len = n - last_start;
    if (len > mo.max_tokens_per_call) {
      return absl::InvalidArgumentError("the last CED chunk does not fit --chunk");
    }
    RETURN_IF_ERROR(cpu->Forward(
        state,
        {.tokens = std::span<const int32_t>(r.tokens).subspan(size_t(last_start)), .all_logits = true, .ced = true},
        &out));
    const int64_t rows = static_cast<int64_t>(out.logits.size()) / V;
    r.first_scored = n - rows;
    logits = std::move(out.logits);
  } else {
    for (int64_t at = 0; at < n; at += mo.max_tokens_per_call) {
      const int64_t len = std::min(mo.max_tokens_per_call, n - at);
      RETURN_IF_ERROR(cpu->Forward(
          state, {.tokens = std::span<const int32_t>(r.tokens).subspan(size_t(at), size_t(len)), .all_logits = true}, &out));
      logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double total = 0;
  for (int64_t t = r.first_scored; t + 1 < n; ++t) {
    const float* row = logits.data() + (t - r.first_scored) * V;
    const double lp = LogProb(row, V, r.tokens[t + 1]);
    r.logprobs.push_back(lp);
    r.argmax.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
    total += lp;
  }
  const double count = static_cast<double>(r.logprobs.size());
  r.mean_logprob = count > 0 ? total / count : 0;
  r.perplexity = std::exp(-r.mean_logprob);
  if (!o.logits_out.empty()) {
    const int64_t rows = static_cast<int64_t>(logits.size()) / V;
    std::vector<int64_t> positions(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) positions[i] = r.first_scored + i;
    safetensors::SafetensorsWriter w;
    auto bytes = [](const auto& v) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                      v.size() * sizeof(v[0]));
    };
    RETURN_IF_ERROR(w.Add("logits", safetensors::DType::kF32, {rows, V}, bytes(logits)));
    RETURN_IF_ERROR(w.Add("positions", safetensors::DType::kI64, {rows}, bytes(positions)));
    RETURN_IF_ERROR(w.Add("tokens", safetensors::DType::kI32, {n}, bytes(r.tokens)));
    RETURN_IF_ERROR(w.Write(o.logits_out)) << "--logits-out";
  }
  return r;
}

int RunScoreCommand(const std::vector<std::string>& args) {
  CLI::App app{"flashserve score: log-probabilities and perplexity of a sequence"};
  ScoreOptions o;
  std::string tokens, text_file, mode = "exact";
  bool json = false;
  app.add_option("--model", o.model_dir, "checkpoint directory")->required();
  auto* t = app.add_option("--tokens", tokens, "token ids, comma separated");
  auto* f = app.add_option("--text-file", text_file, "UTF-8 text, tokenised with the model's tokenizer");
  t->excludes(f);
  app.add_option("--prefill-mode", mode, "exact or ced")->check(CLI::IsMember({"exact", "ced"}));
  app.add_option("--logits-out", o.logits_out, "write the scored positions' logits (safetensors)");
  app.add_option("--chunk", o.chunk, "tokens per forward call")->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", o.threads, "CPU threads (0 = all)");
  app.add_flag("--json", json, "print one JSON object");
  std::vector<std::string> argv_store{"flashserve score"};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (const std::string& a : argv_store) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.ced = mode == "ced";
  if (f->count() > 0) o.text_file = text_file;
  if (t->count() > 0) {
    std::vector<int32_t> ids;
    for (absl::string_view part : absl::StrSplit(tokens, ',', absl::SkipWhitespace())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        std::cerr << "flashserve score: --tokens: '" << part << "' is not an integer\n";
        return 2;
      }
      ids.push_back(id);
    }
    o.tokens = std::move(ids);
  }
  absl::StatusOr<ScoreResult> r = Score(o);
  if (!r.ok()) {
    std::cerr << "flashserve score: " << r.status() << "\n";
    return 1;
  }
  if (json) {
    nlohmann::json j{{"tokens", r->tokens.size()},       {"first_scored", r->first_scored},
                     {"logprobs", r->logprobs},          {"argmax", r->argmax},
                     {"mean_logprob", r->mean_logprob},  {"perplexity", r->perplexity},
                     {"seconds", r->seconds},            {"prefill_mode", mode}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "tokens " << r->tokens.size() << ", scored " << r->logprobs.size()
              << " transitions from position " << r->first_scored << " (" << mode << ")\n"
              << "mean log-probability " << r->mean_logprob << ", perplexity " << r->perplexity
              << ", forward " << r->seconds << " s\n";
  }
  return 0;
}

}  // namespace flashserve::score
