// Router post-processing on the device (MoeRouteCpu's recipe) in two shapes with the same bytes
// out: a block per token and a thread per expert (small m), a warp per token with ceil(E/32)
// experts per lane in registers (large m). Device code of cuda/moe_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_route.h"

namespace flashserve::kernels::moe_device {

// Threads per routing block: the expert count rounded up to whole warps (E <= 1024).
__host__ __device__ inline int RouteThreads(int64_t n_experts) {
  return static_cast<int>((n_experts + 31) / 32 * 32);
}

// Lane-wise argmax merge: the higher score wins, the lower id on equal scores (-1 = none).
__device__ __forceinline__ void MergeBest(int32_t& best, float& score, int32_t other,
                                          float other_score) {
  if (other >= 0 && (best < 0 || other_score > score || (other_score == score && other < best))) {
    best = other;
    score = other_score;
  }
}

// Expert e's score of one token: PyTorch softplus (threshold 20) of logit / temp, then sqrt (the
// unbiased score, which weights the expert), and that + bias[e] (which ranks it); the same fp32
// operations as the CPU body, in one place for every kernel shape.
// `bias_e` is bias[e] when has_bias (loaded by the caller with its other loads).
__device__ __forceinline__ void RouteScore(float logit, float temp, bool has_bias, float bias_e,
                                           float& score, float& biased) {
  const float v = exact::DivRn(logit, temp);
  const float sp = v > 20.f ? v : Log1pF32(ExpF32(v));
  score = exact::SqrtRn(sp);
  biased = has_bias ? exact::AddRn(score, bias_e) : score;
}

// One token per block (grid-stride), expert e on thread e: every score is computed at once (the
// old warp-per-token loop paid a dependent global load per 32 experts), then top_k passes of a
// block argmax: a warp shuffle merge, one warp winner per warp in shared memory (double-buffered
// by pass parity, so one barrier per pass), and every thread merges the warp winners in
// ascending warp order (the same answer everywhere). Lower id wins ties, as the CPU's
// first-then-strictly-greater walk.
__global__ void __launch_bounds__(kMoeCudaMaxExperts)
    MoeRouteKernel(MoeRouteParams p, int32_t* counts) {
  __shared__ int32_t win_id[2][kMoeCudaMaxExperts / 32];
  __shared__ float win_score[2][kMoeCudaMaxExperts / 32];
  __shared__ int32_t chosen[kMoeCudaMaxTopK];
  __shared__ float chosen_s[kMoeCudaMaxTopK];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  const int64_t n = p.n_experts;
  const int64_t k = p.options.top_k;
  const int e = threadIdx.x;
  const bool has_expert = e < n;
  const float temp = p.options.gate_temp;

  for (int64_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    const bool image = p.is_image != nullptr && p.is_image[t] != 0;
    const float* bias = image ? p.bias_vl : p.bias;
    float sc = 0.f, biased = 0.f;
    if (has_expert) {
      RouteScore(p.logits[t * n + e], temp, bias != nullptr, bias != nullptr ? bias[e] : 0.f, sc,
                 biased);
    }
    bool taken = !has_expert;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = taken ? -1 : e;
      float score = biased;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        const int32_t ob = __shfl_xor_sync(0xFFFFFFFFu, best, off);
        const float os = __shfl_xor_sync(0xFFFFFFFFu, score, off);
        MergeBest(best, score, ob, os);
      }
      const int buf = static_cast<int>(j % 2);
      if (lane == 0) {
        win_id[buf][warp] = best;
        win_score[buf][warp] = score;
      }
      __syncthreads();
      best = -1;
      score = 0.f;
      for (int w = 0; w < warps; ++w) MergeBest(best, score, win_id[buf][w], win_score[buf][w]);
      // A winner always exists (k <= E untaken candidates; MergeBest takes the first one it
      // sees even when NaN scores defeat the comparisons).
      if (e == best) {
        taken = true;
        chosen[j] = e;
        chosen_s[j] = sc;
      }
    }
    __syncthreads();  // chosen is complete
    if (threadIdx.x == 0) {
      int32_t* ids = p.expert_ids + t * k;
      float* weights = p.expert_weights + t * k;
      float sum = 0.f;
      for (int64_t j = 0; j < k; ++j) sum = exact::AddRn(sum, chosen_s[j]);
      const bool norm = p.options.norm_topk_prob && k > 1;
      const float denom = exact::AddRn(sum, 1e-20f);
      for (int64_t j = 0; j < k; ++j) {
        float w = chosen_s[j];
        if (norm) w = exact::DivRn(w, denom);
        weights[j] = exact::MulRn(w, p.options.route_scale);
        ids[j] = chosen[j];
        if (counts != nullptr) atomicAdd(counts + chosen[j], 1);
      }
    }
    __syncthreads();  // chosen and the winner buffers are rewritten for the next token
  }
}

// ---- A warp per token (large m) ---------------------------------------------------------------
inline constexpr int kRouteWarpThreads = 128;  // 4 tokens per block: small m still spreads wide

// Experts per lane of the warp-per-token kernel's instantiation for E experts (E <= 1024).
__host__ __device__ inline int RouteExpertsPerLane(int64_t n_experts) {
  return n_experts <= 32 ? 1 : n_experts <= 128 ? 4 : n_experts <= 384 ? 12 : 32;
}

// The order of non-NaN floats as unsigned keys: a > b ⇔ RouteKey(a) > RouteKey(b), a == b ⇔
// equal keys (-0 and +0 one key); never 0 (-Inf is 0x007FFFFF), so 0 can mean "no candidate".
__device__ __forceinline__ uint32_t RouteKey(float f) {
  uint32_t u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

// RouteTokenWarp's selection by the shuffle merge (every token before session 77; a token with
// a NaN biased score since): top_k passes of each lane's walk over its untaken experts in
// ascending id, a MergeBest tree over the lanes and lane 0's answer broadcast. Lane j gets pass
// j's id and unbiased score.
template <int kPerLane>
__device__ __forceinline__ void RouteSelectByShuffle(int64_t k, int lane, const float* sc,
                                                     const float* biased, uint32_t taken,
                                                     int32_t& my_id, float& my_s) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float score = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (((taken >> i) & 1u) == 0u && (best < 0 || biased[i] > score)) {
        best = lane + 32 * i;
        score = biased[i];
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const int32_t ob = __shfl_xor_sync(0xFFFFFFFFu, best, off);
      const float os = __shfl_xor_sync(0xFFFFFFFFu, score, off);
      MergeBest(best, score, ob, os);
    }
    // A winner always exists (k <= E untaken candidates; a lane with an untaken expert always
    // proposes one, and MergeBest keeps a proposal even when NaN defeats the comparisons).
    best = __shfl_sync(0xFFFFFFFFu, best, 0);
    const int owner = best % 32, reg = best / 32;
    float win_s = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) win_s = i == reg ? sc[i] : win_s;
    win_s = __shfl_sync(0xFFFFFFFFu, win_s, owner);
    if (lane == owner) taken |= 1u << reg;
    if (lane == j) {
      my_id = best;
      my_s = win_s;
    }
  }
}

// RouteTokenWarp's outputs: the rank-order sum, normalisation and scale of the lanes' scores
// (the block kernel's operations in its order), written by lanes j < top_k.
__device__ __forceinline__ void RouteWriteToken(const MoeRouteParams& p, int64_t t, int64_t k,
                                                int lane, int32_t my_id, float my_s,
                                                int32_t* counts, int32_t* ids_copy,
                                                float* weights_copy) {
  float sum = 0.f;
  for (int64_t j = 0; j < k; ++j) {
    sum = exact::AddRn(sum, __shfl_sync(0xFFFFFFFFu, my_s, static_cast<int>(j)));
  }
  if (lane < k) {
    const bool norm = p.options.norm_topk_prob && k > 1;
    const float denom = exact::AddRn(sum, 1e-20f);
    float w = my_s;
    if (norm) w = exact::DivRn(w, denom);
    w = exact::MulRn(w, p.options.route_scale);
    p.expert_weights[t * k + lane] = w;
    p.expert_ids[t * k + lane] = my_id;
    if (counts != nullptr) atomicAdd(counts + my_id, 1);
    if (ids_copy != nullptr) {
      ids_copy[t * k + lane] = my_id;
      weights_copy[t * k + lane] = w;
    }
  }
}

// Token t on the calling warp, expert e = lane + 32·i in register i of its lane: the scores are
// RouteScore's (computed here, or with kGiven read from given_score / given_biased, the token's
// rows that a whole block computed in parallel: RouteScoresBlock), then top_k passes of a warp
// argmax with no barrier: each lane walks its untaken experts in ascending id (first, then
// strictly greater: the lane's lowest id wins its ties), a shuffle merge of the lane winners
// (MergeBest: higher score, lower id on equal scores), and lane 0's answer is broadcast so every
// lane agrees even when NaN scores make the merge order-dependent. For non-NaN scores the winner
// is the unique (highest biased score, lowest id), as in the block kernel and MoeRouteCpu. Lane j
// keeps pass j's unbiased score; the rank-order sum, normalisation and scale are the block
// kernel's operations in its order. Lane j < top_k writes rank j's id and weight, adds 1 to
// counts[id] (optional; global or shared) and, when given, copies both to ids_copy / weights_copy
// at t·top_k + j (the fused front kernel's shared-memory slot table).
// `redux` (session 77): when no biased score of the token is NaN, each pass is two warp
// reductions instead of the shuffle merge — the maximum of the lanes' best keys (RouteKey: the
// order of the scores, -0 and +0 one key), then the minimum id among the lanes holding it — and
// each lane's best is a tree over its registers (a lower register wins its ties): the same
// winner (the highest biased score, the lowest id among equal ones), ~5 dependent steps per pass
// instead of ~15. A token with a NaN takes the shuffle merge (whose broadcast makes the lanes
// agree), as does every token with redux false (A/B: MoeCudaParams::route_redux).
template <int kPerLane, bool kGiven = false>
__device__ __forceinline__ void RouteTokenWarp(const MoeRouteParams& p, int64_t t, int32_t* counts,
                                               int32_t* ids_copy, float* weights_copy,
                                               const float* given_score = nullptr,
                                               const float* given_biased = nullptr,
                                               bool redux = true) {
  const int lane = threadIdx.x % 32;
  const int64_t n = p.n_experts;
  const int64_t k = p.options.top_k;
  float sc[kPerLane], biased[kPerLane];
  uint32_t taken = 0;  // bit i: expert lane + 32·i chosen or absent
  if constexpr (kGiven) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      sc[i] = e < n ? given_score[e] : 0.f;
      biased[i] = e < n ? given_biased[e] : 0.f;
      if (e >= n) taken |= 1u << i;
    }
  } else {
    const float temp = p.options.gate_temp;
    const bool image = p.is_image != nullptr && p.is_image[t] != 0;
    const float* bias = image ? p.bias_vl : p.bias;
    const float* row = p.logits + t * n;
    // All loads first (one memory round trip), then the scores.
    float logit[kPerLane], bv[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      logit[i] = e < n ? row[e] : 0.f;
      bv[i] = bias != nullptr && e < n ? bias[e] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      sc[i] = 0.f;
      biased[i] = 0.f;
      if (e < n) {
        RouteScore(logit[i], temp, bias != nullptr, bv[i], sc[i], biased[i]);
      } else {
        taken |= 1u << i;
      }
    }
  }
  int32_t my_id = 0;
  float my_s = 0.f;
  bool nan = false;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) nan |= ((taken >> i) & 1u) == 0u && isnan(biased[i]);
  if (redux && !__any_sync(0xFFFFFFFFu, nan)) {
    uint32_t key[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      key[i] = ((taken >> i) & 1u) != 0u ? 0u : RouteKey(biased[i]);
    for (int64_t j = 0; j < k; ++j) {
      // The lane's best untaken expert: a tree whose left operand always holds the lower
      // registers, so a lower register (a lower id) keeps its ties; taken experts have key 0,
      // below every score's key.
      uint32_t bk[kPerLane];
      int bi[kPerLane];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) bk[i] = key[i], bi[i] = i;
#pragma unroll
      for (int s = 1; s < kPerLane; s *= 2) {
#pragma unroll
        for (int i = 0; i + s < kPerLane; i += 2 * s) {
          if (bk[i + s] > bk[i]) bk[i] = bk[i + s], bi[i] = bi[i + s];
        }
      }
      const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, bk[0]);
      // A winner always exists (k <= E untaken candidates), so top is a score's key, not 0.
      const int32_t best = static_cast<int32_t>(__reduce_min_sync(
          0xFFFFFFFFu, bk[0] == top ? static_cast<uint32_t>(lane + 32 * bi[0]) : 0xFFFFFFFFu));
      const int owner = best % 32, reg = best / 32;
      float win_s = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        win_s = i == reg ? sc[i] : win_s;
        if (lane == owner && i == reg) key[i] = 0u;
      }
      win_s = __shfl_sync(0xFFFFFFFFu, win_s, owner);
      if (lane == j) {
        my_id = best;
        my_s = win_s;
      }
    }
  } else {
    RouteSelectByShuffle<kPerLane>(k, lane, sc, biased, taken, my_id, my_s);
  }
  RouteWriteToken(p, t, k, lane, my_id, my_s, counts, ids_copy, weights_copy);
}

// One token per warp (grid-stride): RouteTokenWarp.
template <int kPerLane>
__global__ void __launch_bounds__(kRouteWarpThreads)
    MoeRouteWarpKernel(MoeRouteParams p, int32_t* counts) {
  const int64_t warps_per_block = kRouteWarpThreads / 32;
  const int64_t stride = int64_t{gridDim.x} * warps_per_block;
  for (int64_t t = int64_t{blockIdx.x} * warps_per_block + threadIdx.x / 32; t < p.m; t += stride) {
    RouteTokenWarp<kPerLane>(p, t, counts, nullptr, nullptr);
  }
}

}  // namespace flashserve::kernels::moe_device
