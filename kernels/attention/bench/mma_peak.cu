// Bench-only mma.sync peak kernel (see mma_peak.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention/bench/mma_peak.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"

namespace flashserve::kernels::attn_bench {
namespace {

constexpr int kThreads = 256;
constexpr int kChains = 8;
constexpr int kIters = 4096;

__global__ void __launch_bounds__(kThreads) MmaPeakKernel(float* sink, uint32_t seed) {
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = (seed ^ (threadIdx.x * 2654435761u + i)) & 0x3F803F80u;
  b[0] = a[1] ^ 0x00400040u;
  b[1] = a[2] ^ 0x00200020u;
  float c[kChains][4] = {};
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
          "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
          : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  float s = 0.0f;
  for (int k = 0; k < kChains; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  if (s == 12345.678f) sink[blockIdx.x] = s;  // keeps the chains alive; practically never taken
}

}  // namespace

double MeasureMmaSyncTflops(int repeats) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int ctas = 4 * sms;
  DeviceBuffer sink(static_cast<size_t>(ctas) * sizeof(float));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  MmaPeakKernel<<<ctas, kThreads>>>(sink.get<float>(), 1);  // warm-up
  CUDA_CHECK(cudaGetLastError());
  float best_ms = 1e30f;
  for (int r = 0; r < repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(start));
    MmaPeakKernel<<<ctas, kThreads>>>(sink.get<float>(), static_cast<uint32_t>(r));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  const double flops = 2.0 * 16 * 8 * 16 * kChains * double(kIters) * (kThreads / 32) * ctas;
  return flops / (best_ms * 1e-3) / 1e12;
}

Bf16TensorRates MeasureBf16TensorRates() {
  Bf16TensorRates r;
  r.mma = MeasureMmaSyncTflops(5);
  r.cublas = MeasureCublasBf16Tflops(&r.cublas_source);
  r.dense = std::max(r.mma, r.cublas);
  return r;
}

}  // namespace flashserve::kernels::attn_bench
