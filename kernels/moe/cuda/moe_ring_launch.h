// Launchers of the TMA-ring expert GEMM (cuda/moe_ring_gemm.cuh, compiled in its own translation
// unit, cuda/moe_ring_launch.cu), called by cuda/moe_launch.cu's stage launchers when the stage
// params ask for the ring. Internal to kernels/moe; host code of .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

// The work counters at the start of a ring buffer (MoeCudaRingPartialBytes), 4 int32.
int32_t* RingCounterWords(float* partials);

// Whether a call of `slots` slot rows over `n_experts` experts runs the dynamic cut.
bool RingCutIsDynamic(MoeCudaRingCut cut, int64_t slots, int64_t n_experts);

// Enqueues the ring kernel and its epilogue (up: w1/w3 + SwiGLU + the quantiser; down: w2) over
// the tile list of `g` (tile_rows 8) on `stream`, `partials` holding MoeCudaRingPartialBytes(slots,
// up ? 2N : N) bytes, its units cut as `cut` says (RingCutIsDynamic); for the dynamic cut, unless
// `counters_zeroed`, a memset of its work counters first. Returns false, enqueueing nothing, where
// the ring cannot run (K not a multiple of 256, N not a multiple of the pair width, a scale array
// not 8-byte aligned, a TMA map the driver refuses): the caller then runs the streaming GEMM.
// Launch failures abort. epilogue false (down only): no epilogue kernel; LaunchRingCombine then
// finishes the call.
bool LaunchRing(const GemmArgs& g, bool up, int64_t slots, float* partials, bool counters_zeroed,
                MoeCudaRingCut cut, cudaStream_t stream, bool epilogue = true);

// The combine of `c` (c.ye unused) from the partials of a down ring launched without its
// epilogue (`partials`, `num_tiles`, `slots` as given to it; `inter` = its K; `dynamic`: its
// RingCutIsDynamic): the same bits as that epilogue followed by the combine
// (cuda/moe_ring_combine.cuh); after a dynamic cut it resets the ring's counter.
void LaunchRingCombine(const MoeCombineParams& c, float* partials, const int32_t* num_tiles,
                       int64_t slots, int64_t inter, bool dynamic, cudaStream_t stream);

// The launch LaunchRing makes (any N, K it takes), with its occupancy on the current device.
MoeCudaGemmPlan DescribeRing(bool up, bool dynamic);

}  // namespace flashserve::kernels::moe_device
