// A check of the warp-specialised wgmma kernel's pipeline (sparse_attn_wgmma_ws.cuh: producer
// warpgroup, cp.async into the mbarrier ring, consumers waiting on it) for the GPU
// test; no CUDA header. Not part of the launcher.
#pragma once

#include "kernels/attention/attention.h"

namespace flashserve::kernels::attention_internal {

// Runs WgmmaWsKernel's producer unchanged (WsProduceUnit: Q with the first block, every 64-entry
// list block gathered into stage (slot % 2) through the full / empty mbarriers) against consumers
// that compute only S = Q·K^T of each block (WgmmaQkIssue on the stage, both warpgroups) and write
// it to s (fp32 [p.tokens][blocks][64 heads][64 entries], blocks = ceil(p.width / 64); entries
// that are -1 or out of range give the zero-filled row's 0). Units = tokens (p.heads must be 64,
// one head group, no splits), dealt to `ctas` CTAs grid-stride, so ctas < tokens makes a CTA run
// several units through one ring (Q reloaded between them). p's device pointers q, kv, indices
// are read; out, sinks and the workspace are not used. Synchronises the device; CUDA errors
// abort.
void RunWgmmaWsRingCheck(const SparseAttnParams& p, int ctas, float* s);

}  // namespace flashserve::kernels::attention_internal
