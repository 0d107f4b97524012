// The combine: per token an fp32 sum from 0 of its routed experts' bf16 outputs in ascending
// expert id, then the shared expert's output, one RNE cast (MoeCpu's operations). Device code of
// cuda/moe_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kCombineThreads = 128;

__device__ __forceinline__ void AddBf16x8(float (&acc)[8], const uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[2 * i] = exact::AddRn(acc[2 * i], exact::Bf16ToF32(w[i] & 0xFFFFu));
    acc[2 * i + 1] = exact::AddRn(acc[2 * i + 1], exact::Bf16ToF32(w[i] >> 16));
  }
}

// A block per token (grid-stride), 8 columns per thread and step.
__global__ void __launch_bounds__(kCombineThreads) MoeCombineKernel(MoeCombineParams p) {
  __shared__ int32_t rows[kMoeCudaMaxTopK];
  const int64_t k = p.top_k;
  for (int64_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    if (threadIdx.x == 0) {
      // The token's slot rows sorted by expert id (insertion sort; k is small, ids distinct).
      int32_t ids[kMoeCudaMaxTopK];
      for (int64_t j = 0; j < k; ++j) {
        const int32_t id = p.expert_ids[t * k + j];
        const int32_t row = p.token_slot[t * k + j];
        int64_t at = j;
        while (at > 0 && ids[at - 1] > id) {
          ids[at] = ids[at - 1];
          rows[at] = rows[at - 1];
          --at;
        }
        ids[at] = id;
        rows[at] = row;
      }
    }
    __syncthreads();
    for (int64_t c = int64_t{threadIdx.x} * 8; c < p.dim; c += kCombineThreads * 8) {
      float acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        AddBf16x8(acc, *reinterpret_cast<const uint4*>(p.ye + int64_t{rows[j]} * p.dim + c));
      }
      if (p.shared_y != nullptr) {
        AddBf16x8(acc, *reinterpret_cast<const uint4*>(p.shared_y + t * p.shared_y_stride + c));
      }
      uint32_t out[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[i] = exact::F32ToBf16(acc[2 * i]) | (exact::F32ToBf16(acc[2 * i + 1]) << 16);
      }
      *reinterpret_cast<uint4*>(p.y + t * p.y_stride + c) =
          make_uint4(out[0], out[1], out[2], out[3]);
    }
    __syncthreads();  // rows is rewritten for the next token
  }
}

}  // namespace flashserve::kernels::moe_device
