// The decode-size front of the MoE layer in one block: route, counting sort (+ tile list) and,
// when one pass of the block covers it, the FP8 quantise + gather. Device code of
// cuda/moe_launch.cu only.
//
// The same bytes as LaunchMoeRoute followed by LaunchMoePermute (tested): the block computes all
// m·E scores (RouteScore, a thread each, into shared memory), then each token's top-k is chosen by
// RouteTokenWarp (the warp-per-token kernel's selection), which also counts the chosen experts into
// a shared-memory histogram and copies ids and weights into a shared slot table; the offsets and
// the tile list come from SortOffsetsAndTiles (the one-block sort's phase 3, same code); a slot's
// row is its expert's offset + the number of earlier slots ((token, rank) order) of the same
// expert: the stable order MoeCpu and both sorts write. At one token the separate kernels cost
// ~10 µs each (a block argmax with a barrier per pass; the sort's per-warp histograms and scans
// over all E experts, README "Where one token's 88 µs go").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_permute.cuh"
#include "kernels/moe/cuda/moe_route.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kFrontMaxSlots = static_cast<int>(kMoeCudaFrontMaxTokens * kMoeCudaMaxTopK);
static_assert(kFrontMaxSlots <= kSortThreads, "one slot per thread in the scatter");

// Dynamic shared memory: the unbiased and the biased score of every (token, expert); at most
// 64 KB (8 tokens × 1024 experts).
__host__ __device__ inline size_t FrontSmemBytes(int64_t m, int64_t n_experts) {
  return static_cast<size_t>(8 * m * n_experts);
}

template <int kPerLane>
__global__ void __launch_bounds__(kSortThreads)
    MoeFrontKernel(MoeRouteParams rp, MoePermuteParams p, bool gather) {
  extern __shared__ __align__(16) float front_scores[];  // [m][E] unbiased, then [m][E] biased
  __shared__ int32_t first[kMoeCudaMaxExperts];          // counts, then offsets
  __shared__ int32_t slot_id[kFrontMaxSlots];            // (token, rank) order
  __shared__ float slot_w[kFrontMaxSlots];
  __shared__ int32_t red[2 * kSortWarps];
  const int64_t n = p.n_experts, k = p.top_k, slots = p.m * k;
  float* score = front_scores;
  float* biased = front_scores + p.m * n;

  // Every (token, expert) score at once, a thread each (the block route's parallelism: a warp
  // walking its token's E/32 experts per lane would chain their exp / log1p).
  const float temp = rp.options.gate_temp;
  for (int64_t u = threadIdx.x; u < p.m * n; u += kSortThreads) {
    const int64_t t = u / n, e = u % n;
    const bool image = rp.is_image != nullptr && rp.is_image[t] != 0;
    const float* bias = image ? rp.bias_vl : rp.bias;
    RouteScore(rp.logits[u], temp, bias != nullptr, bias != nullptr ? bias[e] : 0.f, score[u],
               biased[u]);
  }
  for (int64_t e = threadIdx.x; e < n; e += kSortThreads) first[e] = 0;
  __syncthreads();
  for (int64_t t = threadIdx.x / 32; t < p.m; t += kSortWarps) {
    RouteTokenWarp<kPerLane, true>(rp, t, first, slot_id, slot_w, score + t * n, biased + t * n);
  }
  __syncthreads();
  SortOffsetsAndTiles(p, first, red);  // ends with a barrier: `first` holds the offsets
  for (int64_t i = threadIdx.x; i < slots; i += kSortThreads) {
    const int32_t e = slot_id[i];  // always in range: the route chose it
    int32_t before = 0;
    for (int64_t j = 0; j < i; ++j) before += slot_id[j] == e ? 1 : 0;
    const int32_t pos = first[e] + before;
    p.slot_token[pos] = static_cast<int32_t>(i / k);
    p.slot_weight[pos] = slot_w[i];
    p.token_slot[i] = pos;
  }
  if (!gather) return;
  __syncthreads();  // token_slot is complete (global writes of this block are visible after it)
  const int64_t nb = p.dim / 32;
  for (int64_t u = threadIdx.x; u < p.m * nb; u += kSortThreads) {
    QuantGatherBlock(p, u / nb, u % nb);
  }
}

}  // namespace flashserve::kernels::moe_device
