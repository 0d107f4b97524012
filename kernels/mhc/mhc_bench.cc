// bench_mhc: the GPU mixes pass, hc_pre and hc_post against a device-to-device copy.
//
//   bench_mhc [--iters N] [--warmup N] [--dim D] [--large 0|1]
//
// Mixes pass at D = 5120 (default) for 1 .. 16384 tokens, with and without the fused collapse:
// time, bytes (X read, 4·D·2 B per token, + fn read once, 24·4·D·4 B; outputs and the workspace
// are not counted), FLOPs (24·4·D·2 per token; the Sinkhorn tail is not counted) and the ratio of
// its GB/s to the copy's. hc_pre ([T, 4, D] read, [T, D] written) and hc_post ([T, D] + [T, 4, D]
// read, [T, 4, D] written) at 16384 and decode token counts. Each time is the median of N
// launches between two CUDA events, after the warm-up. The copy is cudaMemcpyAsync
// device-to-device of the op's X, timed the same way in the same run and counted as read +
// write. Before timing, the first tokens of each op are compared with the CPU body (mixes within
// 1e-5 relative to their magnitude, hc_pre / hc_post bit for bit); a mismatch makes the exit
// code 1.
//
// Bounds (mixes rows): bytes_us = bytes / the copy's GB/s (the byte roof), fma_us = FLOPs at the
// fp32 FMA peak (SMs x 128 lanes x 2 x peak clock; the bound of the fp32-FMA body), mma_us = the
// tensor-core body's 3 x bf16 mma.sync work at an assumed 1024 dense bf16 FMA / clock / SM (about
// what mma.sync sustains on Hopper; wgmma's peak is twice that). roof = the larger of bytes_us and
// the compute bound of the body that ran; frac = roof / median_us. "mixes" is the default
// (tensor-core) body: the small-batch kernel up to kMhcMixesSmallBatchAutoTokens (32) tokens, the
// large-batch kernels above; "mixes_large" forces the large-batch kernels at small token counts
// and "mixes_small" the small-batch kernel around the switch, for comparison (they place it);
// "mixes_fma" is the fp32-FMA body; "mixes_prep" the default with fn prepared once
// (LaunchMhcPrepareFn, outside the timing; fn_frags); "mixes_mma" the large-batch body on
// mma.sync only (kTensorCoreMmaSync: the TMA kernel the wgmma one replaced). Decode latency is
// the tokens = 1 rows. --large 1 runs the large-batch rows only (2,048, 4,096, 16,384 tokens:
// mixes, mixes_prep, mixes_mma, with the collapse at 16,384), for A/B builds.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "kernels/common/bench_flags.h"
#include "kernels/common/cuda_check.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels {
namespace {

constexpr int kS = kMhcStreams;

struct Options {
  int iters = 50;
  int warmup = 10;
  int64_t dim = 5120;
  int large = 0;
};

double MedianMicros(const Options& o, const std::function<void()>& launch) {
  for (int i = 0; i < o.warmup; ++i) launch();
  std::vector<cudaEvent_t> ev(2 * o.iters);
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < o.iters; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i]));
    launch();
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1]));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> us(o.iters);
  for (int i = 0; i < o.iters; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = 1000.0 * ms;
  }
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventDestroy(e));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

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

std::vector<float> RandomFloats(int64_t n, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = u(rng);
  return v;
}

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  DeviceBuffer d(host.size() * sizeof(T));
  d.CopyFromHost(host.data(), host.size() * sizeof(T));
  return d;
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& d, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(n);
  d.CopyToHost(host.data(), n * sizeof(T));
  return host;
}

struct Row {
  std::string op;
  int64_t tokens = 0;
  double us = 0, mb = 0, gbps = 0, tflops = 0, copy_us = 0, copy_gbps = 0;
  double bytes_us = 0, fma_us = 0, mma_us = 0, roof_us = 0;
};

// Peak rates of device 0 for the bounds columns.
struct Peaks {
  double fma_flops = 0;  // fp32 FLOP/s (FMA = 2)
  double mma_flops = 0;  // bf16 mma.sync FLOP/s (assumed 1024 FMA / clock / SM)
};

class Bench {
 public:
  explicit Bench(Options o) : o_(o) {
    const int64_t width = kS * o_.dim;
    fn_ = RandomFloats(kMhcMixes * width, -1.0f / std::sqrt(float(width)),
                       1.0f / std::sqrt(float(width)), 1);
    base_ = RandomFloats(kMhcMixes, -1.0f, 1.0f, 2);
    scale_ = RandomFloats(3, 0.5f, 1.4f, 3);
  }

  void SetPeaks(Peaks peaks) { peaks_ = peaks; }

  // prepared: fn also prepared once by LaunchMhcPrepareFn (outside the timing, as at weight
  // upload) and passed as fn_frags; its bytes (1.5x fn's) count as read.
  void Mixes(int64_t tokens, bool collapse, MhcMixesGpuKernel kernel, bool prepared = false) {
    const int64_t dim = o_.dim, width = kS * dim;
    const std::vector<uint16_t> x = RandomBf16(tokens * width, tokens);
    const std::vector<float> pre_in = RandomFloats(tokens * kS, 0.0f, 1.0f, 4);
    DeviceBuffer dx = Upload(x), dfn = Upload(fn_), dbase = Upload(base_), dscale = Upload(scale_);
    DeviceBuffer dpre_in = Upload(pre_in), dpre(tokens * kS * 4), dpost(tokens * kS * 4),
                 dcomb(tokens * 16 * 4), dmix(tokens * kMhcMixes * 4), dcoll(tokens * dim * 2);
    const int64_t ws_floats = MhcMixesWorkspaceFloats(tokens, dim);
    DeviceBuffer ws(ws_floats * 4);
    MhcMixesParams p;
    p.tokens = tokens;
    p.dim = dim;
    p.x = dx.get<uint16_t>();
    p.x_stride = width;
    p.fn = dfn.get<float>();
    p.base = dbase.get<float>();
    p.scale = dscale.get<float>();
    p.pre = dpre.get<float>();
    p.post = dpost.get<float>();
    p.comb = dcomb.get<float>();
    p.mixes = dmix.get<float>();
    if (collapse) {
      p.pre_in = dpre_in.get<float>();
      p.collapsed = dcoll.get<uint16_t>();
      p.collapsed_stride = dim;
    }
    DeviceBuffer frags(prepared ? static_cast<size_t>(MhcFnFragmentBytes(dim)) : 16);
    if (prepared) {
      CHECK_OK(LaunchMhcPrepareFn(dim, p.fn, frags.get(), MhcFnFragmentBytes(dim), nullptr));
      p.fn_frags = frags.get();
    }
    CHECK_OK(LaunchMhcMixes(p, ws.get<float>(), ws_floats, nullptr, kernel));
    VerifyMixes(p, x, Download<float>(dmix, tokens * kMhcMixes));
    p.mixes = nullptr;
    const double bytes = 2.0 * tokens * width + (prepared ? 6.0 : 4.0) * kMhcMixes * width +
                         (collapse ? 2.0 * tokens * dim : 0.0);
    const double flops = 2.0 * kMhcMixes * width * tokens;
    const bool tc = kernel != MhcMixesGpuKernel::kFp32Fma;
    const char* name = kernel == MhcMixesGpuKernel::kFp32Fma                ? "mixes_fma"
                       : kernel == MhcMixesGpuKernel::kTensorCoreLargeBatch ? "mixes_large"
                       : kernel == MhcMixesGpuKernel::kTensorCoreSmallBatch ? "mixes_small"
                       : kernel == MhcMixesGpuKernel::kTensorCoreMmaSync    ? "mixes_mma"
                                                                            : "mixes";
    const std::string op =
        std::string(name) + (prepared ? "_prep" : "") + (collapse ? "+collapse" : "");
    Time(op.c_str(), tokens, bytes, flops, dx, x.size() * 2,
         [&] { CHECK_OK(LaunchMhcMixes(p, ws.get<float>(), ws_floats, nullptr, kernel)); });
    Row& r = rows_.back();
    r.fma_us = flops / peaks_.fma_flops * 1e6;
    r.mma_us = 3.0 * flops / peaks_.mma_flops * 1e6;
    r.roof_us = std::max(r.bytes_us, tc ? r.mma_us : r.fma_us);
  }

  void PrePost(int64_t tokens) {
    const int64_t dim = o_.dim, width = kS * dim;
    const std::vector<uint16_t> x = RandomBf16(tokens * width, tokens + 1);
    const std::vector<uint16_t> f = RandomBf16(tokens * dim, tokens + 2);
    const std::vector<float> pre = RandomFloats(tokens * kS, 0.0f, 1.0f, 5);
    const std::vector<float> comb = RandomFloats(tokens * 16, 0.0f, 1.0f, 6);
    DeviceBuffer dx = Upload(x), df = Upload(f), dpre = Upload(pre), dcomb = Upload(comb);
    DeviceBuffer dout(tokens * dim * 2), dres(tokens * width * 2);
    const HcPreParams hp{
        tokens, dim, dx.get<uint16_t>(), width, dpre.get<float>(), dout.get<uint16_t>(), dim};
    CHECK_OK(LaunchHcPre(hp, nullptr));
    const int64_t n = std::min<int64_t>(tokens, 16);
    std::vector<uint16_t> want(n * dim);
    CHECK_OK(HcPreCpu({n, dim, x.data(), width, pre.data(), want.data(), dim}, nullptr));
    VerifyBits("hc_pre", Download<uint16_t>(dout, want.size()), want);
    Time("hc_pre", tokens, 2.0 * (tokens * width + tokens * dim), 0, dx, x.size() * 2,
         [&] { CHECK_OK(LaunchHcPre(hp, nullptr)); });

    const HcPostParams pp{tokens,
                          dim,
                          df.get<uint16_t>(),
                          dim,
                          dx.get<uint16_t>(),
                          width,
                          dpre.get<float>(),
                          dcomb.get<float>(),
                          dres.get<uint16_t>(),
                          width};
    CHECK_OK(LaunchHcPost(pp, nullptr));
    std::vector<uint16_t> want_post(n * width);
    CHECK_OK(HcPostCpu(
        {n, dim, f.data(), dim, x.data(), width, pre.data(), comb.data(), want_post.data(), width},
        nullptr));
    VerifyBits("hc_post", Download<uint16_t>(dres, want_post.size()), want_post);
    Time("hc_post", tokens, 2.0 * (tokens * dim + 2 * tokens * width), 0, dx, x.size() * 2,
         [&] { CHECK_OK(LaunchHcPost(pp, nullptr)); });
  }

  int Print(const std::string& command) const {
    std::printf("\n%-19s %7s %10s %10s %8s %8s %10s %9s %7s %9s %9s %9s %6s\n", "op", "tokens",
                "median_us", "MB_moved", "GB/s", "TFLOP/s", "copy_us", "copy_GB/s", "ratio",
                "bytes_us", "fma_us", "mma_us", "frac");
    for (const Row& r : rows_) {
      std::printf("%-19s %7ld %10.2f %10.2f %8.0f %8.2f %10.2f %9.0f %7.2f %9.2f", r.op.c_str(),
                  static_cast<long>(r.tokens), r.us, r.mb, r.gbps, r.tflops, r.copy_us, r.copy_gbps,
                  r.gbps / r.copy_gbps, r.bytes_us);
      if (r.roof_us > 0) {
        std::printf(" %9.2f %9.2f %6.2f\n", r.fma_us, r.mma_us, r.roof_us / r.us);
      } else {
        std::printf(" %9s %9s %6.2f\n", "-", "-", r.bytes_us / r.us);
      }
    }
    std::printf("\ncorrectness (first tokens vs CPU body): %s\n",
                failures_ == 0 ? "OK" : "MISMATCH");
    std::printf("command: %s\n", command.c_str());
    return failures_ == 0 ? 0 : 1;
  }

 private:
  void Time(const char* op, int64_t tokens, double bytes, double flops, const DeviceBuffer& src,
            size_t src_bytes, const std::function<void()>& launch) {
    DeviceBuffer copy(src_bytes);
    const double copy_us = MedianMicros(o_, [&] {
      CUDA_CHECK(cudaMemcpyAsync(copy.get(), src.get(), src_bytes, cudaMemcpyDeviceToDevice));
    });
    const double us = MedianMicros(o_, launch);
    const double copy_gbps = 2.0 * src_bytes / copy_us / 1e3;
    rows_.push_back({op, tokens, us, bytes / 1e6, bytes / us / 1e3, flops / us / 1e6, copy_us,
                     copy_gbps, bytes / copy_gbps / 1e3});
  }

  // The first tokens' mixes against MhcMixesCpu: within 1e-5 of sum |x·fn|·r.
  void VerifyMixes(const MhcMixesParams& gp, const std::vector<uint16_t>& x,
                   const std::vector<float>& gpu_mixes) {
    const int64_t n = std::min<int64_t>(gp.tokens, 8), width = kS * gp.dim;
    std::vector<float> pre(n * kS), post(n * kS), comb(n * 16), mixes(n * kMhcMixes);
    MhcMixesParams p = gp;
    p.tokens = n;
    p.x = x.data();
    p.fn = fn_.data();
    p.base = base_.data();
    p.scale = scale_.data();
    p.pre = pre.data();
    p.post = post.data();
    p.comb = comb.data();
    p.mixes = mixes.data();
    p.pre_in = nullptr;
    p.collapsed = nullptr;
    CHECK_OK(MhcMixesCpu(p, nullptr));
    for (int64_t t = 0; t < n; ++t) {
      for (int m = 0; m < kMhcMixes; ++m) {
        double mag = 0;
        for (int64_t k = 0; k < width; ++k) {
          mag += std::fabs(formats::Bf16BitsToFloat(x[t * width + k]) * fn_[m * width + k]);
        }
        // r <= 1/sqrt(mean x^2) <= a few for these inputs; mag·1e-5 is generous.
        if (std::fabs(gpu_mixes[t * kMhcMixes + m] - mixes[t * kMhcMixes + m]) > 1e-5 * mag) {
          std::fprintf(stderr, "MISMATCH: mixes token %ld mix %d: gpu %.9g cpu %.9g\n",
                       static_cast<long>(t), m, gpu_mixes[t * kMhcMixes + m],
                       mixes[t * kMhcMixes + m]);
          ++failures_;
          return;
        }
      }
    }
  }

  void VerifyBits(const char* op, const std::vector<uint16_t>& got,
                  const std::vector<uint16_t>& want) {
    if (got != want) {
      std::fprintf(stderr, "MISMATCH: %s differs from the CPU body\n", op);
      ++failures_;
    }
  }

  Options o_;
  std::vector<float> fn_, base_, scale_;
  std::vector<Row> rows_;
  Peaks peaks_;
  int failures_ = 0;
};

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  if (!ParseBenchFlags(argc, argv,
                       {{"--iters", &o.iters},
                        {"--warmup", &o.warmup},
                        {"--dim", &o.dim},
                        {"--large", &o.large, 0, 1}},
                       &command)) {
    return 2;
  }
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_mhc: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; median of %d launches after %d warm-up; D = %ld\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup,
              static_cast<long>(o.dim));
  int clock_khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double sm_hz = static_cast<double>(prop.multiProcessorCount) * clock_khz * 1e3;
  const Peaks peaks{sm_hz * 128 * 2, sm_hz * 1024 * 2};
  std::printf("peaks: fp32 FMA %.1f TFLOP/s, bf16 mma.sync (assumed) %.0f TFLOP/s at %.2f GHz\n",
              peaks.fma_flops / 1e12, peaks.mma_flops / 1e12, clock_khz / 1e6);
  Bench bench(o);
  bench.SetPeaks(peaks);
  constexpr MhcMixesGpuKernel kTc = MhcMixesGpuKernel::kTensorCore;
  constexpr MhcMixesGpuKernel kFma = MhcMixesGpuKernel::kFp32Fma;
  constexpr MhcMixesGpuKernel kLarge = MhcMixesGpuKernel::kTensorCoreLargeBatch;
  constexpr MhcMixesGpuKernel kSmall = MhcMixesGpuKernel::kTensorCoreSmallBatch;
  constexpr MhcMixesGpuKernel kMma = MhcMixesGpuKernel::kTensorCoreMmaSync;
  if (o.large != 0) {
    for (int64_t tokens : {2048, 4096, 16384}) {
      bench.Mixes(tokens, false, kTc);
      bench.Mixes(tokens, false, kTc, /*prepared=*/true);
      bench.Mixes(tokens, false, kMma, /*prepared=*/true);
    }
    bench.Mixes(16384, true, kTc, /*prepared=*/true);
    bench.Mixes(16384, true, kMma, /*prepared=*/true);
    return bench.Print(command);
  }
  for (int64_t tokens : {1, 8, 16, 32, 48, 64, 128, 256, 512, 2048, 4096, 16384}) {
    bench.Mixes(tokens, false, kTc);
  }
  for (int64_t tokens : {1, 64, 256, 16384}) bench.Mixes(tokens, true, kTc);
  // With fn prepared once (fn_frags): the tensor-core bodies copy it instead of splitting it.
  for (int64_t tokens : {1, 8, 32, 48, 64, 128, 256, 512, 2048, 4096, 16384}) {
    bench.Mixes(tokens, false, kTc, /*prepared=*/true);
  }
  for (int64_t tokens : {1, 256, 16384}) bench.Mixes(tokens, true, kTc, /*prepared=*/true);
  // Both tensor-core bodies around the switch at kMhcMixesSmallBatchAutoTokens (same bits).
  for (int64_t tokens : {1, 16, 32, 48}) bench.Mixes(tokens, false, kLarge);
  bench.Mixes(1, true, kLarge);
  for (int64_t tokens : {32, 48, 64, 256}) bench.Mixes(tokens, false, kSmall);
  // The large batches' mma.sync TMA kernel, which the wgmma kernel replaced (same bits).
  for (int64_t tokens : {2048, 4096, 16384}) bench.Mixes(tokens, false, kMma, /*prepared=*/true);
  bench.Mixes(16384, false, kMma);
  bench.Mixes(16384, true, kMma);
  bench.Mixes(16384, true, kMma, /*prepared=*/true);
  for (int64_t tokens : {1, 16384}) bench.Mixes(tokens, false, kFma);
  bench.Mixes(16384, true, kFma);
  for (int64_t tokens : {1, 64, 16384}) bench.PrePost(tokens);
  return bench.Print(command);
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
