// CUDA launchers of the MoE layer: validate (moe_cuda_params.cc, host-only and tested without a
// GPU), pick the instantiation, size the grid, launch; MoeCuda chains the stages over one
// workspace.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/moe/cuda/moe_combine.cuh"
#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/cuda/moe_permute.cuh"
#include "kernels/moe/cuda/moe_route.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels {
namespace {

using moe_device::GemmArgs;
using moe_device::GemmShape;

// Grids are walked grid-stride; more blocks than these only queue.
constexpr int64_t kMaxGridX = int64_t{1} << 20;
constexpr int64_t kMaxGridY = 65535;

unsigned Blocks(int64_t n, int64_t cap) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(n, cap)));
}

void EnqueueRoute(const MoeRouteParams& p, int32_t* counts, cudaStream_t stream) {
  if (p.m == 0) return;
  const int64_t blocks = (p.m + moe_device::kRouteWarps - 1) / moe_device::kRouteWarps;
  moe_device::MoeRouteKernel<<<Blocks(blocks, kMaxGridX), 32 * moe_device::kRouteWarps,
                               moe_device::kRouteWarps * moe_device::RouteSmemPerWarp(p.n_experts),
                               stream>>>(p, counts);
  CUDA_CHECK(cudaGetLastError());
}

void EnqueuePermute(const MoePermuteParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  moe_device::MoeScatterKernel<<<static_cast<unsigned>(p.n_experts), moe_device::kScatterThreads, 0,
                                 stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
  moe_device::
      MoeQuantGatherKernel<<<Blocks(p.m, kMaxGridX), moe_device::kGatherThreads, 0, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

// Upper bound of the tile count: every tile holds at least one slot row, and at most one tile per
// touched expert is partial.
int64_t MaxTiles(int64_t slots, int64_t n_experts, int64_t tile_rows) {
  const int64_t partial = std::min(slots, n_experts);
  return std::min(slots, (slots + partial * (tile_rows - 1)) / tile_rows);
}

// Opts the kernel into more than 48 KiB of dynamic shared memory, once per device (bit d of
// `done`), so that later launches make no extra driver call (MoeCuda stays cheap to enqueue and
// to capture in a graph).
template <typename Kernel>
void EnsureSmemLimit(Kernel* kernel, int bytes, std::atomic<uint64_t>& done) {
  if (bytes <= 48 * 1024) return;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if ((done.load(std::memory_order_acquire) & bit) != 0) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_acq_rel);
}

template <int kMT, int kWN, bool kUp>
void LaunchGemm(const GemmArgs& g, int64_t slots, int64_t n_experts, cudaStream_t stream) {
  using S = GemmShape<kMT, kWN, kUp>;
  auto* kernel = moe_device::MoeExpertGemmKernel<kMT, kWN, kUp>;
  static std::atomic<uint64_t> smem_set{0};
  EnsureSmemLimit(kernel, S::kSmemBytes, smem_set);
  const dim3 grid(static_cast<unsigned>(g.n / S::kBN),
                  Blocks(MaxTiles(slots, n_experts, S::kBM), kMaxGridY));
  kernel<<<grid, moe_device::kGemmThreads, S::kSmemBytes, stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

void EnqueueUp(const MoeExpertUpParams& p, cudaStream_t stream) {
  if (p.slots == 0) return;
  const MoeCudaWeights& w = *p.weights;
  GemmArgs g;
  g.a = p.xg;
  g.w = w.w1;
  g.w_scale = w.w1_scale;
  g.w_up = w.w3;
  g.w_up_scale = w.w3_scale;
  g.n = w.inter;
  g.k = w.dim;
  g.offsets = p.offsets;
  g.tiles = p.tiles;
  g.num_tiles = p.num_tiles;
  g.slot_weight = p.slot_weight;
  g.swiglu_limit = p.swiglu_limit;
  g.out = p.ag;
  g.act = p.act;
  switch (p.tile_rows) {
    case 16:
      return LaunchGemm<1, 2, true>(g, p.slots, w.n_experts, stream);
    case 32:
      return LaunchGemm<2, 4, true>(g, p.slots, w.n_experts, stream);
    default:
      return LaunchGemm<4, 4, true>(g, p.slots, w.n_experts, stream);
  }
}

void EnqueueDown(const MoeExpertDownParams& p, cudaStream_t stream) {
  if (p.slots == 0) return;
  const MoeCudaWeights& w = *p.weights;
  GemmArgs g;
  g.a = p.ag;
  g.w = w.w2;
  g.w_scale = w.w2_scale;
  g.n = w.dim;
  g.k = w.inter;
  g.offsets = p.offsets;
  g.tiles = p.tiles;
  g.num_tiles = p.num_tiles;
  g.out = p.ye;
  switch (p.tile_rows) {
    case 16:
      return LaunchGemm<1, 2, false>(g, p.slots, w.n_experts, stream);
    case 32:
      return LaunchGemm<2, 4, false>(g, p.slots, w.n_experts, stream);
    default:
      return LaunchGemm<4, 4, false>(g, p.slots, w.n_experts, stream);
  }
}

void EnqueueCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  moe_device::MoeCombineKernel<<<Blocks(p.m, kMaxGridX), moe_device::kCombineThreads, 0, stream>>>(
      p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

absl::Status LaunchMoeRoute(const MoeRouteParams& p, int32_t* expert_counts, CUstream_st* stream) {
  RETURN_IF_ERROR(moe_cuda_internal::ValidateMoeRouteCuda(p));
  EnqueueRoute(p, expert_counts, stream);
  return absl::OkStatus();
}

absl::Status LaunchMoePermute(const MoePermuteParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  EnqueuePermute(p, stream);
  return absl::OkStatus();
}

absl::Status LaunchMoeExpertUp(const MoeExpertUpParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  EnqueueUp(p, stream);
  return absl::OkStatus();
}

absl::Status LaunchMoeExpertDown(const MoeExpertDownParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  EnqueueDown(p, stream);
  return absl::OkStatus();
}

absl::Status LaunchMoeCombine(const MoeCombineParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  EnqueueCombine(p, stream);
  return absl::OkStatus();
}

absl::Status MoeCuda(const MoeCudaParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.m == 0) return absl::OkStatus();
  const MoeCudaWeights& w = *p.weights;
  const int64_t m = p.m, k = p.options.top_k, e = w.n_experts, slots = m * k;
  const moe_cuda_internal::MoeCudaLayout l =
      moe_cuda_internal::ComputeMoeCudaLayout(e, w.dim, w.inter, m, k);
  auto* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p.workspace) + 255) &
                                                ~uintptr_t{255});
  auto* counts = reinterpret_cast<int32_t*>(base + l.counts);
  auto* offsets = reinterpret_cast<int32_t*>(base + l.offsets);
  auto* num_tiles = reinterpret_cast<int32_t*>(base + l.num_tiles);
  auto* tiles = reinterpret_cast<int32_t*>(base + l.tiles);
  auto* ids = reinterpret_cast<int32_t*>(base + l.ids);
  auto* weights = reinterpret_cast<float*>(base + l.weights);
  auto* slot_token = reinterpret_cast<int32_t*>(base + l.slot_token);
  auto* slot_weight = reinterpret_cast<float*>(base + l.slot_weight);
  auto* token_slot = reinterpret_cast<int32_t*>(base + l.token_slot);
  auto* xg = reinterpret_cast<uint16_t*>(base + l.xg);
  auto* ag = reinterpret_cast<uint16_t*>(base + l.ag);
  uint16_t* ye = xg;  // xg is dead once the up stage has run (same stream)

  CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(int32_t) * e, stream));
  const MoeRouteParams rp{p.options,      m,          e,   p.logits, w.gate_bias,
                          w.gate_bias_vl, p.is_image, ids, weights};
  EnqueueRoute(rp, counts, stream);
  if (p.expert_ids != nullptr) {
    CUDA_CHECK(cudaMemcpyAsync(p.expert_ids, ids, sizeof(int32_t) * slots, cudaMemcpyDeviceToDevice,
                               stream));
  }
  if (p.expert_weights != nullptr) {
    CUDA_CHECK(cudaMemcpyAsync(p.expert_weights, weights, sizeof(float) * slots,
                               cudaMemcpyDeviceToDevice, stream));
  }
  const int64_t tile_rows = MoeCudaTileRows(m, k, e);
  MoePermuteParams pp;
  pp.m = m;
  pp.n_experts = e;
  pp.top_k = k;
  pp.dim = w.dim;
  pp.tile_rows = tile_rows;
  pp.expert_ids = ids;
  pp.expert_weights = weights;
  pp.expert_counts = counts;
  pp.x = p.x;
  pp.x_stride = p.x_stride;
  pp.offsets = offsets;
  pp.slot_token = slot_token;
  pp.slot_weight = slot_weight;
  pp.token_slot = token_slot;
  pp.tiles = tiles;
  pp.num_tiles = num_tiles;
  pp.xg = xg;
  EnqueuePermute(pp, stream);

  MoeExpertUpParams up;
  up.weights = &w;
  up.swiglu_limit = p.options.swiglu_limit;
  up.slots = slots;
  up.tile_rows = tile_rows;
  up.offsets = offsets;
  up.tiles = tiles;
  up.num_tiles = num_tiles;
  up.xg = xg;
  up.slot_weight = slot_weight;
  up.ag = ag;
  EnqueueUp(up, stream);

  MoeExpertDownParams down;
  down.weights = &w;
  down.slots = slots;
  down.tile_rows = tile_rows;
  down.offsets = offsets;
  down.tiles = tiles;
  down.num_tiles = num_tiles;
  down.ag = ag;
  down.ye = ye;
  EnqueueDown(down, stream);

  MoeCombineParams cp;
  cp.m = m;
  cp.top_k = k;
  cp.dim = w.dim;
  cp.expert_ids = ids;
  cp.token_slot = token_slot;
  cp.ye = ye;
  cp.shared_y = p.shared_y;
  cp.shared_y_stride = p.shared_y_stride;
  cp.y = p.y;
  cp.y_stride = p.y_stride;
  EnqueueCombine(cp, stream);
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
