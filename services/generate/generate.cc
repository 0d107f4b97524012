#include "services/generate/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "model/runtime/cpu_model.h"
#include "model/sampling/sampler.h"
#include "model/runtime/prepared_model.h"
#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "model/vit/vl_inputs.h"
#include "model/weights/loader.h"
#include "nlohmann/json.hpp"

namespace flashserve::generate {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

absl::StatusOr<std::vector<uint8_t>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

absl::StatusOr<GenerateResult> Generate(const GenerateOptions& o, std::ostream* stream) {
  if (o.prompt.has_value() == o.tokens.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --tokens");
  }
  if (o.max_tokens < 1) return absl::InvalidArgumentError("--max-tokens must be at least 1");

  GenerateResult r;
  const Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(auto checkpoint, model::LoadedCheckpoint::Open(o.model_dir));
  ASSIGN_OR_RETURN(auto prepared, model::PrepareModel(*checkpoint));
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::Load(o.model_dir), "tokenizer of the model");
  const model::ModelConfig& config = checkpoint->config();
  const int threads = o.threads > 0 ? o.threads
                                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ThreadPool pool(static_cast<size_t>(std::max(1, threads - 1)));

  std::vector<int32_t> ids;
  if (o.prompt) {
    if (tok->special_ids().bos) ids.push_back(*tok->special_ids().bos);
    ASSIGN_OR_RETURN(std::vector<int32_t> text_ids, tok->Encode(*o.prompt));
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  } else {
    ids = *o.tokens;
  }
  std::vector<uint8_t> image;
  std::vector<uint16_t> embeddings;
  if (!o.images.empty()) {
    if (!config.vision_enabled()) {
      return absl::InvalidArgumentError("--image given but the model has no vision encoder");
    }
    ASSIGN_OR_RETURN(auto encoder, model::vit::VisionEncoder::Create(
                                       config, *checkpoint->weights().vision, *prepared->vision,
                                       {}, &pool));
    std::vector<std::vector<uint8_t>> bytes;
    for (const std::string& path : o.images) {
      ASSIGN_OR_RETURN(std::vector<uint8_t> b, ReadFile(path));
      bytes.push_back(std::move(b));
    }
    ASSIGN_OR_RETURN(model::vit::VlInputs vl,
                     model::vit::BuildVlInputs(config, *checkpoint->weights().vision, *encoder,
                                               ids, bytes));
    ids = std::move(vl.token_ids);
    image = std::move(vl.image);
    embeddings = std::move(vl.embeddings);
  }
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  r.prompt_ids = ids;

  // Speculative steps verify up to a block past the last kept token.
  const int64_t capacity =
      static_cast<int64_t>(ids.size()) + o.max_tokens + 1 + 2 * config.dspark_block_size;
  model::CpuModelOptions mo{.max_tokens_per_call = std::max<int64_t>(
                                std::min<int64_t>(o.chunk, capacity), config.dspark_block_size),
                            .max_context = std::max<int64_t>(capacity, config.max_seq_len),
                            .linear_mode = o.exact_gemm ? kernels::LinearMode::kExact
                                                        : kernels::LinearMode::kFast,
                            .tokenizer_path = o.model_dir};
  ASSIGN_OR_RETURN(auto cpu, model::CpuModel::Create(*checkpoint, *prepared, mo, &pool));
  ASSIGN_OR_RETURN(model::SessionState session, cpu->NewSession(capacity));
  r.load_seconds = Seconds(t0, Clock::now());

  const int64_t V = config.vocab_size, n = static_cast<int64_t>(ids.size());
  sampling::SamplingParams sp{.temperature = static_cast<float>(o.temperature),
                              .top_k = o.top_k,
                              .top_p = static_cast<float>(o.top_p),
                              .min_p = static_cast<float>(o.min_p),
                              .repetition_penalty = static_cast<float>(o.repetition_penalty),
                              .seed = o.seed,
                              .max_tokens = o.max_tokens};
  const std::optional<int32_t> eos = tok->special_ids().eos;
  if (eos) sp.stop_token_ids.push_back(*eos);
  ASSIGN_OR_RETURN(sampling::Sampler sampler,
                   sampling::Sampler::Create(sp, static_cast<int32_t>(V), ids));
  model::ForwardOutput out;
  const Clock::time_point t1 = Clock::now();
  for (int64_t start = 0; start < n; start += mo.max_tokens_per_call) {
    const int64_t len = std::min(mo.max_tokens_per_call, n - start);
    model::ForwardInput in{.tokens = std::span(ids).subspan(size_t(start), size_t(len))};
    if (!image.empty()) {
      in.image = std::span(image).subspan(size_t(start), size_t(len));
      in.embeddings = embeddings.data() + start * config.dim;
    }
    RETURN_IF_ERROR(cpu->Forward(session, in, &out)) << "prefill at position " << start;
  }
  const Clock::time_point t2 = Clock::now();
  r.prefill_seconds = Seconds(t1, t2);
  tokenizer::StreamDecoder decoder(tok.get(), /*skip_special=*/true);
  std::string piece;
  // Emits one sampled token; returns true when generation is over.
  auto emit = [&](const sampling::SampleResult& res) -> absl::StatusOr<bool> {
    r.output_ids.push_back(res.token);
    if (res.finish == sampling::FinishReason::kStop) {
      r.stopped_at_eos = true;
      return true;
    }
    piece.clear();
    RETURN_IF_ERROR(decoder.Next(res.token, &piece));
    r.text += piece;
    if (stream != nullptr) *stream << piece << std::flush;
    return res.finish != sampling::FinishReason::kNone;
  };
  ASSIGN_OR_RETURN(sampling::SampleResult first, sampler.Sample(out.logits));
  ASSIGN_OR_RETURN(bool done, emit(first));
  int32_t anchor = first.token;
  const bool speculative = o.speculative && config.dspark_enabled();
  model::StepJournal journal;
  model::DraftOutput draft;
  std::vector<int32_t> verify;
  std::vector<sampling::SampleResult> results(static_cast<size_t>(config.dspark_block_size + 1));
  while (!done) {
    ++r.decode_steps;
    if (!speculative) {
      RETURN_IF_ERROR(cpu->Forward(session, {.tokens = {&anchor, 1}}, &out))
          << "decode step " << r.decode_steps;
      ASSIGN_OR_RETURN(sampling::SampleResult res, sampler.Sample(out.logits));
      ASSIGN_OR_RETURN(done, emit(res));
      anchor = res.token;
      continue;
    }
    // Draft after the anchor, verify anchor + drafts in one call, keep the accepted prefix.
    RETURN_IF_ERROR(cpu->Draft(session, anchor, &draft)) << "draft";
    const std::span<const int32_t> drafts = std::span(draft.ids).subspan(1);
    verify.assign(1, anchor);
    verify.insert(verify.end(), drafts.begin(), drafts.end());
    RETURN_IF_ERROR(cpu->Forward(session,
                                 {.tokens = verify, .all_logits = true, .journal = &journal},
                                 &out))
        << "verify step " << r.decode_steps;
    ASSIGN_OR_RETURN(int32_t emitted, sampler.Verify(drafts, {}, out.logits, results));
    r.drafted += static_cast<int64_t>(drafts.size());
    // The first emitted − 1 tokens are accepted drafts; the last is the correction or the bonus
    // token (or a draft that finished the request, after which nothing continues). Keep the
    // anchor and the accepted drafts.
    const int32_t accepted = emitted - 1;
    r.accepted += accepted;
    RETURN_IF_ERROR(cpu->Truncate(session, journal, 1 + accepted)) << "truncate";
    for (int32_t i = 0; i < emitted && !done; ++i) {
      ASSIGN_OR_RETURN(done, emit(results[i]));
    }
    anchor = results[emitted - 1].token;
  }
  piece.clear();
  decoder.Flush(&piece);
  r.text += piece;
  if (stream != nullptr) *stream << piece << std::flush;
  r.decode_seconds = Seconds(t2, Clock::now());
  return r;
}

int RunGenerateCommand(const std::vector<std::string>& args) {
  CLI::App app{"flashserve generate: run one prompt on the CPU backend"};
  GenerateOptions o;
  std::string prompt, tokens;
  bool json = false;
  app.add_option("--model", o.model_dir, "checkpoint directory (config.json, tokenizer.json)")
      ->required();
  auto* p = app.add_option("--prompt", prompt, "prompt text (BOS is prepended)");
  auto* t = app.add_option("--tokens", tokens, "prompt token ids, comma separated");
  p->excludes(t);
  app.add_option("--image", o.images, "image file for a <｜deepseek_image｜> placeholder");
  app.add_option("--max-tokens", o.max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 20));
  app.add_option("--temperature", o.temperature, "0 = greedy")->check(CLI::Range(0.0, 2.0));
  app.add_option("--top-p", o.top_p, "nucleus sampling mass (1 = off)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens (0 = off)");
  app.add_option("--min-p", o.min_p, "drop tokens below min_p × the best (0 = off)");
  app.add_option("--repetition-penalty", o.repetition_penalty, "1 = off");
  app.add_option("--seed", o.seed, "sampling seed");
  app.add_flag("--speculative", o.speculative, "speculative decoding with the DSpark drafter");
  app.add_flag("--exact", o.exact_gemm, "the reference's GEMM order (bit-reproducible)");
  app.add_option("--threads", o.threads, "CPU threads (0 = all)");
  app.add_option("--chunk", o.chunk, "prefill tokens per forward call")->check(CLI::Range(1, 1 << 20));
  app.add_flag("--json", json, "print one JSON object (ids, text, timings) instead of the text");
  std::vector<std::string> argv_store{"flashserve generate"};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (const std::string& a : argv_store) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!prompt.empty() || p->count() > 0) o.prompt = prompt;
  if (t->count() > 0) {
    std::vector<int32_t> ids;
    for (absl::string_view part : absl::StrSplit(tokens, ',', absl::SkipWhitespace())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        std::cerr << "flashserve generate: --tokens: '" << part << "' is not an integer\n";
        return 2;
      }
      ids.push_back(id);
    }
    o.tokens = std::move(ids);
  }
  absl::StatusOr<GenerateResult> r = Generate(o, json ? nullptr : &std::cout);
  if (!r.ok()) {
    std::cerr << "\nflashserve generate: " << r.status() << "\n";
    return 1;
  }
  const int64_t n_out = static_cast<int64_t>(r->output_ids.size());
  const double prefill_tps = r->prompt_ids.size() / std::max(r->prefill_seconds, 1e-9);
  const double decode_tps = (n_out - 1) / std::max(r->decode_seconds, 1e-9);
  if (json) {
    nlohmann::json j{{"prompt_ids", r->prompt_ids},         {"output_ids", r->output_ids},
                     {"text", r->text},                     {"stopped_at_eos", r->stopped_at_eos},
                     {"load_seconds", r->load_seconds},     {"prefill_seconds", r->prefill_seconds},
                     {"decode_seconds", r->decode_seconds}, {"prefill_tokens_per_second", prefill_tps},
                     {"decode_tokens_per_second", decode_tps},
                     {"decode_steps", r->decode_steps},     {"drafted", r->drafted},
                     {"accepted", r->accepted}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "\n";
    std::cerr << "[prompt " << r->prompt_ids.size() << " tokens, prefill " << r->prefill_seconds
              << " s (" << prefill_tps << " tok/s); " << n_out << " tokens generated, decode "
              << r->decode_seconds << " s (" << decode_tps << " tok/s)"
              << (r->stopped_at_eos ? ", stopped at EOS" : "") << "; load " << r->load_seconds
              << " s";
    if (r->drafted > 0) {
      std::cerr << "; speculative: " << r->accepted << " of " << r->drafted
                << " drafts accepted in " << r->decode_steps << " verify steps";
    }
    std::cerr << "]\n";
  }
  return 0;
}

}  // namespace flashserve::generate
