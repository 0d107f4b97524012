// Launchers of the TMA-ring expert GEMM (cuda/moe_ring_gemm.cuh, compiled in its own translation
// unit, cuda/moe_ring_launch.cu), called by cuda/moe_launch.cu's stage launchers when the stage
// params ask for the ring. Internal to kernels/moe; host code of .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

// Enqueues the ring kernel and its epilogue (up: w1/w3 + SwiGLU + the quantiser; down: w2) over
// the tile list of `g` (tile_rows 8) on `stream`, `partials` holding MoeCudaRingPartialBytes(slots,
// up ? 2N : N) bytes. Returns false, enqueueing nothing, where the ring cannot run (K not a
// multiple of 256, N not a multiple of the pair width, a scale array not 8-byte aligned, a TMA
// map the driver refuses): the caller then runs the streaming GEMM. Launch failures abort.
// epilogue false (down only): no epilogue kernel; LaunchRingCombine then finishes the call.
bool LaunchRing(const GemmArgs& g, bool up, int64_t slots, float* partials, cudaStream_t stream,
                bool epilogue = true);

// The combine of `c` (c.ye unused) from the partials of a down ring launched without its
// epilogue (`partials`, `num_tiles`, `slots` as given to it; `inter` = its K): the same bits as
// that epilogue followed by the combine (cuda/moe_ring_combine.cuh).
void LaunchRingCombine(const MoeCombineParams& c, const float* partials, const int32_t* num_tiles,
                       int64_t slots, int64_t inter, cudaStream_t stream);

// The launch LaunchRing makes (any N, K it takes), with its occupancy on the current device.
MoeCudaGemmPlan DescribeRing(bool up);

}  // namespace flashserve::kernels::moe_device
