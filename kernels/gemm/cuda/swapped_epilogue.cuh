// The epilogue of the swapped-role kernels (linear_fp8_rs.cuh, float_linear_swap.cuh), whose
// warpgroup MMA computes y^T: a warp's m64nN accumulators hold (weight row, x row). Lane (grp,
// tig) holds weight rows n and n + 8 (hr = 0, 1; n = its first row, for kernels/common/wgmma.cuh's
// fragment layout n = 16·warp + grp or the kernel's own row map) and x rows 2·tig + 8j + h
// (j < N / 8, h = 0, 1) relative to the tile: d[4j + 2hr + h]. Rows at or past `rows_left` (x)
// and columns at or past `n_limit` (weights) are not stored. Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"

namespace flashserve::kernels::gemm_device {

// fp32 split partials: out points at (x row 2·tig, weight row n) of a row-major [rows][ld] array.
template <int kN>
__device__ __forceinline__ void StoreSwappedPartial(const float (&acc)[kN / 2], float* out,
                                                    int64_t ld, int64_t n, int64_t n_limit,
                                                    int64_t rows_left) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (n + 8 * hr >= n_limit) continue;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (8 * j + h >= rows_left) continue;
        out[(8 * j + h) * ld + 8 * hr] = acc[4 * j + 2 * hr + h];
      }
    }
  }
}

// The output: + bias[column] (fp32, one rounding) when bias is set, then fp32 or one RNE rounding
// to bf16 (exactly one of y_f32 / y_bf16). Element (x row 2·tig + r, weight row c) goes to
// y[at0 + r·y_stride + c].
template <int kN>
__device__ __forceinline__ void StoreSwappedOutput(const float (&acc)[kN / 2], uint16_t* y_bf16,
                                                   float* y_f32, int64_t at0, int64_t y_stride,
                                                   int64_t n, int64_t n_limit, int64_t rows_left,
                                                   const float* bias) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t c = n + 8 * hr;
    if (c >= n_limit) continue;
    const float b = bias != nullptr ? bias[c] : 0.f;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (8 * j + h >= rows_left) continue;
        float v = acc[4 * j + 2 * hr + h];
        if (bias != nullptr) v = exact::AddRn(v, b);
        const int64_t at = at0 + (8 * j + h) * y_stride + c;
        if (y_f32 != nullptr) {
          y_f32[at] = v;
        } else {
          y_bf16[at] = static_cast<uint16_t>(exact::F32ToBf16(v));
        }
      }
    }
  }
}

}  // namespace flashserve::kernels::gemm_device
