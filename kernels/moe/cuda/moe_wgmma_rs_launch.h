// Launchers of the register-sourced wgmma expert GEMM (cuda/moe_wgmma_rs_gemm.cuh, compiled in
// its own translation unit, cuda/moe_wgmma_rs_launch.cu), called by cuda/moe_launch.cu's stage
// launchers and MoeCudaDescribeGemm. Internal to kernels/moe; host code of .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

// Enqueues the up (w1/w3 + SwiGLU + quantiser) or down (w2) GEMM over the tile list of `g`
// (tile_rows 128, or 32 / 48 / 64 / 80 / 96 where MoeCudaRsTileRows gives them) on `stream`:
// persistent CTAs (one per SM, or `ctas` where positive) walking the items (256 weight rows × a
// tile; at most max_tiles tiles) grid-stride. `slots`: the call's slot rows (they choose the tile
// widths' set, RsWidthSetFor). Opts the kernel into its shared memory once per device. Launch
// failures abort.
void LaunchWgmmaRs(const GemmArgs& g, bool up, int64_t tile_rows, int64_t max_tiles, int64_t ctas,
                   int64_t slots, cudaStream_t stream);

// The launch LaunchWgmmaRs makes for N = n (I up, D down) at tile_rows, max_tiles and ctas 0,
// with its occupancy on the current device (a driver call): grid_x CTAs, grid_y 1.
MoeCudaGemmPlan DescribeWgmmaRs(bool up, int64_t tile_rows, int64_t n, int64_t max_tiles);

}  // namespace flashserve::kernels::moe_device
