// The shared expert's SwiGLU kernel (cuda/moe_shared_launch.cu only): MoeSwiGluRow without a
// routing weight on the bf16 outputs of the w1 / w3 GEMMs, with moe_device.cuh's operations (the
// routed experts' SwiGLU, correctly rounded exp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_shared_cuda.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kSharedSwiGluThreads = 256;

// One element per thread, grid-stride over m·inter. The bf16 inputs are exact fp32 values, so
// SwiGluBf16's rounding of its inputs to bf16 changes nothing but a NaN's payload (the output is
// NaN then either way).
__global__ void __launch_bounds__(kSharedSwiGluThreads)
    MoeSharedSwiGluKernel(const MoeSharedSwiGluParams p) {
  cuda_common::PdlLaunchDependents();  // the w2 stream Linear after it may start loading
  const int64_t total = p.m * p.inter;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.inter, c = i - r * p.inter;
    const float g = exact::Bf16ToF32(p.g[r * p.g_stride + c]);
    const float u = exact::Bf16ToF32(p.u[r * p.u_stride + c]);
    p.a[r * p.a_stride + c] = static_cast<uint16_t>(SwiGluBf16(g, u, p.swiglu_limit, 0.f, false));
  }
}

}  // namespace flashserve::kernels::moe_device
