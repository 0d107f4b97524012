// A test helper for programmatic dependents (pdl.cuh): a kernel that lets the next kernel of the
// stream start at once and writes its output late. A LaunchPdl kernel behind it that reads the
// output before PdlWaitPrerequisites reads the old bytes, so a test comparing its results with a
// plainly launched reference sees the mistake.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashserve::kernels {

// Enqueues one kernel of a few CTAs that calls PdlLaunchDependents first, spins until `delay_ns`
// of the GPU's global timer have passed, then copies `bytes` (a multiple of 16; 16-byte aligned
// pointers) from src to dst. Launched plainly. Errors abort (CUDA_CHECK).
void LaunchLateCopy(void* dst, const void* src, size_t bytes, uint64_t delay_ns,
                    cudaStream_t stream);

// The control that shows a test can see the mistake: a LaunchPdl kernel that copies `bytes` from
// src to dst *before* its PdlWaitPrerequisites (against pdl.cuh's rule), then waits. Behind
// LaunchLateCopy writing src, dst gets src's old bytes when the programmatic launch overlapped
// the writer, its new ones when it did not (a refused attribute: a plain launch).
void LaunchPdlEarlyCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace flashserve::kernels
