// The combine kernels' shared pieces (MoeCombineKernel in cuda/moe_combine.cuh, its TMA-ring form
// in cuda/moe_ring_combine.cuh): the block shape and the bf16 row adds. Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"

namespace flashserve::kernels::moe_device {

inline constexpr int kCombineMaxThreads = 1024;
inline constexpr int kCombineBatch = 8;  // row loads in flight per thread

// Threads per combine block: one per 8 columns (whole warps), at most kCombineMaxThreads.
__host__ __device__ inline int CombineThreads(int64_t dim) {
  const int64_t t = (dim / 8 + 31) / 32 * 32;
  return static_cast<int>(t < kCombineMaxThreads ? t : kCombineMaxThreads);
}

__device__ __forceinline__ void AddBf16x8(float (&acc)[8], const uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[2 * i] = exact::AddRn(acc[2 * i], exact::Bf16ToF32(w[i] & 0xFFFFu));
    acc[2 * i + 1] = exact::AddRn(acc[2 * i + 1], exact::Bf16ToF32(w[i] >> 16));
  }
}

}  // namespace flashserve::kernels::moe_device
