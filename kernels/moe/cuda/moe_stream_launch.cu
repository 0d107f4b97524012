// The weight-streaming expert GEMM's launchers (cuda/moe_stream_launch.h). A translation unit of
// its own: 20 instantiations (row tiles × up/down × unit width × slot tiles).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"
#include "kernels/moe/cuda/moe_stream_gemm.cuh"
#include "kernels/moe/cuda/moe_stream_launch.h"

namespace flashserve::kernels::moe_device {
namespace {

// kRT: m16 row tiles per warp, 1 for a handful of tiles (one or two tokens: twice the CTAs, so a
// one-token call still fills the GPU) or when N is not a multiple of the two-tile CTA width, else
// 2 (each slot-row fragment feeds twice the weights; measured with 16-slot tiles too: 768 tokens
// 3.09 ms against 3.30 with one). forced: 1 or 2 overrides the choice (2 only
// where N fits). A CTA column past N (N % kBN != 0, possible with 16-warp CTAs at one row tile)
// idles its warps past N.
template <bool kUp, int kN8>
int StreamRowTiles(int64_t n, int64_t slots, int forced = 0) {
  constexpr int64_t kWide = StreamShape<2, kUp, 1, kN8>::kBN;
  if (n % kWide != 0) return 1;
  return forced != 0 ? forced : (slots > 16 ? 2 : 1);
}

// The kernel, opted into the largest shared memory any K takes (the whole K's rows up to
// kMoeCudaStreamMaxK / kMoeCudaStream16MaxK, or an activation chunk of at most kStreamActBytes).
template <int kRT, bool kUp, int kG, int kN8>
auto* StreamKernel() {
  using S = StreamShape<kRT, kUp, kG, kN8>;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = MoeExpertStreamKernel<kRT, kUp, kG, kN8>;
  const int64_t max_k = kN8 == 1 ? kMoeCudaStreamMaxK : kMoeCudaStream16MaxK;
  const int64_t bytes = kN8 == 4 ? kStreamActBytes : StreamSmemBytes(max_k, kN8, S::kUnitK);
  EnsureSmemLimit(kernel, static_cast<int>(std::max<int64_t>(bytes, S::kTileBytes)), smem_set);
  return kernel;
}

template <int kRT, bool kUp, int kG, int kN8>
int StreamSmem(int64_t k) {
  using S = StreamShape<kRT, kUp, kG, kN8>;
  return static_cast<int>(std::max<int64_t>(StreamSmemBytes(k, kN8, S::kUnitK), S::kTileBytes));
}

template <int kRT, bool kUp, int kG, int kN8>
void LaunchG(const GemmArgs& g, int64_t grid_y, cudaStream_t stream) {
  using S = StreamShape<kRT, kUp, kG, kN8>;
  auto* kernel = StreamKernel<kRT, kUp, kG, kN8>();
  const dim3 grid(static_cast<unsigned>((g.n + S::kBN - 1) / S::kBN),
                  static_cast<unsigned>(grid_y));
  kernel<<<grid, S::kThreads, StreamSmem<kRT, kUp, kG, kN8>(g.k), stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

// 32-row tiles take 128-wide units (kG 1): with 256-wide ones ptxas spills 110-270 bytes at the
// 128-register cap. Only the instantiations that can run are compiled.
template <bool kUp, int kN8>
void Launch(const GemmArgs& g, int row_tiles, int64_t slots, int64_t grid_y, cudaStream_t stream) {
  const bool two = StreamRowTiles<kUp, kN8>(g.n, slots, row_tiles) == 2, g2 = g.k % 256 == 0;
  if constexpr (kN8 < 4) {
    if (g2) {
      if (two) return LaunchG<2, kUp, 2, kN8>(g, grid_y, stream);
      return LaunchG<1, kUp, 2, kN8>(g, grid_y, stream);
    }
  }
  if (two) return LaunchG<2, kUp, 1, kN8>(g, grid_y, stream);
  LaunchG<1, kUp, 1, kN8>(g, grid_y, stream);
}

template <int kRT, bool kUp, int kG, int kN8>
MoeCudaGemmPlan DescribeG(int64_t n, int64_t k, int64_t grid_y) {
  using S = StreamShape<kRT, kUp, kG, kN8>;
  const int smem = StreamSmem<kRT, kUp, kG, kN8>(k);
  int ctas = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, StreamKernel<kRT, kUp, kG, kN8>(),
                                                           S::kThreads, smem));
  MoeCudaGemmPlan plan;
  plan.stream = true;
  plan.tile_rows = S::kSlots;
  plan.weight_rows = S::kRows;
  plan.k_step = S::kUnitK;
  plan.stages = S::kDepth;
  plan.smem_bytes = smem;
  plan.grid_x = (n + S::kBN - 1) / S::kBN;
  plan.grid_y = grid_y;
  plan.ctas_per_sm = ctas;
  plan.weight_stage_bytes = S::kRows * (S::kRowUnitBytes + S::kUnitK / 32);
  return plan;
}

template <bool kUp, int kN8>
MoeCudaGemmPlan Describe(int64_t n, int64_t k, int64_t slots, int64_t grid_y) {
  const bool two = StreamRowTiles<kUp, kN8>(n, slots) == 2, g2 = k % 256 == 0;
  if constexpr (kN8 < 4) {
    if (g2)
      return two ? DescribeG<2, kUp, 2, kN8>(n, k, grid_y)
                 : DescribeG<1, kUp, 2, kN8>(n, k, grid_y);
  }
  return two ? DescribeG<2, kUp, 1, kN8>(n, k, grid_y) : DescribeG<1, kUp, 1, kN8>(n, k, grid_y);
}

}  // namespace

void LaunchStream(const GemmArgs& g, bool up, int64_t tile_rows, int row_tiles, int64_t slots,
                  int64_t grid_y, cudaStream_t stream) {
  switch (tile_rows) {
    case kMoeCudaStream32TileRows:
      if (up) return Launch<true, 4>(g, row_tiles, slots, grid_y, stream);
      return Launch<false, 4>(g, row_tiles, slots, grid_y, stream);
    case kMoeCudaStream16TileRows:
      if (up) return Launch<true, 2>(g, row_tiles, slots, grid_y, stream);
      return Launch<false, 2>(g, row_tiles, slots, grid_y, stream);
    default:
      if (up) return Launch<true, 1>(g, row_tiles, slots, grid_y, stream);
      return Launch<false, 1>(g, row_tiles, slots, grid_y, stream);
  }
}

MoeCudaGemmPlan DescribeStream(bool up, int64_t tile_rows, int64_t n, int64_t k, int64_t slots,
                               int64_t grid_y) {
  switch (tile_rows) {
    case kMoeCudaStream32TileRows:
      return up ? Describe<true, 4>(n, k, slots, grid_y) : Describe<false, 4>(n, k, slots, grid_y);
    case kMoeCudaStream16TileRows:
      return up ? Describe<true, 2>(n, k, slots, grid_y) : Describe<false, 2>(n, k, slots, grid_y);
    default:
      return up ? Describe<true, 1>(n, k, slots, grid_y) : Describe<false, 1>(n, k, slots, grid_y);
  }
}

}  // namespace flashserve::kernels::moe_device
