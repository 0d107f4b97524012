// LaunchL2Prefetch (weight_prefetch.h): a CTA of 32 threads per 32 chunks; each thread asks the
// L2 for its chunk (cp.async.bulk.prefetch.L2: no destination, no completion to wait for) and the
// CTA exits at once, so the launch holds an SM slot only for the issue.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/weight_prefetch.h"

namespace flashserve::kernels {
namespace {

struct PrefetchArgs {
  uintptr_t base[kL2PrefetchMaxRanges];
  int64_t row_bytes[kL2PrefetchMaxRanges];
  int64_t pitch[kL2PrefetchMaxRanges];
  int64_t chunks_per_row[kL2PrefetchMaxRanges];
  int64_t first_chunk[kL2PrefetchMaxRanges + 1];  // range r's chunks: [first_chunk[r], [r + 1])
  int count = 0;
};

constexpr int kThreads = 32;

__global__ void __launch_bounds__(kThreads)
    L2PrefetchKernel(const __grid_constant__ PrefetchArgs a) {
  const int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (i >= a.first_chunk[a.count]) return;
  int r = 0;
  while (i >= a.first_chunk[r + 1]) ++r;
  const int64_t j = i - a.first_chunk[r];
  const int64_t row = j / a.chunks_per_row[r], c = j - row * a.chunks_per_row[r];
  // The row's 16-byte aligned span, cut into chunks from its aligned start.
  const uintptr_t row_start = a.base[r] + static_cast<uintptr_t>(row * a.pitch[r]);
  const uintptr_t lo_row = (row_start + 15u) & ~uintptr_t{15};
  const uintptr_t hi_row = (row_start + static_cast<uintptr_t>(a.row_bytes[r])) & ~uintptr_t{15};
  const uintptr_t lo = lo_row + static_cast<uintptr_t>(c * kL2PrefetchChunkBytes);
  const uintptr_t hi = min(hi_row, lo + static_cast<uintptr_t>(kL2PrefetchChunkBytes));
  if (hi > lo) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(lo),
                 "r"(static_cast<uint32_t>(hi - lo))
                 : "memory");
  }
}

}  // namespace

absl::Status LaunchL2Prefetch(const L2PrefetchParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateL2PrefetchParams(p));
  PrefetchArgs a;
  a.first_chunk[0] = 0;
  for (int i = 0; i < p.count; ++i) {
    const L2PrefetchRange& r = p.ranges[i];
    const int64_t chunks = L2PrefetchChunks(r);
    a.base[i] = reinterpret_cast<uintptr_t>(r.ptr);
    a.row_bytes[i] = r.row_bytes;
    a.pitch[i] = r.rows > 1 ? r.pitch : 0;
    a.chunks_per_row[i] = chunks > 0 ? chunks / r.rows : 1;
    a.first_chunk[i + 1] = a.first_chunk[i] + chunks;
  }
  a.count = p.count;
  const int64_t total = a.first_chunk[p.count];
  if (total == 0) return absl::OkStatus();
  const int64_t grid = (total + kThreads - 1) / kThreads;
  L2PrefetchKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
