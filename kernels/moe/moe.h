// The MoE layer of DeepSeek-V4.1-Flash on CPU (model spec §4.7, §10 items 1, 3, 8): router,
// routed SwiGLU experts over permuted tokens, shared expert, fp32 accumulation.
//
// Numerics (all fp32 unless stated; see README.md):
// - Router: logits = x · W^T (W the bf16 gate weight used in fp32: a kF32 or kBf16
//   PreparedLinear, fp32 output, no activation quant); v = logits / gate_temp;
//   s = sqrt(softplus(v)) with PyTorch's softplus (beta 1, threshold 20: v > 20 -> v, else
//   log1p(exp(v))). Selection: top-k of (s + bias) — bias_vl instead for tokens flagged image.
//   Ties on equal biased scores: the lower expert id wins (and ranks first). The chosen experts
//   are listed in rank order (biased score descending). Weights: the unbiased s of the chosen
//   experts; if norm_topk_prob and k > 1, each divided by (their sum, in rank order, + 1e-20);
//   then × route_scale.
// - Expert (SwiGLU): g = w1(x), u = w3(x) (bf16 Linear outputs, x act-quantised by LinearCpu),
//   upcast; if swiglu_limit > 0: u clamped to [-limit, limit], g clamped above at limit only;
//   a = silu(g) · u with silu(g) = g / (1 + exp(-g)); routed experts: a = w · a (fp32 routing
//   weight); one cast to bf16; y = w2(a) (bf16). The shared expert skips the multiply (the
//   reference passes weights=None), same clamps.
// - Accumulation: acc (fp32, per token) = 0; routed outputs added in ascending expert id (not
//   rank order); then the shared expert's output; one cast to bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/prepared_linear.h"
#include "kernels/moe/moe_route.h"  // MoeOptions, MoeRouteParams, MoeRouteCpu, MoeSwiGluRow

namespace flashserve::kernels {

// Borrowed weights of one MoE layer; all pointers must outlive the calls using them.
struct MoeWeights {
  int64_t n_experts = 0;                      // E
  const PreparedLinear* gate = nullptr;       // [E, D], kF32 or kBf16, no bias
  const float* gate_bias = nullptr;           // [E] fp32 selection bias, or null (= 0)
  const float* gate_bias_vl = nullptr;        // [E] fp32, for image tokens; null if no vision
  const PreparedLinear* const* w1 = nullptr;  // [E] pointers: [I, D] each
  const PreparedLinear* const* w3 = nullptr;  // [E] pointers: [I, D] each
  const PreparedLinear* const* w2 = nullptr;  // [E] pointers: [D, I] each
  // Shared expert ([Is, D], [Is, D], [D, Is]); all three null = no shared expert.
  const PreparedLinear* shared_w1 = nullptr;
  const PreparedLinear* shared_w3 = nullptr;
  const PreparedLinear* shared_w2 = nullptr;
};

struct MoeParams {
  const MoeWeights* weights = nullptr;
  MoeOptions options;
  int64_t m = 0;                        // tokens; 0 is a no-op
  const uint16_t* x = nullptr;          // bf16 [m, D], row r at x + r * x_stride
  int64_t x_stride = 0;                 // elements, >= D
  const uint8_t* is_image = nullptr;    // [m] or null: nonzero selects with bias_vl
  uint16_t* y = nullptr;                // bf16 [m, D] out; must not overlap x or the workspace
  int64_t y_stride = 0;                 // elements, >= D
  int32_t* expert_ids = nullptr;        // optional out [m, top_k] (rank order)
  float* expert_weights = nullptr;      // optional out [m, top_k]
  LinearMode mode = LinearMode::kFast;  // passed to every Linear
  void* workspace = nullptr;            // >= MoeWorkspaceBytes(...) bytes, caller-owned
  size_t workspace_bytes = 0;
};

// Workspace bytes MoeCpu needs for up to `max_tokens` tokens with this top_k, mode and pool
// (pass the same pool, or one of the same size, to MoeCpu). Monotone in max_tokens. Roughly
// 4·M·E (logits) + 16·M·k (routing) + 4·M·D (accumulator) + 2·M·(2·D + 2·I) (gathered rows,
// g/u, expert output) + the largest LinearWorkspaceBytes of the layer's Linears for M rows.
// Errors: InvalidArgumentError when the weights are inconsistent (see MoeCpu) or top_k / max_tokens
// are out of range.
absl::StatusOr<size_t> MoeWorkspaceBytes(const MoeWeights& weights, int64_t max_tokens,
                                         int64_t top_k, LinearMode mode, const ThreadPool* pool);

// y = MoE(x) as documented above. Tokens are grouped by expert (counting sort, token order kept
// inside an expert), their rows gathered, and one LinearCpu runs per expert and projection on
// its M_e rows; outputs are scatter-added in ascending expert id. Results do not depend on the
// pool (each Linear's split is result-invariant; the rest is per-row).
// Errors: InvalidArgumentError naming the param: null weights / x / y, m < 0, short strides,
// weight shapes that disagree ([E, D] gate, [I, D] w1/w3, [D, I] w2, one I for all routed
// experts), top_k / gate_temp out of range, an image token without bias_vl, a small workspace;
// errors from LinearCpu are passed on with context (y may then be partly written).
// Allocation: none besides the pool's task closures. Must not be called from a task of `pool`.
// Thread safety: concurrent calls need distinct workspaces and outputs.
absl::Status MoeCpu(const MoeParams& p, ThreadPool* pool);

}  // namespace flashserve::kernels
