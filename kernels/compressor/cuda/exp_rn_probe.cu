// ExpRnOnDevice: one thread per input bit pattern.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"
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

}  // namespace

void ExpRnOnDevice(uint32_t first_bits, int64_t n, uint32_t* out) {
  CHECK(n >= 0 && n <= (int64_t{1} << 28)) << "ExpRnOnDevice: n = " << n;
  if (n == 0) return;
  DeviceBuffer buf(static_cast<size_t>(n) * 4);
  ExpRnKernel<<<4096, 256>>>(first_bits, n, buf.get<uint32_t>());
  CUDA_CHECK(cudaGetLastError());
  buf.CopyToHost(out, static_cast<size_t>(n) * 4);
}

}  // namespace flashserve::kernels::compressor_testing
