// The shared expert's SwiGLU kernel (cuda/moe_shared_launch.cu only): MoeSwiGluRow without a
// routing weight on the bf16 outputs of the w1 / w3 GEMMs, with moe_device.cuh's operations (the
// routed experts' SwiGLU, correctly rounded exp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/quant/cuda/quant_kernels.cuh"

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

// The qdq form (MoeSharedSwiGluParams::qdq): a unit of 8 consecutive values per thread (16-byte
// loads of g and u, one 16-byte store), written as the FP8 activation QDQ of the SwiGLU values
// (quant::device::QdqFp8UnitOfQuad: the 4 aligned lanes of a 32-value block together). Grid-stride
// over units; rows hold whole blocks (inter % 32 == 0) and every stride is a multiple of 4 units,
// so a block's 4 lanes are in or out together.
__global__ void __launch_bounds__(kSharedSwiGluThreads)
    MoeSharedSwiGluQdqKernel(const MoeSharedSwiGluParams p) {
  cuda_common::PdlLaunchDependents();  // the w2 Linear after it may start loading
  const int64_t row_units = p.inter / 8;
  const int64_t total = p.m * row_units;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / row_units, c = (i - r * row_units) * 8;
    const uint4 gv = *reinterpret_cast<const uint4*>(p.g + r * p.g_stride + c);
    const uint4 uv = *reinterpret_cast<const uint4*>(p.u + r * p.u_stride + c);
    const uint32_t gw[4] = {gv.x, gv.y, gv.z, gv.w};
    const uint32_t uw[4] = {uv.x, uv.y, uv.z, uv.w};
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = SwiGluBf16(exact::Bf16ToF32(gw[j] & 0xFFFFu),
                                     exact::Bf16ToF32(uw[j] & 0xFFFFu), p.swiglu_limit, 0.f, false);
      const uint32_t hi = SwiGluBf16(exact::Bf16ToF32(gw[j] >> 16), exact::Bf16ToF32(uw[j] >> 16),
                                     p.swiglu_limit, 0.f, false);
      w[j] = (lo & 0xFFFFu) | (hi << 16);
    }
    uint32_t q[4];
    quant::device::QdqFp8UnitOfQuad(w, q);
    *reinterpret_cast<uint4*>(p.a + r * p.a_stride + c) = make_uint4(q[0], q[1], q[2], q[3]);
  }
}

}  // namespace flashserve::kernels::moe_device
