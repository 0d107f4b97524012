// The consumer-side decode probe (sparse_attn_wgmma_ws.cuh WsProbeShape; wgmma_ws.md "Session
// 70"): wgmma-ws on the bf16 pool with a block's FP4 decode added to each follower warpgroup's
// work, to time that decode's cost before building it for the row form. Not part of
// LaunchSparseAttn; bench_sparse_attn (`--path probe`) and the GPU test call it. No CUDA header.
#pragma once

#include "absl/status/status.h"
#include "kernels/attention/attention.h"

struct CUstream_st;

namespace flashserve::kernels::attention_internal {

// Runs SparseAttnParams' recipe (attention.h) on the bf16 pool with WgmmaWsKernel's probe
// instantiation `placement` (1: the decode before the next block's S; 2: after the warpgroup's
// P·V is issued, the next block's S after it; 3: as 1 with a stand-in decode of half the
// instructions). The output is LaunchSparseAttn's on the wgmma-ws
// path bit for bit (the decode writes a sink only). Needs heads a multiple of 64, head_dim 512,
// no RoPE, no row form, q / kv / out 16-byte aligned with strides that are multiples of 8
// elements, and one list range per (token, group): tokens · heads / 64 >= 128
// (kSparseAttnCudaSplitCtas), so that no split combine runs; the workspace is not used.
// Enqueues one kernel on `stream`. Errors: InvalidArgumentError naming the unsupported field
// (nothing is launched).
absl::Status LaunchSparseAttnWsProbe(const SparseAttnParams& p, CUstream_st* stream, int placement);

}  // namespace flashserve::kernels::attention_internal
