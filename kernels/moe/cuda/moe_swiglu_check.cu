// Test support: SwiGluGateFactor against the formula it replaces, on the device.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/cuda/moe_swiglu_check.h"

namespace flashserve::kernels::moe_test {
namespace {

__global__ void GateFactorKernel(const float* g, int64_t n, float* kernel_factor,
                                 float* formula_factor) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float gv = g[i];
    kernel_factor[i] = moe_device::SwiGluGateFactor(gv);
    formula_factor[i] = exact::DivRn(gv, exact::AddRn(1.f, moe_device::ExpF32(-gv)));
  }
}

}  // namespace

void SwiGluGateFactorsOnDevice(const float* g, int64_t n, float* kernel_factor,
                               float* formula_factor) {
  float* d = nullptr;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  CUDA_CHECK(cudaMalloc(&d, 3 * bytes));
  CUDA_CHECK(cudaMemcpy(d, g, bytes, cudaMemcpyHostToDevice));
  GateFactorKernel<<<128, 256>>>(d, n, d + n, d + 2 * n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(kernel_factor, d + n, bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(formula_factor, d + 2 * n, bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(d));
}

}  // namespace flashserve::kernels::moe_test
