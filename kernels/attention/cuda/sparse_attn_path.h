// Which CUDA body LaunchSparseAttn runs, and a process-wide override for tests and the bench (A/B
// of the paths on the same inputs). Internal to this folder; no CUDA header.
#pragma once

#include "kernels/attention/attention.h"

namespace flashserve::kernels::attention_internal {

enum class SparseAttnCudaPath {
  kAuto,     // the launcher's choice (README.md "CUDA")
  kScalar,   // ScalarKernel: any valid params
  kMmaSync,  // TensorKernel: head_dim 128 / 256 / 512, 16-byte aligned rows, strides % 8 == 0
  kWgmma,    // WgmmaKernel: head_dim 512 and the mma.sync path's alignment
  // WgmmaKernel's split-K S variant (README.md "wgmma path"): same fit as kWgmma; never the
  // default, selectable for A/B (tests, bench).
  kWgmmaSplitK,
  // WgmmaWsKernel (README.md "wgmma-ws"): the wgmma path's math with a producer warpgroup
  // gathering into an mbarrier ring; same fit as kWgmma. The default at the released dims only
  // when kSparseAttnWsDefault is set (the rule there).
  kWgmmaWs,
  // kWgmmaWs without the producer's L2 prefetch of the block after next: A/B only (bench
  // `--path ws` measures both), never the default. Same output bits.
  kWgmmaWsNoPrefetch,
};

// Whether the default (kAuto) takes kWgmmaWs instead of kWgmma for the bf16 form. Rule: set it
// when, on the H200, `bench_sparse_attn --path ws` shows wgmma-ws's median_us at or below
// wgmma's at every batch (1, 8, 64, 256 tokens) and kernels_attention_gpu_test passes with the
// override on kWgmmaWs (WgmmaWsAtReleasedDims). Until that run: off.
inline constexpr bool kSparseAttnWsDefault = false;

const char* SparseAttnCudaPathName(SparseAttnCudaPath path);

// Makes later LaunchSparseAttn calls prefer `path` (kAuto restores the default). A preferred path
// that does not fit the params falls back: kWgmma / kWgmmaSplitK / kWgmmaWs / kWgmmaWsNoPrefetch
// → kMmaSync → kScalar. Not synchronised with launches in flight on other threads: set it between
// launches (tests, benches).
void SetSparseAttnCudaPathOverride(SparseAttnCudaPath path);

// The path LaunchSparseAttn takes for `p` under the current override (p need not be validated).
// Default: kWgmma (kWgmmaWs when kSparseAttnWsDefault) for head_dim 512 with heads a multiple of
// 64, kMmaSync for the other tensor shapes, kScalar for the rest. The row form (kv_rows) is
// always kWgmma, whatever the override.
SparseAttnCudaPath SparseAttnCudaPathFor(const SparseAttnParams& p);

}  // namespace flashserve::kernels::attention_internal
