// Test / bench support: fills device expert weights from moe_test_weights.h's hash.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/moe/cuda/moe_test_weights_cuda.h"
#include "kernels/moe/moe_test_weights.h"

namespace flashserve::kernels::moe_test {
namespace {

__global__ void FillCodesKernel(uint64_t seed, int proj, int64_t n_experts, int64_t rows,
                                int64_t row_bytes, uint8_t* codes) {
  const int64_t total = n_experts * rows * row_bytes;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t byte = i % row_bytes;
    const int64_t row = (i / row_bytes) % rows;
    const int64_t expert = i / (row_bytes * rows);
    codes[i] = WeightCodeByte(seed, proj, expert, row, byte);
  }
}

__global__ void FillScalesKernel(uint64_t seed, WeightKind kind, int proj, int64_t n_experts,
                                 int64_t rows, int64_t blocks, uint8_t* scales) {
  const int64_t total = n_experts * rows * blocks;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t block = i % blocks;
    const int64_t row = (i / blocks) % rows;
    const int64_t expert = i / (blocks * rows);
    scales[i] = WeightScaleByte(seed, kind, proj, expert, row, block);
  }
}

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 1 << 16)));
}

}  // namespace

void FillExpertProjection(uint64_t seed, WeightKind kind, int proj, int64_t n_experts, int64_t rows,
                          int64_t cols, uint8_t* codes, uint8_t* scales) {
  const int64_t code_bytes = n_experts * rows * (cols / 2);
  const int64_t scale_bytes = n_experts * rows * (cols / 32);
  FillCodesKernel<<<GridFor(code_bytes), 256>>>(seed, proj, n_experts, rows, cols / 2, codes);
  CUDA_CHECK(cudaGetLastError());
  FillScalesKernel<<<GridFor(scale_bytes), 256>>>(seed, kind, proj, n_experts, rows, cols / 32,
                                                  scales);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace flashserve::kernels::moe_test
