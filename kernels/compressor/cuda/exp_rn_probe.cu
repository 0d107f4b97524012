// ExpRnOnDevice: one thread per input bit pattern.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/compressor/cuda/compress_vec.cuh"
#include "kernels/compressor/cuda/exp_rn_fast.cuh"
#include "kernels/compressor/cuda/exp_rn_probe.h"
#include "kernels/compressor/exp_rn.h"

namespace flashserve::kernels::compressor_testing {
namespace {

__global__ void ExpRnKernel(uint32_t first_bits, int64_t n, uint32_t* out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = __uint_as_float(first_bits + static_cast<uint32_t>(i));
    out[i] = __float_as_uint(compressor_math::ExpRn(x));
  }
}

// counts[0]: inputs ExpRnFast accepts, counts[1]: those whose value is not ExpRn's; counts[2]:
// the smallest such bit pattern (atomicMin). Every 32-bit pattern once: 2^32 / (blocks · 256)
// inputs per thread.
__global__ void ExpRnFastKernel(unsigned long long* counts) {
  unsigned long long accepted = 0;
  unsigned long long bad = 0;
  const uint64_t step = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += step) {
    const auto bits = static_cast<uint32_t>(i);
    float y = 0.0f;
    if (compressor_device::ExpRnFast(__uint_as_float(bits), &y)) {
      ++accepted;
      if (__float_as_uint(y) != __float_as_uint(compressor_math::ExpRn(__uint_as_float(bits)))) {
        ++bad;
        atomicMin(counts + 2, static_cast<unsigned long long>(bits));
      }
    }
  }
  atomicAdd(counts, accepted);
  atomicAdd(counts + 1, bad);
}

// Bit patterns of 2^-92 and 1.0f: the numerators DivRnPooled is used for.
constexpr uint32_t kPooledLoBits = 0x11800000u, kPooledHiBits = 0x3F800000u;

// counts[0]: e tried, counts[1]: differing quotients, counts[2]: the smallest e bits (atomicMin).
__global__ void DivRnPooledKernel(unsigned long long* counts) {
  unsigned long long tried = 0;
  unsigned long long bad = 0;
  for (uint32_t bits = kPooledLoBits + blockIdx.x * blockDim.x + threadIdx.x; bits <= kPooledHiBits;
       bits += gridDim.x * blockDim.x) {
    const float e = __uint_as_float(bits);
    const float sum = exact::AddRn(1.0f, e);
    ++tried;
    const bool differ = __float_as_uint(compressor_device::DivRnPooled(1.0f, sum)) !=
                            __float_as_uint(exact::DivRn(1.0f, sum)) ||
                        __float_as_uint(compressor_device::DivRnPooled(e, sum)) !=
                            __float_as_uint(exact::DivRn(e, sum));
    if (differ) {
      ++bad;
      atomicMin(counts + 2, static_cast<unsigned long long>(bits));
    }
  }
  atomicAdd(counts, tried);
  atomicAdd(counts + 1, bad);
}

// Runs a counter kernel on `blocks` blocks of 256 threads: counts[0] the inputs counted (tried or
// accepted: the report's first field), counts[1] the mismatches, counts[2] the smallest
// mismatching input's bits (0xFFFFFFFF: none).
template <class Report>
Report RunCounters(void (*kernel)(unsigned long long*), unsigned blocks) {
  DeviceBuffer buf(3 * sizeof(unsigned long long));
  const unsigned long long init[3] = {0, 0, 0xFFFFFFFFull};
  buf.CopyFromHost(init, sizeof(init));
  kernel<<<blocks, 256>>>(buf.get<unsigned long long>());
  CUDA_CHECK(cudaGetLastError());
  unsigned long long out[3] = {};
  buf.CopyToHost(out, sizeof(out));
  return Report{static_cast<int64_t>(out[0]), static_cast<int64_t>(out[1]),
                static_cast<uint32_t>(out[2])};
}

}  // namespace

DivRnPooledReport DivRnPooledOnDevice() {
  return RunCounters<DivRnPooledReport>(DivRnPooledKernel, 4096);
}

ExpRnFastReport ExpRnFastOnDeviceAllFloats() {
  return RunCounters<ExpRnFastReport>(ExpRnFastKernel, 8192);
}

void ExpRnOnDevice(uint32_t first_bits, int64_t n, uint32_t* out) {
  CHECK(n >= 0 && n <= (int64_t{1} << 28)) << "ExpRnOnDevice: n = " << n;
  if (n == 0) return;
  DeviceBuffer buf(static_cast<size_t>(n) * 4);
  ExpRnKernel<<<4096, 256>>>(first_bits, n, buf.get<uint32_t>());
  CUDA_CHECK(cudaGetLastError());
  buf.CopyToHost(out, static_cast<size_t>(n) * 4);
}

}  // namespace flashserve::kernels::compressor_testing
