// Timing for the GPU benches (bench/): the median of repeated launches between CUDA events, the
// measurement every bench_* binary reports and compares with its roofline. Host code only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace flashserve::kernels {

// Runs `launch` `warmup` times untimed, then `iters` times, each between two events recorded on
// `stream`, and returns the median elapsed time in microseconds. `launch` must enqueue its work on
// `stream`. iters >= 1. CUDA errors abort (CUDA_CHECK).
double MedianEventMicros(int warmup, int iters, const std::function<void()>& launch,
                         cudaStream_t stream = nullptr);

// As MedianEventMicros, but the timed launches are queued behind a host callback that holds
// `stream` until all of them are enqueued, so the GPU runs them back to back: the device time
// even where the host enqueues more slowly than the GPU executes (e.g. a graph of many small
// kernels). `host_us` (optional) gets the host's mean enqueue time per launch.
double MedianQueuedEventMicros(int warmup, int iters, const std::function<void()>& launch,
                               cudaStream_t stream, double* host_us = nullptr);

// The two roofs of the benches' roofline bound, measured in the same run as the kernels:
// device-to-device cudaMemcpyAsync bandwidth of `bytes` bytes (counted read + write), GB/s
// (median of `iters` copies after 3 untimed ones).
double MeasureD2dCopyGbps(size_t bytes, int iters);
// cublasGemmEx bf16 × bf16 → bf16 with fp32 compute at m = n = k = 8192, TFLOP/s, via dlopen()
// (the toolkit has no static cuBLAS and the static bench binaries must not depend on it); 0 when
// no libcublas can be loaded. `source` gets a description of what was measured.
double MeasureCublasBf16Tflops(std::string* source);
// The same for int8: cublasGemmEx int8 × int8 → int32 (CUBLAS_COMPUTE_32I, A transposed, the
// layout cuBLAS's int8 tensor-core kernels take) at m = n = k = 8192, TOP/s; 0 when no libcublas
// loads or the call is refused. The rate of the kernels that compute in int8 (the indexer's
// scorer).
double MeasureCublasInt8Tops(std::string* source);

// cuBLAS on the GEMM of a Linear with bf16 weights, y[m, n] = x[m, k] · w[n, k]ᵀ (cublasGemmEx
// bf16 operands and output, fp32 compute, the default algorithm), on the legacy default stream:
// the median µs of `iters` calls after `warmup`, each call on the next of `weight_copies` weight
// buffers (enough copies that no call finds its weight in L2). What a vendor GEMM makes of the
// same shape — the FP8 Linear's GEMM on expanded weights — beside the roofline (the benches'
// A/B reference, not their roof). `random_data`: operands pseudo-random bf16 in ±[1, 2), whose
// bits toggle like real data; else every byte 0x3C, as MeasureCublasBf16Tflops fills them (the
// tensor cores draw less power on constant operands, so the clock may stay higher). 0 when no
// libcublas loads or the call is refused; `source` says which.
double CublasBf16LinearMicros(int64_t m, int64_t n, int64_t k, int weight_copies, bool random_data,
                              int warmup, int iters, std::string* source);

}  // namespace flashserve::kernels
