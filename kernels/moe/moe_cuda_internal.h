// Internals shared by the CUDA launchers (cuda/moe_launch.cu) and their host-side validation
// (moe_cuda_params.cc); not for other modules.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_cuda_internal {

// Byte offsets of MoeCuda's workspace regions from a 256-byte-aligned base.
struct MoeCudaLayout {
  size_t counts = 0;       // i32 [E]
  size_t offsets = 0;      // i32 [E + 1]
  size_t num_tiles = 0;    // i32 [1]
  size_t tiles = 0;        // i32 [2·S]
  size_t ids = 0;          // i32 [S]
  size_t weights = 0;      // f32 [S]
  size_t slot_token = 0;   // i32 [S]
  size_t slot_weight = 0;  // f32 [S]
  size_t token_slot = 0;   // i32 [S]
  size_t xg = 0;           // bf16 [S, D]; reused for ye [S, D] once the up stage has read it
  size_t ag = 0;           // bf16 [S, I]
  size_t total = 0;        // including 256 bytes of alignment slack
};

// S = max_tokens · top_k.
MoeCudaLayout ComputeMoeCudaLayout(int64_t n_experts, int64_t dim, int64_t inter,
                                   int64_t max_tokens, int64_t top_k);

// LaunchMoeRoute's checks (MoeRouteCpu's, minus the host read of is_image, plus the GPU limits).
absl::Status ValidateMoeRouteCuda(const MoeRouteParams& p);

// Validation of the whole-layer params without the workspace-size check (shared by Validate and
// MoeCuda, which also needs the layout).
absl::Status ValidateMoeCudaParamsCore(const MoeCudaParams& p);

}  // namespace flashserve::kernels::moe_cuda_internal
