// CUDA launchers of the MoE layer: validate (moe_cuda_params.cc, host-only and tested without a
// GPU), pick the instantiation, size the grid, launch; MoeCuda chains the stages over one
// workspace.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/per_device_cache.h"
#include "kernels/common/side_stream.h"
#include "kernels/moe/cuda/moe_combine.cuh"
#include "kernels/moe/cuda/moe_front.cuh"
#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/cuda/moe_permute.cuh"
#include "kernels/moe/cuda/moe_ring_launch.h"
#include "kernels/moe/cuda/moe_route.cuh"
#include "kernels/moe/cuda/moe_stream_launch.h"
#include "kernels/moe/cuda/moe_wgmma_gemm.cuh"
#include "kernels/moe/cuda/moe_wgmma_rs_launch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_shared_cuda.h"

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

// MoeFp4CodesToDeviceOrder on the device (LaunchMoeFp4ToDeviceOrder): each 32-bit word in place.
__global__ void Fp4ToDeviceOrderKernel(uint32_t* words, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    words[i] = MoeFp4ToDeviceOrder(words[i]);
  }
}

template <int kPerLane>
void LaunchRouteWarp(const MoeRouteParams& p, int32_t* counts, cudaStream_t stream) {
  constexpr int64_t kTokensPerBlock = moe_device::kRouteWarpThreads / 32;
  moe_device::MoeRouteWarpKernel<kPerLane>
      <<<Blocks((p.m + kTokensPerBlock - 1) / kTokensPerBlock, kMaxGridX),
         moe_device::kRouteWarpThreads, 0, stream>>>(p, counts);
  CUDA_CHECK(cudaGetLastError());
}

void EnqueueRoute(const MoeRouteParams& p, int32_t* counts, MoeCudaPath path, cudaStream_t stream) {
  if (p.m == 0) return;
  if (MoeCudaRoutePath(p.m, path) == MoeCudaPath::kLarge) {
    switch (moe_device::RouteExpertsPerLane(p.n_experts)) {
      case 1:
        return LaunchRouteWarp<1>(p, counts, stream);
      case 4:
        return LaunchRouteWarp<4>(p, counts, stream);
      case 12:
        return LaunchRouteWarp<12>(p, counts, stream);
      default:
        return LaunchRouteWarp<32>(p, counts, stream);
    }
  }
  moe_device::
      MoeRouteKernel<<<Blocks(p.m, kMaxGridX), moe_device::RouteThreads(p.n_experts), 0, stream>>>(
          p, counts);
  CUDA_CHECK(cudaGetLastError());
}

// The multi-block sort: per-block counts, the scan over blocks × experts (+ offsets and tiles),
// the per-block stable scatter.
void EnqueueMultiBlockSort(const MoePermuteParams& p, const MoeCudaSortPlan& plan,
                           cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  EnsureSmemLimit(moe_device::MoeSortScatterKernel,
                  static_cast<int>(moe_device::SortScatterSmemBytes(kMoeCudaMaxExperts)), smem_set);
  const unsigned blocks = static_cast<unsigned>(plan.blocks);
  moe_device::MoeSortCountKernel<<<blocks, moe_device::kSortThreads,
                                   moe_device::SortCountSmemBytes(p.n_experts), stream>>>(
      p, plan.chunk);
  CUDA_CHECK(cudaGetLastError());
  moe_device::MoeSortScanKernel<<<1, moe_device::kSortThreads,
                                  moe_device::SortScanSmemBytes(p.n_experts), stream>>>(
      p, plan.blocks);
  CUDA_CHECK(cudaGetLastError());
  moe_device::MoeSortScatterKernel<<<blocks, moe_device::kSortThreads,
                                     moe_device::SortScatterSmemBytes(p.n_experts), stream>>>(
      p, plan.chunk);
  CUDA_CHECK(cudaGetLastError());
}

void EnqueuePermute(const MoePermuteParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  const MoeCudaSortPlan plan = MoeCudaPlanSort(p.m * p.top_k, p.path, p.sort_scratch != nullptr);
  bool fused = false;
  if (plan.path == MoeCudaPath::kLarge) {
    EnqueueMultiBlockSort(p, plan, stream);
  } else {
    static std::atomic<uint64_t> smem_set{0};
    const size_t smem = moe_device::SortSmemBytes(p.n_experts);
    EnsureSmemLimit(moe_device::MoeSortKernel,
                    static_cast<int>(moe_device::SortSmemBytes(kMoeCudaMaxExperts)), smem_set);
    // When one pass of the sort's threads covers the quantiser blocks (a few tokens: 3 at D
    // 5120), its block also gathers: one launch fewer on the batch-1 path. Beyond, a grid of its
    // own.
    fused = p.m * (p.dim / 32) <= moe_device::kSortThreads;
    moe_device::MoeSortKernel<<<1, moe_device::kSortThreads, smem, stream>>>(p, fused);
    CUDA_CHECK(cudaGetLastError());
  }
  if (fused) return;
  moe_device::
      MoeQuantGatherKernel<<<Blocks(p.m, kMaxGridX), moe_device::kGatherThreads, 0, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

template <int kPerLane>
void LaunchFront(const MoeRouteParams& rp, const MoePermuteParams& p,
                 moe_device::FrontGather gather, int ctas, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  EnsureSmemLimit(
      moe_device::MoeFrontKernel<kPerLane>,
      static_cast<int>(moe_device::FrontSmemBytes(kMoeCudaFrontMaxTokens, kMoeCudaMaxExperts)),
      smem_set);
  const size_t smem = moe_device::FrontSmemBytes(p.m, p.n_experts);
  if (p.programmatic) {
    cuda_common::LaunchPdl(moe_device::MoeFrontKernel<kPerLane>, dim3(ctas),
                           dim3(moe_device::kSortThreads), smem, stream, rp, p, gather);
    return;
  }
  moe_device::MoeFrontKernel<kPerLane>
      <<<ctas, moe_device::kSortThreads, smem, stream>>>(rp, p, gather);
  CUDA_CHECK(cudaGetLastError());
}

// Route + sort in one block, and the quantise: with xg_by_token (rows by token, which do not
// depend on the routing) by quantiser CTAs of the same launch while block 0 routes, a quad of
// lanes per 32-value block (1 token at D 5120: 160 blocks, 2 CTAs); with top_k copies (the slot
// rows come from the sort) by block 0 after its scatter when one pass covers x, else by a
// quantise grid after it. The caller validated MoeCudaFrontFits.
void EnqueueFront(const MoeRouteParams& rp, const MoePermuteParams& params, cudaStream_t stream) {
  using moe_device::FrontGather;
  if (params.m == 0) return;
  const int64_t blocks = params.m * (params.dim / 32), quads = moe_device::kSortThreads / 4;
  const FrontGather gather = params.xg_by_token                   ? FrontGather::kSideCtas
                             : blocks <= moe_device::kSortThreads ? FrontGather::kInBlock
                                                                  : FrontGather::kNone;
  MoePermuteParams p = params;
  // A quantise grid follows: the front's signal would schedule it, not the ring.
  if (gather == FrontGather::kNone) p.launch_dependents = false;
  const int ctas =
      gather == FrontGather::kSideCtas ? 1 + static_cast<int>((blocks + quads - 1) / quads) : 1;
  switch (moe_device::RouteExpertsPerLane(p.n_experts)) {
    case 1:
      LaunchFront<1>(rp, p, gather, ctas, stream);
      break;
    case 4:
      LaunchFront<4>(rp, p, gather, ctas, stream);
      break;
    case 12:
      LaunchFront<12>(rp, p, gather, ctas, stream);
      break;
    default:
      LaunchFront<32>(rp, p, gather, ctas, stream);
      break;
  }
  if (gather != FrontGather::kNone) return;
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

template <int kMT, int kWN, bool kUp, int kBK, bool kHoist>
void LaunchGemmBK(const GemmArgs& g, int64_t slots, int64_t n_experts, cudaStream_t stream) {
  using S = GemmShape<kMT, kWN, kUp, kBK>;
  auto* kernel = moe_device::MoeExpertGemmKernel<kMT, kWN, kUp, kBK, kHoist>;
  static std::atomic<uint64_t> smem_set{0};
  EnsureSmemLimit(kernel, S::kSmemBytes, smem_set);
  const dim3 grid(static_cast<unsigned>(g.n / S::kBN),
                  Blocks(MaxTiles(slots, n_experts, S::kBM), kMaxGridY));
  kernel<<<grid, moe_device::kGemmThreads, S::kSmemBytes, stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

// K steps of 256 (whole 128-byte lines of every weight row per request) where K allows, unless
// 128 is asked for (the first design, kept for comparison).
// `hoist`: the per-tile precomputed copy addresses (HoistedLoads; same outputs).
template <int kMT, int kWN, bool kUp>
void LaunchGemm(const GemmArgs& g, int64_t k_step, bool hoist, int64_t slots, int64_t n_experts,
                cudaStream_t stream) {
  if (k_step != 128 && g.k % 256 == 0) {
    if (hoist) return LaunchGemmBK<kMT, kWN, kUp, 256, true>(g, slots, n_experts, stream);
    return LaunchGemmBK<kMT, kWN, kUp, 256, false>(g, slots, n_experts, stream);
  }
  if (hoist) return LaunchGemmBK<kMT, kWN, kUp, 128, true>(g, slots, n_experts, stream);
  LaunchGemmBK<kMT, kWN, kUp, 128, false>(g, slots, n_experts, stream);
}

template <int kMT, int kWN, bool kUp, int kBK>
MoeCudaGemmPlan DescribeBK(int64_t n, int64_t slots, int64_t n_experts) {
  using S = GemmShape<kMT, kWN, kUp, kBK>;
  auto* kernel = moe_device::MoeExpertGemmKernel<kMT, kWN, kUp, kBK>;
  static std::atomic<uint64_t> smem_set{0};
  EnsureSmemLimit(kernel, S::kSmemBytes, smem_set);
  int ctas = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, moe_device::kGemmThreads,
                                                           S::kSmemBytes));
  MoeCudaGemmPlan plan;
  plan.tile_rows = S::kBM;
  plan.weight_rows = S::kNB;
  plan.k_step = kBK;
  plan.stages = S::kStages;
  plan.smem_bytes = S::kSmemBytes;
  plan.grid_x = n / S::kBN;
  plan.grid_y = Blocks(MaxTiles(slots, n_experts, S::kBM), kMaxGridY);
  plan.ctas_per_sm = ctas;
  plan.weight_stage_bytes = S::kBStage - 16 * S::kNB + 4 * S::kScaleWords * S::kNB;
  return plan;
}

template <int kMT, int kWN, bool kUp>
MoeCudaGemmPlan Describe(int64_t n, int64_t k, int64_t k_step, int64_t slots, int64_t n_experts) {
  if (k_step != 128 && k % 256 == 0) return DescribeBK<kMT, kWN, kUp, 256>(n, slots, n_experts);
  return DescribeBK<kMT, kWN, kUp, 128>(n, slots, n_experts);
}

// The streaming GEMM (tile_rows 8, or 16 with the stage params' `stream`): cuda/moe_stream_launch.
void LaunchStreamTiles(const GemmArgs& g, bool up, int64_t tile_rows, int row_tiles, int64_t slots,
                       int64_t n_experts, cudaStream_t stream) {
  moe_device::LaunchStream(g, up, tile_rows, row_tiles, slots,
                           Blocks(MaxTiles(slots, n_experts, tile_rows), kMaxGridY), stream);
}

// The wgmma GEMM (tile_rows 128): a CTA per (256 weight rows, tile), grid-stride over the tiles.
template <bool kUp>
void LaunchWgmma(const GemmArgs& g, int64_t slots, int64_t n_experts, cudaStream_t stream) {
  using S = moe_device::WgShape<kUp>;
  auto* kernel = moe_device::MoeExpertWgmmaKernel<kUp>;
  static std::atomic<uint64_t> smem_set{0};
  EnsureSmemLimit(kernel, S::kSmemBytes, smem_set);
  const dim3 grid(static_cast<unsigned>((g.n + S::kBN - 1) / S::kBN),
                  Blocks(MaxTiles(slots, n_experts, kMoeCudaWgmmaTileRows), kMaxGridY));
  kernel<<<grid, moe_device::kWgThreads, S::kSmemBytes, stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

template <bool kUp>
MoeCudaGemmPlan DescribeWgmma(int64_t n, int64_t slots, int64_t n_experts) {
  using S = moe_device::WgShape<kUp>;
  auto* kernel = moe_device::MoeExpertWgmmaKernel<kUp>;
  static std::atomic<uint64_t> smem_set{0};
  EnsureSmemLimit(kernel, S::kSmemBytes, smem_set);
  int ctas = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, moe_device::kWgThreads,
                                                           S::kSmemBytes));
  MoeCudaGemmPlan plan;
  plan.wgmma = true;
  plan.tile_rows = kMoeCudaWgmmaTileRows;
  plan.weight_rows = moe_device::kWgNB;
  plan.k_step = moe_device::kWgBK;
  plan.stages = moe_device::kWgStages;
  plan.smem_bytes = S::kSmemBytes;
  plan.grid_x = (n + S::kBN - 1) / S::kBN;
  plan.grid_y = Blocks(MaxTiles(slots, n_experts, kMoeCudaWgmmaTileRows), kMaxGridY);
  plan.ctas_per_sm = ctas;
  plan.weight_stage_bytes = S::kWeightStageBytes;
  return plan;
}

void EnqueueUp(const MoeExpertUpParams& p, cudaStream_t stream) {
  if (p.slots == 0) return;
  const MoeCudaWeights& w = *p.weights;
  GemmArgs g;
  g.a = p.xg;
  g.a_row = p.slot_token;
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
  g.n_experts = w.n_experts;
  g.work_counters = p.wgmma_rs_counters;
  if (p.wgmma_rs) {
    return moe_device::LaunchWgmmaRs(g, true, p.tile_rows,
                                     MaxTiles(p.slots, w.n_experts, p.tile_rows), p.wgmma_rs_ctas,
                                     p.slots, stream);
  }
  switch (p.tile_rows) {
    case kMoeCudaStreamTileRows:
      if (p.ring && moe_device::LaunchRing(g, true, p.slots, p.ring_partials,
                                           p.ring_counters_zeroed, p.ring_cut, stream)) {
        return;
      }
      return LaunchStreamTiles(g, true, p.tile_rows, p.stream_row_tiles, p.slots, w.n_experts,
                               stream);
    case kMoeCudaWgmmaTileRows:
      return LaunchWgmma<true>(g, p.slots, w.n_experts, stream);
    case 16:
      if (p.stream) {
        return LaunchStreamTiles(g, true, p.tile_rows, p.stream_row_tiles, p.slots, w.n_experts,
                                 stream);
      }
      return LaunchGemm<1, 2, true>(g, p.k_step, p.hoisted_addresses, p.slots, w.n_experts, stream);
    case 32:
      if (p.stream) {
        return LaunchStreamTiles(g, true, p.tile_rows, p.stream_row_tiles, p.slots, w.n_experts,
                                 stream);
      }
      return LaunchGemm<2, 4, true>(g, p.k_step, p.hoisted_addresses, p.slots, w.n_experts, stream);
    default:
      return LaunchGemm<4, 4, true>(g, p.k_step, p.hoisted_addresses, p.slots, w.n_experts, stream);
  }
}

// fused_combine (MoeCuda only): where the ring runs, it runs without its epilogue and
// *fused_combine becomes true (the caller then combines with LaunchRingCombine).
void EnqueueDown(const MoeExpertDownParams& p, cudaStream_t stream, bool* fused_combine = nullptr) {
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
  g.n_experts = w.n_experts;
  g.work_counters = p.wgmma_rs_counters;
  if (p.wgmma_rs) {
    return moe_device::LaunchWgmmaRs(g, false, p.tile_rows,
                                     MaxTiles(p.slots, w.n_experts, p.tile_rows), p.wgmma_rs_ctas,
                                     p.slots, stream);
  }
  switch (p.tile_rows) {
    case kMoeCudaStreamTileRows:
      if (p.ring &&
          moe_device::LaunchRing(g, false, p.slots, p.ring_partials, p.ring_counters_zeroed,
                                 p.ring_cut, stream, fused_combine == nullptr)) {
        if (fused_combine != nullptr) *fused_combine = true;
        return;
      }
      return LaunchStreamTiles(g, false, p.tile_rows, p.stream_row_tiles, p.slots, w.n_experts,
                               stream);
    case kMoeCudaWgmmaTileRows:
      return LaunchWgmma<false>(g, p.slots, w.n_experts, stream);
    case 16:
      if (p.stream) {
        return LaunchStreamTiles(g, false, p.tile_rows, p.stream_row_tiles, p.slots, w.n_experts,
                                 stream);
      }
      return LaunchGemm<1, 2, false>(g, p.k_step, p.hoisted_addresses, p.slots, w.n_experts,
                                     stream);
    case 32:
      if (p.stream) {
        return LaunchStreamTiles(g, false, p.tile_rows, p.stream_row_tiles, p.slots, w.n_experts,
                                 stream);
      }
      return LaunchGemm<2, 4, false>(g, p.k_step, p.hoisted_addresses, p.slots, w.n_experts,
                                     stream);
    default:
      return LaunchGemm<4, 4, false>(g, p.k_step, p.hoisted_addresses, p.slots, w.n_experts,
                                     stream);
  }
}

void EnqueueCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  moe_device::
      MoeCombineKernel<<<Blocks(p.m, kMaxGridX), moe_device::CombineThreads(p.dim), 0, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int64_t MoeCudaRsMinSlotsPerExpert(int64_t requested) {
  if (requested > 0) return requested;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // no device: the H200's threshold (any choice is correct)
    return kMoeCudaWgmmaMinSlotsPerExpert;
  }
  static PerDeviceInt cache;
  return cache.Get(device, [device] {
    int mem_khz = 0, bus_bits = 0, sms = 0, sm_khz = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device) != cudaSuccess || sms <= 0 ||
        sm_khz <= 0) {
      (void)cudaGetLastError();
      return static_cast<int>(kMoeCudaWgmmaMinSlotsPerExpert);
    }
    // Peak DRAM bytes per second (two transfers per memory clock) over SM-cycles per second.
    const double bytes_per_s = 2.0 * 1e3 * mem_khz * (bus_bits / 8.0);
    const double sm_cycles_per_s = 1e3 * static_cast<double>(sm_khz) * sms;
    return static_cast<int>(MoeCudaRsMinSlotsPerExpertFor(bytes_per_s / sm_cycles_per_s));
  });
}

absl::StatusOr<MoeCudaGemmPlan> MoeCudaDescribeGemm(const MoeCudaWeights& weights, int64_t m,
                                                    int64_t top_k, int64_t k_step, bool up,
                                                    MoeCudaGemm gemm, MoeCudaRingCut ring_cut,
                                                    int64_t rs_tile_rows,
                                                    int64_t rs_min_slots_per_expert) {
  RETURN_IF_ERROR(Validate(weights));
  if (static_cast<int>(ring_cut) < 0 ||
      static_cast<int>(ring_cut) > static_cast<int>(MoeCudaRingCut::kDynamic)) {
    return absl::InvalidArgumentError(
        "MoeCudaDescribeGemm: ring_cut is not kAuto, kStatic or kDynamic");
  }
  const int64_t max_k = std::max(weights.dim, weights.inter);
  if (static_cast<int>(gemm) < 0 ||
      static_cast<int>(gemm) > static_cast<int>(MoeCudaGemm::kStreamRing) ||
      ((gemm == MoeCudaGemm::kStream || gemm == MoeCudaGemm::kStream32 ||
        gemm == MoeCudaGemm::kStreamRing) &&
       max_k > kMoeCudaStreamMaxK) ||
      (gemm == MoeCudaGemm::kStream16 && max_k > kMoeCudaStream16MaxK)) {
    return absl::InvalidArgumentError(
        "MoeCudaDescribeGemm: gemm is not kAuto, kTiled, kStream, kWgmma, kWgmmaRs, kStream16, "
        "kStream32 or kStreamRing, or a streaming GEMM with max(D, I) above kMoeCudaStreamMaxK / "
        "kMoeCudaStream16MaxK");
  }
  if (m < 1 || top_k < 1 || top_k > std::min(kMoeCudaMaxTopK, weights.n_experts)) {
    return absl::InvalidArgumentError("MoeCudaDescribeGemm: m or top_k out of range");
  }
  if (k_step != kMoeCudaKStepAuto && k_step != 128 && k_step != 256) {
    return absl::InvalidArgumentError("MoeCudaDescribeGemm: k_step must be 0, 128 or 256");
  }
  if (!MoeCudaIsRsTileRowsChoice(rs_tile_rows)) {
    return absl::InvalidArgumentError(
        "MoeCudaDescribeGemm: rs_tile_rows must be 0, 32, 48, 64, 80, 96 or 128");
  }
  if (rs_min_slots_per_expert < 0) {
    return absl::InvalidArgumentError(
        "MoeCudaDescribeGemm: rs_min_slots_per_expert must be 0 (the device's) or positive");
  }
  const int64_t rs_min = MoeCudaRsMinSlotsPerExpert(rs_min_slots_per_expert);
  const MoeCudaGemm chosen = MoeCudaChooseGemm(m, top_k, weights.n_experts, gemm, max_k, rs_min);
  const int64_t tile_rows = MoeCudaTileRows(m, top_k, weights.n_experts, gemm, max_k, rs_min);
  const int64_t n = up ? weights.inter : weights.dim, k = up ? weights.dim : weights.inter;
  const int64_t slots = m * top_k, e = weights.n_experts;
  if (chosen == MoeCudaGemm::kStreamRing && slots <= MoeCudaRingMaxSlots(e) && k % 256 == 0) {
    return moe_device::DescribeRing(up, moe_device::RingCutIsDynamic(ring_cut, slots, e));
  }
  if (chosen == MoeCudaGemm::kStream || chosen == MoeCudaGemm::kStreamRing ||
      chosen == MoeCudaGemm::kStream16 || chosen == MoeCudaGemm::kStream32) {
    return moe_device::DescribeStream(up, tile_rows, n, k, slots,
                                      Blocks(MaxTiles(slots, e, tile_rows), kMaxGridY));
  }
  if (chosen == MoeCudaGemm::kWgmmaRs) {
    const int64_t rows = MoeCudaRsTileRows(slots, e, rs_tile_rows);
    return moe_device::DescribeWgmmaRs(up, rows, n, MaxTiles(slots, e, rows));
  }
  if (tile_rows == kMoeCudaWgmmaTileRows) {
    return up ? DescribeWgmma<true>(n, slots, e) : DescribeWgmma<false>(n, slots, e);
  }
  if (up) {
    if (tile_rows == 16) return Describe<1, 2, true>(n, k, k_step, slots, e);
    if (tile_rows == 32) return Describe<2, 4, true>(n, k, k_step, slots, e);
    return Describe<4, 4, true>(n, k, k_step, slots, e);
  }
  if (tile_rows == 16) return Describe<1, 2, false>(n, k, k_step, slots, e);
  if (tile_rows == 32) return Describe<2, 4, false>(n, k, k_step, slots, e);
  return Describe<4, 4, false>(n, k, k_step, slots, e);
}

absl::Status LaunchMoeRoute(const MoeRouteParams& p, int32_t* expert_counts, CUstream_st* stream,
                            MoeCudaPath path) {
  RETURN_IF_ERROR(moe_cuda_internal::ValidateMoeRouteCuda(p, path));
  EnqueueRoute(p, expert_counts, path, stream);
  return absl::OkStatus();
}

absl::Status LaunchMoePermute(const MoePermuteParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  EnqueuePermute(p, stream);
  return absl::OkStatus();
}

absl::Status LaunchMoeRoutePermute(const MoeRouteParams& route, const MoePermuteParams& permute,
                                   CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateMoeRoutePermute(route, permute));
  EnqueueFront(route, permute, stream);
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

absl::Status LaunchMoeFp4ToDeviceOrder(uint8_t* codes, int64_t bytes, CUstream_st* stream) {
  RETURN_IF_ERROR(moe_cuda_internal::ValidateMoeFp4Conversion(codes, bytes));
  if (bytes == 0) return absl::OkStatus();
  const int64_t words = bytes / 4;
  Fp4ToDeviceOrderKernel<<<Blocks((words + 255) / 256, kMaxGridX), 256, 0, stream>>>(
      reinterpret_cast<uint32_t*>(codes), words);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchMoeCombine(const MoeCombineParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  EnqueueCombine(p, stream);
  return absl::OkStatus();
}

absl::Status MoeCuda(const MoeCudaParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.m == 0) {
    // Nothing to compute, but the caller's forked work is still joined (a capture must not end
    // with an unjoined branch).
    if (p.after_up) p.after_up(stream);
    if (p.shared_y_ready != nullptr) CUDA_CHECK(cudaStreamWaitEvent(stream, p.shared_y_ready, 0));
    if (p.hc_post_ready != nullptr) CUDA_CHECK(cudaStreamWaitEvent(stream, p.hc_post_ready, 0));
    return absl::OkStatus();
  }
  const MoeCudaWeights& w = *p.weights;
  const int64_t m = p.m, k = p.options.top_k, e = w.n_experts, slots = m * k;
  // Validate checked the shared weights; an error here is a broken invariant.
  const absl::StatusOr<size_t> shared_bytes =
      moe_cuda_internal::SharedExpertBytes("MoeCuda", p.shared, w.dim, m);
  CHECK_OK(shared_bytes.status());
  const moe_cuda_internal::MoeCudaLayout l =
      moe_cuda_internal::ComputeMoeCudaLayout(e, w.dim, w.inter, m, k, *shared_bytes);
  auto* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p.workspace) + 255) &
                                                ~uintptr_t{255});
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
  auto* ring_partials = reinterpret_cast<float*>(base + l.ring_partials);

  // The shared expert first: it needs only x, and its output waits in the workspace for the
  // combine. Its workspace regions are its own, so it may run on a forked stream next to the
  // routed stages (joined before the combine).
  const uint16_t* shared_y = p.shared_y;
  const bool fork = p.shared != nullptr && p.shared_concurrent;
  int64_t shared_y_stride = p.shared_y_stride;
  if (p.shared != nullptr) {
    auto* sy = reinterpret_cast<uint16_t*>(base + l.shared_y);
    MoeSharedExpertParams sp;
    sp.weights = p.shared;
    sp.swiglu_limit = p.options.swiglu_limit;
    sp.m = m;
    sp.x = p.x;
    sp.x_stride = p.x_stride;
    sp.y = sy;
    sp.y_stride = w.dim;
    sp.workspace = base + l.shared_ws;
    sp.workspace_bytes = *shared_bytes;
    CHECK_OK(LaunchMoeSharedExpert(sp, fork ? ForkSideStream(stream) : stream));
    shared_y = sy;
    shared_y_stride = w.dim;
  }

  // The sort counts the ids itself: no counts from the route, no memset.
  const MoeRouteParams rp{p.options,      m,          e,   p.logits, w.gate_bias,
                          w.gate_bias_vl, p.is_image, ids, weights};
  const bool front = p.fused_front && MoeCudaFrontFits(m) && p.route_path == MoeCudaPath::kAuto &&
                     p.sort_path == MoeCudaPath::kAuto;
  if (!front) EnqueueRoute(rp, nullptr, p.route_path, stream);
  const MoeCudaGemm gemm = MoeCudaChooseGemm(m, k, e, p.gemm, std::max(w.dim, w.inter),
                                             MoeCudaRsMinSlotsPerExpert(p.rs_min_slots_per_expert));
  const bool rs = gemm == MoeCudaGemm::kWgmmaRs;
  const int64_t tile_rows =
      rs ? MoeCudaRsTileRows(slots, e, p.rs_tile_rows) : MoeCudaTileRows(m, k, e, gemm);
  const bool wide_stream = gemm == MoeCudaGemm::kStream16 || gemm == MoeCudaGemm::kStream32;
  // The workspace holds the ring's partials up to MoeCudaRingMaxSlots(E); larger calls stream
  // (kStream).
  const bool ring = gemm == MoeCudaGemm::kStreamRing && slots <= MoeCudaRingMaxSlots(e);
  // The register-sourced GEMM for the down projection after another up GEMM (down_gemm; from the
  // choice above, what MoeCudaDownRsAfterOtherUp says).
  const bool rs_down_after = p.down_gemm == MoeCudaGemm::kWgmmaRs && !rs && !ring;
  MoePermuteParams pp;
  pp.m = m;
  pp.n_experts = e;
  pp.top_k = k;
  pp.dim = w.dim;
  pp.tile_rows = tile_rows;
  pp.expert_ids = ids;
  pp.expert_weights = weights;
  pp.x = p.x;
  pp.x_stride = p.x_stride;
  pp.offsets = offsets;
  pp.slot_token = slot_token;
  pp.slot_weight = slot_weight;
  pp.token_slot = token_slot;
  pp.tiles = tiles;
  pp.num_tiles = num_tiles;
  pp.xg = xg;
  pp.xg_by_token = !p.gather_slot_rows;
  pp.wgmma_rs_order = rs;  // the operand order of the GEMM that reads xg
  pp.path = p.sort_path;
  pp.sort_scratch = reinterpret_cast<int32_t*>(base + l.sort_scratch);
  // The ring GEMMs' (words 0, 1) or the register-sourced GEMM's (up 0, 1; down 2, 3) work
  // counters, cleared here rather than by a memset node of their own (each GEMM leaves its own
  // zero too).
  int32_t* counters = moe_device::RingCounterWords(ring_partials);
  pp.ring_counters = ring || rs || rs_down_after ? counters : nullptr;
  // Only where the up ring is the front's next kernel: no routing copies after the front (and
  // EnqueueFront drops it where a quantise grid follows).
  pp.launch_dependents =
      front && ring && p.early_ring && p.expert_ids == nullptr && p.expert_weights == nullptr;
  pp.route_redux = p.route_redux;
  pp.programmatic = front && p.front_programmatic;
  if (front) {
    EnqueueFront(rp, pp, stream);
  } else {
    EnqueuePermute(pp, stream);
  }
  // The routing copies for the caller (after the front, which routes too).
  if (p.expert_ids != nullptr) {
    CUDA_CHECK(cudaMemcpyAsync(p.expert_ids, ids, sizeof(int32_t) * slots, cudaMemcpyDeviceToDevice,
                               stream));
  }
  if (p.expert_weights != nullptr) {
    CUDA_CHECK(cudaMemcpyAsync(p.expert_weights, weights, sizeof(float) * slots,
                               cudaMemcpyDeviceToDevice, stream));
  }

  MoeExpertUpParams up;
  up.weights = &w;
  up.swiglu_limit = p.options.swiglu_limit;
  up.slots = slots;
  up.tile_rows = tile_rows;
  up.offsets = offsets;
  up.tiles = tiles;
  up.num_tiles = num_tiles;
  up.xg = xg;
  up.slot_token = p.gather_slot_rows ? nullptr : slot_token;
  up.slot_weight = slot_weight;
  up.ag = ag;
  up.k_step = p.gemm_k_step;
  up.hoisted_addresses = p.gemm_hoisted_addresses;
  up.stream_row_tiles = p.gemm_stream_row_tiles;
  up.wgmma_rs = rs;
  up.wgmma_rs_counters = rs ? counters : nullptr;
  up.stream = wide_stream;
  up.ring = ring;
  up.ring_partials = ring_partials;
  up.ring_partials_bytes = MoeCudaRingPartialBytes(slots, 2 * w.inter);
  up.ring_counters_zeroed = ring;
  up.ring_cut = p.ring_cut;
  EnqueueUp(up, stream);
  if (p.after_up) p.after_up(stream);  // the caller's work forked once the up stage has run

  if (rs_down_after) {
    // The up GEMM read the tile list; the down GEMM takes its 128-row tiles (in place) and ag in
    // its operand order. Validated parts of the call: an error is a broken invariant.
    MoeRegroupTilesParams rg;
    rg.n_experts = e;
    rg.slots = slots;
    rg.tile_rows = tile_rows;
    rg.offsets = offsets;
    rg.tiles = tiles;
    rg.num_tiles = num_tiles;
    rg.tiles_out = tiles;
    rg.num_tiles_out = num_tiles;
    CHECK_OK(LaunchMoeRegroupTiles(rg, stream));
    CHECK_OK(LaunchMoeToRsOperandOrder(ag, slots, w.inter, stream));
  }
  const bool down_rs = rs || rs_down_after;
  MoeExpertDownParams down;
  down.weights = &w;
  down.slots = slots;
  down.tile_rows = rs_down_after ? kMoeCudaWgmmaTileRows : tile_rows;
  down.offsets = offsets;
  down.tiles = tiles;
  down.num_tiles = num_tiles;
  down.ag = ag;
  down.ye = ye;
  down.k_step = p.gemm_k_step;
  down.hoisted_addresses = p.gemm_hoisted_addresses;
  down.stream_row_tiles = p.gemm_stream_row_tiles;
  down.wgmma_rs = down_rs;
  down.wgmma_rs_counters = down_rs ? counters + 2 : nullptr;
  down.stream = wide_stream && !rs_down_after;
  down.ring = ring;
  down.ring_partials = ring_partials;
  down.ring_partials_bytes = MoeCudaRingPartialBytes(slots, w.dim);
  down.ring_counters_zeroed = ring;
  down.ring_cut = p.ring_cut;
  bool fused_combine = false;
  EnqueueDown(down, stream, p.ring_fused_combine ? &fused_combine : nullptr);

  MoeCombineParams cp;
  cp.m = m;
  cp.top_k = k;
  cp.dim = w.dim;
  cp.expert_ids = ids;
  cp.token_slot = token_slot;
  cp.ye = ye;
  cp.shared_y = shared_y;
  cp.shared_y_stride = shared_y_stride;
  cp.y = p.y;
  cp.y_stride = p.y_stride;
  cp.hc_post = p.hc_post;
  if (fork) JoinSideStream(stream);
  if (p.shared_y_ready != nullptr) CUDA_CHECK(cudaStreamWaitEvent(stream, p.shared_y_ready, 0));
  if (p.hc_post_ready != nullptr) CUDA_CHECK(cudaStreamWaitEvent(stream, p.hc_post_ready, 0));
  if (fused_combine) {
    moe_device::LaunchRingCombine(cp, ring_partials, num_tiles, slots, w.inter,
                                  moe_device::RingCutIsDynamic(p.ring_cut, slots, w.n_experts),
                                  stream);
  } else {
    EnqueueCombine(cp, stream);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
