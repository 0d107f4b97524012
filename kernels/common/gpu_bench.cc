#include "kernels/common/gpu_bench.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
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

namespace {

// cublasGemmEx from the first libcublas that loads (see MeasureCublasBf16Tflops), or null.
struct CublasGemmEx {
  using Create = decltype(&cublasCreate_v2);
  using Destroy = decltype(&cublasDestroy_v2);
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  Create create = nullptr;
  Destroy destroy = nullptr;
  GemmEx gemm = nullptr;
  std::string name;
};

CublasGemmEx LoadCublasGemmEx() {
  CublasGemmEx c;
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      c.name = name;
      break;
    }
  }
  if (lib == nullptr) return c;
  c.create = reinterpret_cast<CublasGemmEx::Create>(dlsym(lib, "cublasCreate_v2"));
  c.destroy = reinterpret_cast<CublasGemmEx::Destroy>(dlsym(lib, "cublasDestroy_v2"));
  c.gemm = reinterpret_cast<CublasGemmEx::GemmEx>(dlsym(lib, "cublasGemmEx"));
  if (c.create == nullptr || c.destroy == nullptr || c.gemm == nullptr) c.gemm = nullptr;
  return c;
}

// The median rate of cublasGemmEx at m = n = k = 8192 with `type` operands (filled with `fill`
// bytes), `out_type` output, `compute` and A transposed by `trans_a`, in units of 10^12 per s;
// 0 when cuBLAS is missing or refuses the call.
double GemmRate(cudaDataType type, size_t elem_bytes, int fill, cudaDataType out_type,
                size_t out_bytes, cublasComputeType_t compute, cublasOperation_t trans_a,
                const void* alpha, const void* beta, std::string* source, const char* what) {
  const CublasGemmEx c = LoadCublasGemmEx();
  if (c.gemm == nullptr) {
    *source = c.name.empty() ? "no libcublas" : "no cublasGemmEx in " + c.name;
    return 0.0;
  }
  *source = std::string("cuBLAS GemmEx 8192^3 ") + what + " (" + c.name + ")";
  cublasHandle_t handle = nullptr;
  if (c.create(&handle) != CUBLAS_STATUS_SUCCESS) return 0.0;
  constexpr int n = 8192;
  const size_t elems = size_t{n} * n;
  DeviceBuffer a(elems * elem_bytes), b(elems * elem_bytes), out(elems * out_bytes);
  CUDA_CHECK(cudaMemset(a.get(), fill, elems * elem_bytes));
  CUDA_CHECK(cudaMemset(b.get(), fill, elems * elem_bytes));
  bool ok = true;
  const double us = MedianEventMicros(3, 10, [&] {
    ok &=
        c.gemm(handle, trans_a, CUBLAS_OP_N, n, n, n, alpha, a.get(), type, n, b.get(), type, n,
               beta, out.get(), out_type, n, compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  c.destroy(handle);
  if (!ok) *source += ": refused";
  return ok ? 2.0 * n * n * double(n) / us / 1e6 : 0.0;
}

}  // namespace

double MeasureCublasBf16Tflops(std::string* source) {
  const float alpha = 1.0f, beta = 0.0f;
  // bf16 0x3C3C ≈ 0.0115 everywhere.
  return GemmRate(CUDA_R_16BF, 2, 0x3C, CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F, CUBLAS_OP_N, &alpha,
                  &beta, source, "bf16/fp32");
}

double MeasureCublasInt8Tops(std::string* source) {
  const int32_t alpha = 1, beta = 0;
  // int8 1 everywhere: every int32 sum is 8192, far from overflow.
  return GemmRate(CUDA_R_8I, 1, 0x01, CUDA_R_32I, 4, CUBLAS_COMPUTE_32I, CUBLAS_OP_T, &alpha, &beta,
                  source, "int8/int32");
}

namespace {

// Pseudo-random bf16 in ±[1, 2) (random sign and 7 mantissa bits): operands whose bits toggle as
// real activations and weights do (the tensor cores' power, so the clock, depends on it).
void FillRandomBf16(DeviceBuffer& buf, uint64_t seed) {
  std::vector<uint16_t> host(buf.bytes() / 2);
  uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t& v : host) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<uint16_t>(0x3F80u | ((r >> 57) & 0x7Fu) | ((r >> 48) & 0x8000u));
  }
  CUDA_CHECK(cudaMemcpy(buf.get(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
}

}  // namespace

double CublasBf16LinearMicros(int64_t m, int64_t n, int64_t k, int weight_copies, bool random_data,
                              int warmup, int iters, std::string* source) {
  const CublasGemmEx c = LoadCublasGemmEx();
  if (c.gemm == nullptr) {
    *source = c.name.empty() ? "no libcublas" : "no cublasGemmEx in " + c.name;
    return 0.0;
  }
  *source = std::string("cuBLAS GemmEx bf16/fp32 x · wT, ") +
            (random_data ? "random" : "constant") + " data (" + c.name + ")";
  cublasHandle_t handle = nullptr;
  if (c.create(&handle) != CUBLAS_STATUS_SUCCESS) return 0.0;
  const int copies = std::max(weight_copies, 1);
  DeviceBuffer x(static_cast<size_t>(m * k) * 2), y(static_cast<size_t>(m * n) * 2);
  std::vector<DeviceBuffer> w;
  for (int i = 0; i < copies; ++i) {
    w.emplace_back(static_cast<size_t>(n * k) * 2);
    if (random_data) {
      FillRandomBf16(w.back(), 100 + i);
    } else {
      CUDA_CHECK(cudaMemset(w.back().get(), 0x3C, w.back().bytes()));  // bf16 ≈ 0.0115
    }
  }
  if (random_data) {
    FillRandomBf16(x, 7);
  } else {
    CUDA_CHECK(cudaMemset(x.get(), 0x3C, x.bytes()));
  }
  const float alpha = 1.0f, beta = 0.0f;
  bool ok = true;
  int call = 0;
  // Column-major: yᵀ [n, m] = w [n, k] (stored k-major: op T) · xᵀ [k, m].
  const double us = MedianEventMicros(warmup, iters, [&] {
    ok &= c.gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                 static_cast<int>(k), &alpha, w[call++ % copies].get(), CUDA_R_16BF,
                 static_cast<int>(k), x.get(), CUDA_R_16BF, static_cast<int>(k), &beta, y.get(),
                 CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  c.destroy(handle);
  if (!ok) *source += ": refused";
  return ok ? us : 0.0;
}

}  // namespace flashserve::kernels
