// Programmatic dependent launch (PDL; PTX ISA "griddepcontrol", sm_90): a kernel launched with
// the programmatic-stream-serialization attribute (LaunchPdl) may be scheduled before the kernel
// ahead of it in the stream has finished — as soon as every CTA of that kernel has executed
// PdlLaunchDependents or exited — so its CTAs start on idle SMs, do work that reads nothing the
// earlier kernel writes (weight loads, shared-memory set-up), and block in
// PdlWaitPrerequisites until the earlier kernel has completed and its memory operations are
// visible. A kernel launched without the attribute passes PdlWaitPrerequisites at once, and
// PdlLaunchDependents has no effect when the next kernel is launched plainly: both are safe in
// any kernel. CUDA graphs capture the dependency as a programmatic edge.
//
// The rule for a kernel launched with LaunchPdl: before PdlWaitPrerequisites it may read only
// what no earlier kernel of the stream writes (weights, constants) and write only shared memory
// and registers. One widening, which no kernel uses (session 73's MoE early-down
// switch relied on it, measured level and was removed; kernels/moe/ring_gemm.md "Session 73"):
// where the kernel ahead calls PdlLaunchDependents only after its own PdlWaitPrerequisites, what
// the kernels before that one wrote is complete and visible too, provided each of those waited
// (PdlWaitPrerequisites) before completing or was launched plainly: a LaunchPdl kernel that never
// waits may complete before the kernel ahead of it. Device code and launch helper only; include
// from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/common/cuda_check.h"

namespace flashserve::kernels::cuda_common {

// Lets the next kernel of the stream, if launched with LaunchPdl, be scheduled now.
__device__ __forceinline__ void PdlLaunchDependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Waits until the kernels this one depends on have completed and their writes are visible.
__device__ __forceinline__ void PdlWaitPrerequisites() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the stream's
// previous kernel. A stream or driver that refuses the attribute (a launch-configuration error,
// not sticky) gets a plain launch instead, where PdlWaitPrerequisites is a no-op.
template <typename... Params, typename... Args>
void LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
               Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  if (cudaLaunchKernelEx(&config, kernel, args...) != cudaSuccess) {
    (void)cudaGetLastError();
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace flashserve::kernels::cuda_common
