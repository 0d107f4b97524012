// The combine: per token an fp32 sum from 0 of its routed experts' bf16 outputs in ascending
// expert id, then the shared expert's output, one RNE cast (MoeCpu's operations). Device code of
// cuda/moe_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_combine_row.cuh"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

// A block per token (grid-stride), 8 columns per thread (a single step for D <= 8192). The
// token's slot rows are ordered by expert id in parallel (rank j = number of smaller ids; the ids
// of a token are distinct), and a thread issues its row loads (up to kCombineBatch) before the
// first add, so a token costs about one L2 round trip instead of top_k.
__global__ void __launch_bounds__(kCombineMaxThreads) MoeCombineKernel(MoeCombineParams p) {
  __shared__ int32_t ids[kMoeCudaMaxTopK];
  __shared__ int32_t slot[kMoeCudaMaxTopK];
  __shared__ int32_t rows[kMoeCudaMaxTopK];
  const int64_t k = p.top_k;
  for (int64_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    CombineOrderSlots(p, t, ids, slot, rows);
    __syncthreads();
    for (int64_t c = int64_t{threadIdx.x} * 8; c < p.dim; c += int64_t{blockDim.x} * 8) {
      const uint4 sh = LoadSharedY(p, t, c);  // issued before the routed rows' loads
      const HcPostCols hp = LoadHcPost(p, t, c);
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      // Up to kCombineBatch row loads in flight, then their adds in order.
      for (int64_t j0 = 0; j0 < k; j0 += kCombineBatch) {
        uint4 v[kCombineBatch];
#pragma unroll
        for (int j = 0; j < kCombineBatch; ++j) {
          v[j] = j0 + j < k
                     ? *reinterpret_cast<const uint4*>(p.ye + int64_t{rows[j0 + j]} * p.dim + c)
                     : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < kCombineBatch; ++j) {
          if (j0 + j < k) AddBf16x8(acc, v[j]);
        }
      }
      StoreCombined(p, t, c, acc, sh, hp);
    }
    __syncthreads();  // ids / rows are rewritten for the next token
  }
}

}  // namespace flashserve::kernels::moe_device
