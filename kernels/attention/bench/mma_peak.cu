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

// The mma.sync shapes the peak kernel runs: bf16 m16n8k16 → fp32, and int8 m16n8k32 → int32
// (twice the K per instruction). Operands are small values derived from the seed.
struct Bf16Mma {
  using Acc = float;
  static constexpr uint32_t kMask = 0x3F803F80u, kB0 = 0x00400040u, kB1 = 0x00200020u;
  static constexpr double kOps = 2.0 * 16 * 8 * 16;
  __device__ static void Run(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
struct Int8Mma {
  using Acc = int;
  static constexpr uint32_t kMask = 0x07070707u, kB0 = 0x01010101u, kB1 = 0x02020202u;
  static constexpr double kOps = 2.0 * 16 * 8 * 32;
  __device__ static void Run(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// kChains independent accumulator chains per warp, kIters rounds.
template <class Mma>
__global__ void __launch_bounds__(kThreads) MmaPeakKernel(float* sink, uint32_t seed) {
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = (seed ^ (threadIdx.x * 2654435761u + i)) & Mma::kMask;
  b[0] = a[1] ^ Mma::kB0;
  b[1] = a[2] ^ Mma::kB1;
  typename Mma::Acc c[kChains][4] = {};
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) Mma::Run(c[k], a, b);
  }
  typename Mma::Acc s = 0;
  for (int k = 0; k < kChains; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  // Keeps the chains alive; practically never taken.
  if (s == static_cast<typename Mma::Acc>(12345678)) sink[blockIdx.x] = static_cast<float>(s);
}

// Best of `repeats` launches of MmaPeakKernel<Mma> over 4 CTAs per SM, in 10^12 operations per
// second (Mma::kOps operations per mma).
template <class Mma>
double PeakRate(int repeats) {
  auto* kernel = MmaPeakKernel<Mma>;
  const double ops_per_mma = Mma::kOps;
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

double MeasureMmaSyncInt8Tops(int repeats) { return PeakRate<Int8Mma>(repeats); }

Int8TensorRates MeasureInt8TensorRates() {
  Int8TensorRates r;
  r.mma = MeasureMmaSyncInt8Tops(5);
  r.cublas = MeasureCublasInt8Tops(&r.cublas_source);
  r.dense = std::max(r.mma, r.cublas);
  return r;
}

double MeasureMmaSyncTflops(int repeats) { return PeakRate<Bf16Mma>(repeats); }

Bf16TensorRates MeasureBf16TensorRates() {
  Bf16TensorRates r;
  r.mma = MeasureMmaSyncTflops(5);
  r.cublas = MeasureCublasBf16Tflops(&r.cublas_source);
  r.dense = std::max(r.mma, r.cublas);
  return r;
}

}  // namespace flashserve::kernels::attn_bench
