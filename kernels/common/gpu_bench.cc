#include "kernels/common/gpu_bench.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/base/check.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels {

namespace {

// The median of the elapsed times between events 2i and 2i + 1 (completed), in microseconds;
// destroys the events.
double MedianPairMicros(std::vector<cudaEvent_t>& ev) {
  std::vector<double> us(ev.size() / 2);
  for (size_t i = 0; i < us.size(); ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = 1000.0 * ms;
  }
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventDestroy(e));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

double MedianEventMicros(int warmup, int iters, const std::function<void()>& launch,
                         cudaStream_t stream) {
  CHECK(iters >= 1) << "MedianEventMicros: iters " << iters;
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(iters));
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
    launch();
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return MedianPairMicros(ev);
}

namespace {

// A host callback that blocks its stream until the flag is set (MedianQueuedEventMicros).
void CUDART_CB HoldStreamUntilReleased(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  while (!released->load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

double MedianQueuedEventMicros(int warmup, int iters, const std::function<void()>& launch,
                               cudaStream_t stream, double* host_us) {
  CHECK(iters >= 1) << "MedianQueuedEventMicros: iters " << iters;
  for (int i = 0; i < warmup; ++i) launch();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(iters));
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  std::atomic<bool> released{false};
  CUDA_CHECK(cudaLaunchHostFunc(stream, HoldStreamUntilReleased, &released));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
    launch();
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  const auto t1 = std::chrono::steady_clock::now();
  released.store(true, std::memory_order_release);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host_us != nullptr) {
    *host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
  }
  return MedianPairMicros(ev);
}

double MeasureD2dCopyGbps(size_t bytes, int iters) {
  DeviceBuffer src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemset(src.get(), 0x5A, bytes));
  const double us = MedianEventMicros(3, iters, [&] {
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice));
  });
  return 2.0 * static_cast<double>(bytes) / us / 1e3;
}

double MeasureCublasBf16Tflops(std::string* source) {
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      *source = std::string("cuBLAS GemmEx 8192^3 bf16/fp32 (") + name + ")";
      break;
    }
  }
  if (lib == nullptr) {
    *source = "no libcublas";
    return 0.0;
  }
  auto create = reinterpret_cast<decltype(&cublasCreate_v2)>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<decltype(&cublasDestroy_v2)>(dlsym(lib, "cublasDestroy_v2"));
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  auto gemm = reinterpret_cast<GemmEx>(dlsym(lib, "cublasGemmEx"));
  if (create == nullptr || destroy == nullptr || gemm == nullptr) return 0.0;
  cublasHandle_t handle = nullptr;
  if (create(&handle) != CUBLAS_STATUS_SUCCESS) return 0.0;
  constexpr int n = 8192;
  const size_t bytes = size_t{n} * n * 2;
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  CUDA_CHECK(cudaMemset(a.get(), 0x3C, bytes));  // bf16 0x3C3C ≈ 0.0115
  CUDA_CHECK(cudaMemset(b.get(), 0x3C, bytes));
  const float alpha = 1.0f, beta = 0.0f;
  bool ok = true;
  const double us = MedianEventMicros(3, 10, [&] {
    ok &= gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF, n, b.get(),
               CUDA_R_16BF, n, &beta, c.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
               CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  destroy(handle);
  return ok ? 2.0 * n * n * double(n) / us / 1e6 : 0.0;
}

}  // namespace flashserve::kernels
