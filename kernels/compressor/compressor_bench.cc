// bench_compressor: the GPU compressor's post-GEMM work at the released dims against the copy
// roof.
//
//   bench_compressor [--tokens N] [--iters N] [--warmup N]
//
// N tokens (default 16384) of fp32 projections at C = 512 (kv and gate logits, as the caller's
// GEMMs leave them), rd = 64 (YaRN table of the compressed layers). For ratio 2 (8192 groups) and
// ratio 1 (N rows, fp32 and bf16 GEMM output) it prints the median of N launches between two
// CUDA events (after the warm-up) of: LaunchCompressProjected (pooling + cast + RMSNorm; reads
// the projections, writes the latents), LaunchFinalizeCompressedKv (RoPE at j·r + FP4 QDQ +
// 288-byte serving rows; reads the latents, writes kv and the rows) and the two back to back.
// Bytes count each tensor once: the compress kernel's re-read of its own latents (L1/L2) is not
// counted, and "both" counts the latents once (written by one kernel, read by the next from L2).
// The roof is a cudaMemcpyAsync device-to-device of the projections (counted read + write) measured
// in the same run; ratio = (bytes / copy bandwidth) / measured (1.0 = at the roof). Before timing,
// the GPU's latents, kv and serving rows are compared with the CPU bodies (CompressProjectedCpu,
// FinalizeCompressedKvCpu); a mismatch makes the exit code 1. Then ratio-2 decode steps (each
// sequence completes its pair) for B = 1, 8, 64, 256, 1024 sequences: B LaunchCompressProjected
// calls ("seq") against one LaunchCompressProjectedBatch ("batch", 3 launches at 1024), compared
// bit for bit first (a mismatch also makes the exit code 1).
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
#include "common/formats/bf16.h"
#include "kernels/common/bench_flags.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/compressor/compressor.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kC = 512;
constexpr int64_t kRowBytes = 288;  // formats::MainKvRowBytes(512)

struct Options {
  int iters = 50;
  int warmup = 5;
  int64_t tokens = 16384;
};

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  DeviceBuffer d(host.size() * sizeof(T));
  d.CopyFromHost(host.data(), host.size() * sizeof(T));
  return d;
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& d, size_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  d.CopyToHost(host.data(), n * sizeof(T));
  return host;
}

struct Row {
  std::string op;
  double us = 0, mb = 0, roof_us = 0;
};

class Bench {
 public:
  Bench(Options o, double copy_gbps, const RopeTable& table)
      : o_(o), copy_gbps_(copy_gbps), table_(table) {}

  // ratio 2 (pooled), ratio 1 from fp32 or bf16 projections.
  void Run(int64_t ratio, bool bf16) {
    const int64_t n = o_.tokens, groups = n / ratio;
    const std::string tag = ratio == 1 ? (bf16 ? "r1 bf16" : "r1 fp32") : "r2";
    std::mt19937 rng(static_cast<uint32_t>(ratio * 2 + bf16));
    std::uniform_real_distribution<float> ukv(-2.0f, 2.0f), uz(-4.0f, 4.0f), un(0.5f, 1.5f);
    std::vector<float> kv(static_cast<size_t>(n * kC)), z;
    for (float& v : kv) v = ukv(rng);
    if (ratio > 1) {
      z.resize(kv.size());
      for (float& v : z) v = uz(rng);
    }
    std::vector<uint16_t> kv_bf16;
    if (bf16) {
      kv_bf16.resize(kv.size());
      for (size_t i = 0; i < kv.size(); ++i) kv_bf16[i] = formats::FloatToBf16Bits(kv[i]);
    }
    std::vector<uint16_t> norm(kC);
    for (uint16_t& w : norm) w = formats::FloatToBf16Bits(un(rng));
    DeviceBuffer dkv = bf16 ? Upload(kv_bf16) : Upload(kv), dz = Upload(z.empty() ? kv : z);
    DeviceBuffer dnorm = Upload(norm);
    DeviceBuffer dlat(static_cast<size_t>(groups * kC) * 2), didx(static_cast<size_t>(groups) * 8);
    DeviceBuffer dout(static_cast<size_t>(groups * kC) * 2),
        drows(static_cast<size_t>(groups) * kRowBytes);
    DeviceBuffer dstate(
        static_cast<size_t>(std::max<int64_t>(CompressorDeviceStateBytes(ratio, kC), 16)));
    CompressorDeviceState state =
        MakeCompressorDeviceState(ratio, kC, dstate.get(), dstate.bytes()).value();
    int64_t emitted = 0;
    CompressProjectedParams cp;
    cp.ratio = ratio;
    cp.channels = kC;
    cp.tokens = n;
    if (bf16) {
      cp.kv_bf16 = dkv.get<uint16_t>();
    } else {
      cp.kv = dkv.get<float>();
    }
    cp.kv_stride = kC;
    if (ratio > 1) {
      cp.score = dz.get<float>();
      cp.score_stride = kC;
    }
    cp.norm_weight = dnorm.get<uint16_t>();
    cp.latent = dlat.get<uint16_t>();
    cp.latent_stride = kC;
    cp.latent_capacity = groups;
    cp.group_index = didx.get<int64_t>();
    cp.groups_emitted = &emitted;
    FinalizeCompressedKvParams fp;
    fp.table = &table_;
    fp.ratio = ratio;
    fp.rows = groups;
    fp.channels = kC;
    fp.group_index = didx.get<int64_t>();
    fp.latent = dlat.get<uint16_t>();
    fp.latent_stride = kC;
    fp.kv = dout.get<uint16_t>();
    fp.kv_stride = kC;
    fp.cache_rows = drows.get<uint8_t>();
    fp.cache_row_stride = kRowBytes;
    // Every timed call starts from the empty state at position 0 (N is a multiple of the ratio).
    auto compress = [&] {
      state.pending = 0;
      state.next_pos = 0;
      CHECK_OK(LaunchCompressProjected(cp, &state, nullptr));
    };
    auto finalize = [&] { CHECK_OK(LaunchFinalizeCompressedKv(fp, nullptr)); };
    compress();
    finalize();
    Verify(tag, ratio, kv, kv_bf16, z, norm, dlat, didx, dout, drows, groups);

    const double in_bytes = static_cast<double>(n) * kC * (bf16 ? 2 : 4) * (ratio > 1 ? 2 : 1);
    const double lat_bytes = static_cast<double>(groups) * kC * 2;
    const double tail_bytes = lat_bytes + static_cast<double>(groups) * (kC * 2 + kRowBytes);
    Add(tag + " compress", in_bytes + lat_bytes + groups * 8.0, compress);
    Add(tag + " finalize", tail_bytes + groups * 8.0, finalize);
    Add(tag + " both", in_bytes + tail_bytes + groups * 8.0, [&] {
      compress();
      finalize();
    });
  }

  // One ratio-2 decode step that completes each sequence's pair (pending 1 put back on the host
  // before every launch) for b sequences: b LaunchCompressProjected calls against one
  // LaunchCompressProjectedBatch; the two outputs are compared bit for bit first.
  void RunDecode(int64_t b) {
    std::mt19937 rng(static_cast<uint32_t>(b));
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> kvz(static_cast<size_t>(2 * b * kC));
    for (float& v : kvz) v = u(rng);
    const std::vector<float> state_rows(static_cast<size_t>(2 * b * kC), 0.5f);
    std::vector<uint16_t> norm(kC, 0x3F80);
    DeviceBuffer dkvz = Upload(kvz), dnorm = Upload(norm), dstate = Upload(state_rows);
    DeviceBuffer dlat_s(static_cast<size_t>(b * kC) * 2), dlat_b(dlat_s.bytes());
    DeviceBuffer didx(static_cast<size_t>(b) * 8);
    std::vector<CompressorDeviceState> states;
    std::vector<CompressorDeviceState*> ptrs;
    std::vector<CompressProjectedParams> single, batched;
    std::vector<int64_t> emitted(static_cast<size_t>(b));
    constexpr int64_t kPos = 4095;
    for (int64_t t = 0; t < b; ++t) {
      states.push_back(MakeCompressorDeviceState(2, kC, dstate.get<float>() + 2 * t * kC,
                                                 static_cast<size_t>(8 * kC))
                           .value());
      CompressProjectedParams p;
      p.ratio = 2;
      p.channels = kC;
      p.start_pos = kPos;
      p.tokens = 1;
      p.kv = dkvz.get<float>() + t * kC;
      p.kv_stride = kC;
      p.score = dkvz.get<float>() + (b + t) * kC;
      p.score_stride = kC;
      p.norm_weight = dnorm.get<uint16_t>();
      p.latent = dlat_s.get<uint16_t>() + t * kC;
      p.latent_stride = kC;
      p.latent_capacity = 1;
      p.group_index = didx.get<int64_t>() + t;
      p.groups_emitted = &emitted[static_cast<size_t>(t)];
      single.push_back(p);
      p.latent = dlat_b.get<uint16_t>() + t * kC;
      batched.push_back(p);
    }
    for (auto& st : states) ptrs.push_back(&st);
    auto reset = [&] {
      for (auto& st : states) {
        st.pending = 1;
        st.next_pos = kPos;
      }
    };
    auto per_seq = [&] {
      reset();
      for (int64_t t = 0; t < b; ++t)
        CHECK_OK(LaunchCompressProjected(single[t], ptrs[t], nullptr));
    };
    auto batch = [&] {
      reset();
      CHECK_OK(LaunchCompressProjectedBatch({batched.data(), b}, ptrs.data(), nullptr));
    };
    per_seq();
    batch();
    const auto ls = Download<uint16_t>(dlat_s, static_cast<size_t>(b * kC));
    const auto lb = Download<uint16_t>(dlat_b, ls.size());
    int64_t bad = 0;
    for (size_t i = 0; i < ls.size(); ++i) bad += ls[i] != lb[i];
    std::printf("r2 decode B=%ld: batched vs per-sequence launches, %ld mismatching latents\n",
                static_cast<long>(b), static_cast<long>(bad));
    if (bad > 0) ++failures_;
    const double bytes = static_cast<double>(b) * (4.0 * kC * 4 + kC * 2 + 8);
    const std::string tag = "r2 dec B=" + std::to_string(b);
    Add(tag + " seq", bytes, per_seq);
    Add(tag + " batch", bytes, batch);
  }

  int Print(const std::string& command) const {
    std::printf("\nroof: d2d copy %.0f GB/s (read + write)\n", copy_gbps_);
    std::printf("%-20s %11s %10s %8s %11s %7s\n", "op", "median_us", "MB", "GB/s", "roofline_us",
                "ratio");
    for (const Row& r : rows_) {
      std::printf("%-20s %11.1f %10.1f %8.0f %11.1f %7.3f\n", r.op.c_str(), r.us, r.mb,
                  r.mb / r.us * 1e3, r.roof_us, r.roof_us / r.us);
    }
    std::printf(
        "\ncorrectness (all latents, kv and serving rows vs the CPU bodies; batched decode "
        "vs per-sequence): %s\n",
        failures_ == 0 ? "OK" : "MISMATCH");
    std::printf("command: %s\n", command.c_str());
    return failures_ == 0 ? 0 : 1;
  }

 private:
  void Add(const std::string& op, double bytes, const std::function<void()>& launch) {
    const double us = MedianEventMicros(o_.warmup, o_.iters, launch);
    rows_.push_back({op, us, bytes / 1e6, bytes / copy_gbps_ / 1e3});
  }

  void Verify(const std::string& tag, int64_t ratio, const std::vector<float>& kv,
              const std::vector<uint16_t>& kv_bf16, const std::vector<float>& z,
              const std::vector<uint16_t>& norm, const DeviceBuffer& dlat, const DeviceBuffer& didx,
              const DeviceBuffer& dout, const DeviceBuffer& drows, int64_t groups) {
    ThreadPool pool(8);
    CompressorState st = MakeCompressorState(ratio, kC).value();
    std::vector<uint16_t> lat(static_cast<size_t>(groups * kC)), out(lat.size());
    std::vector<int64_t> idx(static_cast<size_t>(groups));
    std::vector<uint8_t> rows(static_cast<size_t>(groups * kRowBytes));
    int64_t emitted = 0;
    CompressProjectedParams cp;
    cp.ratio = ratio;
    cp.channels = kC;
    cp.tokens = o_.tokens;
    if (!kv_bf16.empty()) {
      cp.kv_bf16 = kv_bf16.data();
    } else {
      cp.kv = kv.data();
    }
    cp.kv_stride = kC;
    if (ratio > 1) {
      cp.score = z.data();
      cp.score_stride = kC;
    }
    cp.norm_weight = norm.data();
    cp.latent = lat.data();
    cp.latent_stride = kC;
    cp.latent_capacity = groups;
    cp.group_index = idx.data();
    cp.groups_emitted = &emitted;
    CHECK_OK(CompressProjectedCpu(cp, &st, &pool));
    FinalizeCompressedKvParams fp;
    fp.table = &table_;
    fp.ratio = ratio;
    fp.rows = groups;
    fp.channels = kC;
    fp.group_index = idx.data();
    fp.latent = lat.data();
    fp.latent_stride = kC;
    fp.kv = out.data();
    fp.kv_stride = kC;
    fp.cache_rows = rows.data();
    fp.cache_row_stride = kRowBytes;
    CHECK_OK(FinalizeCompressedKvCpu(fp, &pool));
    int64_t bad = 0;
    const auto glat = Download<uint16_t>(dlat, lat.size());
    const auto gout = Download<uint16_t>(dout, out.size());
    const auto gidx = Download<int64_t>(didx, idx.size());
    const auto grows = Download<uint8_t>(drows, rows.size());
    for (size_t i = 0; i < lat.size(); ++i) bad += (glat[i] != lat[i]) + (gout[i] != out[i]);
    for (size_t i = 0; i < idx.size(); ++i) bad += gidx[i] != idx[i];
    for (size_t i = 0; i < rows.size(); ++i) bad += grows[i] != rows[i];
    std::printf("%s: %ld groups, %ld mismatching values (latents, kv, indices, row bytes)\n",
                tag.c_str(), static_cast<long>(groups), static_cast<long>(bad));
    if (bad > 0) ++failures_;
  }

  Options o_;
  double copy_gbps_;
  const RopeTable& table_;
  std::vector<Row> rows_;
  int failures_ = 0;
};

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  if (!ParseBenchFlags(argc, argv,
                       {{"--tokens", &o.tokens, 2}, {"--iters", &o.iters}, {"--warmup", &o.warmup}},
                       &command)) {
    return 2;
  }
  if (o.tokens % 2 != 0) {
    std::fprintf(stderr, "--tokens needs an even count (ratio 2), got %ld\n",
                 static_cast<long>(o.tokens));
    return 2;
  }
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_compressor: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "device: %s, %d SMs, L2 %d MB; median of %d launches after %d warm-up; %ld tokens, "
      "C = %ld, rd = 64\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup,
      static_cast<long>(o.tokens), static_cast<long>(kC));
  const RopeTable table =
      RopeTable::Create(RopeSpec{64, 160000.0, 65536, 16.0, 32.0, 1.0}, 0).value();
  const size_t copy_bytes = static_cast<size_t>(o.tokens * kC) * 4;
  DeviceBuffer src(copy_bytes), dst(copy_bytes);
  const double copy_us = MedianEventMicros(o.warmup, o.iters, [&] {
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice));
  });
  Bench bench(o, 2.0 * static_cast<double>(copy_bytes) / copy_us / 1e3, table);
  bench.Run(2, false);
  bench.Run(1, false);
  bench.Run(1, true);
  for (int64_t b : {1, 8, 64, 256, 1024}) bench.RunDecode(b);
  return bench.Print(command);
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
