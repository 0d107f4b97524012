// The steps between the up and down stages when the register-sourced GEMM runs the down
// projection after another GEMM ran the up projection (moe_cuda.h: LaunchMoeRegroupTiles,
// LaunchMoeToRsOperandOrder; MoeCudaParams::down_gemm).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/cuda_check.h"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels {
namespace {

constexpr int kRegroupThreads = 1024;
constexpr int64_t kRsTileRows = kMoeCudaWgmmaTileRows;

// One block: the tiles in chunks of kRegroupThreads, a block-wide exclusive scan of the kept
// flags per chunk. Every read of a chunk happens before its writes (the barrier after the warp
// counts), and the writes land below the chunk's end (at most as many kept entries as read), so
// the compaction may run in place.
__global__ void __launch_bounds__(kRegroupThreads)
    MoeRegroupTilesKernel(const int32_t* offsets, const int32_t* tiles, const int32_t* num_tiles,
                          int32_t* tiles_out, int32_t* num_tiles_out) {
  __shared__ int32_t warp_base[kRegroupThreads / 32];
  __shared__ int32_t chunk_kept;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int32_t n = *num_tiles;
  int32_t kept = 0;  // entries written so far (the same in every thread)
  for (int32_t c0 = 0; c0 < n; c0 += kRegroupThreads) {
    const int32_t t = c0 + static_cast<int32_t>(threadIdx.x);
    int32_t e = 0, row0 = 0;
    bool keep = false;
    if (t < n) {
      e = tiles[2 * t];
      row0 = tiles[2 * t + 1];
      keep = (row0 - offsets[e]) % kRsTileRows == 0;
    }
    const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, keep);
    if (lane == 0) warp_base[warp] = __popc(ballot);
    __syncthreads();
    if (warp == 0) {
      const int32_t count = warp_base[lane];
      int32_t incl = count;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
        if (lane >= d) incl += v;
      }
      warp_base[lane] = incl - count;
      if (lane == 31) chunk_kept = incl;
    }
    __syncthreads();
    if (keep) {
      const int32_t at = kept + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
      tiles_out[2 * at] = e;
      tiles_out[2 * at + 1] = row0;
    }
    kept += chunk_kept;
    __syncthreads();  // warp_base and chunk_kept are rewritten by the next chunk
  }
  __syncthreads();  // every thread has read *num_tiles before it is rewritten (in place)
  if (threadIdx.x == 0) *num_tiles_out = kept;
}

// A thread per 32-column block: its 16 words read (LoadBlock32), then written transposed
// (StoreQdqBlock's rs_order).
__global__ void MoeToRsOperandOrderKernel(uint16_t* rows, int64_t blocks) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    uint32_t w[16];
    moe_device::LoadBlock32(rows + 32 * b, w);
    moe_device::StoreQdqBlock(reinterpret_cast<uint4*>(rows + 32 * b), w, /*rs_order=*/true);
  }
}

}  // namespace

absl::Status LaunchMoeRegroupTiles(const MoeRegroupTilesParams& p, CUstream_st* stream) {
  if (absl::Status st = Validate(p); !st.ok()) return st;
  if (p.slots == 0) return absl::OkStatus();
  MoeRegroupTilesKernel<<<1, kRegroupThreads, 0, stream>>>(p.offsets, p.tiles, p.num_tiles,
                                                           p.tiles_out, p.num_tiles_out);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchMoeToRsOperandOrder(uint16_t* rows, int64_t n_rows, int64_t cols,
                                       CUstream_st* stream) {
  if (n_rows < 0 || cols < 0 || cols % 32 != 0) {
    return absl::InvalidArgumentError(
        "LaunchMoeToRsOperandOrder: n_rows must be >= 0 and cols a non-negative multiple of 32");
  }
  if (n_rows > 0 && cols > 0 && (rows == nullptr || reinterpret_cast<uintptr_t>(rows) % 16 != 0)) {
    return absl::InvalidArgumentError(
        "LaunchMoeToRsOperandOrder: rows must be a 16-byte aligned device pointer");
  }
  const int64_t blocks = n_rows * (cols / 32);
  if (blocks == 0) return absl::OkStatus();
  const int64_t grid = std::min<int64_t>((blocks + 255) / 256, 65536);
  MoeToRsOperandOrderKernel<<<static_cast<unsigned>(grid), 256, 0, stream>>>(rows, blocks);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
