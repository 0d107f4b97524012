#include "kernels/common/gpu_bench.h"

#include <algorithm>
#include <vector>

#include "common/base/check.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels {

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
  std::vector<double> us(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = 1000.0 * ms;
  }
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventDestroy(e));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace flashserve::kernels
