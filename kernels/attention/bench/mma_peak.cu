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

// The same with mma.sync.m16n8k32 int8 → int32 (twice the K per instruction).
__global__ void __launch_bounds__(kThreads) MmaInt8PeakKernel(float* sink, uint32_t seed) {
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = (seed ^ (threadIdx.x * 2654435761u + i)) & 0x07070707u;
  b[0] = a[1] ^ 0x01010101u;
  b[1] = a[2] ^ 0x02020202u;
  int c[kChains][4] = {};
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) {
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
          "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
          : "+r"(c[k][0]), "+r"(c[k][1]), "+r"(c[k][2]), "+r"(c[k][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  int s = 0;
  for (int k = 0; k < kChains; ++k) s += c[k][0] ^ c[k][1] ^ c[k][2] ^ c[k][3];
  if (s == 12345678) sink[blockIdx.x] = static_cast<float>(s);  // keeps the chains alive
}

// Best of `repeats` launches of `kernel` over 4 CTAs per SM, in 10^12 operations per second for
// `ops_per_mma` operations per mma.
double PeakRate(void (*kernel)(float*, uint32_t), double ops_per_mma, int repeats) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int ctas = 4 * sms;
  DeviceBuffer sink(static_cast<size_t>(ctas) * sizeof(float));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  kernel<<<ctas, kThreads>>>(sink.get<float>(), 1);  // warm-up
  CUDA_CHECK(cudaGetLastError());
  float best_ms = 1e30f;
  for (int r = 0; r < repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(start));
    kernel<<<ctas, kThreads>>>(sink.get<float>(), static_cast<uint32_t>(r));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  const double ops = ops_per_mma * kChains * double(kIters) * (kThreads / 32) * ctas;
  return ops / (best_ms * 1e-3) / 1e12;
}

}  // namespace

double MeasureMmaSyncInt8Tops(int repeats) {
  return PeakRate(MmaInt8PeakKernel, 2.0 * 16 * 8 * 32, repeats);
}

Int8TensorRates MeasureInt8TensorRates() {
  Int8TensorRates r;
  r.mma = MeasureMmaSyncInt8Tops(5);
  r.cublas = MeasureCublasInt8Tops(&r.cublas_source);
  r.dense = std::max(r.mma, r.cublas);
  return r;
}

double MeasureMmaSyncTflops(int repeats) {
  return PeakRate(MmaPeakKernel, 2.0 * 16 * 8 * 16, repeats);
}

Bf16TensorRates MeasureBf16TensorRates() {
  Bf16TensorRates r;
  r.mma = MeasureMmaSyncTflops(5);
  r.cublas = MeasureCublasBf16Tflops(&r.cublas_source);
  r.dense = std::max(r.mma, r.cublas);
  return r;
}

}  // namespace flashserve::kernels::attn_bench
