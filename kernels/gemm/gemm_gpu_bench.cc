// bench_gemm_gpu: the FP8 block-scaled Linear on the GPU (LaunchLinearFp8) at the released FP8
// Linear shapes against the roofline.
//
//   bench_gemm_gpu [--iters N] [--warmup N] [--m 1,2,4,...,4096] [--shapes wq_a,wkv,...]
//                  [--kernels auto,stream,stream-tma,rs,mma,wgmma,wgmma-bf16,wgmma-ws,
//                             wgmma-ws-inplace,none]
//                  [--peak-tflops T] [--splits 0,2,...] [--ws-cols 0,128,160,192,256]
//                  [--stream-k-tail 0,1] [--multicast 0,1] [--x-qdq 0,1]
//                  [--kept-expansion 0,1]
//                  [--cublas 0|1|rand|const]
//                  [--const-data 0|1]
//
// --kernels times each listed kernel per (shape, M) (A/B): auto = the plan's choice, stream = the
// one-launch weight-streaming kernel (tile_rows 8; auto's choice up to M = 8 below 64 MiB of
// codes, where auto takes the TMA-ring variant with its own plan: kernel column "stream-tma"),
// stream-tma = the stream plan on the TMA-ring variant (LinearCudaParams::stream_tma; M <= 8), rs =
// the register-sourced wgmma kernel (tile_rows 256; auto's choice at M = 9 / 17 .. 768), mma = the
// mma.sync kernel (16-row tiles where the plan takes the stream kernel, 64-row tiles where it
// would take wgmma, 16 / 32 / 64 by M where it takes rs; with its separate QDQ and split-K
// reduction launches), wgmma = the FP8 wgmma
// kernel (tile_rows 128: E4M3 operands), wgmma-bf16 = the bf16-expansion wgmma kernel's 256-thread
// cp.async main loop (tile_rows 128, wgmma_bf16, wgmma_ws = false), wgmma-ws = its
// warp-specialised persistent TMA main loop (tile_rows 128, wgmma_bf16, wgmma_ws; auto takes it
// wherever the plan picks the bf16 wgmma kernel; from kLinearCudaExpandMinRows rows the weight is
// first expanded to bf16 in the workspace, kernel "wgmma-bf16-ws-x"), wgmma-ws-inplace = the same
// main loop decoding every stage's codes in place at every M (expand_weights = false), none = no
// kernel (with --cublas 1: cuBLAS alone); the
// `kernel` column says which ran. --splits times each listed split_k (0 = the plan's; forced
// counts are capped at the K steps; the `splits` column says what ran). --ws-cols times each
// listed LinearCudaParams::ws_tile_cols where the warp-specialised kernel runs on expanded
// weights (0 = the default, LinearCudaWsTileCols's choice; 256 = the width before session 63; the
// kernel column then reads "ws-x-cN" with the width that ran; elsewhere only 0 runs).
// --stream-k-tail times each listed LinearCudaParams::stream_k_tail (1 runs only where the plan
// has a tail, with ws-cols 0; kernel column "ws-x-skR": 256-column tiles, the last wave's
// tiles in R K ranges). --multicast times each listed LinearCudaParams::ws_multicast (1 runs only
// where the warp-specialised kernel runs without a tail; the kernel column gains "-mc": CTA pairs
// along M sharing each weight box). --x-qdq times each listed LinearCudaParams::x_qdq (1 only
// where the bf16 wgmma kernels run; "-xq": x read in place as already QDQ'd, no activation pass;
// x is QDQ'd once before timing, since the tensor cores' time depends on the operands' bits).
// --kept-expansion 1 also times each expanded-weight plan on weights whose bf16 expansion is kept
// (Fp8LinearDevice::expanded, made once by LaunchExpandFp8Linear; "-ke": no expansion launch per
// call). --cublas 1 adds per (shape, M) rows "cublas-rand" and "cublas-const" (rand / const: only
// that one): cuBLAS's bf16 GEMM of the same M, N, K on bf16 weights (CublasBf16LinearMicros, weight
// copies cycled as below) on random and on constant operands — what a vendor GEMM makes of the
// shape's tiles and waves, the A/B reference for the FP8 Linear on expanded weights (their ratio
// uses the same roof); and to the roofs line cuBLAS's 8192^3 on random operands (the roof itself is
// measured on constant ones, MeasureCublasBf16Tflops). --peak-tflops replaces the measured rate in
// the compute roof (default: the larger of cuBLAS's bf16 GEMM and the mma.sync peak, both measured
// in the run; 893 TFLOP/s is cuBLAS's on the H200).
//
// Per shape and M: the median of N calls (CUDA events, after the warm-up) of the whole launch
// (activation QDQ, GEMM, split-K reduction when the plan splits; one kernel for stream). Successive
// calls cycle through enough weight copies (>= 160 MB in all) that no call finds its weight in L2.
//   bytes = weight codes + scales + x (bf16) + y (bf16): what any implementation must move
//   FLOPs = 2·M·N·K
//   roof  = max(bytes / d2d copy bandwidth, FLOPs / bf16 mma.sync rate), both measured in this
//           run (cudaMemcpyAsync d2d of 1 GiB counted read + write; kernels/attention/bench's
//           mma.sync peak, the instruction the GEMM uses); ratio = roof / measured (1 = on the
//           roof).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/base/check.h"
#include "kernels/attention/bench/mma_peak.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

// Every (a, b) of two lists, a outer.
std::vector<std::pair<int64_t, int64_t>> Pairs(const std::vector<int64_t>& a,
                                               const std::vector<int64_t>& b) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t x : a) {
    for (int64_t y : b) out.emplace_back(x, y);
  }
  return out;
}

// Every (a, b, c) of three lists, a outermost.
std::vector<std::tuple<int64_t, int64_t, int64_t>> Triples(const std::vector<int64_t>& a,
                                                           const std::vector<int64_t>& b,
                                                           const std::vector<int64_t>& c) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
  for (const auto& [x, y] : Pairs(a, b)) {
    for (int64_t z : c) out.emplace_back(x, y, z);
  }
  return out;
}

struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape kShapes[] = {
    {"wq_a", 1280, 5120},
    {"wq_b", 32768, 1280},
    {"wkv", 512, 5120},
    {"wo_b", 5120, 8192},
    {"idx_wq_b", 4096, 1280},
    {"shared_w1", 2304, 5120},
    {"shared_w2", 5120, 2304},
    {"engram_wkv", 25600, 6144},
    {"main_proj", 5120, 15360},
    // Stacked Linears (ConcatLinearRows): the pairs that read the same input, as one — and the
    // shared expert's w1 | w3 as LaunchMoeSharedExpert runs it (fused).
    {"wq_a_wkv", 1792, 5120},
    {"wq_b_idx", 36864, 1280},
    {"shared_w13", 4608, 5120},
};
// Until session 67 the name shared_w13 held 2,304 × 5,120 — w1 (or w3) alone — and the docs
// called those figures "shared w1|w3"; that shape is shared_w1 now.

struct Options {
  int iters = 20;
  int warmup = 3;
  std::vector<int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<std::string> shapes;  // empty: all
  // Kernels to time per (shape, M): auto (the plan's choice), stream (tile_rows 8), rs (the
  // register-sourced wgmma kernel, tile_rows kLinearCudaRsRows), mma
  // (mma.sync: the plan's tile, 16 rows where the plan picks stream, 64 where it picks wgmma,
  // 16 / 32 / 64 by M where it picks the register-sourced kernel),
  // wgmma (tile_rows 128).
  std::vector<std::string> kernels = {"auto"};
  std::vector<int64_t> splits = {0};     // LinearCudaParams::split_k values (0 = automatic)
  std::vector<int64_t> ws_cols = {0};    // LinearCudaParams::ws_tile_cols values
  std::vector<int64_t> tails = {0};      // LinearCudaParams::stream_k_tail values (0 / 1)
  std::vector<int64_t> multicast = {0};  // LinearCudaParams::ws_multicast values (0 / 1)
  std::vector<int64_t> x_qdq = {0};      // LinearCudaParams::x_qdq values (0 / 1)
  std::vector<int64_t> kept = {0};       // 1: weights with Fp8LinearDevice::expanded set
  bool cublas = false;                   // --cublas: cuBLAS's bf16 GEMM of each shape and M
  std::vector<bool> cublas_data = {true, false};  // its operands random (true) / constant
  bool const_data = false;  // --const-data 1: constant x and weights (the power's share)
  double peak_tflops = 0;   // > 0: the compute roof's rate instead of the measured mma.sync one
};

// tile_rows forcing `kernel` given the automatic plan's tile_rows.
int64_t TileFor(const std::string& kernel, int64_t auto_tile, int64_t m) {
  if (kernel == "wgmma" || kernel == "wgmma-bf16" || kernel == "wgmma-ws" ||
      kernel == "wgmma-ws-inplace") {
    return 128;
  }
  if (kernel == "mma") {
    if (auto_tile == kLinearCudaRsRows) return m <= 16 ? 16 : (m <= 32 ? 32 : 64);
    return auto_tile == 128 ? 64 : (auto_tile == kLinearCudaStreamRows ? 16 : auto_tile);
  }
  if (kernel == "stream" || kernel == "stream-tma") return kLinearCudaStreamRows;
  if (kernel == "rs") return kLinearCudaRsRows;
  return 0;
}

std::vector<std::string> SplitList(const char* s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

// A flag's comma list of 0 / 1 values; exits with a message on anything else.
std::vector<int64_t> ZeroOneList(const char* flag, const char* arg) {
  std::vector<int64_t> out;
  for (const std::string& v : SplitList(arg)) {
    if (v != "0" && v != "1") {
      std::fprintf(stderr, "%s: %s is not 0 or 1\n", flag, v.c_str());
      std::exit(2);
    }
    out.push_back(v == "1" ? 1 : 0);
  }
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--iters") {
      o.iters = std::max(1, std::atoi(argv[i + 1]));
    } else if (flag == "--warmup") {
      o.warmup = std::max(0, std::atoi(argv[i + 1]));
    } else if (flag == "--m") {
      o.ms.clear();
      for (const std::string& v : SplitList(argv[i + 1])) o.ms.push_back(std::atoll(v.c_str()));
    } else if (flag == "--shapes") {
      o.shapes = SplitList(argv[i + 1]);
      for (const std::string& name : o.shapes) {
        if (std::none_of(std::begin(kShapes), std::end(kShapes),
                         [&](const Shape& s) { return name == s.name; })) {
          std::fprintf(stderr, "bench_gemm_gpu: unknown shape %s; known:", name.c_str());
          for (const Shape& s : kShapes) std::fprintf(stderr, " %s", s.name);
          std::fprintf(stderr, "\n");
          std::exit(2);
        }
      }
    } else if (flag == "--kernels") {
      o.kernels = SplitList(argv[i + 1]);
      for (const std::string& k : o.kernels) {
        if (k != "auto" && k != "stream" && k != "stream-tma" && k != "rs" && k != "mma" &&
            k != "wgmma" && k != "wgmma-bf16" && k != "wgmma-ws" && k != "wgmma-ws-inplace" &&
            k != "none") {
          std::fprintf(stderr,
                       "--kernels: %s is not auto, stream, stream-tma, rs, mma, wgmma, wgmma-bf16, "
                       "wgmma-ws, wgmma-ws-inplace or none\n",
                       k.c_str());
          std::exit(2);
        }
      }
    } else if (flag == "--ws-cols") {
      o.ws_cols.clear();
      for (const std::string& v : SplitList(argv[i + 1])) {
        const int64_t c = std::atoll(v.c_str());
        if (!LinearCudaWsTileColsValid(c)) {
          std::fprintf(stderr, "--ws-cols: %s is not 0, 128, 160, 192 or 256\n", v.c_str());
          std::exit(2);
        }
        o.ws_cols.push_back(c);
      }
    } else if (flag == "--stream-k-tail") {
      o.tails = ZeroOneList("--stream-k-tail", argv[i + 1]);
    } else if (flag == "--const-data") {
      o.const_data = std::string(argv[i + 1]) == "1";
    } else if (flag == "--cublas") {
      const std::string v = argv[i + 1];
      if (v != "0" && v != "1" && v != "rand" && v != "const") {
        std::fprintf(stderr, "--cublas: %s is not 0, 1, rand or const\n", v.c_str());
        std::exit(2);
      }
      o.cublas = v != "0";
      o.cublas_data.clear();
      if (v == "1" || v == "rand") o.cublas_data.push_back(true);
      if (v == "1" || v == "const") o.cublas_data.push_back(false);
    } else if (flag == "--kept-expansion") {
      o.kept = ZeroOneList("--kept-expansion", argv[i + 1]);
    } else if (flag == "--x-qdq") {
      o.x_qdq = ZeroOneList("--x-qdq", argv[i + 1]);
    } else if (flag == "--multicast") {
      o.multicast = ZeroOneList("--multicast", argv[i + 1]);
    } else if (flag == "--splits") {
      o.splits.clear();
      for (const std::string& v : SplitList(argv[i + 1])) {
        const int64_t sp = std::atoll(v.c_str());
        if (sp < 0 || sp > kLinearCudaMaxSplits) {
          std::fprintf(stderr, "--splits: %s is not in [0, %ld]\n", v.c_str(),
                       static_cast<long>(kLinearCudaMaxSplits));
          std::exit(2);
        }
        o.splits.push_back(sp);
      }
    } else if (flag == "--peak-tflops") {
      o.peak_tflops = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

double MedianMicros(const Options& o, cudaStream_t stream, const std::function<void(int)>& launch) {
  for (int i = 0; i < o.warmup; ++i) launch(i);
  std::vector<cudaEvent_t> ev(2 * o.iters);
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < o.iters; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
    launch(o.warmup + i);
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
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

// Deterministic weight bytes: E4M3 codes without the NaN codes, scales 2^-12 .. 2^-2.
void FillWeight(std::vector<uint8_t>& codes, std::vector<uint8_t>& scales, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint8_t& c : codes) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<uint8_t>(s >> 56);
    if ((c & 0x7F) == 0x7F) c ^= 1;
  }
  for (uint8_t& c : scales) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<uint8_t>(115 + (s >> 60) % 11);
  }
}

int Main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  std::printf("command:");
  for (int i = 0; i < argc; ++i) std::printf(" %s", argv[i]);
  std::printf("\n");
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; median of %d calls after %d warm-up\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const size_t copy_bytes = size_t{1} << 30;
  double copy_gbps = 0;
  {
    DeviceBuffer src(copy_bytes), dst(copy_bytes);
    CUDA_CHECK(cudaMemset(src.get(), 1, copy_bytes));
    const double copy_us = MedianMicros(o, stream, [&](int) {
      CUDA_CHECK(
          cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, stream));
    });
    copy_gbps = 2.0 * copy_bytes / copy_us / 1e3;
  }
  // The compute roof: the dense bf16 tensor rate measured in this run, the larger of cuBLAS's
  // GEMM and the mma.sync peak (until session 51 the mma.sync peak alone, ~28 % below cuBLAS's,
  // so documented runs passed --peak-tflops 893).
  const attn_bench::Bf16TensorRates rates = attn_bench::MeasureBf16TensorRates();
  const double tc_tflops = o.peak_tflops > 0 ? o.peak_tflops : rates.dense;
  std::printf(
      "roofs: d2d copy %.0f GB/s (read + write), bf16 mma.sync %.0f / cuBLAS %.0f TFLOP/s "
      "measured (%s), compute roof %.0f TFLOP/s\n\n",
      copy_gbps, rates.mma, rates.cublas, rates.cublas_source.c_str(), tc_tflops);
  if (o.cublas) {
    std::string source;
    const double us = CublasBf16LinearMicros(8192, 8192, 8192, 1, true, 3, 10, &source);
    std::printf("cuBLAS 8192^3 on random operands: %.0f TFLOP/s (%s)\n\n",
                us > 0 ? 2.0 * 8192.0 * 8192.0 * 8192.0 / us / 1e6 : 0.0, source.c_str());
  }
  std::printf("%-11s %6s %6s %5s %-13s %4s %6s %10s %9s %9s %8s %7s %9s %6s\n", "shape", "N", "K",
              "M", "kernel", "tile", "splits", "median_us", "MB", "GFLOP", "TFLOP/s", "GB/s",
              "roof_us", "ratio");

  const int64_t max_m = *std::max_element(o.ms.begin(), o.ms.end());
  for (const Shape& s : kShapes) {
    if (!o.shapes.empty() &&
        std::find(o.shapes.begin(), o.shapes.end(), std::string(s.name)) == o.shapes.end()) {
      continue;
    }
    const int64_t scale_bytes = ((s.n + 31) / 32) * (s.k / 32);
    const int64_t w_bytes = s.n * s.k + scale_bytes;
    const int copies =
        static_cast<int>(std::clamp<int64_t>((int64_t{160} << 20) / w_bytes + 1, 1, 64));
    std::vector<uint8_t> codes(s.n * s.k), scales(scale_bytes);
    std::vector<DeviceBuffer> dcodes, dscales;
    std::vector<Fp8LinearDevice> views;
    for (int c = 0; c < copies; ++c) {
      FillWeight(codes, scales, 1000 + c);
      if (o.const_data) {  // every code 1.0 (E4M3 0x38), every scale 2^-7
        std::fill(codes.begin(), codes.end(), uint8_t{0x38});
        std::fill(scales.begin(), scales.end(), uint8_t{120});
      }
      dcodes.emplace_back(codes.size());
      dscales.emplace_back(scales.size());
      dcodes.back().CopyFromHost(codes.data(), codes.size());
      dscales.back().CopyFromHost(scales.data(), scales.size());
      views.push_back(
          {s.n, s.k, dcodes.back().get<uint8_t>(), dscales.back().get<uint8_t>(), nullptr});
    }
    // The same weights with their bf16 expansion kept (--kept-expansion 1).
    std::vector<DeviceBuffer> dexpanded;
    std::vector<Fp8LinearDevice> kept_views;
    if (std::find(o.kept.begin(), o.kept.end(), 1) != o.kept.end()) {
      for (const Fp8LinearDevice& v : views) {
        dexpanded.emplace_back(static_cast<size_t>(2 * s.n * s.k));
        const absl::Status st = LaunchExpandFp8Linear(v, dexpanded.back().get<uint16_t>(), stream);
        CHECK(st.ok()) << st;
        kept_views.push_back(v);
        kept_views.back().expanded = dexpanded.back().get<uint16_t>();
      }
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<uint16_t> x(max_m * s.k);
    uint64_t r = 7;
    for (uint16_t& v : x) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<uint16_t>(0x3C00 + ((r >> 52) & 0x3FF)) | ((r >> 63) ? 0x8000 : 0);
      if (o.const_data) v = 0x3C00;
    }
    DeviceBuffer dx(x.size() * 2), dy(static_cast<size_t>(max_m * s.n * 2));
    dx.CopyFromHost(x.data(), x.size() * 2);
    // --x-qdq 1 runs on x QDQ'd as the caller would hand it over: the tensor cores' time depends
    // on the operands' bits (session 66: raw random x read in place made engram.wkv ~9 % slower
    // than its QDQ'd copy, as cuBLAS on random against constant operands).
    DeviceBuffer dxq(std::find(o.x_qdq.begin(), o.x_qdq.end(), 1) != o.x_qdq.end() ? x.size() * 2
                                                                                   : 16);
    if (dxq.bytes() == x.size() * 2) {
      CHECK_OK(quant::LaunchQdq({quant::BlockFormat::kFp8E4m3Ue8m0B32, max_m, s.k,
                                 dx.get<uint16_t>(), s.k, dxq.get<uint16_t>(), s.k},
                                stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    // Every kernel's plan: the automatic one, the forced stream / 16- / 64- / 128-row tiles, both
    // wgmma kernels.
    size_t ws_bytes = 0;
    for (int64_t split : o.splits) {
      ws_bytes =
          std::max({ws_bytes, LinearCudaWorkspaceBytes(views[0], max_m, 0, split),
                    LinearCudaWorkspaceBytes(views[0], max_m, kLinearCudaStreamRows, split),
                    LinearCudaWorkspaceBytes(views[0], max_m, kLinearCudaRsRows, split),
                    LinearCudaWorkspaceBytes(views[0], max_m, 16, split),
                    LinearCudaWorkspaceBytes(views[0], max_m, 64, split),
                    LinearCudaWorkspaceBytes(views[0], max_m, 128, split),
                    LinearCudaWorkspaceBytes(views[0], max_m, 128, split, true),
                    LinearCudaWorkspaceBytes(views[0], max_m, 128, split, true, true, true, true),
                    LinearCudaWorkspaceBytes(views[0], max_m, 0, split, true, true, true, true)});
    }
    DeviceBuffer ws(ws_bytes);
    for (int64_t m : o.ms) {
      const double bytes = static_cast<double>(w_bytes) + 2.0 * m * s.k + 2.0 * m * s.n;
      const double flops = 2.0 * m * s.n * s.k;
      const double roof_us = std::max(bytes / (copy_gbps * 1e3), flops / (tc_tflops * 1e6));
      if (o.cublas) {
        const int bf16_copies = static_cast<int>(
            std::clamp<int64_t>((int64_t{160} << 20) / (2 * s.n * s.k) + 1, 1, 64));
        for (bool random_data : o.cublas_data) {
          std::string source;
          const double us = CublasBf16LinearMicros(m, s.n, s.k, bf16_copies, random_data, o.warmup,
                                                   o.iters, &source);
          const char* name = random_data ? "cublas-rand" : "cublas-const";
          if (us > 0) {
            std::printf(
                "%-11s %6ld %6ld %5ld %-13s %4s %6s %10.2f %9.2f %9.2f %8.1f %7.0f %9.2f %6.2f\n",
                s.name, static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m), name,
                "-", "-", us, bytes / 1e6, flops / 1e9, flops / us / 1e6, bytes / us / 1e3, roof_us,
                roof_us / us);
          } else {
            std::printf("%-11s %6ld %6ld %5ld %s: %s\n", s.name, static_cast<long>(s.n),
                        static_cast<long>(s.k), static_cast<long>(m), name, source.c_str());
          }
        }
      }
      for (const std::string& kernel : o.kernels) {
        if (kernel == "none") continue;  // e.g. --cublas 1 alone
        for (int64_t split : o.splits) {
          for (const auto& [ws_cols, tail] : Pairs(o.ws_cols, o.tails)) {
            const int64_t tile = TileFor(kernel, PlanLinearCuda(m, s.n, s.k).tile_rows, m);
            const bool bf16 = kernel != "wgmma";  // auto and mma: the default (bf16 expansion)
            const bool use_ws = kernel != "wgmma-bf16";  // the default main loop unless the old one
            const bool expand = kernel != "wgmma-ws-inplace";
            const LinearCudaPlan plan =
                PlanLinearCuda(m, s.n, s.k, tile, split, bf16, use_ws, expand, tail != 0);
            // A tail run only where the plan has one, at the width it allows.
            if (tail != 0 && (plan.tail.ranges == 1 || ws_cols != 0)) continue;
            // The width that runs on expanded weights; other kernels take only ws_cols 0.
            int64_t cols = 0;
            if (plan.expand_weights) {
              cols = plan.tail.ranges > 1 ? kLinearCudaWgmmaCols
                                          : LinearCudaWsTileColsFor(ws_cols, m, s.n, plan.splits,
                                                                    prop.multiProcessorCount);
            } else if (ws_cols != 0) {
              continue;
            }
            for (const auto& [mc, xq, ke] : Triples(o.multicast, o.x_qdq, o.kept)) {
              // Pairs only where the warp-specialised kernel runs without a tail; a pre-QDQ'd x
              // only where the bf16 wgmma kernels read it in place; a kept expansion only where
              // the plan expands.
              if (mc != 0 && (!plan.warp_specialised || plan.tail.ranges > 1)) continue;
              if (xq != 0 && plan.kernel != LinearCudaKernel::kWgmmaBf16) continue;
              if (ke != 0 && !plan.expand_weights) continue;
              std::string name;
              if (plan.tail.ranges > 1) {
                name = "ws-x-sk" + std::to_string(plan.tail.ranges);
              } else if (cols != 0) {
                name = "ws-x-c" + std::to_string(cols) + (mc != 0 ? "-mc" : "");
              } else if (plan.warp_specialised) {
                name = mc != 0 ? "wgmma-bf16-ws-mc" : "wgmma-bf16-ws";
              } else {
                name = plan.tma_ring || (kernel == "stream-tma" && m <= 8)
                           ? "stream-tma"
                           : LinearCudaKernelName(plan.kernel);
              }
              if (xq != 0) name += "-xq";
              if (ke != 0) name += "-ke";
              const double us = MedianMicros(o, stream, [&](int i) {
                LinearCudaParams p;
                p.weight = ke != 0 ? &kept_views[i % copies] : &views[i % copies];
                p.m = m;
                p.x_bf16 = xq != 0 ? dxq.get<uint16_t>() : dx.get<uint16_t>();
                p.x_stride = s.k;
                p.y_bf16 = dy.get<uint16_t>();
                p.y_stride = s.n;
                p.workspace = ws.get();
                p.workspace_bytes = ws.bytes();
                p.tile_rows = tile;
                p.split_k = split;
                p.wgmma_bf16 = bf16;
                p.wgmma_ws = use_ws;
                p.expand_weights = expand;
                p.stream_tma = kernel == "stream-tma";
                p.ws_tile_cols = ws_cols;
                p.stream_k_tail = tail != 0;
                p.ws_multicast = mc != 0;
                p.x_qdq = xq != 0;
                const absl::Status st = LaunchLinearFp8(p, stream);
                CHECK(st.ok()) << st;
              });
              std::printf(
                  "%-11s %6ld %6ld %5ld %-13s %4ld %6ld %10.2f %9.2f %9.2f %8.1f %7.0f %9.2f "
                  "%6.2f\n",
                  s.name, static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m),
                  name.c_str(), static_cast<long>(plan.tile_rows), static_cast<long>(plan.splits),
                  us, bytes / 1e6, flops / 1e9, flops / us / 1e6, bytes / us / 1e3, roof_us,
                  roof_us / us);
            }
          }
        }
      }
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
