// bench_gemm_float_gpu: the bf16 / fp32 Linear on the GPU (LaunchFloatLinear) at the model's
// non-quantised Linear shapes against the roofline.
//
//   bench_gemm_float_gpu [--iters N] [--warmup N] [--m 1,2,4,...,4096] [--shapes wo_a,gate,...]
//                        [--kernels auto,mma,wgmma,wgmma-ws,swap,gemv] [--split-k S]
//                        [--peak-tflops T] [--ws-cols 256,0,128,160,192]
//
// --kernels times each listed kernel per (shape, M) (A/B): auto = the plan's choice, mma = the
// mma.sync kernel (16 / 32 / 64-row tiles by M), wgmma = the wgmma kernel's
// 256-thread cp.async main loop (tile_rows 128, wgmma_ws = false), wgmma-ws = its
// warp-specialised persistent TMA main loop (tile_rows 128; auto takes it wherever the plan picks
// wgmma), swap = the swapped-role wgmma kernel (tile_rows 256: weights as the MMA's A operand),
// gemv = the CUDA-core kernel (tile_rows 1; M <= 4 only), gemv-wide = the same with 8 weight rows
// per CTA and a warp per row (FloatLinearCudaParams::gemv_wide; printed gemv8), swap-fp8 = the
// swapped-role kernel on the FP8 form (tile_rows 8; shapes with the FP8 form; x streamed above M
// 8), and its forms swap-fp8-c4 (4 accumulator chains), swap-fp8-w2 (2 consumer warpgroups),
// swap-fp8-w2c4 (both), swap-fp8-w3 (3 warpgroups; FloatLinearCudaParams::swap_fp8_warpgroups /
// swap_fp8_chains; printed with the suffix); the last four bf16 weights only, skipped for fp32
// ones. The `kernel` column says which ran; "exp+" before it: the plan first expanded an FP8-only
// weight into the workspace (shape wo_a_fp8only: the FP8 form alone, no bf16 weight; the roof's
// bytes count the codes, the expansion is in the time).
// --split-k forces the K split count of every kernel (0 = the plan's). --ws-cols times each listed
// FloatLinearCudaParams::ws_tile_cols where the warp-specialised kernel runs (0 = the default,
// LinearCudaWsTileCols's width; 256 = the width before session 64; the kernel column then reads
// "ws-cN" with the width that ran; other kernels run once, at the first value).
// --peak-tflops replaces the measured rate in the compute roof (default: the larger of cuBLAS's
// bf16 GEMM and the mma.sync peak, both measured in the run).
//
// Per shape and M: the median of N calls (CUDA events, after the warm-up) of the whole launch
// (GEMM, plus the split-K reduction when the plan splits). Successive calls cycle through enough
// weight copies (>= 160 MB in all) that no call finds its weight in L2.
//   bytes = weights + x + y in their dtypes: what any implementation must move
//   FLOPs = 2·G·M·N·K; the tensor cores execute `pieces` times that (1 for bf16 × bf16, 3 when
//           one operand is fp32: exact hi/mid/lo bf16 split)
//   roof  = max(bytes / d2d copy bandwidth, pieces·FLOPs / bf16 mma.sync rate), both measured
//           in this run (cudaMemcpyAsync d2d of 1 GiB counted read + write;
//           kernels/attention/bench's mma.sync peak); ratio = roof / measured (1 = on the roof).
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "kernels/attention/bench/mma_peak.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"

namespace flashserve::kernels {
namespace {

struct Shape {
  const char* name;
  int64_t n, k, groups;
  bool w_f32, y_f32;
  // bf16 weights that are E4M3 values times a power of two per 32 × 32 block, uploaded with their
  // FP8 form (NarrowFloatLinearWeightToFp8, FloatLinearCudaParams::w_fp8; session 80): the
  // CUDA-core kernel streams the codes, the other kernels the bf16 weight.
  bool fp8 = false;
  // The FP8 form alone (no w_bf16; FloatLinearCudaParams "FP8 only"): plans that read bf16
  // weights expand the codes into the workspace first, inside the timed call.
  bool fp8_only = false;
};
// Model spec §4.3 step 6 (wo_a on o viewed [M, 8, 4096]), §4.4, §4.5, §4.7.
constexpr Shape kShapes[] = {
    {"wo_a", 1024, 4096, 8, false, false},
    {"idx_wproj", 32, 5120, 1, false, false},
    {"idx_wk", 128, 512, 1, false, false},
    {"cmp_wkv_r1", 512, 5120, 1, false, false},
    {"gate_f32", 384, 5120, 1, true, true},
    {"cmp_r2_f32", 512, 5120, 1, true, true},
    // The same fp32-weight Linears uploaded narrowed to bf16 (NarrowFloatLinearWeight: the model's
    // fp32 copies hold bf16 checkpoint values), fp32 out; the r = 2 pair as one grouped call.
    {"gate", 384, 5120, 1, false, true},
    {"cmp_r2_pair", 512, 5120, 2, false, true},
    {"wo_a_fp8", 1024, 4096, 8, false, false, true},
    {"wo_a_fp8only", 1024, 4096, 8, false, false, true, true},
};

struct Options {
  int iters = 20;
  int warmup = 3;
  std::vector<int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<std::string> shapes;  // empty: all
  // Kernels to time per (shape, M): auto (the plan's choice), mma (mma.sync: the plan's tile, 64
  // rows where the plan picks wgmma), wgmma (tile_rows 128).
  std::vector<std::string> kernels = {"auto"};
  int64_t split_k = 0;
  double peak_tflops = 0;  // > 0: the compute roof's rate instead of the measured mma.sync one
  std::vector<int64_t> ws_cols = {0};  // ws_tile_cols values (0: the default)
};

// tile_rows forcing `kernel` at m rows (mma: the mma.sync plan's rows for m).
int64_t TileFor(const std::string& kernel, int64_t m) {
  if (kernel == "wgmma" || kernel == "wgmma-ws") return 128;
  if (kernel == "swap") return kFloatLinearCudaSwapRows;
  if (kernel.rfind("swap-fp8", 0) == 0) return kFloatLinearCudaSwapFp8Rows;
  if (kernel == "gemv" || kernel == "gemv-wide") return kFloatLinearCudaGemvRows;
  if (kernel == "mma") return m <= 16 ? 16 : (m <= 32 ? 32 : 64);
  return 0;
}

std::vector<std::string> SplitList(const char* s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
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
    } else if (flag == "--kernels") {
      o.kernels = SplitList(argv[i + 1]);
      for (const std::string& k : o.kernels) {
        if (k != "auto" && k != "mma" && k != "wgmma" && k != "wgmma-ws" && k != "swap" &&
            k != "gemv" && k != "gemv-wide" && k != "swap-fp8" && k != "swap-fp8-c4" &&
            k != "swap-fp8-w2" && k != "swap-fp8-w2c4" && k != "swap-fp8-w3") {
          std::fprintf(stderr,
                       "--kernels: %s is not auto, mma, wgmma, wgmma-ws, swap, gemv, gemv-wide, "
                       "swap-fp8, swap-fp8-c4, swap-fp8-w2, swap-fp8-w2c4 or swap-fp8-w3\n",
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
    } else if (flag == "--split-k") {
      o.split_k = std::max<int64_t>(0, std::atoll(argv[i + 1]));
    } else if (flag == "--peak-tflops") {
      o.peak_tflops = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

// Deterministic bf16 bits of values in ±[1, 2) · 2^-6 (finite; the fp32 weights are these
// widened plus low mantissa bits, so all three pieces are busy).
void FillBf16(std::vector<uint16_t>& v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<uint16_t>(0x3C80 + ((s >> 52) & 0x7F)) | ((s >> 63) ? 0x8000 : 0);
  }
}

void FillF32(std::vector<float>& v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t bits = 0x3C800000u + static_cast<uint32_t>((s >> 41) & 0x7FFFFF);
    x = std::bit_cast<float>(bits | ((s >> 63) ? 0x80000000u : 0u));
  }
}

// bf16 values that are E4M3 codes times 2^-8 .. 2^-5 per 32 × 32 block (rows of `cols`).
void FillFp8Valued(std::vector<uint16_t>& v, int64_t cols, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] { return s = s * 6364136223846793005ull + 1442695040888963407ull; };
  std::vector<int> block_exp((v.size() / cols + 31) / 32 * ((cols + 31) / 32));
  for (int& e : block_exp) e = -8 + static_cast<int>((next() >> 60) % 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t code = static_cast<uint8_t>(next() >> 56);
    if ((code & 0x7F) == 0x7F) code ^= 1;  // no NaN codes
    const int64_t r = static_cast<int64_t>(i) / cols, c = static_cast<int64_t>(i) % cols;
    const int e = block_exp[(r / 32) * ((cols + 31) / 32) + c / 32];
    v[i] = formats::FloatToBf16Bits(std::ldexp(formats::E4m3ToFloat(code), e));
  }
}

void RunShape(const Options& o, const Shape& s, double copy_gbps, double tc_tflops,
              cudaStream_t stream) {
  const int64_t w_es = s.w_f32 ? 4 : 2, y_es = s.y_f32 ? 4 : 2;
  const int64_t w_elems = s.groups * s.n * s.k;
  const int64_t w_bytes = w_elems * w_es;
  const int copies =
      static_cast<int>(std::clamp<int64_t>((int64_t{160} << 20) / w_bytes + 1, 1, 64));
  std::vector<DeviceBuffer> dw, dcodes, dscales;
  for (int c = 0; c < copies; ++c) {
    dw.emplace_back(w_bytes);
    if (s.fp8) {
      std::vector<uint16_t> w(w_elems);
      FillFp8Valued(w, s.k, 1000 + c);
      std::vector<uint8_t> codes(w_elems), scales(w_elems / (32 * 32));
      CHECK(
          NarrowFloatLinearWeightToFp8(w.data(), s.groups * s.n, s.k, codes.data(), scales.data()));
      dw.back().CopyFromHost(w.data(), w_bytes);
      dcodes.emplace_back(codes.size());
      dcodes.back().CopyFromHost(codes.data(), codes.size());
      dscales.emplace_back(scales.size());
      dscales.back().CopyFromHost(scales.data(), scales.size());
    } else if (s.w_f32) {
      std::vector<float> w(w_elems);
      FillF32(w, 1000 + c);
      dw.back().CopyFromHost(w.data(), w_bytes);
    } else {
      std::vector<uint16_t> w(w_elems);
      FillBf16(w, 1000 + c);
      dw.back().CopyFromHost(w.data(), w_bytes);
    }
  }
  const int64_t max_m = *std::max_element(o.ms.begin(), o.ms.end());
  // x [M, G, K] and y [M, G, N]: groups interleaved in a row (o viewed [M, 8, 4096]).
  std::vector<uint16_t> x(max_m * s.groups * s.k);
  FillBf16(x, 7);
  DeviceBuffer dx(x.size() * 2), dy(static_cast<size_t>(max_m * s.groups * s.n * y_es));
  dx.CopyFromHost(x.data(), x.size() * 2);
  FloatLinearCudaParams base;
  base.n = s.n;
  base.k = s.k;
  base.groups = s.groups;
  base.w_group_stride = s.n * s.k;
  base.x_bf16 = dx.get<uint16_t>();
  base.x_stride = s.groups * s.k;
  base.x_group_stride = s.k;
  base.y_bf16 = s.y_f32 ? nullptr : dy.get<uint16_t>();
  base.y_f32 = s.y_f32 ? dy.get<float>() : nullptr;
  base.y_stride = s.groups * s.n;
  base.y_group_stride = s.n;
  // Every kernel's plan: the automatic one and the forced 64- / 128- / 256-row tiles.
  size_t ws_bytes = 16;
  base.split_k = o.split_k;
  for (int64_t tile : {int64_t{0}, int64_t{16}, int64_t{32}, int64_t{64}, int64_t{128},
                       kFloatLinearCudaSwapRows}) {
    if (tile == kFloatLinearCudaSwapRows && s.w_f32) continue;
    FloatLinearCudaParams q = base;
    q.tile_rows = tile;
    if (s.fp8_only) {  // the expansion where a plan reads bf16 weights
      q.w_fp8 = dcodes[0].get<uint8_t>();
      q.w_fp8_scales = dscales[0].get<uint8_t>();
    }
    ws_bytes = std::max(ws_bytes, FloatLinearCudaWorkspaceBytes(q, max_m));
  }
  if (s.fp8) {  // the FP8 form's plans: x in the fragment order where its kernel streams it
    for (int64_t tile : {int64_t{0}, kFloatLinearCudaSwapFp8Rows}) {
      FloatLinearCudaParams q = base;
      q.tile_rows = tile;
      q.w_fp8 = dcodes[0].get<uint8_t>();
      q.w_fp8_scales = dscales[0].get<uint8_t>();
      ws_bytes = std::max(ws_bytes, FloatLinearCudaWorkspaceBytes(q, max_m));
    }
  }
  DeviceBuffer ws(ws_bytes);
  base.workspace = ws.get();
  base.workspace_bytes = ws.bytes();
  const int pieces = s.w_f32 ? 3 : 1;
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  for (int64_t m : o.ms) {
    for (const std::string& kernel : o.kernels) {
      for (size_t wi = 0; wi < o.ws_cols.size(); ++wi) {
        if ((kernel == "wgmma" || kernel == "wgmma-ws" || kernel == "swap") && s.w_f32) {
          continue;  // bf16 only
        }
        if ((kernel == "gemv" || kernel == "gemv-wide") && m > kFloatLinearCudaGemvMaxM) continue;
        const bool swap8 = kernel.rfind("swap-fp8", 0) == 0;
        if (swap8 && !s.fp8) continue;
        // The 4-chain forms apply where x is resident only.
        if (swap8 && m > kFloatLinearCudaSwapFp8MaxM && kernel.find("c4") != std::string::npos) {
          continue;
        }
        FloatLinearCudaParams p = base;
        p.m = m;
        p.w_bf16 = s.w_f32 || s.fp8_only ? nullptr : dw[0].get<uint16_t>();  // the W dtype
        p.w_f32 = s.w_f32 ? dw[0].get<float>() : nullptr;
        if (s.fp8) {  // the plan reads whether the FP8 form is there
          p.w_fp8 = dcodes[0].get<uint8_t>();
          p.w_fp8_scales = dscales[0].get<uint8_t>();
        }
        p.tile_rows = TileFor(kernel, m);
        p.wgmma_ws = kernel != "wgmma";
        p.gemv_wide = kernel == "gemv-wide";
        if (swap8) {  // forced: the named form; the automatic plan keeps the defaults
          p.swap_fp8_warpgroups = kernel.find("-w2") != std::string::npos   ? 2
                                  : kernel.find("-w3") != std::string::npos ? 3
                                                                            : 1;
          p.swap_fp8_chains = kernel.find("c4") != std::string::npos ? 4 : 1;
        }
        char swap8_name[24];
        const int wgs = FloatLinearCudaSwapFp8Warpgroups(p);  // the automatic plan's by M
        std::snprintf(swap8_name, sizeof(swap8_name), "swap-fp8%s%s",
                      wgs == 2   ? "-w2"
                      : wgs == 3 ? "-w3"
                                 : "",
                      p.swap_fp8_chains == 4 ? "c4" : "");
        p.ws_tile_cols = o.ws_cols[wi];
        const FloatLinearCudaPlan plan = PlanFloatLinearCuda(p);
        if (!plan.warp_specialised && wi > 0) continue;  // the width matters to wgmma-ws only
        const int64_t cols = FloatLinearCudaWsTileCols(p, plan, sms);
        char ws_name[16];
        std::snprintf(ws_name, sizeof(ws_name), "ws-c%ld", static_cast<long>(cols));
        int call = 0;
        const double us = MedianEventMicros(
            o.warmup, o.iters,
            [&] {
              FloatLinearCudaParams q = p;
              if (s.w_f32) {
                q.w_f32 = dw[call % copies].get<float>();
              } else if (!s.fp8_only) {
                q.w_bf16 = dw[call % copies].get<uint16_t>();
              }
              if (s.fp8) {
                q.w_fp8 = dcodes[call % copies].get<uint8_t>();
                q.w_fp8_scales = dscales[call % copies].get<uint8_t>();
              }
              ++call;
              const absl::Status st = LaunchFloatLinear(q, stream);
              CHECK(st.ok()) << st;
            },
            stream);
        // The FP8 form's kernels stream codes and scales instead of bf16; so does an FP8-only
        // weight under every plan (the bytes any implementation must move: its expansion's
        // traffic is the plan's overhead, in the time, not in the roof).
        const bool fp8_read = s.fp8 && (s.fp8_only || plan.tile_rows == kFloatLinearCudaGemvRows ||
                                        plan.tile_rows == kFloatLinearCudaSwapFp8Rows);
        const double w_read = fp8_read ? w_elems + w_elems / 1024.0 : static_cast<double>(w_bytes);
        const double bytes =
            w_read + 2.0 * m * s.groups * s.k + static_cast<double>(y_es) * m * s.groups * s.n;
        const double flops = 2.0 * m * s.groups * s.n * s.k;
        const double roof_us =
            std::max(bytes / (copy_gbps * 1e3), pieces * flops / (tc_tflops * 1e6));
        const std::string shown =
            (FloatLinearCudaExpansionOffset(p, plan) >= 0 ? std::string("exp+") : std::string()) +
            (plan.tile_rows == kFloatLinearCudaSwapRows      ? "swap"
             : plan.tile_rows == kFloatLinearCudaSwapFp8Rows ? swap8_name
             : plan.tile_rows == kFloatLinearCudaGemvRows
                 ? (fp8_read ? (p.gemv_wide ? "gemv8-fp8" : "gemv-fp8")
                             : (p.gemv_wide ? "gemv8" : "gemv"))
                 : (plan.tile_rows != kFloatLinearCudaWgmmaRows
                        ? "mma.sync"
                        : (!plan.warp_specialised ? "wgmma"
                           : o.ws_cols.size() > 1 || cols != kFloatLinearCudaWgmmaCols
                               ? ws_name
                               : "wgmma-ws")));
        std::printf(
            "%-10s %5ld %5ld %2ld %4s %5ld %-8s %4ld %6ld %10.2f %9.2f %9.2f %8.1f %7.0f %9.2f "
            "%6.2f\n",
            s.name, static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(s.groups),
            s.w_f32 ? "f32" : "bf16", static_cast<long>(m), shown.c_str(),
            static_cast<long>(plan.tile_rows), static_cast<long>(plan.splits), us, bytes / 1e6,
            flops / 1e9, flops / us / 1e6, bytes / us / 1e3, roof_us, roof_us / us);
      }
    }
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
    const double copy_us = MedianEventMicros(
        o.warmup, o.iters,
        [&] {
          CUDA_CHECK(
              cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, stream));
        },
        stream);
    copy_gbps = 2.0 * copy_bytes / copy_us / 1e3;
  }
  // The compute roof: the dense bf16 tensor rate measured in this run, the larger of cuBLAS's
  // GEMM and the mma.sync peak (until session 51 the mma.sync peak alone, ~28 % below cuBLAS's,
  // so documented runs passed --peak-tflops 893).
  const attn_bench::Bf16TensorRates rates = attn_bench::MeasureBf16TensorRates();
  const double tc_tflops = o.peak_tflops > 0 ? o.peak_tflops : rates.dense;
  std::printf(
      "roofs: d2d copy %.0f GB/s (read + write), bf16 mma.sync %.0f / cuBLAS %.0f TFLOP/s "
      "measured (%s), compute roof %.0f TFLOP/s\n",
      copy_gbps, rates.mma, rates.cublas, rates.cublas_source.c_str(), tc_tflops);
  std::printf("x bf16 [M, G, K] rows, y [M, G, N]; fp32 weights cost 3 mma per product\n\n");
  std::printf("%-10s %5s %5s %2s %4s %5s %-8s %4s %6s %10s %9s %9s %8s %7s %9s %6s\n", "shape", "N",
              "K", "G", "w", "M", "kernel", "tile", "splits", "median_us", "MB", "GFLOP", "TFLOP/s",
              "GB/s", "roof_us", "ratio");
  for (const Shape& s : kShapes) {
    if (!o.shapes.empty() &&
        std::find(o.shapes.begin(), o.shapes.end(), std::string(s.name)) == o.shapes.end()) {
      continue;
    }
    RunShape(o, s, copy_gbps, tc_tflops, stream);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
