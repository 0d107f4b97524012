// bench_engram: the GPU Engram gather at the released dims against the copy roof.
//
//   bench_engram [--tokens M] [--rows R] [--iters N] [--warmup N] [--separate]
//
// M tokens (default 4096) × 24 ids × 256 values from a table of R rows (default 8,000,000 packed
// 264-byte rows = 1.97 GiB; --separate uses the checkpoint's two tensors instead), ids uniform
// over the table (a fresh random row per id, as hashed n-grams are). Prints the median of N
// launches between two CUDA events after the warm-up. Bytes: the gathered rows (24 × 264 B per
// token, the useful bytes: DRAM moves whole 32-byte sectors, so a 264-byte row costs 288 B when it
// is not 32-byte aligned), the ids (8 B each) and the bf16 output (12,288 B per token). The roof is
// a cudaMemcpyAsync device-to-device of the output's size measured in the same run (counted read
// + write); ratio = (bytes / copy bandwidth) / measured (1.0 = at the roof). Before timing, every
// output row is compared with the CPU body (the table holds a repeated 64K-row random pattern, so
// the host keeps only the pattern); a mismatch makes the exit code 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "kernels/common/bench_flags.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/engram/engram.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kCols = 24;
constexpr int64_t kDim = 256;
constexpr int64_t kScales = kDim / kEngramScaleBlock;
constexpr int64_t kRowBytes = kDim + kScales;  // 264
constexpr int64_t kPatternRows = 65536;

struct Options {
  int iters = 50;
  int warmup = 5;
  int64_t tokens = 4096;
  int64_t rows = 8000000;
  bool separate = false;
};

// Fills `n` bytes of device memory with copies of `pattern`.
void FillRepeated(uint8_t* dst, size_t n, const std::vector<uint8_t>& pattern) {
  CUDA_CHECK(cudaMemcpy(dst, pattern.data(), std::min(n, pattern.size()), cudaMemcpyHostToDevice));
  for (size_t done = pattern.size(); done < n; done *= 2) {
    CUDA_CHECK(cudaMemcpy(dst + done, dst, std::min(done, n - done), cudaMemcpyDeviceToDevice));
  }
}

int Run(const Options& o, const std::string& command) {
  std::mt19937_64 rng(1);
  // The pattern: finite and NaN codes alike (random bytes), realistic scale bytes.
  std::vector<uint8_t> codes(kPatternRows * kDim), scales(kPatternRows * kScales);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
  for (uint8_t& s : scales) s = static_cast<uint8_t>(110 + rng() % 31);
  std::vector<int64_t> ids(static_cast<size_t>(o.tokens * kCols));
  std::uniform_int_distribution<int64_t> pick(0, o.rows - 1);
  for (int64_t& id : ids) id = pick(rng);
  ids[0] = 0;
  ids[1] = o.rows - 1;

  // Device table: packed rows (codes then scales), or the two tensors.
  const size_t table_bytes = static_cast<size_t>(o.rows) * kRowBytes;
  DeviceBuffer table(table_bytes);
  EngramGatherParams p;
  p.tokens = o.tokens;
  p.ids_per_token = kCols;
  p.dim = kDim;
  p.ids_stride = kCols;
  p.rows = o.rows;
  p.out_stride = kCols * kDim;
  if (o.separate) {
    FillRepeated(table.get<uint8_t>(), static_cast<size_t>(o.rows) * kDim, codes);
    FillRepeated(table.get<uint8_t>() + o.rows * kDim, static_cast<size_t>(o.rows) * kScales,
                 scales);
    p.codes = table.get<uint8_t>();
    p.codes_stride = kDim;
    p.scales = table.get<uint8_t>() + o.rows * kDim;
    p.scales_stride = kScales;
  } else {
    std::vector<uint8_t> packed(kPatternRows * kRowBytes);
    for (int64_t r = 0; r < kPatternRows; ++r) {
      std::copy_n(codes.begin() + r * kDim, kDim, packed.begin() + r * kRowBytes);
      std::copy_n(scales.begin() + r * kScales, kScales, packed.begin() + r * kRowBytes + kDim);
    }
    FillRepeated(table.get<uint8_t>(), table_bytes, packed);
    p.codes = table.get<uint8_t>();
    p.codes_stride = kRowBytes;
    p.scales = table.get<uint8_t>() + kDim;
    p.scales_stride = kRowBytes;
  }
  DeviceBuffer dids(ids.size() * 8), dout(static_cast<size_t>(o.tokens * kCols * kDim) * 2);
  dids.CopyFromHost(ids.data(), ids.size() * 8);
  p.ids = dids.get<int64_t>();
  p.out = dout.get<uint16_t>();

  // Correctness: the CPU body over the pattern with ids folded onto it.
  CHECK_OK(LaunchEngramGather(p, nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> got(static_cast<size_t>(o.tokens * kCols * kDim));
  dout.CopyToHost(got.data(), got.size() * 2);
  std::vector<int64_t> folded(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) folded[i] = ids[i] % kPatternRows;
  std::vector<uint16_t> want(got.size());
  EngramGatherParams cpu = p;
  cpu.ids = folded.data();
  cpu.codes = codes.data();
  cpu.codes_stride = kDim;
  cpu.scales = scales.data();
  cpu.scales_stride = kScales;
  cpu.rows = kPatternRows;
  cpu.out = want.data();
  ThreadPool pool(8);
  CHECK_OK(EngramGatherCpu(cpu, &pool));
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];

  const double out_bytes = static_cast<double>(got.size()) * 2;
  const double bytes = static_cast<double>(ids.size()) * (kRowBytes + 8) + out_bytes;
  const double us =
      MedianEventMicros(o.warmup, o.iters, [&] { CHECK_OK(LaunchEngramGather(p, nullptr)); });
  DeviceBuffer copy_src(got.size() * 2), copy_dst(got.size() * 2);
  const double copy_us = MedianEventMicros(o.warmup, o.iters, [&] {
    CUDA_CHECK(
        cudaMemcpyAsync(copy_dst.get(), copy_src.get(), got.size() * 2, cudaMemcpyDeviceToDevice));
  });
  const double copy_gbps = 2.0 * out_bytes / copy_us / 1e3;
  const double roof_us = bytes / copy_gbps / 1e3;
  std::printf("table: %ld rows (%.2f GiB, %s), %ld tokens x %ld ids x %ld\n",
              static_cast<long>(o.rows), static_cast<double>(table_bytes) / (1 << 30),
              o.separate ? "codes + scales tensors" : "packed 264-byte rows",
              static_cast<long>(o.tokens), static_cast<long>(kCols), static_cast<long>(kDim));
  std::printf("roof: d2d copy of %.1f MB: %.1f us = %.0f GB/s (read + write)\n", out_bytes / 1e6,
              copy_us, copy_gbps);
  std::printf("%-14s %11s %10s %8s %11s %7s\n", "op", "median_us", "MB", "GB/s", "roofline_us",
              "ratio");
  std::printf("%-14s %11.1f %10.1f %8.0f %11.1f %7.3f\n", "engram_gather", us, bytes / 1e6,
              bytes / us / 1e3, roof_us, roof_us / us);
  std::printf("\ncorrectness (all %zu outputs vs the CPU body): %s (%ld mismatches)\n", got.size(),
              bad == 0 ? "OK" : "MISMATCH", static_cast<long>(bad));
  std::printf("command: %s\n", command.c_str());
  return bad == 0 ? 0 : 1;
}

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  if (!ParseBenchFlags(argc, argv,
                       {{"--tokens", &o.tokens},
                        {"--rows", &o.rows, 2, (int64_t{8} << 30) / 264},  // 8 GiB of 264-byte rows
                        {"--iters", &o.iters},
                        {"--warmup", &o.warmup},
                        {"--separate", &o.separate}},
                       &command)) {
    return 2;
  }
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_engram: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; median of %d launches after %d warm-up\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup);
  return Run(o, command);
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
