// Weights into the L2 ahead of the kernel that streams them (sm_90: cp.async.bulk.prefetch.L2).
//
// At decode sizes every Linear of a layer step is a weight stream, and the kernels between them
// (norms, the mHC boundaries, attention over a few hundred KV rows, the MoE's routing) leave the
// HBM mostly idle. A prefetch launched on a side stream as such a kernel starts asks the L2 for the
// next Linear's weights meanwhile, so that Linear could read part or all of them from the L2.
// Measured in the layer step (session 74, weight_prefetch.md): 2–10 µs slower at 1 and 8 tokens
// on an H200, so nothing runs it by default; bench_decoder_layer_step --l2-prefetch is the A/B.
// A prefetch moves no data the caller sees and changes no result: it is a hint the memory system
// may drop; the kernel that reads the weights later reads them as always.
//
// A range is `rows` rows of `row_bytes` bytes each, `pitch` bytes apart (a contiguous weight is one
// row of all its bytes; a prefix of every row — the first K columns of each weight row — serves a
// kernel whose CTAs each walk their rows along K from the start). The bulk prefetch takes 16-byte
// aligned addresses and sizes: each row's first bytes up to the next 16-byte boundary and its last
// ones past the last are left out (a hint; at most 30 bytes a row).
//
// Contract: pointers are device pointers; LaunchL2Prefetch validates first (InvalidArgumentError
// naming the field; nothing is enqueued then), then enqueues one kernel of short-lived 32-thread
// CTAs on `stream` (each issues its chunks' prefetches and exits) and returns. Cost: one launch;
// the HBM traffic of the bytes named. Safe to run beside kernels that read the same bytes; the
// bytes must not be written while it runs (a prefetch of bytes being written is harmless to the
// data but meaningless).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

struct CUstream_st;

namespace flashserve::kernels {

struct L2PrefetchRange {
  const void* ptr = nullptr;
  int64_t rows = 0;       // 0: an empty range
  int64_t row_bytes = 0;  // bytes prefetched of each row, from its start
  int64_t pitch = 0;      // bytes from one row's start to the next (>= row_bytes; any for rows 1)
};

inline constexpr int kL2PrefetchMaxRanges = 4;
// Bytes per prefetch instruction (the last one of a row shorter). A CTA of 32 threads issues 32
// of them, i.e. covers 512 KB, then exits.
inline constexpr int64_t kL2PrefetchChunkBytes = 16 * 1024;

struct L2PrefetchParams {
  L2PrefetchRange ranges[kL2PrefetchMaxRanges];
  int count = 0;
};

// The range of `bytes` contiguous bytes at ptr.
inline L2PrefetchRange L2PrefetchContiguous(const void* ptr, int64_t bytes) {
  return L2PrefetchRange{ptr, bytes > 0 ? 1 : 0, bytes, bytes};
}

// Prefetch chunks of a range (a row's chunks: ceil(row_bytes / kL2PrefetchChunkBytes)).
int64_t L2PrefetchChunks(const L2PrefetchRange& r);

// InvalidArgumentError naming the first bad field, else OK. Host-only checks.
absl::Status ValidateL2PrefetchParams(const L2PrefetchParams& p);

// Enqueues the prefetch of every range on `stream` (nothing when they are all empty).
absl::Status LaunchL2Prefetch(const L2PrefetchParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
