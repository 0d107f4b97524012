// CUDA launcher of the Engram gather: validate (engram_params.cc, shared with the CPU body), pick
// the vectorised or scalar instantiation from the operands' alignment, size the grid, launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/engram/cuda/engram_kernels.cuh"
#include "kernels/engram/engram.h"

namespace flashserve::kernels {
namespace {

using engram_device::kThreads;
using engram_device::kWarps;

// Items are walked grid-stride; more blocks than this only queue.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

bool Aligned(const void* p, int64_t stride_bytes, int64_t n) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(n) == 0 && stride_bytes % n == 0;
}

}  // namespace

absl::Status LaunchEngramGather(const EngramGatherParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateEngramGather(p));
  if (p.tokens == 0) return absl::OkStatus();
  const int64_t items = p.tokens * p.ids_per_token;
  const auto blocks = static_cast<unsigned>(std::min((items + kWarps - 1) / kWarps, kMaxBlocks));
  const bool vec = Aligned(p.codes, p.codes_stride, 8) && Aligned(p.out, 2 * p.out_stride, 16);
  if (vec) {
    engram_device::EngramGatherKernel<true><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    engram_device::EngramGatherKernel<false><<<blocks, kThreads, 0, stream>>>(p);
  }
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
