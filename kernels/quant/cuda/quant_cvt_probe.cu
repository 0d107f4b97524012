#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/quant/cuda/quant_cvt_probe.h"
#include "kernels/quant/cuda/quant_fast.cuh"
#include "kernels/quant/cuda/quant_math.h"

namespace flashserve::kernels::quant::testing {
namespace {

struct Counters {
  unsigned long long e4m3;
  unsigned long long bf16;
  uint32_t first_e4m3[4];
  uint32_t first_bf16[4];
};

__device__ void Record(unsigned long long* count, uint32_t* first, uint32_t bits) {
  const unsigned long long n = atomicAdd(count, 1ull);
  if (n < 4) first[n] = bits;
}

__global__ void ProbeKernel(Counters* c) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const auto bits = static_cast<uint32_t>(i);
    if (math::IsNanBits(bits)) continue;
    const float x = math::F32(bits);
    const uint32_t e4m3 = (device::E4m3x2(0.0f, x) & 0xFFu) | ((bits >> 24) & 0x80u);
    if (e4m3 != math::F32ToE4m3(x)) Record(&c->e4m3, c->first_e4m3, bits);
    if ((device::Bf16x2(0.0f, x) & 0xFFFFu) != math::F32ToBf16(x)) {
      Record(&c->bf16, c->first_bf16, bits);
    }
  }
}

}  // namespace

CvtProbeResult ProbeHardwareConversions() {
  DeviceBuffer buf(sizeof(Counters));
  CUDA_CHECK(cudaMemset(buf.get(), 0, sizeof(Counters)));
  ProbeKernel<<<132 * 8, 256>>>(buf.get<Counters>());
  CUDA_CHECK(cudaGetLastError());
  Counters c{};
  buf.CopyToHost(&c, sizeof(c));
  CvtProbeResult r;
  r.e4m3_mismatches = c.e4m3;
  r.bf16_mismatches = c.bf16;
  for (int i = 0; i < 4; ++i) r.first_e4m3[i] = c.first_e4m3[i], r.first_bf16[i] = c.first_bf16[i];
  return r;
}

}  // namespace flashserve::kernels::quant::testing
