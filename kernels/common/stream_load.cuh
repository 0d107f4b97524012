// Read-once global loads: the streamed weights of the weight-streaming kernels (kernels/gemm
// cuda/linear_fp8_stream.cuh, kernels/moe cuda/moe_stream_gemm.cuh) and the row-form attention's
// serving rows (kernels/attention cuda/sparse_attn_wgmma_rows.cuh). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::kernels::cuda_common {

// 16 bytes of a weight that is read once: not kept in L1 (ld.global.nc.L1::no_allocate), and
// the L2 fetches the 256-byte neighbourhood (the next unit of the same row).
__device__ __forceinline__ uint4 LoadStream16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 8 bytes of the same kind of weight (see LoadStream16).
__device__ __forceinline__ uint2 LoadStream8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p));
  return v;
}

// 16 / 8 bytes through the read-only path with the default cache policy (the row-form attention's
// serving rows: read once per list block, neighbours fetched by the other threads of the row).
__device__ __forceinline__ uint4 LoadNc16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 LoadNc8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

}  // namespace flashserve::kernels::cuda_common
