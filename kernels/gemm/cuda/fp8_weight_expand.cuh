// The FP8 weight expansion of LaunchLinearFp8's large-M plans (LinearCudaPlan::expand_weights):
// E4M3 codes × UE8M0 block scales -> bf16 [N, K], row-major, with the decoder the GEMM kernels
// use in shared memory (gemm_device::DecodeB), so the warp-specialised main loop then reads
// exactly the bf16 values its in-place decode would have made. Device code of
// cuda/linear_fp8_launch.cu only (sm_90a).
//
// Work split: thread unit u = one 16-byte chunk of codes (16 weights of one row, inside one
// 32-wide scale block: K is a multiple of 32), grid-stride; one 16-byte load, one scale byte
// (L1/L2-resident: a scale row serves 32 weight rows), two 16-byte stores. Memory-bound: 1 byte
// read and 2 written per weight.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemm/cuda/e4m3_bf16_decode.cuh"

namespace flashserve::kernels::gemm_device {

inline constexpr int kExpandThreads = 256;

struct ExpandArgs {
  const uint8_t* codes = nullptr;   // E4M3 [n, k], 16-byte aligned
  const uint8_t* scales = nullptr;  // UE8M0 [ceil(n/32), k/32]
  int64_t n = 0, k = 0;
  uint16_t* out = nullptr;  // bf16 [n, k], 16-byte aligned
};

__global__ void __launch_bounds__(kExpandThreads) ExpandFp8WeightKernel(const ExpandArgs a) {
  const int64_t chunks_per_row = a.k / 16;
  const int64_t total = a.n * chunks_per_row;
  const int64_t k_blocks = a.k / 32;
  for (int64_t u = int64_t{blockIdx.x} * kExpandThreads + threadIdx.x; u < total;
       u += int64_t{gridDim.x} * kExpandThreads) {
    const int64_t row = u / chunks_per_row, chunk = u % chunks_per_row;
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(a.codes) + u);
    const ScaleMul mul = MakeScaleMul(__ldg(a.scales + (row / 32) * k_blocks + chunk / 2));
    uint32_t lo[4], hi[4];
    DecodeB(make_uint2(q.x, q.y), mul, lo);
    DecodeB(make_uint2(q.z, q.w), mul, hi);
    uint4* dst = reinterpret_cast<uint4*>(a.out + row * a.k + chunk * 16);
    dst[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    dst[1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  }
}

}  // namespace flashserve::kernels::gemm_device
