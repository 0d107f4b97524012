// The register-sourced wgmma expert GEMM's launchers (cuda/moe_wgmma_rs_launch.h). A translation
// unit of its own: the kernel is large and moe_launch.cu already instantiates the other GEMMs.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"
#include "kernels/moe/cuda/moe_wgmma_rs_gemm.cuh"
#include "kernels/moe/cuda/moe_wgmma_rs_launch.h"

namespace flashserve::kernels::moe_device {
namespace {

template <bool kUp>
auto* RsKernel() {
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = MoeExpertWgmmaRsKernel<kUp>;
  EnsureSmemLimit(kernel, kRsSmemBytes, smem_set);
  return kernel;
}

// Persistent CTAs, one per SM (kRsSmemBytes allows no second), or `ctas` where positive; never
// more than the items (column blocks × the tile bound).
template <bool kUp>
dim3 RsGrid(int64_t n, int64_t max_tiles, int64_t ctas) {
  constexpr int64_t kBN = RsShape<kUp>::kBN;
  const int64_t items = (n + kBN - 1) / kBN * max_tiles;
  const int64_t want = ctas > 0 ? ctas : SmCount(CurrentDevice());
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min(items, want))));
}

template <bool kUp>
void Launch(const GemmArgs& g, int64_t max_tiles, int64_t ctas, cudaStream_t stream) {
  auto* kernel = RsKernel<kUp>();
  kernel<<<RsGrid<kUp>(g.n, max_tiles, ctas), kRsThreads, kRsSmemBytes, stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

template <bool kUp>
MoeCudaGemmPlan Describe(int64_t n, int64_t max_tiles) {
  int ctas = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, RsKernel<kUp>(), kRsThreads,
                                                           kRsSmemBytes));
  const dim3 grid = RsGrid<kUp>(n, max_tiles, 0);
  MoeCudaGemmPlan plan;
  plan.wgmma = true;
  plan.wgmma_rs = true;
  plan.tile_rows = kMoeCudaWgmmaTileRows;
  plan.weight_rows = kRsNB;
  plan.k_step = kRsBK;
  plan.stages = kRsStages;
  plan.smem_bytes = kRsSmemBytes;
  plan.grid_x = grid.x;
  plan.grid_y = grid.y;
  plan.ctas_per_sm = ctas;
  plan.weight_stage_bytes = RsShape<kUp>::kWeightStageBytes;
  return plan;
}

}  // namespace

void LaunchWgmmaRs(const GemmArgs& g, bool up, int64_t max_tiles, int64_t ctas,
                   cudaStream_t stream) {
  if (up) return Launch<true>(g, max_tiles, ctas, stream);
  Launch<false>(g, max_tiles, ctas, stream);
}

MoeCudaGemmPlan DescribeWgmmaRs(bool up, int64_t n, int64_t max_tiles) {
  return up ? Describe<true>(n, max_tiles) : Describe<false>(n, max_tiles);
}

}  // namespace flashserve::kernels::moe_device
