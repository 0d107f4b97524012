// Timing for the GPU benches (bench/): the median of repeated launches between CUDA events, the
// measurement every bench_* binary reports and compares with its roofline. Host code only.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace flashserve::kernels {

// Runs `launch` `warmup` times untimed, then `iters` times, each between two events recorded on
// `stream`, and returns the median elapsed time in microseconds. `launch` must enqueue its work on
// `stream`. iters >= 1. CUDA errors abort (CUDA_CHECK).
double MedianEventMicros(int warmup, int iters, const std::function<void()>& launch,
                         cudaStream_t stream = nullptr);

}  // namespace flashserve::kernels
