// bench_norm_rope: bandwidth of the GPU RMSNorm, text RoPE and fused RMSNorm + RoPE against a
// device-to-device copy.
//
//   bench_norm_rope [--iters N] [--warmup N]
//
// Shapes: RMSNorm over [16384, 5120] (prefill hidden), [16384, 1280] (q_lora), [16384, 512] (kv)
// and batches [1 / 8 / 64 / 256 / 1024, 5120] (256: the last register-cached count), [1, 1280], [1,
// 512]; RMSNorm with its QDQ'd second output (out_qdq) against the norm and the QDQ pass at
// [16384 / 4096, 5120] and [16384 / 4096, 1280]; RoPE of the released q [tokens, 64 heads, 512] (rd
// 64) in place (only the rotated tails move) at 16384 / 64 / 8 / 1 tokens and out of place at 16384
// / 1; the fused kv norm + RoPE [tokens, 512] at 16384 / 1024 / 256 / 64 / 8 / 1. Decode latency is
// the 1-row / 1-token lines (launch-bound: compare with the launch cost). Each time is the median
// of N launches between two CUDA events, after the warm-up. Bytes moved = bytes read + bytes
// written. The copy column is cudaMemcpyAsync device-to-device of the op's input tensor, timed the
// same way and counted the same way (read + write), in the same run; ratio = op GB/s / copy GB/s.
// Before timing, each op's output is compared with its CPU body (first rows); a mismatch makes the
// exit code 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "kernels/common/bench_flags.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

struct Options {
  int iters = 50;
  int warmup = 10;
};

// Deterministic bf16 values in about ±2 (xorshift).
std::vector<uint16_t> RandomBf16(int64_t n, uint64_t seed) {
  std::vector<uint16_t> x(static_cast<size_t>(n));
  uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
  for (uint16_t& v : x) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const float u = static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
    v = formats::FloatToBf16Bits(u);
  }
  return x;
}

DeviceBuffer Upload(const void* host, size_t bytes) {
  DeviceBuffer d(bytes);
  d.CopyFromHost(host, bytes);
  return d;
}

struct Row {
  std::string op, shape;
  double us = 0, mb = 0, gbps = 0, copy_us = 0, copy_gbps = 0;
};

class Bench {
 public:
  explicit Bench(Options o) : o_(o) {}

  void Norm(int64_t rows, int64_t cols) {
    const std::vector<uint16_t> x = RandomBf16(rows * cols, rows + cols);
    const std::vector<uint16_t> w = RandomBf16(cols, 7);
    DeviceBuffer dx = Upload(x.data(), x.size() * 2), dw = Upload(w.data(), w.size() * 2);
    DeviceBuffer dout(x.size() * 2);
    const RmsNormParams p{rows,    cols,   dx.get<uint16_t>(),   cols, dw.get<uint16_t>(),
                          nullptr, 1e-20f, dout.get<uint16_t>(), cols};
    CHECK_OK(LaunchRmsNorm(p, nullptr));
    const int64_t n = std::min<int64_t>(rows, 64);
    std::vector<uint16_t> want(static_cast<size_t>(n * cols));
    CHECK_OK(RmsNormCpu({n, cols, x.data(), cols, w.data(), nullptr, 1e-20f, want.data(), cols},
                        nullptr));
    Verify("rms_norm", dout, want);
    const double bytes = 2.0 * x.size() * 2 + cols * 2;
    Time("rms_norm", Shape({rows, cols}), bytes, dx, x.size() * 2,
         [&] { CHECK_OK(LaunchRmsNorm(p, nullptr)); });
  }

  // RMSNorm with the QDQ'd second output (RmsNormParams::out_qdq: the input of FP8 Linears that
  // skip their activation pass with LinearCudaParams::x_qdq), against the norm followed by the
  // separate QDQ pass that writes the same values; both move x once in and two outputs out.
  void NormQdq(int64_t rows, int64_t cols) {
    const std::vector<uint16_t> x = RandomBf16(rows * cols, rows + cols);
    const std::vector<uint16_t> w = RandomBf16(cols, 7);
    DeviceBuffer dx = Upload(x.data(), x.size() * 2), dw = Upload(w.data(), w.size() * 2);
    DeviceBuffer dout(x.size() * 2), dq(x.size() * 2);
    RmsNormParams p{rows,    cols,   dx.get<uint16_t>(),   cols, dw.get<uint16_t>(),
                    nullptr, 1e-20f, dout.get<uint16_t>(), cols};
    p.out_qdq = dq.get<uint16_t>();
    p.out_qdq_stride = cols;
    CHECK_OK(LaunchRmsNorm(p, nullptr));
    const int64_t n = std::min<int64_t>(rows, 64);
    std::vector<uint16_t> out(static_cast<size_t>(n * cols)), want(out.size());
    CHECK_OK(RmsNormCpu(
        {n, cols, x.data(), cols, w.data(), nullptr, 1e-20f, out.data(), cols, want.data(), cols},
        nullptr));
    Verify("rms_norm+qdq", dq, want);
    const double bytes = 3.0 * x.size() * 2 + cols * 2;
    Time("rms_norm+qdq", Shape({rows, cols}), bytes, dx, x.size() * 2,
         [&] { CHECK_OK(LaunchRmsNorm(p, nullptr)); });
    RmsNormParams plain = p;
    plain.out_qdq = nullptr;
    quant::QdqParams q{
        quant::BlockFormat::kFp8E4m3Ue8m0B32, rows, cols, p.out, cols, p.out_qdq, cols};
    Time("rms_norm, qdq pass", Shape({rows, cols}), bytes, dx, x.size() * 2, [&] {
      CHECK_OK(LaunchRmsNorm(plain, nullptr));
      CHECK_OK(quant::LaunchQdq(q, nullptr));
    });
  }

  void Rope(int64_t tokens, int64_t heads, int64_t head_dim, bool in_place) {
    const RopeSpec spec{64, 160000.0, 65536, 16.0, 32.0, 1.0};
    absl::StatusOr<RopeTable> table = RopeTable::Create(spec, 0);
    CHECK_OK(table.status());
    const int64_t n = tokens * heads * head_dim;
    const std::vector<uint16_t> x = RandomBf16(n, tokens + heads);
    std::vector<int64_t> pos(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) pos[t] = 100000 + 37 * t;
    DeviceBuffer dx = Upload(x.data(), n * 2), dpos = Upload(pos.data(), pos.size() * 8);
    DeviceBuffer dout(n * 2);
    RopeParams p;
    p.table = &*table;
    p.tokens = tokens;
    p.heads = heads;
    p.head_dim = head_dim;
    p.positions = dpos.get<int64_t>();
    p.x = dx.get<uint16_t>();
    p.x_stride = p.out_stride = heads * head_dim;
    p.x_head_stride = p.out_head_stride = head_dim;
    p.out = dout.get<uint16_t>();
    CHECK_OK(LaunchRope(p, nullptr));
    const int64_t check = std::min<int64_t>(tokens, 16);
    std::vector<uint16_t> want(static_cast<size_t>(check * heads * head_dim));
    RopeParams cpu = p;
    cpu.tokens = check;
    cpu.positions = pos.data();
    cpu.x = x.data();
    cpu.out = want.data();
    CHECK_OK(RopeCpu(cpu, nullptr));
    Verify("rope", dout, want);
    if (in_place)
      p.out = dx.get<uint16_t>();  // repeated in place: values keep rotating, traffic is the same
    const double moved = in_place ? 2.0 * tokens * heads * spec.rope_dims * 2 : 2.0 * n * 2;
    Time(in_place ? "rope in place" : "rope", Shape({tokens, heads, head_dim}), moved, dx, n * 2,
         [&] { CHECK_OK(LaunchRope(p, nullptr)); });
  }

  void NormRope(int64_t rows, int64_t cols) {
    const RopeSpec spec{64, 160000.0, 65536, 16.0, 32.0, 1.0};
    absl::StatusOr<RopeTable> table = RopeTable::Create(spec, 0);
    CHECK_OK(table.status());
    const std::vector<uint16_t> x = RandomBf16(rows * cols, rows);
    const std::vector<uint16_t> w = RandomBf16(cols, 3);
    std::vector<int64_t> pos(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) pos[t] = t;
    DeviceBuffer dx = Upload(x.data(), x.size() * 2), dw = Upload(w.data(), w.size() * 2);
    DeviceBuffer dpos = Upload(pos.data(), pos.size() * 8), dout(x.size() * 2);
    RmsNormRopeParams p;
    p.norm = {rows,    cols,   dx.get<uint16_t>(),   cols, dw.get<uint16_t>(),
              nullptr, 1e-20f, dout.get<uint16_t>(), cols};
    p.table = &*table;
    p.positions = dpos.get<int64_t>();
    const double bytes = 2.0 * x.size() * 2 + cols * 2 + rows * 8;
    CHECK_OK(LaunchRmsNormRope(p, nullptr));
    // CPU: RmsNormCpu, then RopeCpu in place on the first rows.
    const int64_t n = std::min<int64_t>(rows, 64);
    std::vector<uint16_t> want(static_cast<size_t>(n * cols));
    CHECK_OK(
        RmsNormRopeCpu({{n, cols, x.data(), cols, w.data(), nullptr, 1e-20f, want.data(), cols},
                        &*table,
                        pos.data(),
                        false},
                       nullptr));
    Verify("rms_norm+rope", dout, want);
    Time("rms_norm+rope", Shape({rows, cols}), bytes, dx, x.size() * 2,
         [&] { CHECK_OK(LaunchRmsNormRope(p, nullptr)); });
  }

  int Print(const std::string& command) const {
    std::printf("\n%-15s %-16s %10s %10s %8s %10s %9s %7s\n", "op", "shape", "median_us",
                "MB_moved", "GB/s", "copy_us", "copy_GB/s", "ratio");
    for (const Row& r : rows_) {
      std::printf("%-15s %-16s %10.2f %10.2f %8.0f %10.2f %9.0f %7.2f\n", r.op.c_str(),
                  r.shape.c_str(), r.us, r.mb, r.gbps, r.copy_us, r.copy_gbps,
                  r.gbps / r.copy_gbps);
    }
    std::printf("\ncorrectness (first rows vs CPU body): %s\n", failures_ == 0 ? "OK" : "MISMATCH");
    std::printf("command: %s\n", command.c_str());
    return failures_ == 0 ? 0 : 1;
  }

 private:
  static std::string Shape(std::initializer_list<int64_t> dims) {
    std::string s;
    for (int64_t d : dims) {
      if (!s.empty()) s.push_back('x');
      s.append(std::to_string(d));
    }
    return s;
  }

  // Times `launch` and a d2d copy of the op's input (`src`, `src_bytes`) in the same run.
  void Time(const char* op, const std::string& shape, double bytes, const DeviceBuffer& src,
            size_t src_bytes, const std::function<void()>& launch) {
    DeviceBuffer copy(src_bytes);
    const double copy_us = MedianEventMicros(o_.warmup, o_.iters, [&] {
      CUDA_CHECK(cudaMemcpyAsync(copy.get(), src.get(), src_bytes, cudaMemcpyDeviceToDevice));
    });
    const double us = MedianEventMicros(o_.warmup, o_.iters, launch);
    rows_.push_back(
        {op, shape, us, bytes / 1e6, bytes / us / 1e3, copy_us, 2.0 * src_bytes / copy_us / 1e3});
  }

  // The first want.size() values of `got` (device) must equal `want` bit for bit.
  void Verify(const char* op, const DeviceBuffer& got, const std::vector<uint16_t>& want) {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> host(want.size());
    got.CopyToHost(host.data(), host.size() * 2);
    int64_t bad = 0;
    for (size_t i = 0; i < host.size(); ++i) bad += host[i] != want[i];
    if (bad > 0) {
      std::fprintf(stderr, "MISMATCH: %s: %ld of %zu values differ from the CPU body\n", op,
                   static_cast<long>(bad), host.size());
      ++failures_;
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
    std::fprintf(stderr, "bench_norm_rope: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; median of %d launches after %d warm-up\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup);
  Bench bench(o);
  for (int64_t rows : {16384, 1024, 256, 64, 8, 1}) bench.Norm(rows, 5120);
  for (int64_t rows : {16384, 1}) bench.Norm(rows, 1280);
  for (int64_t rows : {16384, 1}) bench.Norm(rows, 512);
  for (int64_t rows : {16384, 4096}) bench.NormQdq(rows, 5120);
  for (int64_t rows : {16384, 4096}) bench.NormQdq(rows, 1280);
  bench.Norm(16384, 256);
  bench.Norm(16384, 128);
  bench.NormRope(16384, 128);
  for (int64_t tokens : {16384, 64, 8, 1}) bench.Rope(tokens, 64, 512, /*in_place=*/true);
  for (int64_t tokens : {16384, 1}) bench.Rope(tokens, 64, 512, /*in_place=*/false);
  for (int64_t tokens : {16384, 1024, 256, 64, 8, 1}) bench.NormRope(tokens, 512);
  return bench.Print(command);
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
