// bench_ced: CED prefill and bounded replay against exact prefill (issue 4 items 3 and 4) on a
// synthetic model whose layer schedule is the released one (40 layers; encoder 0–19, decoder
// 20–39; KV sources 2/8/14 at ratio 2 and 20 at ratio 1; index sources 2..36; candidate blocks
// 2048 × 8 at layer 20; window 128; top-k 512) at small widths (dim 128, 2 heads × 128, 4 experts),
// with seeded random weights (model/weights/synthetic_checkpoint.h).
//
//   build/bench/bench_ced [--lengths 256,1024,4096,16384,32768] [--decode 16] [--chunk 512]
//                         [--threads N] [--dir DIR]
//
// For each prompt length N (random ids, fixed seed):
//   exact   every layer on every token, chunks of --chunk;
//   ced     encoder on every token, the decoder's global KV (layer 20) for every token, the
//           decoder on the last 128 tokens only (non-final chunks stop after layer 20's KV);
//   replay  the exact state with every SWA ring dropped, rebuilt from the cached global KV by
//           replaying the last 128 tokens (CpuModel::Replay).
// Reported: wall time of exact and CED and their ratio next to the layer-count theory
// (N + W) / 2N; the largest absolute difference of the last position's logits from exact; the
// greedy agreement with exact over --decode steps teacher-forced on exact's greedy tokens; for
// replay the mean rel-RMS of the rebuilt rings against the exact rings.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "model/config/config_parser.h"
#include "model/runtime/cpu_model.h"
#include "model/runtime/prepared_model.h"
#include "model/weights/loader.h"
#include "model/weights/synthetic_checkpoint.h"

namespace {

using namespace flashserve;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

model::ModelConfig MiniConfig(int64_t max_len) {
  auto c = model::LoadModelConfig("configs/deepseek-v41-flash/inference_config.json");
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
    std::exit(1);
  }
  model::ModelConfig m = *c;
  m.max_seq_len = static_cast<int>(max_len);
  m.vocab_size = 4096;
  m.image_token_id = 4095;
  m.dspark_noise_token_id = 4094;
  m.dim = 128;
  m.moe_inter_dim = 128;
  m.n_heads = 2;
  m.head_dim = 128;
  m.rope_head_dim = 64;
  m.q_lora_rank = 64;
  m.o_groups = 2;
  m.o_lora_rank = 64;
  m.n_routed_experts = 4;
  m.n_activated_experts = 2;
  m.index_n_heads = 2;
  m.index_head_dim = 64;
  m.engram_layer_ids.clear();
  m.engram_num_embeddings.clear();
  m.vision_n_layers = 0;
  m.dspark_block_size = 0;
  m.n_mtp_layers = 0;
  m.dspark_target_layer_ids.clear();
  m.compress_ratios.resize(static_cast<size_t>(m.n_layers));
  return m;
}

double RingRelRms(const model::SessionState& a, const model::SessionState& b) {
  double sum = 0;
  for (size_t l = 0; l < a.layers.size(); ++l) {
    double num = 0, den = 0;
    for (size_t e = 0; e < a.layers[l].swa.bf16.size(); ++e) {
      const double x = formats::Bf16BitsToFloat(a.layers[l].swa.bf16[e]);
      const double y = formats::Bf16BitsToFloat(b.layers[l].swa.bf16[e]);
      num += (x - y) * (x - y);
      den += x * x;
    }
    sum += std::sqrt(num / std::max(den, 1e-30));
  }
  return sum / static_cast<double>(a.layers.size());
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double{std::fabs(a[i] - b[i])});
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lengths = {256, 1024, 4096, 16384, 32768};
  int64_t decode = 16, chunk = 512;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::string dir = (std::filesystem::temp_directory_path() / "flashserve-ced-mini").string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--lengths") {
      lengths.clear();
      for (absl::string_view p : absl::StrSplit(next(), ',')) {
        int64_t n = 0;
        if (absl::SimpleAtoi(p, &n) && n > 0) lengths.push_back(n);
      }
    } else if (a == "--decode") {
      decode = std::stoll(next());
    } else if (a == "--chunk") {
      chunk = std::stoll(next());
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else if (a == "--dir") {
      dir = next();
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const int64_t max_len = *std::max_element(lengths.begin(), lengths.end()) + decode + 1;
  const model::ModelConfig config = MiniConfig(max_len);
  if (auto st = model::WriteSyntheticCheckpoint(config, dir, 20261129); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  auto ckpt = model::LoadedCheckpoint::Open(dir);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "%s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  auto prepared = model::PrepareModel(**ckpt);
  if (!prepared.ok()) return 1;
  ThreadPool pool(static_cast<size_t>(std::max(1, threads - 1)));
  auto cpu = model::CpuModel::Create(**ckpt, **prepared,
                                     {.max_tokens_per_call = chunk, .max_context = max_len},
                                     &pool);
  if (!cpu.ok()) {
    std::fprintf(stderr, "%s\n", cpu.status().ToString().c_str());
    return 1;
  }
  model::CpuModel& m = **cpu;
  const int64_t W = config.window_size;
  std::printf("synthetic model: released schedule (decoder from layer %d), dim %d, window %lld; "
              "%d threads, chunk %lld, %lld decode steps\n",
              m.schedule().decoder_start_layer, config.dim, static_cast<long long>(W), threads,
              static_cast<long long>(chunk), static_cast<long long>(decode));
  std::printf("%7s %9s %9s %9s %9s | %10s %8s | %10s %8s %9s\n", "N", "exact s", "CED s",
              "CED/exact", "theory", "CED maxabs", "agree", "rep maxabs", "agree", "ring rRMS");
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(3, config.vocab_size - 1);
  for (int64_t n : lengths) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t& t : tokens) t = id(rng);
    const std::span<const int32_t> all(tokens);
    auto exact = m.NewSession(n + decode + 1);
    auto ced = m.NewSession(n + decode + 1);
    if (!exact.ok() || !ced.ok()) return 1;
    model::ForwardOutput oe, oc, orp;
    Clock::time_point t0 = Clock::now();
    for (int64_t at = 0; at < n; at += chunk) {
      if (!m.Forward(*exact, {.tokens = all.subspan(at, std::min(chunk, n - at))}, &oe).ok()) {
        return 1;
      }
    }
    const double t_exact = Since(t0);
    // CED: the last chunk carries at least the window.
    const int64_t last = std::max<int64_t>(0, n - std::max(W, std::min(chunk, n)));
    t0 = Clock::now();
    for (int64_t at = 0; at < last; at += chunk) {
      const int64_t len = std::min(chunk, last - at);
      if (!m.Forward(*ced, {.tokens = all.subspan(at, len), .ced = true, .ced_skip_decoder = true},
                     &oc)
               .ok()) {
        return 1;
      }
    }
    if (!m.Forward(*ced, {.tokens = all.subspan(last), .ced = true}, &oc).ok()) return 1;
    const double t_ced = Since(t0);
    // Replay: exact's global KV, rings dropped.
    model::SessionState rep = *exact;
    for (model::LayerState& l : rep.layers) {
      std::fill(l.swa.bytes.begin(), l.swa.bytes.end(), 0);
      std::fill(l.swa.bf16.begin(), l.swa.bf16.end(), 0);
    }
    model::ResetSessionState(rep);
    if (!m.Replay(rep, all, &orp).ok()) return 1;
    const double ring = RingRelRms(*exact, rep);
    const double ced_abs = MaxAbs(oc.logits, oe.logits), rep_abs = MaxAbs(orp.logits, oe.logits);
    int ced_agree = Argmax(oc.logits) == Argmax(oe.logits);
    int rep_agree = Argmax(orp.logits) == Argmax(oe.logits);
    int32_t next = Argmax(oe.logits);
    for (int64_t k = 1; k < decode; ++k) {
      if (!m.Forward(*exact, {.tokens = {&next, 1}}, &oe).ok() ||
          !m.Forward(*ced, {.tokens = {&next, 1}}, &oc).ok() ||
          !m.Forward(rep, {.tokens = {&next, 1}}, &orp).ok()) {
        return 1;
      }
      ced_agree += Argmax(oc.logits) == Argmax(oe.logits);
      rep_agree += Argmax(orp.logits) == Argmax(oe.logits);
      next = Argmax(oe.logits);
    }
    std::printf("%7lld %9.2f %9.2f %9.2f %9.2f | %10.3f %5d/%-2lld | %10.3f %5d/%-2lld %9.4f\n",
                static_cast<long long>(n), t_exact, t_ced, t_ced / t_exact,
                double(n + W) / double(2 * n), ced_abs, ced_agree, static_cast<long long>(decode),
                rep_abs, rep_agree, static_cast<long long>(decode), ring);
    std::fflush(stdout);
  }
  return 0;
}
