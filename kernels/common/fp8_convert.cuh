// E4M3 codes to f16 / fp32 on sm_90a (`cvt.rn.f16x2.e4m3x2`: exact, every E4M3 value is an f16),
// shared by the FP8 weight-streaming kernel (kernels/gemm cuda/linear_fp8_stream.cuh: codes as f16
// MMA operands) and the CUDA-core Linear's FP8 weight form (cuda/float_linear_gemv.cuh: fp32
// weights). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::kernels::cuda_common {

// Codes bytes 0, 1 and bytes 2, 3 of w as two f16 pairs (the lower byte in the lower half).
__device__ __forceinline__ void E4m3x4ToF16(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
      " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

// The two halves of an f16 pair as fp32 (exact): lower half to `lo`.
__device__ __forceinline__ void F16x2ToF32(uint32_t h2, float& lo, float& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(h2));
}

}  // namespace flashserve::kernels::cuda_common
