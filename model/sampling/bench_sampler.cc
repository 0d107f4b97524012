// Times Sampler::Sample (and Verify) on random logits rows of the released vocabulary size
// (129,280), one core. Run: build/bench/bench_sampler [iterations]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "model/sampling/sampler.h"

using flashserve::sampling::LogprobsMode;
using flashserve::sampling::Sampler;
using flashserve::sampling::SampleResult;
using flashserve::sampling::SamplingParams;
using flashserve::sampling::TokenId;

namespace {

constexpr int32_t kVocab = 129280;

void Time(const char* name, const SamplingParams& params, const std::vector<float>& logits,
          int iterations) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(params, kVocab, std::vector<TokenId>{1, 2, 3});
  if (!sampler.ok()) std::abort();
  const auto start = std::chrono::steady_clock::now();
  int64_t sink = 0;
  for (int i = 0; i < iterations; ++i) sink += sampler->Sample(logits)->token;
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-40s %8.1f us/token  (sink %lld)\n", name, us / iterations,
              static_cast<long long>(sink));
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(rng);
  std::printf("vocab %d, %d iterations each\n", kVocab, iterations);

  SamplingParams p;
  p.seed = 1;
  p.temperature = 0.0f;
  Time("greedy", p, logits, iterations);
  p.temperature = 1.0f;
  Time("temperature 1", p, logits, iterations);
  p.top_k = 50;
  Time("top_k 50", p, logits, iterations);
  p.top_k = 0;
  p.top_p = 0.9f;
  Time("top_p 0.9", p, logits, iterations);
  p.top_p = 0.95f;
  p.top_k = 40;
  p.min_p = 0.05f;
  Time("top_k 40 + top_p 0.95 + min_p 0.05", p, logits, iterations);
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.5f;
  Time("... + penalties", p, logits, iterations);
  p.logprobs = 20;
  Time("... + 20 raw logprobs", p, logits, iterations);
  p.logprobs_mode = LogprobsMode::kProcessed;
  Time("... + 20 processed logprobs", p, logits, iterations);
  return 0;
}
