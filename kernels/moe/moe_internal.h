// Internals shared by the MoE params code and the CPU bodies; not for other modules.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/moe/moe.h"

namespace flashserve::kernels::moe_internal {

// Dims read off the weights (validated by ValidateMoeWeights).
struct MoeDims {
  int64_t n_experts = 0;  // E
  int64_t dim = 0;        // D
  int64_t inter = 0;      // I of the routed experts
  int64_t max_inter = 0;  // max(I, shared I)
  bool has_shared = false;
};

// Byte offsets into the workspace (each 64-byte aligned relative to an aligned base).
struct MoeLayout {
  size_t logits = 0;       // f32 [M, E]
  size_t ids = 0;          // i32 [M, k]
  size_t weights = 0;      // f32 [M, k]
  size_t offsets = 0;      // i32 [E + 1]
  size_t slot_token = 0;   // i32 [M · k], grouped by expert
  size_t slot_weight = 0;  // f32 [M · k]
  size_t acc = 0;          // f32 [M, D]
  size_t xg = 0;           // bf16 [M, D] gathered rows
  size_t g = 0;            // bf16 [M, I] (then a, in place)
  size_t u = 0;            // bf16 [M, I]
  size_t ye = 0;           // bf16 [M, D] one expert's output
  size_t linear = 0;       // LinearCpu workspace
  size_t linear_bytes = 0;
  size_t total = 0;  // includes 64 bytes of alignment slack
};

absl::Status ValidateMoeWeights(const MoeWeights& w, MoeDims* dims);
absl::Status ValidateMoeOptions(const MoeOptions& o, int64_t n_experts, const char* who);
MoeLayout ComputeMoeLayout(const MoeWeights& w, const MoeDims& d, int64_t max_tokens, int64_t top_k,
                           LinearMode mode, const ThreadPool* pool);

}  // namespace flashserve::kernels::moe_internal
