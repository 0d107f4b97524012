// bench_quant: bandwidth of the GPU block quantisers against a device-to-device copy.
//
//   bench_quant [--iters N] [--warmup N]
//
// For [16384, 5120] and [65536, 512] bf16 matrices (and serving rows of 512 / 128 channels), times
// quantise, dequantise and QDQ of each format: the median of N launches, each between two CUDA
// events, after the warm-up. Bytes moved = bytes read + bytes written (bf16 values, code bytes,
// scale bytes). The roofline is cudaMemcpyAsync device-to-device over the bf16 matrix, timed the
// same way and counted the same way (read + write). Every input is larger than the L2 cache.
// Before timing, the first rows of each quantiser's GPU output are checked against the CPU body;
// a mismatch makes the exit code 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "kernels/common/bench_flags.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::quant {
namespace {

struct Options {
  int iters = 50;
  int warmup = 10;
};

// Median launch time in microseconds of `launch`, each launch between two events.
// Random bf16 data shaped like activations: per-row scale 2^e (e in [-8, 8]), values in ±1.
std::vector<uint16_t> RandomBf16(int64_t rows, int64_t cols) {
  std::vector<uint16_t> x(static_cast<size_t>(rows * cols));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int64_t r = 0; r < rows; ++r) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const float scale = static_cast<float>(1 << 8) / static_cast<float>(1 << (s % 17));
    for (int64_t i = 0; i < cols; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      const float u = static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
      x[r * cols + i] = formats::FloatToBf16Bits(u * scale / 256.0f);
    }
  }
  return x;
}

struct Row {
  std::string op, format, shape;
  double us = 0, mb = 0, gbps = 0, copy_gbps = 0;
};

class Bench {
 public:
  explicit Bench(Options o) : o_(o) {}

  void RunShape(int64_t rows, int64_t cols) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    const size_t x_bytes = static_cast<size_t>(rows * cols) * 2;
    const std::vector<uint16_t> host_x = RandomBf16(rows, cols);
    DeviceBuffer x(x_bytes), out(x_bytes), codes(static_cast<size_t>(rows * cols)),
        scales(static_cast<size_t>(rows * cols / 16)), copy(x_bytes);
    x.CopyFromHost(host_x.data(), x_bytes);

    const double copy_us = MedianEventMicros(o_.warmup, o_.iters, [&] {
      CUDA_CHECK(cudaMemcpyAsync(copy.get(), x.get(), x_bytes, cudaMemcpyDeviceToDevice));
    });
    const double copy_gbps = 2.0 * x_bytes / copy_us / 1e3;
    rows_.push_back({"memcpy d2d", "-", shape, copy_us, 2.0 * x_bytes / 1e6, copy_gbps, copy_gbps});

    for (BlockFormat f : {BlockFormat::kFp8E4m3Ue8m0B32, BlockFormat::kFp4E2m1E4m3B16,
                          BlockFormat::kFp4E2m1Ue8m0B32}) {
      const int64_t cb = CodeBytes(f, cols), sb = ScaleBytes(f, cols);
      const QuantizeParams q{
          f, rows, cols, x.get<uint16_t>(), cols, codes.get<uint8_t>(), cb, scales.get<uint8_t>(),
          sb};
      const DequantizeParams d{
          f,   rows, cols, codes.get<uint8_t>(), cb, scales.get<uint8_t>(), sb, out.get<uint16_t>(),
          cols};
      const QdqParams qdq{f, rows, cols, x.get<uint16_t>(), cols, out.get<uint16_t>(), cols};
      CheckAgainstCpu(q, host_x);
      const double code_bytes = static_cast<double>(rows * (cb + sb));
      Time("quantize", f, shape, x_bytes + code_bytes, copy_gbps,
           [&] { CHECK_OK(LaunchQuantize(q, nullptr)); });
      Time("dequantize", f, shape, x_bytes + code_bytes, copy_gbps,
           [&] { CHECK_OK(LaunchDequantize(d, nullptr)); });
      Time("qdq", f, shape, 2.0 * x_bytes, copy_gbps, [&] { CHECK_OK(LaunchQdq(qdq, nullptr)); });
    }
  }

  // Serving rows: encode rows * channels values into packed rows.
  void RunRows(KvRowKind kind, int64_t rows, int64_t channels) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(channels);
    const size_t x_bytes = static_cast<size_t>(rows * channels) * 2;
    const int64_t row_bytes = KvRowBytes(kind, channels);
    const std::vector<uint16_t> host_x = RandomBf16(rows, channels);
    DeviceBuffer x(x_bytes), out(static_cast<size_t>(rows * row_bytes)), copy(x_bytes);
    x.CopyFromHost(host_x.data(), x_bytes);
    const double copy_us = MedianEventMicros(o_.warmup, o_.iters, [&] {
      CUDA_CHECK(cudaMemcpyAsync(copy.get(), x.get(), x_bytes, cudaMemcpyDeviceToDevice));
    });
    const EncodeRowsParams p{
        kind, rows, channels, x.get<uint16_t>(), channels, out.get<uint8_t>(), row_bytes};
    QuantizeParams q;
    CHECK_OK(ToQuantizeParams(p, &q));
    CheckAgainstCpu(q, host_x);
    const char* name = kind == KvRowKind::kSwaKv    ? "encode SWA rows"
                       : kind == KvRowKind::kMainKv ? "encode main rows"
                                                    : "encode index rows";
    Time(name, q.format, shape, static_cast<double>(x_bytes + rows * row_bytes),
         2.0 * x_bytes / copy_us / 1e3, [&] { CHECK_OK(LaunchEncodeRows(p, nullptr)); });
  }

  int Print(const std::string& command) const {
    std::printf("\n%-18s %-16s %-11s %10s %10s %9s %9s %7s\n", "op", "format", "shape", "median_us",
                "MB_moved", "GB/s", "copy_GB/s", "ratio");
    for (const Row& r : rows_) {
      std::printf("%-18s %-16s %-11s %10.1f %10.1f %9.0f %9.0f %7.2f\n", r.op.c_str(),
                  r.format.c_str(), r.shape.c_str(), r.us, r.mb, r.gbps, r.copy_gbps,
                  r.gbps / r.copy_gbps);
    }
    std::printf("\ncorrectness (first rows vs CPU body): %s\n", failures_ == 0 ? "OK" : "MISMATCH");
    std::printf("command: %s\n", command.c_str());
    return failures_ == 0 ? 0 : 1;
  }

 private:
  void Time(const char* op, BlockFormat f, const std::string& shape, double bytes, double copy_gbps,
            const std::function<void()>& launch) {
    const double us = MedianEventMicros(o_.warmup, o_.iters, launch);
    rows_.push_back({op, BlockFormatName(f), shape, us, bytes / 1e6, bytes / us / 1e3, copy_gbps});
  }

  // Quantises on the GPU, then compares the first rows' codes and scales with QuantizeCpu.
  void CheckAgainstCpu(const QuantizeParams& q, const std::vector<uint16_t>& host_x) {
    CHECK_OK(LaunchQuantize(q, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const int64_t n = std::min<int64_t>(q.rows, 256);
    const int64_t cb = CodeBytes(q.format, q.cols), sb = ScaleBytes(q.format, q.cols);
    std::vector<uint8_t> gpu_c(n * q.codes_stride), gpu_s(n * q.scales_stride);
    CUDA_CHECK(cudaMemcpy(gpu_c.data(), q.codes, gpu_c.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gpu_s.data(), q.scales, gpu_s.size(), cudaMemcpyDeviceToHost));
    std::vector<uint8_t> cpu_c = gpu_c, cpu_s = gpu_s;
    QuantizeParams c = q;
    c.rows = n, c.x = host_x.data(), c.codes = cpu_c.data(), c.scales = cpu_s.data();
    CHECK_OK(QuantizeCpu(c));
    for (int64_t r = 0; r < n; ++r) {
      if (std::memcmp(&gpu_c[r * q.codes_stride], &cpu_c[r * q.codes_stride], cb) != 0 ||
          std::memcmp(&gpu_s[r * q.scales_stride], &cpu_s[r * q.scales_stride], sb) != 0) {
        std::fprintf(stderr, "MISMATCH: %s row %ld differs from the CPU body\n",
                     BlockFormatName(q.format), static_cast<long>(r));
        ++failures_;
        return;
      }
    }
  }

  Options o_;
  std::vector<Row> rows_;
  int failures_ = 0;
};

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  if (!ParseBenchFlags(argc, argv, {{"--iters", &o.iters}, {"--warmup", &o.warmup}}, &command)) {
    return 2;
  }
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_quant: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; median of %d launches after %d warm-up\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup);
  std::printf("command: %s\n", command.c_str());
  Bench bench(o);
  bench.RunShape(16384, 5120);
  bench.RunShape(65536, 512);
  bench.RunRows(KvRowKind::kSwaKv, 65536, 512);
  bench.RunRows(KvRowKind::kMainKv, 65536, 512);
  bench.RunRows(KvRowKind::kIndexK, 262144, 128);
  return bench.Print(command);
}

}  // namespace
}  // namespace flashserve::kernels::quant

int main(int argc, char** argv) { return flashserve::kernels::quant::Main(argc, argv); }
