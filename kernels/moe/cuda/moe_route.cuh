// Router post-processing on the device (MoeRouteCpu's recipe): a warp per token. Device code of
// cuda/moe_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_route.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kRouteWarps = 4;

// Dynamic shared memory per warp: 2·E floats, kMoeCudaMaxTopK chosen ids, E taken flags.
__host__ __device__ inline size_t RouteSmemPerWarp(int64_t n_experts) {
  return static_cast<size_t>(8 * n_experts + 4 * kMoeCudaMaxTopK +
                             ((n_experts + 15) & ~int64_t{15}));
}

// Lane-wise argmax merge: the higher score wins, the lower id on equal scores (-1 = none).
__device__ __forceinline__ void MergeBest(int32_t& best, float& score, int32_t other,
                                          float other_score) {
  if (other >= 0 && (best < 0 || other_score > score || (other_score == score && other < best))) {
    best = other;
    score = other_score;
  }
}

__global__ void __launch_bounds__(32 * kRouteWarps)
    MoeRouteKernel(MoeRouteParams p, int32_t* counts) {
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t n = p.n_experts;
  const int64_t k = p.options.top_k;
  const size_t per_warp = RouteSmemPerWarp(n);
  float* s = reinterpret_cast<float*>(route_smem + warp * per_warp);  // unbiased scores [E]
  float* b = s + n;                                                   // biased scores [E]
  int32_t* chosen = reinterpret_cast<int32_t*>(b + n);                // [kMoeCudaMaxTopK]
  unsigned char* taken = reinterpret_cast<unsigned char*>(chosen + kMoeCudaMaxTopK);  // [E]
  const float temp = p.options.gate_temp;

  for (int64_t t = int64_t{blockIdx.x} * kRouteWarps + warp; t < p.m;
       t += int64_t{gridDim.x} * kRouteWarps) {
    const float* logits = p.logits + t * n;
    const bool image = p.is_image != nullptr && p.is_image[t] != 0;
    const float* bias = image ? p.bias_vl : p.bias;
    for (int64_t e = lane; e < n; e += 32) {
      // PyTorch softplus (threshold 20), then sqrt; the same fp32 operations as the CPU body.
      const float v = exact::DivRn(logits[e], temp);
      const float sp = v > 20.f ? v : Log1pF32(ExpF32(v));
      const float sc = exact::SqrtRn(sp);
      s[e] = sc;
      b[e] = bias != nullptr ? exact::AddRn(sc, bias[e]) : sc;
      taken[e] = 0;
    }
    __syncwarp();
    for (int64_t j = 0; j < k; ++j) {
      // Each lane walks its experts in ascending id with the CPU's rule (first untaken, then
      // strictly greater), then the lanes merge with lower-id-wins ties: the CPU's argmax.
      int32_t best = -1;
      float score = 0.f;
      for (int64_t e = lane; e < n; e += 32) {
        if (taken[e] == 0 && (best < 0 || b[e] > score)) {
          best = static_cast<int32_t>(e);
          score = b[e];
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        const int32_t ob = __shfl_xor_sync(0xFFFFFFFFu, best, off);
        const float os = __shfl_xor_sync(0xFFFFFFFFu, score, off);
        MergeBest(best, score, ob, os);
      }
      best = __shfl_sync(0xFFFFFFFFu, best, 0);  // one answer even if NaN scores broke the order
      if (lane == 0) {
        taken[best] = 1;
        chosen[j] = best;
      }
      __syncwarp();
    }
    if (lane == 0) {
      int32_t* ids = p.expert_ids + t * k;
      float* weights = p.expert_weights + t * k;
      float sum = 0.f;
      for (int64_t j = 0; j < k; ++j) sum = exact::AddRn(sum, s[chosen[j]]);
      const bool norm = p.options.norm_topk_prob && k > 1;
      const float denom = exact::AddRn(sum, 1e-20f);
      for (int64_t j = 0; j < k; ++j) {
        float w = s[chosen[j]];
        if (norm) w = exact::DivRn(w, denom);
        weights[j] = exact::MulRn(w, p.options.route_scale);
        ids[j] = chosen[j];
        if (counts != nullptr) atomicAdd(counts + chosen[j], 1);
      }
    }
    __syncwarp();
  }
}

}  // namespace flashserve::kernels::moe_device
