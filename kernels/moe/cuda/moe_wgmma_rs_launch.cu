// The register-sourced wgmma expert GEMM's launchers (cuda/moe_wgmma_rs_launch.h). A translation
// unit of its own: the kernel is large and moe_launch.cu already instantiates the other GEMMs.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/moe/cuda/moe_wgmma_rs_gemm.cuh"
#include "kernels/moe/cuda/moe_wgmma_rs_launch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels::moe_device {
namespace {

template <bool kUp, uint32_t kWidths = kRsLandedWidths, int kBM = kRsBM>
auto* RsKernel() {
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = MoeExpertWgmmaRsKernel<kUp, kWidths, kBM>;
  EnsureSmemLimit(kernel, RsPlan<kBM>::kSmemBytes, smem_set);
  return kernel;
}

// Persistent CTAs, one per SM (RsPlan's shared memory allows no second), or `ctas` where positive;
// never
// more than the items (column blocks × the tile bound).
template <bool kUp>
dim3 RsGrid(int64_t n, int64_t max_tiles, int64_t ctas) {
  constexpr int64_t kBN = RsShape<kUp>::kBN;
  const int64_t items = (n + kBN - 1) / kBN * max_tiles;
  const int64_t want = ctas > 0 ? ctas : SmCount(CurrentDevice());
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min(items, want))));
}

// The kernel's TMA maps (RsTmaMaps): the codes (up: w1's and w3's), the slot rows where they
// come by TMA (RsSlotRowsByTma).
// MoeCuda's checks (16-byte aligned codes and ag, K a multiple of 128) make them describable, so
// a refusal is a broken invariant.
template <bool kUp, int kBM>
RsTmaMaps MakeMaps(const GemmArgs& g, int64_t slots) {
  RsTmaMaps maps{};
  if (RsSlotRowsByTma<kUp>(g)) {
    CHECK(wgmma_ws::MakeTmaRows(&maps.a, g.a, 2 * g.k, slots, 128, kBM, CU_TENSOR_MAP_SWIZZLE_128B))
        << "MoE RS GEMM: no TMA map for the slot rows at " << static_cast<const void*>(g.a)
        << " (K " << g.k << ", " << slots << " rows)";
  }
  const int64_t rows = g.n_experts * g.n;
  for (int i = 0; i < (kUp ? 2 : 1); ++i) {
    const uint8_t* codes = i == 0 ? g.w : g.w_up;
    CHECK(wgmma_ws::MakeTmaRows(i == 0 ? &maps.w : &maps.w_up, codes, g.k / 2, rows, kRsBK / 2,
                                kRsCodeBoxRows<kUp>, CU_TENSOR_MAP_SWIZZLE_64B))
        << "MoE RS GEMM: no TMA map for the codes at " << static_cast<const void*>(codes) << " (K "
        << g.k << ", " << rows << " rows)";
  }
  return maps;
}

template <bool kUp, uint32_t kWidths, int kBM = kRsBM>
void LaunchWidths(const GemmArgs& g, int64_t max_tiles, int64_t ctas, int64_t slots,
                  cudaStream_t stream) {
  auto* kernel = RsKernel<kUp, kWidths, kBM>();
  kernel<<<RsGrid<kUp>(g.n, max_tiles, ctas), RsPlan<kBM>::kThreads, RsPlan<kBM>::kSmemBytes,
           stream>>>(g, MakeMaps<kUp, kBM>(g, slots));
  CUDA_CHECK(cudaGetLastError());
}

// The heights below 128 the launcher has kernels for (their kRsNarrowTileWidths sets): exactly
// kMoeCudaRsTileHeights' rows, ascending.
template <int... kHeights>
struct RsHeights {};
using RsNarrowHeights = RsHeights<32, 48, 64, 80, 96>;
template <int... kHeights>
constexpr bool SameAsTheTable(RsHeights<kHeights...>) {
  constexpr int64_t kRows[] = {kHeights...};
  if (std::size(kRows) != std::size(kMoeCudaRsTileHeights)) return false;
  for (size_t i = 0; i < std::size(kRows); ++i) {
    if (kRows[i] != kMoeCudaRsTileHeights[i].rows) return false;
  }
  return true;
}
static_assert(SameAsTheTable(RsNarrowHeights{}), "a kernel for every MoeCudaRsTileHeight");

// Calls fn(std::integral_constant<int, kBM>) for the height kBM == tile_rows; false if none is.
template <typename Fn, int... kHeights>
bool ForHeight(int64_t tile_rows, Fn&& fn, RsHeights<kHeights...>) {
  return ((tile_rows == kHeights ? (fn(std::integral_constant<int, kHeights>{}), true) : false) ||
          ...);
}

// The width set RsWidthSetFor picks for `slots` rows of the experts. The up GEMM has no {32, 64}
// or {64, 96} kernel of 128-row tiles: it runs {64, 128} there. Tiles of 32 / 48 / 64 / 80 / 96
// rows (MoeCudaRsTileRows, which the stage params' validation holds them to) run the {16, 32} /
// {32, 48} / {32, 64} / {64, 80} / {64, 96} kernel of stages of that many rows, both projections.
template <bool kUp>
void Launch(const GemmArgs& g, int64_t tile_rows, int64_t max_tiles, int64_t ctas, int64_t slots,
            cudaStream_t stream) {
  if (tile_rows != kRsBM) {
    CHECK_EQ(MoeCudaRsTileRows(slots, g.n_experts, tile_rows), tile_rows)
        << "MoE RS GEMM: tile_rows for " << slots << " slot rows of " << g.n_experts << " experts";
    const bool launched = ForHeight(
        tile_rows,
        [&](auto bm) {
          constexpr int kBM = decltype(bm)::value;
          LaunchWidths<kUp, kRsNarrowTileWidths<kBM>, kBM>(g, max_tiles, ctas, slots, stream);
        },
        RsNarrowHeights{});
    CHECK(launched) << "MoE RS GEMM: no kernel for tile_rows " << tile_rows;
    return;
  }
  CHECK_EQ(tile_rows, kRsBM) << "MoE RS GEMM: tile_rows";
  switch (RsWidthSetFor(slots, g.n_experts, kUp)) {
    case kRsN16 | kRsN32:
      return LaunchWidths<kUp, kRsN16 | kRsN32>(g, max_tiles, ctas, slots, stream);
    case kRsN32 | kRsN64:
      if constexpr (!kUp)
        return LaunchWidths<kUp, kRsN32 | kRsN64>(g, max_tiles, ctas, slots, stream);
      break;
    case kRsN64 | kRsN96:
      if constexpr (!kUp)
        return LaunchWidths<kUp, kRsN64 | kRsN96>(g, max_tiles, ctas, slots, stream);
      break;
    default:
      break;
  }
  LaunchWidths<kUp, kRsLandedWidths>(g, max_tiles, ctas, slots, stream);
}

template <bool kUp, int kBM>
MoeCudaGemmPlan Describe(int64_t n, int64_t max_tiles) {
  using P = RsPlan<kBM>;
  int ctas = 0;
  constexpr uint32_t kWidths = kBM == kRsBM ? kRsLandedWidths : kRsNarrowTileWidths<kBM>;
  auto* kernel = RsKernel<kUp, kWidths, kBM>();
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, P::kThreads, P::kSmemBytes));
  const dim3 grid = RsGrid<kUp>(n, max_tiles, 0);
  MoeCudaGemmPlan plan;
  plan.wgmma = true;
  plan.wgmma_rs = true;
  plan.tile_rows = kBM;
  plan.weight_rows = kRsNB;
  plan.k_step = kRsBK;
  plan.stages = P::kStages;
  plan.smem_bytes = P::kSmemBytes;
  plan.grid_x = grid.x;
  plan.grid_y = grid.y;
  plan.ctas_per_sm = ctas;
  plan.weight_stage_bytes = RsShape<kUp>::kWeightStageBytes;
  return plan;
}

}  // namespace

void LaunchWgmmaRs(const GemmArgs& g, bool up, int64_t tile_rows, int64_t max_tiles, int64_t ctas,
                   int64_t slots, cudaStream_t stream) {
  if (up) return Launch<true>(g, tile_rows, max_tiles, ctas, slots, stream);
  Launch<false>(g, tile_rows, max_tiles, ctas, slots, stream);
}

MoeCudaGemmPlan DescribeWgmmaRs(bool up, int64_t tile_rows, int64_t n, int64_t max_tiles) {
  MoeCudaGemmPlan plan;
  const auto describe = [&](auto bm) {
    constexpr int kBM = decltype(bm)::value;
    plan = up ? Describe<true, kBM>(n, max_tiles) : Describe<false, kBM>(n, max_tiles);
  };
  if (!ForHeight(tile_rows, describe, RsNarrowHeights{})) {
    describe(std::integral_constant<int, kRsBM>{});
  }
  return plan;
}

}  // namespace flashserve::kernels::moe_device
