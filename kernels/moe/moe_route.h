// The router and SwiGLU row of the MoE layer (MoeOptions, MoeRouteParams, MoeRouteCpu,
// MoeSwiGluRow), split from moe.h so that CUDA translation units (C++17, no PreparedLinear) can
// share the options and the routing params. The numerics are documented in moe.h.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace flashserve {
class ThreadPool;
}

namespace flashserve::kernels {

struct MoeOptions {
  int64_t top_k = 6;          // experts per token, 1..n_experts (V4.1: 6; tiny fixture: 2)
  float route_scale = 1.5f;   // × on the routing weights
  float swiglu_limit = 10.f;  // <= 0 disables the clamps
  float gate_temp = 1.f;      // logits are divided by it (must be > 0)
  bool norm_topk_prob = true;
};

// Router post-processing from precomputed logits (x · W^T in fp32, before / gate_temp).
struct MoeRouteParams {
  MoeOptions options;
  int64_t m = 0;
  int64_t n_experts = 0;
  const float* logits = nullptr;      // [m, n_experts], dense
  const float* bias = nullptr;        // [n_experts] or null (= 0)
  const float* bias_vl = nullptr;     // [n_experts]; required if any is_image[t] != 0
  const uint8_t* is_image = nullptr;  // [m] or null (= all text)
  int32_t* expert_ids = nullptr;      // out [m, top_k], rank order
  float* expert_weights = nullptr;    // out [m, top_k], same order
};

// Selection and weights as documented in moe.h, one token at a time (O(m · E · k)).
// Errors: InvalidArgumentError naming the param (null pointers, m < 0, top_k out of range,
// gate_temp <= 0, an image token without bias_vl); nothing is written then.
// Thread safety: pure function of its inputs; rows are split over `pool` (null = caller only).
absl::Status MoeRouteCpu(const MoeRouteParams& p, ThreadPool* pool);

// One SwiGLU row: out[i] = bf16(w · silu(g') · u') with g', u' the clamped upcasts of g[i],
// u[i] (see moe.h); `weight` null = no multiply (shared expert). No allocation, thread-safe.
void MoeSwiGluRow(const uint16_t* g, const uint16_t* u, int64_t n, float swiglu_limit,
                  const float* weight, uint16_t* out);

}  // namespace flashserve::kernels
