// The general epilogue step shared by the FP8 and bf16 / fp32 Linear kernels (mma.sync,
// cp.async wgmma, FP8 wgmma; the warp-specialised kernel's edge tiles): one accumulator pair of
// an output row, columns col and col + 1 (the second only when `two`, i.e. col + 1 < N). Device
// code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"

namespace flashserve::kernels::gemm_device {

// A split's fp32 partials: dst points at column col of the partial row.
__device__ __forceinline__ void StorePartialPair(float* dst, float v0, float v1, bool two) {
  dst[0] = v0;
  if (two) dst[1] = v1;
}

// The output: + bias[col] (fp32, one rounding) when g.bias is set, then fp32 (g.y_f32) or one
// RNE rounding to bf16 (g.y_bf16; one 4-byte store where g.y_pair says every pair is aligned),
// at element `off` of y. `A`: any kernel argument struct with bias, y_f32, y_bf16 and y_pair.
template <class A>
__device__ __forceinline__ void StoreOutputPair(const A& g, int64_t off, int64_t col, float v0,
                                                float v1, bool two) {
  if (g.bias != nullptr) {
    v0 = exact::AddRn(v0, g.bias[col]);
    if (two) v1 = exact::AddRn(v1, g.bias[col + 1]);
  }
  if (g.y_f32 != nullptr) {
    g.y_f32[off] = v0;
    if (two) g.y_f32[off + 1] = v1;
    return;
  }
  uint16_t* dst = g.y_bf16 + off;
  const uint32_t b0 = exact::F32ToBf16(v0), b1 = exact::F32ToBf16(v1);
  if (two && g.y_pair) {
    *reinterpret_cast<uint32_t*>(dst) = b0 | (b1 << 16);
  } else {
    dst[0] = static_cast<uint16_t>(b0);
    if (two) dst[1] = static_cast<uint16_t>(b1);
  }
}

}  // namespace flashserve::kernels::gemm_device
