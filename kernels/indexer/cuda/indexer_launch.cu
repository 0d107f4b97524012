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
#include "kernels/common/per_device_cache.h"
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

// The split selection (select_split_kernels.cuh): one cooperative launch when every CTA of the
// grid is resident (the four passes separated by grid.sync(): no memset, no three further
// launches), else a memset and four kernels in stream order. The occupancy is asked once per device
// and Source.
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
  const dim3 grid(static_cast<unsigned>(plan.ctas_per_row),
                  static_cast<unsigned>(std::min(tokens, kMaxGridY)));
  constexpr int kThreads = indexer_device::kSplitThreads;
  auto* fused = indexer_device::SplitFusedKernel<Source>;
  const int device = CurrentDevice();
  static PerDeviceInt fused_per_sm;
  const int per_sm = fused_per_sm.Get(device, [&] {
    int v = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, fused, kThreads, 0));
    return v;
  });
  if (int64_t{grid.x} * grid.y <= int64_t{per_sm} * SmCount(device)) {
    void* args[] = {const_cast<Source*>(&src), &ws};
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(fused), grid,
                                           dim3(kThreads), args, 0, stream));
    return;
  }
  CUDA_CHECK(cudaMemsetAsync(ws.hist, 0, plan.hist_bytes, stream));
  indexer_device::SplitHistKernel<Source, 0><<<grid, kThreads, 0, stream>>>(src, ws);
  CUDA_CHECK(cudaGetLastError());
  // Passes 1–3 as programmatic dependents: each is scheduled while the pass before drains and
  // waits (griddepcontrol.wait) before its first read.
  cuda_common::LaunchPdl(indexer_device::SplitHistKernel<Source, 1>, grid, dim3(kThreads), 0,
                         stream, src, ws);
  cuda_common::LaunchPdl(indexer_device::SplitCountKernel<Source>, grid, dim3(kThreads), 0, stream,
                         src, ws);
  cuda_common::LaunchPdl(indexer_device::SplitWriteKernel<Source>, grid, dim3(kThreads), 0, stream,
                         src, ws);
}

bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// The int8 tensor-core scorer: a CTA per group of kMmaRows rows (kBatch: per row) walks key tiles
// grid-stride, with one wave of resident CTAs in all, each staging its rows' q once for many
// tiles. The SM count, the occupancy at each staged row count and the shared-memory attribute are
// asked once per device (kernels/common/per_device_cache.h).
template <bool kBatch, bool kMask, int kMode = indexer_device::kI8Whole>
void LaunchInt8Kernel(const IndexerScoreParams& p, indexer_device::BatchRows rows,
                      cudaStream_t stream) {
  constexpr int kRows = kBatch ? 1 : indexer_device::kMmaRows;
  auto* kernel = indexer_device::IndexerScoreInt8Kernel<kBatch, kMask, kMode>;
  const int rows_cap = static_cast<int>(std::min<int64_t>(p.tokens, kRows));
  const size_t smem = indexer_device::ScoreInt8SmemBytes(rows_cap);
  const int device = CurrentDevice();
  static PerDeviceInt smem_attribute;  // set once to the largest size any call uses
  smem_attribute.Get(device, [&] {
    const size_t most = indexer_device::ScoreInt8SmemBytes(kRows);
    if (most > 48 * 1024) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(most)));
    }
    return 1;
  });
  static PerDeviceInt occupancy[kRows + 1];  // by rows_cap
  const int per_sm = occupancy[rows_cap].Get(device, [&] {
    int v = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel,
                                                             indexer_device::kMmaThreads, smem));
    return v;
  });
  const int64_t groups = (p.tokens + kRows - 1) / kRows;
  const int64_t resident = int64_t{SmCount(device)} * std::max(per_sm, 1);
  const int64_t per_group = std::max<int64_t>(1, resident / std::min(groups, kMaxGridY));
  // Without a mask: CTA tiles of kMmaTileKeys keys. With one: chunks of 32 blocks of 8 keys per
  // warp, or 16 / 8 where that leaves warps of the resident grid idle (a single row: 65,536
  // positions are 256 chunks of 32 blocks, 64 CTAs).
  int chunk_blocks = 32;
  int64_t units = (p.width + indexer_device::kMmaTileKeys - 1) / indexer_device::kMmaTileKeys;
  if constexpr (kMask) {
    const int64_t n_blocks = (p.width + 7) / 8;
    const int64_t warps = per_group * indexer_device::kMmaWarps;
    while (chunk_blocks > 8 && (n_blocks + chunk_blocks - 1) / chunk_blocks < warps) {
      chunk_blocks /= 2;
    }
    const int64_t chunks = (n_blocks + chunk_blocks - 1) / chunk_blocks;
    units = (chunks + indexer_device::kMmaWarps - 1) / indexer_device::kMmaWarps;
  }
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(units, per_group))),
                  static_cast<unsigned>(std::min(groups, kMaxGridY)));
  kernel<<<grid, indexer_device::kMmaThreads, smem, stream>>>(p, rows, chunk_blocks);
  CUDA_CHECK(cudaGetLastError());
}

// With a candidate mask the masked instantiation (only 8-key blocks a row of the group sees are
// scored), else the one without the mask's code; with cuda_i8_lean the lean kernel, then the
// patch kernel for the tiles it marked.
template <bool kBatch>
void LaunchInt8(const IndexerScoreParams& p, indexer_device::BatchRows rows, cudaStream_t stream) {
  if (p.candidates != nullptr) {
    LaunchInt8Kernel<kBatch, true>(p, rows, stream);
  } else if (p.cuda_i8_lean) {
    LaunchInt8Kernel<kBatch, false, indexer_device::kI8Lean>(p, rows, stream);
    LaunchInt8Kernel<kBatch, false, indexer_device::kI8Patch>(p, rows, stream);
  } else {
    LaunchInt8Kernel<kBatch, false>(p, rows, stream);
  }
}

// The tiled exact scorer (score_tile_kernel.cuh): grid.x = key tiles, grid.y = groups of
// kScoreRows rows (kBatch: rows). The shared-memory attribute is set once per device, to the
// most this instantiation can use.
template <int kDim, bool kBatch>
void LaunchTile(const IndexerScoreParams& p, indexer_device::BatchRows rows, cudaStream_t stream) {
  auto* kernel = indexer_device::IndexerScoreTileKernel<kDim, kBatch>;
  const size_t smem = indexer_device::ScoreTileSmemBytes(p.heads, p.head_dim);
  static PerDeviceInt smem_attribute;
  const int device = CurrentDevice();
  smem_attribute.Get(device, [&] {
    int optin = 0;  // the device's per-block limit (227 KiB on the H200)
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const size_t most =
        std::min<size_t>(indexer_device::ScoreTileSmemBytes(indexer_device::kHeadChunk,
                                                            kDim > 0 ? kDim : kMaxIndexHeadDim),
                         static_cast<size_t>(optin));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(most)));
    return 1;
  });
  const int64_t tiles = (p.width + kScoreThreads - 1) / kScoreThreads;
  const int64_t rows_per_group = kBatch ? 1 : indexer_device::kScoreRows;
  const int64_t groups = (p.tokens + rows_per_group - 1) / rows_per_group;
  const dim3 grid(static_cast<unsigned>(std::min(tiles, kMaxGridX)),
                  static_cast<unsigned>(std::min(groups, kMaxGridY)));
  kernel<<<grid, kScoreThreads, smem, stream>>>(p, rows);
  CUDA_CHECK(cudaGetLastError());
}

template <bool kBatch>
void LaunchTile(const IndexerScoreParams& p, indexer_device::BatchRows rows, cudaStream_t stream) {
  if (p.head_dim == 128) {  // the released index_head_dim
    LaunchTile<128, kBatch>(p, rows, stream);
  } else {
    LaunchTile<0, kBatch>(p, rows, stream);
  }
}

// Whether a k_rows call takes the int8 tensor-core scorer.
bool Int8Applies(const IndexerScoreParams& p) {
  return p.k_rows != nullptr && !p.cuda_exact_only && p.heads == indexer_device::kMmaHeads &&
         p.head_dim == indexer_device::kMmaDim && p.k_row_stride % 4 == 0 && Aligned(p.k_rows, 4);
}

}  // namespace

absl::Status LaunchIndexerScore(const IndexerScoreParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0 || p.width == 0) return absl::OkStatus();
  // k_rows: head_dim % 32 == 0 (validated), decoded while staging, so always the tiled path.
  const bool vec =
      p.k_rows != nullptr || (p.head_dim % 8 == 0 && p.k_stride % 8 == 0 && Aligned(p.k, 16));
  if (Int8Applies(p)) {  // int8 tensor cores on the FP4 rows
    LaunchInt8<false>(p, {}, stream);
    return absl::OkStatus();
  }
  if (vec) {  // a key tile per CTA, scored for up to kScoreRows rows
    LaunchTile<false>(p, {}, stream);
    return absl::OkStatus();
  }
  const int64_t tiles = (p.width + kScoreThreads - 1) / kScoreThreads;
  const dim3 grid(static_cast<unsigned>(std::min(p.tokens, kMaxGridX)),
                  static_cast<unsigned>(std::min(tiles, kMaxGridY)));
  const size_t smem =
      static_cast<size_t>(std::min<int64_t>(p.heads, kHeadChunk) * p.head_dim) * sizeof(float);
  if (smem > 48 * 1024) {  // head_dim > 384 with 32 heads
    CUDA_CHECK(cudaFuncSetAttribute(indexer_device::IndexerScoreKernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  }
  indexer_device::IndexerScoreKernel<<<grid, kScoreThreads, smem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchIndexerScoreBatch(const IndexerScoreBatchParams& b, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(b));
  if (b.batch == 0 || b.max_width == 0) return absl::OkStatus();
  // The kernels' view of a batch: tokens = rows, width = max_width, k_rows = the pool; each
  // group (one row) takes its keys, width and reach from BatchRows.
  IndexerScoreParams p;
  p.tokens = b.batch;
  p.heads = b.heads;
  p.head_dim = b.head_dim;
  p.width = b.max_width;
  p.q = b.q;
  p.q_stride = b.q_stride;
  p.k_rows = b.k_rows;
  p.k_row_stride = b.k_row_stride;
  p.w = b.w;
  p.w_stride = b.w_stride;
  p.candidates = b.candidates;
  p.candidates_stride = b.candidates_stride;
  p.scores = b.scores;
  p.scores_stride = b.scores_stride;
  p.cuda_exact_only = b.cuda_exact_only;
  p.cuda_rechecks = b.cuda_rechecks;
  p.cuda_i8_lean = b.cuda_i8_lean;
  p.cuda_i8_deferred = b.cuda_i8_deferred;
  const indexer_device::BatchRows rows{b.k_row_offsets, b.widths, b.reaches};
  if (Int8Applies(p)) {
    LaunchInt8<true>(p, rows, stream);
  } else {
    LaunchTile<true>(p, rows, stream);
  }
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

absl::Status LaunchIndexerTopkBatch(const IndexerTopkBatchParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(WithStandInWorkspace(p)));
  const indexer_plan::SelectSplitPlan plan = indexer_plan::PlanTopkSplit(p.batch, p.max_width);
  RETURN_IF_ERROR(
      CheckCudaWorkspace("IndexerTopkBatch", p.workspace, p.workspace_bytes, plan.workspace_bytes));
  if (p.batch == 0 || p.max_width == 0) return absl::OkStatus();
  const indexer_device::TopkBatchSource src{
      p, indexer_device::BatchRows{nullptr, p.widths, p.reaches},
      IndexerTopkK(p.index_topk, p.max_width), Aligned(p.scores, 16) && p.scores_stride % 8 == 0};
  if (plan.split()) {
    LaunchSplitSelect(src, p.batch, plan, p.workspace, stream);
  } else {
    LaunchSelect(src, p.batch, stream);
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
