// bench_cpu_model: prefill and decode speed of the CPU forward pass (model/runtime CpuModel) on a
// checkpoint, by default the bundled tiny model.
//
//   build/bench/bench_cpu_model [--model DIR] [--threads N] [--prefill 64,256,1024]
//                               [--decode 64] [--chunk 256] [--exact]
//
// For each prompt length: one prefill in chunks of --chunk (random token ids, fixed seed), then
// --decode single-token steps; prints tokens/s of both and the session's state bytes. Each figure
// is the best of 3 runs (the machine is shared; the best run is the least disturbed one).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/thread_pool.h"
#include "model/runtime/cpu_model.h"
#include "model/runtime/prepared_model.h"
#include "model/weights/loader.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flashserve;
  std::string dir = "tests/conformance/data/v41-tiny";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int64_t> prompts = {64, 256, 1024};
  int64_t decode = 64, chunk = 256;
  bool exact = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") {
      dir = next();
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else if (a == "--prefill") {
      prompts.clear();
      for (absl::string_view p : absl::StrSplit(next(), ',')) {
        int64_t n = 0;
        if (absl::SimpleAtoi(p, &n) && n > 0) prompts.push_back(n);
      }
    } else if (a == "--decode") {
      decode = std::stoll(next());
    } else if (a == "--chunk") {
      chunk = std::stoll(next());
    } else if (a == "--exact") {
      exact = true;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  auto ckpt = model::LoadedCheckpoint::Open(dir);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "%s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  auto prepared = model::PrepareModel(**ckpt);
  if (!prepared.ok()) return 1;
  ThreadPool pool(static_cast<size_t>(std::max(1, threads - 1)));
  const int64_t max_prompt = *std::max_element(prompts.begin(), prompts.end());
  model::CpuModelOptions options{
      .max_tokens_per_call = chunk,
      .max_context = max_prompt + decode + 8,
      .linear_mode = exact ? kernels::LinearMode::kExact : kernels::LinearMode::kFast,
      .tokenizer_path = dir};
  auto cpu = model::CpuModel::Create(**ckpt, **prepared, options, &pool);
  if (!cpu.ok()) {
    std::fprintf(stderr, "%s\n", cpu.status().ToString().c_str());
    return 1;
  }
  const model::ModelConfig& c = (*ckpt)->config();
  std::printf("model %s: %d layers, dim %d; %d threads; %s GEMMs; prefill chunk %lld\n",
              dir.c_str(), c.n_layers, c.dim, threads, exact ? "exact" : "fast",
              static_cast<long long>(chunk));
  std::printf("%8s %14s %14s %16s\n", "prompt", "prefill tok/s", "decode tok/s", "state bytes");
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> id(3, c.vocab_size - 1);
  for (int64_t n : prompts) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t& t : tokens) t = id(rng);
    double best_prefill = 0, best_decode = 0;
    int64_t state_bytes = 0;
    for (int rep = 0; rep < 3; ++rep) {
      auto s = (*cpu)->NewSession(n + decode + 1);
      if (!s.ok()) return 1;
      model::ForwardOutput out;
      Clock::time_point t0 = Clock::now();
      for (int64_t start = 0; start < n; start += chunk) {
        const int64_t len = std::min(chunk, n - start);
        if (!(*cpu)->Forward(*s, {.tokens = std::span(tokens).subspan(start, len)}, &out).ok()) {
          return 1;
        }
      }
      best_prefill = std::max(best_prefill, n / Since(t0));
      t0 = Clock::now();
      for (int64_t k = 0; k < decode; ++k) {
        const int32_t next = static_cast<int32_t>(
            std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin());
        if (!(*cpu)->Forward(*s, {.tokens = {&next, 1}}, &out).ok()) return 1;
      }
      if (decode > 0) best_decode = std::max(best_decode, decode / Since(t0));
      state_bytes = s->SwaBytes() + s->GlobalKvBytes();
    }
    std::printf("%8lld %14.0f %14.1f %16lld\n", static_cast<long long>(n), best_prefill,
                best_decode, static_cast<long long>(state_bytes));
  }
  return 0;
}
