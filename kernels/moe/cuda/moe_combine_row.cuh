// The combine kernels' shared pieces (MoeCombineKernel in cuda/moe_combine.cuh, its TMA-ring form
// in cuda/moe_ring_combine.cuh): the block shape and the bf16 row adds. Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"

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

// Token t's routed slots in ascending expert id: threads < k load its ids and slot rows into
// `ids` / `slot` and write rows[rank] = slot (rank = the number of smaller ids; equal ids, not
// produced by the router, keep rank order). Returns the thread's rank (-1 past k). Two barriers.
__device__ __forceinline__ int CombineOrderSlots(const MoeCombineParams& p, int64_t t, int32_t* ids,
                                                 int32_t* slot, int32_t* rows) {
  const int64_t k = p.top_k;
  if (threadIdx.x < k) {
    ids[threadIdx.x] = p.expert_ids[t * k + threadIdx.x];
    slot[threadIdx.x] = p.token_slot[t * k + threadIdx.x];
  }
  __syncthreads();
  int rank = -1;
  if (threadIdx.x < k) {
    const int32_t id = ids[threadIdx.x];
    rank = 0;
    for (int64_t j = 0; j < k; ++j) {
      rank += ids[j] < id || (ids[j] == id && j < threadIdx.x) ? 1 : 0;
    }
    rows[rank] = slot[threadIdx.x];
  }
  return rank;
}

// The shared expert's output at y[t, c .. c + 7] (zeros without one).
__device__ __forceinline__ uint4 LoadSharedY(const MoeCombineParams& p, int64_t t, int64_t c) {
  return p.shared_y != nullptr
             ? *reinterpret_cast<const uint4*>(p.shared_y + t * p.shared_y_stride + c)
             : make_uint4(0, 0, 0, 0);
}

// y[t, c .. c + 7] = bf16(acc + the shared expert's output `sh` when there is one).
__device__ __forceinline__ void StoreCombined(const MoeCombineParams& p, int64_t t, int64_t c,
                                              float (&acc)[8], const uint4 sh) {
  if (p.shared_y != nullptr) AddBf16x8(acc, sh);
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[i] = exact::F32x2ToBf16x2(acc[2 * i], acc[2 * i + 1]);
  }
  *reinterpret_cast<uint4*>(p.y + t * p.y_stride + c) = make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace flashserve::kernels::moe_device
