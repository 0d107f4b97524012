// The combine kernels' shared pieces (MoeCombineKernel in cuda/moe_combine.cuh, its TMA-ring form
// in cuda/moe_ring_combine.cuh): the block shape and the bf16 row adds. Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mhc/cuda/mhc_math.cuh"
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

// The fused hc_post's inputs at a thread's 8 columns (MoeCombineParams::hc_post): the four
// streams' residual values and the token's post / comb, loaded beside the shared expert's row,
// before the routed rows' loads (nothing is loaded without hc_post).
struct HcPostCols {
  uint4 r[kMhcStreams];
  float4 post;
  float4 comb[kMhcStreams];  // comb[i]: source i's row (destinations j = x, y, z, w)
};

__device__ __forceinline__ HcPostCols LoadHcPost(const MoeCombineParams& p, int64_t t, int64_t c) {
  HcPostCols h{};
  const MoeHcPost& q = p.hc_post;
  if (q.out == nullptr) return h;
  const uint16_t* res = q.residual + t * q.residual_stride + c;
#pragma unroll
  for (int i = 0; i < kMhcStreams; ++i) h.r[i] = *reinterpret_cast<const uint4*>(res + i * p.dim);
  h.post = *reinterpret_cast<const float4*>(q.post + t * kMhcStreams);
#pragma unroll
  for (int i = 0; i < kMhcStreams; ++i) {
    h.comb[i] = *reinterpret_cast<const float4*>(q.comb + (t * kMhcStreams + i) * kMhcStreams);
  }
  return h;
}

// y[t, c .. c + 7] = bf16(acc + the shared expert's output `sh` when there is one) (when y is
// set), and with hc_post the four new streams at those columns from that bf16 y
// (mhc_device::HcPostValue: LaunchHcPost's operations).
__device__ __forceinline__ void StoreCombined(const MoeCombineParams& p, int64_t t, int64_t c,
                                              float (&acc)[8], const uint4 sh,
                                              const HcPostCols& h) {
  if (p.shared_y != nullptr) AddBf16x8(acc, sh);
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[i] = exact::F32x2ToBf16x2(acc[2 * i], acc[2 * i + 1]);
  }
  if (p.y != nullptr) {
    *reinterpret_cast<uint4*>(p.y + t * p.y_stride + c) =
        make_uint4(out[0], out[1], out[2], out[3]);
  }
  const MoeHcPost& q = p.hc_post;
  if (q.out == nullptr) return;
  float f[8], r[kMhcStreams][8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = exact::Bf16ToF32(out[i] & 0xFFFFu);
    f[2 * i + 1] = exact::Bf16ToF32(out[i] >> 16);
  }
#pragma unroll
  for (int s = 0; s < kMhcStreams; ++s) {
    const uint32_t w[4] = {h.r[s].x, h.r[s].y, h.r[s].z, h.r[s].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r[s][2 * i] = exact::Bf16ToF32(w[i] & 0xFFFFu);
      r[s][2 * i + 1] = exact::Bf16ToF32(w[i] >> 16);
    }
  }
  const float post[kMhcStreams] = {h.post.x, h.post.y, h.post.z, h.post.w};
  const float comb[kMhcStreams][kMhcStreams] = {
      {h.comb[0].x, h.comb[0].y, h.comb[0].z, h.comb[0].w},
      {h.comb[1].x, h.comb[1].y, h.comb[1].z, h.comb[1].w},
      {h.comb[2].x, h.comb[2].y, h.comb[2].z, h.comb[2].w},
      {h.comb[3].x, h.comb[3].y, h.comb[3].z, h.comb[3].w}};
  uint16_t* dst = q.out + t * q.out_stride + c;
#pragma unroll
  for (int j = 0; j < kMhcStreams; ++j) {
    float comb_j[kMhcStreams], v[8];
#pragma unroll
    for (int i = 0; i < kMhcStreams; ++i) comb_j[i] = comb[i][j];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float rk[kMhcStreams];
#pragma unroll
      for (int i = 0; i < kMhcStreams; ++i) rk[i] = r[i][k];
      v[k] = mhc_device::HcPostValue(post[j], comb_j, f[k], rk);
    }
    uint32_t w[4];
    exact::F32x8ToBf16x8(v, w);  // F32ToBf16's bits (LaunchHcPost's StoreBf16)
    *reinterpret_cast<uint4*>(dst + j * p.dim) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace flashserve::kernels::moe_device
