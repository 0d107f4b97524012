// The register-sourced wgmma expert GEMM's launchers (cuda/moe_wgmma_rs_launch.h). A translation
// unit of its own: the kernel is large and moe_launch.cu already instantiates the other GEMMs.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/moe/cuda/moe_wgmma_rs_gemm.cuh"
#include "kernels/moe/cuda/moe_wgmma_rs_launch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels::moe_device {
namespace {

template <bool kUp, uint32_t kWidths = kRsLandedWidths>
auto* RsKernel() {
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = MoeExpertWgmmaRsKernel<kUp, kWidths>;
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

// The kernel's TMA maps (RsTmaMaps): the down GEMM's codes, the up GEMM's with kRsUpTma (none
// with the stage chunks), the down GEMM's slot rows with kRsDownATma. MoeCuda's checks (16-byte
// aligned codes and ag, K a multiple of 128) make them describable, so a refusal is a broken
// invariant.
template <bool kUp>
RsTmaMaps MakeMaps(const GemmArgs& g, int64_t slots) {
  RsTmaMaps maps{};
  if (!kUp && kRsDownATma) {
    CHECK(
        wgmma_ws::MakeTmaRows(&maps.a, g.a, 2 * g.k, slots, 128, kRsBM, CU_TENSOR_MAP_SWIZZLE_128B))
        << "MoE RS GEMM: no TMA map for the slot rows at " << static_cast<const void*>(g.a)
        << " (K " << g.k << ", " << slots << " rows)";
  }
  if ((kUp && !kRsUpTma) || g.code_chunks != nullptr) return maps;
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

template <bool kUp, uint32_t kWidths>
void LaunchWidths(const GemmArgs& g, int64_t max_tiles, int64_t ctas, int64_t slots,
                  cudaStream_t stream) {
  auto* kernel = RsKernel<kUp, kWidths>();
  GemmArgs args = g;
  if (kUp && kRsUpTma) args.code_chunks = nullptr;  // laid out as MoeWgmmaRsUpRowOf's slabs
  kernel<<<RsGrid<kUp>(g.n, max_tiles, ctas), kRsThreads, kRsSmemBytes, stream>>>(
      args, MakeMaps<kUp>(args, slots));
  CUDA_CHECK(cudaGetLastError());
}

// The width set RsWidthSetFor picks for `slots` rows of the experts. The up GEMM has no {32, 64}
// or {64, 96} kernel: it runs {64, 128} there.
template <bool kUp>
void Launch(const GemmArgs& g, int64_t max_tiles, int64_t ctas, int64_t slots,
            cudaStream_t stream) {
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

// One thread per 16 bytes of the chunks (MoeRsChunkSourceOf), grid-stride.
__global__ void MoeRsBuildChunksKernel(const uint8_t* w, const uint8_t* w_up, int64_t n_experts,
                                       int64_t n, int64_t k, bool up, uint8_t* out) {
  const int64_t rows = moe_cuda_internal::MoeRsChunkRows(up);
  const int64_t stages = k / kRsBK, blocks = n / 64;
  const int64_t pieces = n_experts * blocks * stages * rows * 4;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pieces;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int place = static_cast<int>(i % 4);
    const int row = static_cast<int>(i / 4 % rows);
    const int64_t chunk = i / (4 * rows);
    const int64_t kt = chunk % stages, cb = chunk / stages % blocks, e = chunk / stages / blocks;
    const moe_cuda_internal::MoeRsChunkSource src =
        moe_cuda_internal::MoeRsChunkSourceOf(up, cb, row, place);
    const uint8_t* from =
        (src.up ? w_up : w) + (e * n + src.column) * (k / 2) + kt * (kRsBK / 2) + src.piece * 16;
    *reinterpret_cast<uint4*>(out + i * 16) = *reinterpret_cast<const uint4*>(from);
  }
}

}  // namespace

void LaunchWgmmaRs(const GemmArgs& g, bool up, int64_t max_tiles, int64_t ctas, int64_t slots,
                   cudaStream_t stream) {
  if (up) return Launch<true>(g, max_tiles, ctas, slots, stream);
  Launch<false>(g, max_tiles, ctas, slots, stream);
}

MoeCudaGemmPlan DescribeWgmmaRs(bool up, int64_t n, int64_t max_tiles) {
  return up ? Describe<true>(n, max_tiles) : Describe<false>(n, max_tiles);
}

}  // namespace flashserve::kernels::moe_device

namespace flashserve::kernels {

static_assert(moe_device::kRsBK == moe_cuda_internal::kMoeRsChunkK);

absl::Status LaunchMoeRsBuildCodeChunks(const MoeCudaWeights& w, bool up, uint8_t* out,
                                        CUstream_st* stream) {
  if (absl::Status st = Validate(w); !st.ok()) return st;
  if (out == nullptr || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return absl::InvalidArgumentError(
        "LaunchMoeRsBuildCodeChunks: out must be a 16-byte aligned device pointer");
  }
  const int64_t n = up ? w.inter : w.dim, k = up ? w.dim : w.inter;
  const int64_t pieces = MoeRsCodeChunkBytes(w, up) / 16;
  const int64_t blocks = std::min<int64_t>((pieces + 255) / 256, 65536);
  moe_device::MoeRsBuildChunksKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      up ? w.w1 : w.w2, up ? w.w3 : nullptr, w.n_experts, n, k, up, out);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
