// The transposed-products prototype (cuda/sparse_attn_transposed.cuh; wgmma_ws.md "Session 69"):
// the gate experiment for moving the row form's decode onto the consumer warpgroups. Not part of
// LaunchSparseAttn; the GPU test and bench_sparse_attn (`--path tproto`) call it. No CUDA header.
#pragma once

#include "absl/status/status.h"
#include "kernels/attention/attention.h"

struct CUstream_st;

namespace flashserve::kernels::attention_internal {

// Runs SparseAttnParams' recipe (attention.h) on the bf16 pool with the transposed products: one
// CTA per token, 64 heads, head_dim 512, no RoPE, no row form, q / kv / out 16-byte aligned with
// strides that are multiples of 8 elements; the workspace is not used. The output agrees with
// LaunchSparseAttn to rounding (the sums of p are formed in another order). Enqueues one kernel
// on `stream`. `ss`: both products read their entries operand from shared memory (wgmma SS, the
// stage tile K-major for Sᵀ and MN-major for Oᵀ) instead of ldmatrix into registers: the same
// structure without the register-sourced A. Errors: InvalidArgumentError naming the unsupported
// field (nothing is launched).
absl::Status LaunchSparseAttnTransposedProto(const SparseAttnParams& p, CUstream_st* stream,
                                             bool ss = false);

}  // namespace flashserve::kernels::attention_internal
