// CUDA launchers of the indexer: validate (indexer_params.cc, shared with the CPU bodies), pick
// the instantiation, size the grid, launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/cuda/score_int8_kernel.cuh"
#include "kernels/indexer/cuda/score_tile_kernel.cuh"
#include "kernels/indexer/cuda/select_split_kernels.cuh"
#include "kernels/indexer/indexer.h"
#include "kernels/indexer/select_plan.h"

namespace flashserve::kernels {
namespace {

using indexer_device::kHeadChunk;
using indexer_device::kScoreThreads;
using indexer_device::kSelectThreads;

// Grid dimensions are walked grid-stride; more blocks than these only queue.
constexpr int64_t kMaxGridX = int64_t{1} << 20;
constexpr int64_t kMaxGridY = 65535;

// The CPU workspace sizes do not apply to the GPU: validation runs against a stand-in that
// satisfies those checks, so every other check (and message) is the CPU bodies'; the GPU's own
// workspace is checked by CheckCudaWorkspace.
alignas(8) uint64_t workspace_stand_in;

template <typename Params>
Params WithStandInWorkspace(const Params& p) {
  Params v = p;
  v.workspace = &workspace_stand_in;
  v.workspace_bytes = std::numeric_limits<size_t>::max();
  return v;
}

absl::Status CheckCudaWorkspace(const char* op, const void* workspace, size_t bytes,
                                size_t needed) {
  if (needed == 0) return absl::OkStatus();
  if (workspace == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: workspace is null (this width needs %d bytes of GPU workspace)", op, needed));
  }
  if (reinterpret_cast<uintptr_t>(workspace) % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: workspace is not 8-byte aligned", op));
  }
  if (bytes < needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: workspace_bytes %d is below the %d bytes of GPU workspace this call needs", op, bytes,
        needed));
  }
  return absl::OkStatus();
}

template <typename Source>
void LaunchSelect(const Source& src, int64_t tokens, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(std::min(tokens, kMaxGridX));
  indexer_device::SelectKernel<Source><<<blocks, kSelectThreads, 0, stream>>>(src, tokens);
  CUDA_CHECK(cudaGetLastError());
}

// The split selection (select_split_kernels.cuh): memset, then four kernels in stream order.
template <typename Source>
void LaunchSplitSelect(const Source& src, int64_t tokens, const indexer_plan::SelectSplitPlan& plan,
                       void* workspace, cudaStream_t stream) {
  static_assert(indexer_device::kSplitThreads == 256, "one thread per histogram bin");
  static_assert(
      Source::kItemsPerThread * indexer_device::kSplitThreads * indexer_plan::kTilesPerCta < 65536,
      "packed 16-bit counts per chunk");
  indexer_device::SplitWorkspace ws;
  ws.hist = static_cast<uint32_t*>(workspace);
  ws.counts = ws.hist + tokens * indexer_plan::kHistWords;
  ws.chunk = plan.chunk;
  ws.ctas = plan.ctas_per_row;
  ws.tokens = tokens;
  CUDA_CHECK(cudaMemsetAsync(ws.hist, 0, plan.hist_bytes, stream));
  const dim3 grid(static_cast<unsigned>(plan.ctas_per_row),
                  static_cast<unsigned>(std::min(tokens, kMaxGridY)));
  constexpr int kThreads = indexer_device::kSplitThreads;
  indexer_device::SplitHistKernel<Source, 0><<<grid, kThreads, 0, stream>>>(src, ws);
  CUDA_CHECK(cudaGetLastError());
  indexer_device::SplitHistKernel<Source, 1><<<grid, kThreads, 0, stream>>>(src, ws);
  CUDA_CHECK(cudaGetLastError());
  indexer_device::SplitCountKernel<Source><<<grid, kThreads, 0, stream>>>(src, ws);
  CUDA_CHECK(cudaGetLastError());
  indexer_device::SplitWriteKernel<Source><<<grid, kThreads, 0, stream>>>(src, ws);
  CUDA_CHECK(cudaGetLastError());
}

bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// The int8 tensor-core scorer: a CTA per group of kMmaRows rows walks key tiles grid-stride,
// with one wave of resident CTAs in all, each staging its rows' q once for many tiles.
void LaunchResident(void (*kernel)(IndexerScoreParams), const IndexerScoreParams& p, size_t smem,
                    cudaStream_t stream) {
  const int64_t groups = (p.tokens + indexer_device::kMmaRows - 1) / indexer_device::kMmaRows;
  const int64_t tiles = (p.width + indexer_device::kMmaTileKeys - 1) / indexer_device::kMmaTileKeys;
  if (smem > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  }
  int device = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel,
                                                           indexer_device::kMmaThreads, smem));
  const int64_t resident = int64_t{sms} * std::max(per_sm, 1);
  const int64_t per_group = std::max<int64_t>(1, resident / std::min(groups, kMaxGridY));
  const dim3 grid(static_cast<unsigned>(std::min(tiles, per_group)),
                  static_cast<unsigned>(std::min(groups, kMaxGridY)));
  kernel<<<grid, indexer_device::kMmaThreads, smem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

absl::Status LaunchIndexerScore(const IndexerScoreParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  const int64_t tiles = (p.width + kScoreThreads - 1) / kScoreThreads;
  // k_rows: head_dim % 32 == 0 (validated), decoded while staging, so always the tiled path.
  const bool vec =
      p.k_rows != nullptr || (p.head_dim % 8 == 0 && p.k_stride % 8 == 0 && Aligned(p.k, 16));
  auto launch = [&](auto kernel, dim3 grid, size_t smem) {
    if (smem > 48 * 1024) {  // the tiled kernel: up to 133 KiB of keys + 64 KiB of q
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
    }
    kernel<<<grid, kScoreThreads, smem, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
  };
  const bool released =
      p.heads == indexer_device::kMmaHeads && p.head_dim == indexer_device::kMmaDim;
  if (p.k_rows != nullptr && !p.cuda_exact_only && released && p.k_row_stride % 4 == 0 &&
      Aligned(p.k_rows, 4)) {  // int8 tensor cores on the FP4 rows
    LaunchResident(indexer_device::IndexerScoreInt8Kernel, p,
                   indexer_device::ScoreInt8SmemBytes(
                       static_cast<int>(std::min<int64_t>(p.tokens, indexer_device::kMmaRows))),
                   stream);
    return absl::OkStatus();
  }
  if (vec) {  // a key tile per CTA, scored for up to kScoreRows rows
    const int64_t groups = (p.tokens + indexer_device::kScoreRows - 1) / indexer_device::kScoreRows;
    const dim3 grid(static_cast<unsigned>(std::min(tiles, kMaxGridX)),
                    static_cast<unsigned>(std::min(groups, kMaxGridY)));
    const size_t smem = indexer_device::ScoreTileSmemBytes(p.heads, p.head_dim);
    if (p.head_dim == 128) {  // the released index_head_dim
      launch(indexer_device::IndexerScoreTileKernel<128>, grid, smem);
    } else {
      launch(indexer_device::IndexerScoreTileKernel<0>, grid, smem);
    }
    return absl::OkStatus();
  }
  const dim3 grid(static_cast<unsigned>(std::min(p.tokens, kMaxGridX)),
                  static_cast<unsigned>(std::min(tiles, kMaxGridY)));
  const size_t smem =
      static_cast<size_t>(std::min<int64_t>(p.heads, kHeadChunk) * p.head_dim) * sizeof(float);
  launch(indexer_device::IndexerScoreKernel, grid, smem);
  return absl::OkStatus();
}

absl::Status LaunchIndexerTopk(const IndexerTopkParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(WithStandInWorkspace(p)));
  const indexer_plan::SelectSplitPlan plan = indexer_plan::PlanTopkSplit(p.tokens, p.width);
  RETURN_IF_ERROR(
      CheckCudaWorkspace("IndexerTopk", p.workspace, p.workspace_bytes, plan.workspace_bytes));
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  const indexer_device::TopkSource src{p, Aligned(p.scores, 16) && p.scores_stride % 8 == 0};
  if (plan.split()) {
    LaunchSplitSelect(src, p.tokens, plan, p.workspace, stream);
  } else {
    LaunchSelect(src, p.tokens, stream);
  }
  return absl::OkStatus();
}

absl::Status LaunchCandidateBlocks(const CandidateBlocksParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(WithStandInWorkspace(p)));
  const indexer_plan::SelectSplitPlan plan =
      indexer_plan::PlanCandidateSplit(p.tokens, p.width, p.block_size);
  RETURN_IF_ERROR(
      CheckCudaWorkspace("CandidateBlocks", p.workspace, p.workspace_bytes, plan.workspace_bytes));
  if (p.tokens == 0) return absl::OkStatus();
  const bool eight = p.block_size == 8;
  const indexer_device::CandidateSource src{
      p, CandidateBlockCount(p.width, p.block_size),
      eight && Aligned(p.scores, 16) && p.scores_stride % 8 == 0,
      eight && Aligned(p.candidates, 8) && p.candidates_stride % 8 == 0};
  if (plan.split()) {
    LaunchSplitSelect(src, p.tokens, plan, p.workspace, stream);
  } else {
    LaunchSelect(src, p.tokens, stream);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
