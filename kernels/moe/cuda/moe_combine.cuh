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
    if (threadIdx.x < k) {
      ids[threadIdx.x] = p.expert_ids[t * k + threadIdx.x];
      slot[threadIdx.x] = p.token_slot[t * k + threadIdx.x];
    }
    __syncthreads();
    if (threadIdx.x < k) {
      const int32_t id = ids[threadIdx.x];
      int rank = 0;
      for (int64_t j = 0; j < k; ++j) {
        // Lower id first; equal ids (not produced by the router) keep rank order.
        rank += ids[j] < id || (ids[j] == id && j < threadIdx.x) ? 1 : 0;
      }
      rows[rank] = slot[threadIdx.x];
    }
    __syncthreads();
    for (int64_t c = int64_t{threadIdx.x} * 8; c < p.dim; c += int64_t{blockDim.x} * 8) {
      uint4 sh = make_uint4(0, 0, 0, 0);
      if (p.shared_y != nullptr) {
        sh = *reinterpret_cast<const uint4*>(p.shared_y + t * p.shared_y_stride + c);
      }
      float acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.f;
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
      if (p.shared_y != nullptr) AddBf16x8(acc, sh);
      uint32_t out[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[i] = exact::F32ToBf16(acc[2 * i]) | (exact::F32ToBf16(acc[2 * i + 1]) << 16);
      }
      *reinterpret_cast<uint4*>(p.y + t * p.y_stride + c) =
          make_uint4(out[0], out[1], out[2], out[3]);
    }
    __syncthreads();  // ids / rows are rewritten for the next token
  }
}

}  // namespace flashserve::kernels::moe_device
