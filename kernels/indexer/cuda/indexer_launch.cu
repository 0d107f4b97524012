// CUDA launchers of the indexer: validate (indexer_params.cc, shared with the CPU bodies), pick
// the instantiation, size the grid, launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

using indexer_device::kHeadChunk;
using indexer_device::kScoreThreads;
using indexer_device::kSelectThreads;

// Grid dimensions are walked grid-stride; more blocks than these only queue.
constexpr int64_t kMaxGridX = int64_t{1} << 20;
constexpr int64_t kMaxGridY = 65535;

// The GPU selections need no workspace: validation runs against a stand-in that satisfies the
// workspace checks, so every other check (and message) is the CPU bodies'.
alignas(8) uint64_t workspace_stand_in;

template <typename Params>
Params WithStandInWorkspace(const Params& p) {
  Params v = p;
  v.workspace = &workspace_stand_in;
  v.workspace_bytes = std::numeric_limits<size_t>::max();
  return v;
}

template <typename Source>
void LaunchSelect(const Source& src, int64_t tokens, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(std::min(tokens, kMaxGridX));
  indexer_device::SelectKernel<Source><<<blocks, kSelectThreads, 0, stream>>>(src, tokens);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

absl::Status LaunchIndexerScore(const IndexerScoreParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  const int64_t tiles = (p.width + kScoreThreads - 1) / kScoreThreads;
  const dim3 grid(static_cast<unsigned>(std::min(p.tokens, kMaxGridX)),
                  static_cast<unsigned>(std::min(tiles, kMaxGridY)));
  const size_t smem =
      static_cast<size_t>(std::min<int64_t>(p.heads, kHeadChunk) * p.head_dim) * sizeof(float);
  const bool vec =
      p.head_dim % 8 == 0 && p.k_stride % 8 == 0 && reinterpret_cast<uintptr_t>(p.k) % 16 == 0;
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024) {  // up to 32 heads x 512 dims x 4 B = 64 KiB
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
    }
    kernel<<<grid, kScoreThreads, smem, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
  };
  if (vec && p.head_dim == 128) {  // the released index_head_dim
    launch(indexer_device::IndexerScoreKernel<true, 128>);
  } else if (vec) {
    launch(indexer_device::IndexerScoreKernel<true, 0>);
  } else {
    launch(indexer_device::IndexerScoreKernel<false, 0>);
  }
  return absl::OkStatus();
}

absl::Status LaunchIndexerTopk(const IndexerTopkParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(WithStandInWorkspace(p)));
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  LaunchSelect(indexer_device::TopkSource{p}, p.tokens, stream);
  return absl::OkStatus();
}

absl::Status LaunchCandidateBlocks(const CandidateBlocksParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(WithStandInWorkspace(p)));
  if (p.tokens == 0) return absl::OkStatus();
  LaunchSelect(indexer_device::CandidateSource{p, CandidateBlockCount(p.width, p.block_size)},
               p.tokens, stream);
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
