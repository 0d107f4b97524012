// Device fp32 arithmetic of the norm/RoPE kernels, written so that each operation is the one
// correctly rounded IEEE operation the CPU bodies (built with -ffp-contract=off) perform:
// inline PTX without .ftz (subnormals kept) and never contracted into an FMA, so no nvcc flag
// (-ftz, -use_fast_math, -fmad, -prec-div, -prec-sqrt) can change a bit. bf16 conversions follow
// common/formats/bf16.h (RNE; NaN keeps its sign and top payload bits, quiet bit forced).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::kernels::norm_rope_device {

__device__ __forceinline__ float MulRn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float AddRn(float a, float b) {
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float SubRn(float a, float b) {
  float r;
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float DivRn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float SqrtRn(float a) {
  float r;
  asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}

// Round to nearest even, subnormals kept (cvt.rn without .ftz).
__device__ __forceinline__ float DoubleToF32(double a) {
  float r;
  asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(a));
  return r;
}

__device__ __forceinline__ float Int64ToF32(int64_t a) {
  float r;
  asm("cvt.rn.f32.s64 %0, %1;" : "=f"(r) : "l"(a));
  return r;
}

__device__ __forceinline__ float Bf16ToF32(uint32_t bf16) { return __uint_as_float(bf16 << 16); }

__device__ __forceinline__ uint32_t F32ToBf16(float x) {
  const uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return ((bits >> 16) | 0x0040u) & 0xFFFFu;
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

// cos/sin of the fp32 angle fp32(fp32(pos) * freq) as RopeCosSin computes them: the double
// cos/sin of the (exact) double angle, rounded once to fp32. CUDA's double sin/cos are within 2
// double ulps of the true value, so the fp32 rounding is the correctly rounded one unless the true
// value lies within ~2^-51 (relative) of an fp32 tie; fp32 sinf/cosf would be off by an ulp often.
__device__ __forceinline__ void RopeCosSinAt(int64_t pos, float freq, float* cos_out,
                                             float* sin_out) {
  const double angle = static_cast<double>(MulRn(Int64ToF32(pos), freq));
  double s = 0.0;
  double c = 0.0;
  sincos(angle, &s, &c);
  *cos_out = DoubleToF32(c);
  *sin_out = DoubleToF32(s);
}

// The RoPE rotation of one interleaved pair (a, b), as RotateInterleaved on the CPU:
// (a*cos - b*sin, a*sin + b*cos), each product and sum rounded on its own.
__device__ __forceinline__ void RotatePair(float a, float b, float cos, float sin, float* re,
                                           float* im) {
  *re = SubRn(MulRn(a, cos), MulRn(b, sin));
  *im = AddRn(MulRn(a, sin), MulRn(b, cos));
}

}  // namespace flashserve::kernels::norm_rope_device
