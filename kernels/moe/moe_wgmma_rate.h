// The wgmma issue-rate microbenchmark behind bench_moe_wgmma_rate (cuda/moe_wgmma_rate.cu): how
// many cycles one SM spends per wgmma when two warpgroups issue nothing else, in the shapes the
// register-sourced expert GEMM (cuda/moe_wgmma_rs_gemm.cuh) uses. It isolates the tensor-core
// side of that kernel from the FP4 decode and the ring (README.md "CUDA: the register-sourced
// wgmma GEMM"). No CUDA header here.
#pragma once

#include <cstdint>

namespace flashserve::kernels::moe_bench {

struct WgmmaRateCase {
  bool register_a = true;  // RS (A from registers) or SS (A from shared memory)
  int n = 128;             // wgmma N: 16, 32, 64, 96 or 128 (RS; 16 / 32 / 96 at 4 per group),
                           // 32, 64 or 256 (SS)
  int per_group = 4;       // wgmmas per commit group: 4 (one 32-K block of 2 m-blocks) or 8
  bool touch_a = false;    // RS: after each wait, one XOR per register of the next A set
};

struct WgmmaRateResult {
  double micros = 0;            // median kernel time
  double cycles_per_wgmma = 0;  // per SM (both warpgroups' wgmmas counted), from clock64
  double tflops = 0;            // dense bf16 FLOPs of all wgmmas / time
};

// Whether the case is one the kernel is instantiated for.
bool WgmmaRateCaseSupported(const WgmmaRateCase& c);

// One CTA of two warpgroups per SM; each warpgroup runs `groups` commit groups (fence, per_group
// wgmmas alternating over two accumulator sets as m-blocks do, commit, wait_group 1), A sets
// double-buffered as in the RS GEMM. Median of `iters` launches after 2 warm-ups. CUDA errors
// abort.
WgmmaRateResult MeasureWgmmaRate(const WgmmaRateCase& c, int groups, int iters);

}  // namespace flashserve::kernels::moe_bench
