// bench_gemm_cpu: throughput of LinearCpu on the tiny fixture's Linear shapes and on the released
// wq_a (5120 -> 1280), for M = 1 (decode) and M = 201 (the fixture's prefill).
//
//   bench_gemm_cpu [--threads T] [--min-ms MS]
//
// T = pool workers besides the calling thread (default 1: the 2-core dev machine). Each row
// repeats one LinearCpu call until MS milliseconds (default 200) have passed after one warm-up
// call and reports the mean time per call and GFLOP/s (2·M·N·K / time). Modes: fast with the
// fp32-expanded weight, fast with codes only (per-tile dequantisation), exact. Weights and
// activations are seeded random data in checkpoint layout.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/gemm/gemm.h"

namespace flashserve::kernels {
namespace {

struct Shape {
  const char* name;
  WeightFormat format;
  int64_t n, k;
};

uint64_t Next(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Random checkpoint bytes: codes without NaN, scales near 2^-6, bf16/fp32 values in ±1/16.
std::vector<uint8_t> RandomBytes(size_t n, uint64_t& s, WeightFormat f) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) {
    b[i] = static_cast<uint8_t>(Next(s));
    if (f == WeightFormat::kFp8Block32 && (b[i] & 0x7F) == 0x7F) b[i] = 0x38;
  }
  if (f == WeightFormat::kBf16) {
    for (size_t i = 1; i < n; i += 2) b[i] = static_cast<uint8_t>(0x3D + (b[i] & 0x80));
  } else if (f == WeightFormat::kF32) {
    for (size_t i = 3; i < n; i += 4) b[i] = static_cast<uint8_t>(0x3D + (b[i] & 0x80));
  }
  return b;
}

double TimeMs(const std::function<void()>& fn, double min_ms) {
  fn();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  int iters = 0;
  double elapsed = 0;
  do {
    fn();
    ++iters;
    elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_ms);
  return elapsed / iters;
}

void BenchShape(const Shape& s, ThreadPool* pool, double min_ms) {
  uint64_t seed = static_cast<uint64_t>(s.n * 7919 + s.k);
  const std::vector<uint8_t> weight =
      RandomBytes(static_cast<size_t>(LinearWeightBytes(s.format, s.n, s.k)), seed, s.format);
  std::vector<uint8_t> scale(static_cast<size_t>(LinearScaleBytes(s.format, s.n, s.k)), 121);
  const LinearWeightView view{s.format, s.n, s.k, weight, scale, {}};
  auto full = PreparedLinear::Create(view);
  auto lean = PreparedLinear::Create(view, {.expand_to_f32 = false});
  CHECK_OK(full.status());
  CHECK_OK(lean.status());
  const bool f32 = s.format == WeightFormat::kF32;
  for (int64_t m : {int64_t{1}, int64_t{201}}) {
    std::vector<uint16_t> xb(static_cast<size_t>(m * s.k));
    for (auto& v : xb)
      v = formats::FloatToBf16Bits(static_cast<float>(Next(seed) % 2001) / 1000 - 1);
    std::vector<float> xf(xb.size());
    for (size_t i = 0; i < xb.size(); ++i) xf[i] = formats::Bf16BitsToFloat(xb[i]);
    std::vector<uint16_t> yb(static_cast<size_t>(m * s.n));
    std::vector<float> yf(static_cast<size_t>(m * s.n));
    struct Variant {
      const char* label;
      const PreparedLinear* w;
      LinearMode mode;
    } variants[] = {{"fast", &*full, LinearMode::kFast},
                    {"fast-codes", &*lean, LinearMode::kFast},
                    {"exact", &*full, LinearMode::kExact}};
    for (const Variant& v : variants) {
      if (f32 && v.w == &*lean) continue;  // kF32 has no codes-only storage
      std::vector<uint8_t> ws(LinearWorkspaceBytes(*v.w, m, v.mode, pool));
      LinearParams p{v.w,
                     m,
                     f32 ? nullptr : xb.data(),
                     f32 ? xf.data() : nullptr,
                     s.k,
                     f32 ? nullptr : yb.data(),
                     f32 ? yf.data() : nullptr,
                     s.n,
                     v.mode,
                     ws.data(),
                     ws.size()};
      const double ms = TimeMs([&] { CHECK_OK(LinearCpu(p, pool)); }, min_ms);
      const double gflops = 2.0 * m * s.n * s.k / (ms * 1e6);
      std::printf("%-26s %-10s M=%-4lld N=%-5lld K=%-5lld %-10s %9.3f ms %8.2f GFLOP/s\n", s.name,
                  WeightFormatName(s.format), static_cast<long long>(m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k), v.label, ms, gflops);
    }
  }
}

int Main(int argc, char** argv) {
  int threads = 1;
  double min_ms = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--min-ms") == 0) min_ms = std::atof(argv[i + 1]);
  }
  std::printf("command: %s --threads %d --min-ms %g\n", argv[0], threads, min_ms);
  std::printf("pool: %d worker(s) + the calling thread; OpenBLAS single-threaded per tile\n",
              threads);
  std::unique_ptr<ThreadPool> pool;
  if (threads > 0) pool = std::make_unique<ThreadPool>(static_cast<size_t>(threads));
  const Shape shapes[] = {
      {"tiny attn.wq_a", WeightFormat::kFp8Block32, 64, 256},
      {"tiny attn.wq_b", WeightFormat::kFp8Block32, 512, 64},
      {"tiny attn.wkv", WeightFormat::kFp8Block32, 128, 256},
      {"tiny attn.wo_b", WeightFormat::kFp8Block32, 256, 128},
      {"tiny expert w1", WeightFormat::kFp4Block32, 128, 256},
      {"tiny expert w2", WeightFormat::kFp4Block32, 256, 128},
      {"tiny attn.wo_a group", WeightFormat::kBf16, 64, 256},
      {"tiny head", WeightFormat::kF32, 2048, 256},
      {"released wq_a", WeightFormat::kFp8Block32, 1280, 5120},
  };
  for (const Shape& s : shapes) BenchShape(s, pool.get(), min_ms);
  return 0;
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
