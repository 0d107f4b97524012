#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "bench/bench_fill.h"
#include "kernels/common/cuda_check.h"
#include "kernels/quant/cuda/quant_math.h"

namespace flashserve::bench {
namespace {

__device__ __forceinline__ uint64_t Hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ float Unit(uint64_t h) {  // [0, 1)
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

__global__ void FillBf16Kernel(uint64_t seed, size_t n, float amp, __nv_bfloat16* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn((2.0f * Unit(Hash(seed, i)) - 1.0f) * amp);
  }
}

__global__ void FillF32Kernel(uint64_t seed, size_t n, float lo, float hi, float* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = lo + (hi - lo) * Unit(Hash(seed, i));
  }
}

__global__ void FillBytesKernel(uint64_t seed, size_t n, uint32_t lo, uint32_t span, bool fp8,
                                uint8_t* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint32_t b = lo + static_cast<uint32_t>(Hash(seed, i) % span);
    if (fp8 && (b & 0x7F) == 0x7F) b ^= 1;
    out[i] = static_cast<uint8_t>(b);
  }
}

__global__ void FillRowBytesKernel(uint64_t seed, size_t rows, size_t row_bytes, size_t offset,
                                   size_t count, uint32_t lo, uint32_t span, uint8_t* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < rows * count;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t r = i / count, c = i % count;
    out[r * row_bytes + offset + c] = static_cast<uint8_t>(lo + Hash(seed, i) % span);
  }
}

constexpr int kThreads = 256;
constexpr int kBlocks = 132 * 16;

}  // namespace

__global__ void Bf16FromFp8BlocksKernel(const uint8_t* codes, const uint8_t* scales, size_t rows,
                                        size_t cols, __nv_bfloat16* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < rows * cols;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    const float v = kernels::quant::math::E4m3ToF32(codes[i]);  // exact
    const int s = static_cast<int>(scales[(r / 32) * (cols / 32) + c / 32]) - 127;
    out[i] = __float2bfloat16_rn(ldexpf(v, s));
  }
}

void Bf16FromFp8Blocks(const uint8_t* codes, const uint8_t* scales, size_t rows, size_t cols,
                       uint16_t* out) {
  Bf16FromFp8BlocksKernel<<<kBlocks, kThreads>>>(codes, scales, rows, cols,
                                                 reinterpret_cast<__nv_bfloat16*>(out));
  CUDA_CHECK(cudaGetLastError());
}

void FillBf16(uint64_t seed, size_t n, float amp, uint16_t* out) {
  FillBf16Kernel<<<kBlocks, kThreads>>>(seed, n, amp, reinterpret_cast<__nv_bfloat16*>(out));
  CUDA_CHECK(cudaGetLastError());
}

void FillF32(uint64_t seed, size_t n, float lo, float hi, float* out) {
  FillF32Kernel<<<kBlocks, kThreads>>>(seed, n, lo, hi, out);
  CUDA_CHECK(cudaGetLastError());
}

void FillFp8Codes(uint64_t seed, size_t n, uint8_t* out) {
  FillBytesKernel<<<kBlocks, kThreads>>>(seed, n, 0, 256, true, out);
  CUDA_CHECK(cudaGetLastError());
}

void FillBytes(uint64_t seed, size_t n, uint8_t lo, uint8_t hi, uint8_t* out) {
  FillBytesKernel<<<kBlocks, kThreads>>>(seed, n, lo, uint32_t{hi} - lo + 1, false, out);
  CUDA_CHECK(cudaGetLastError());
}

void FillRowBytes(uint64_t seed, size_t rows, size_t row_bytes, size_t offset, size_t count,
                  uint8_t lo, uint8_t hi, uint8_t* out) {
  FillRowBytesKernel<<<kBlocks, kThreads>>>(seed, rows, row_bytes, offset, count, lo,
                                            uint32_t{hi} - lo + 1, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace flashserve::bench
