// bench_moe_wgmma_rate: the wgmma issue rate in the register-sourced expert GEMM's shapes, with
// nothing else on the SM (no FP4 decode, no ring, no epilogue), against the dense SS m64n256k16
// rate and cuBLAS in the same run. It says how much of the RS GEMM's time (README.md "CUDA: the
// register-sourced wgmma GEMM") the tensor-core side alone would take.
//
//   bench_moe_wgmma_rate [--groups N] [--iters N]
//
// Per case: median µs of one launch (one CTA of two warpgroups per SM, N commit groups each),
// cycles per wgmma per SM (clock64, both warpgroups' wgmmas counted), TFLOP/s (dense bf16 FLOPs
// of the wgmmas) and the ratio to the SS m64n256k16 row and to cuBLAS.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/moe/moe_wgmma_rate.h"

namespace {

using flashserve::kernels::moe_bench::MeasureWgmmaRate;
using flashserve::kernels::moe_bench::WgmmaRateCase;
using flashserve::kernels::moe_bench::WgmmaRateResult;

int Run(int groups, int iters) {
  std::string source;
  const double cublas = flashserve::kernels::MeasureCublasBf16Tflops(&source);
  std::printf("wgmma issue rate, 2 warpgroups per SM, %d commit groups each, median of %d\n",
              groups, iters);
  std::printf("cuBLAS: %.0f TFLOP/s (%s)\n\n", cublas, source.c_str());
  const std::vector<WgmmaRateCase> cases = {
      {false, 256, 4, false},  // the dense reference: SS m64n256k16
      // SS m64n32k16: the decode attention's S step (kernels/attention: A = Q, 3 KB of shared
      // memory per 16 tensor cycles — does the shared-memory read rate cap it?).
      {false, 32, 4, false},
      {false, 32, 8, false},
      {false, 64, 4, false},
      {false, 64, 8, false},
      {true, 64, 4, false},
      {true, 64, 4, true},
      {true, 64, 8, true},
      {true, 128, 4, false},
      {true, 128, 4, true},
      {true, 128, 8, true},
      // The RS GEMM's narrow tile widths (session 53, its width sets): does a tile of N slot rows
      // cost N / 128 of the n128 cycles?
      {true, 16, 4, false},
      {true, 16, 4, true},
      {true, 32, 4, false},
      {true, 32, 4, true},
      {true, 96, 4, false},
      {true, 96, 4, true},
  };
  std::printf("%-4s %5s %9s %7s %10s %12s %9s %9s %9s\n", "form", "N", "per_group", "touch_a",
              "median_us", "cyc/wgmma", "TFLOP/s", "vs_n256", "vs_cublas");
  double ref = 0;
  for (const WgmmaRateCase& c : cases) {
    const WgmmaRateResult r = MeasureWgmmaRate(c, groups, iters);
    if (ref == 0) ref = r.tflops;
    std::printf("%-4s %5d %9d %7d %10.1f %12.1f %9.1f %9.2f %9.2f\n", c.register_a ? "RS" : "SS",
                c.n, c.per_group, c.touch_a ? 1 : 0, r.micros, r.cycles_per_wgmma, r.tflops,
                r.tflops / ref, cublas > 0 ? r.tflops / cublas : 0.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int groups = 20000, iters = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--groups" || a == "--iters") && i + 1 < argc) {
      const int v = std::atoi(argv[++i]);
      if (v <= 0 || (a == "--groups" && v % 2 != 0)) {
        std::fprintf(stderr, "%s takes a positive count (--groups: even)\n", a.c_str());
        return 2;
      }
      (a == "--groups" ? groups : iters) = v;
    } else {
      std::fprintf(stderr, "usage: bench_moe_wgmma_rate [--groups N] [--iters N]\n");
      return 2;
    }
  }
  if (!flashserve::kernels::CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_moe_wgmma_rate: no CUDA device\n");
    return 1;
  }
  return Run(groups, iters);
}
