// Launchers of the weight-streaming expert GEMM (cuda/moe_stream_gemm.cuh, compiled in its own
// translation unit, cuda/moe_stream_launch.cu), called by cuda/moe_launch.cu's stage launchers
// and MoeCudaDescribeGemm. Internal to kernels/moe; host code of .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

// Enqueues the up (w1/w3 + SwiGLU + quantiser) or down (w2) streaming GEMM over the tile list of
// `g` on `stream`: tile_rows 8 (one mma n8 tile of slot rows), 16 (two: MoeCudaGemm::kStream16)
// or 32 (four, the activations staged in K chunks: kStream32),
// `row_tiles` m16 row tiles per warp (0 = automatic: two when the call has more than 16 slots and
// N is a multiple of the wider CTA; 1 or 2 forced, 2 only where N fits), grid_y CTAs walking the
// tiles grid-stride. K must fit the tile's shared memory (kMoeCudaStreamMaxK /
// kMoeCudaStream16MaxK; the callers validate). Opts the kernel into its shared memory once per
// device. Launch failures abort.
void LaunchStream(const GemmArgs& g, bool up, int64_t tile_rows, int row_tiles, int64_t slots,
                  int64_t grid_y, cudaStream_t stream);

// The launch LaunchStream makes (automatic row tiles) for N = n, K = k, with its occupancy on the
// current device (a driver call).
MoeCudaGemmPlan DescribeStream(bool up, int64_t tile_rows, int64_t n, int64_t k, int64_t slots,
                               int64_t grid_y);

}  // namespace flashserve::kernels::moe_device
