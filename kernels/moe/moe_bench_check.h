// bench_moe's correctness check (split out of moe_bench.cc by responsibility): MoeCuda against
// MoeCpu in exact mode on gate-derived logits without near ties, only the touched experts built
// on the host, with the GPU layer test's tolerances (moe_gpu_layer_test.cc).
#pragma once

#include <cstdint>

#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {

// MoeCuda on `w` (the experts of `spec`, options `o`) for m tokens with each expert GEMM forced,
// and with the 16-row streaming up GEMM followed by the RS down GEMM (MoeCudaParams::down_gemm),
// against one MoeCpu run; with the shared expert when `shared` is given (host weights for MoeCpu,
// `dev_shared` for MoeCuda). Prints one line per run; true when all are within the tolerances.
bool CheckMoeCudaAgainstCpu(const moe_test::LayerSpec& spec, const MoeOptions& o,
                            const MoeCudaWeights& w, int64_t m,
                            const moe_test::SharedExpert* shared = nullptr,
                            const MoeSharedExpertWeights* dev_shared = nullptr);

}  // namespace flashserve::kernels
