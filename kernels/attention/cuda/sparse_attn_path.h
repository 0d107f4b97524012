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
};

const char* SparseAttnCudaPathName(SparseAttnCudaPath path);

// Makes later LaunchSparseAttn calls prefer `path` (kAuto restores the default). A preferred path
// that does not fit the params falls back: kWgmma / kWgmmaSplitK → kMmaSync → kScalar. Not
// synchronised with launches in flight on other threads: set it between launches (tests, benches).
void SetSparseAttnCudaPathOverride(SparseAttnCudaPath path);

// The path LaunchSparseAttn takes for `p` under the current override (p need not be validated).
// Default: kWgmma for head_dim 512 with heads a multiple of 64, kMmaSync for the other tensor
// shapes, kScalar for the rest. The row form (kv_rows) is always kWgmma, whatever the override.
SparseAttnCudaPath SparseAttnCudaPathFor(const SparseAttnParams& p);

}  // namespace flashserve::kernels::attention_internal
