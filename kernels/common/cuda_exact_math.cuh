// Device fp32 arithmetic that reproduces the CPU bodies bit for bit: each operation is the one
// correctly rounded IEEE operation the CPU code (built with -ffp-contract=off) performs, as inline
// PTX without .ftz (subnormals kept) and never contracted into an FMA, so no nvcc flag (-ftz,
// -use_fast_math, -fmad, -prec-div, -prec-sqrt) can change a bit. bf16 conversions follow
// common/formats/bf16.h (RNE; NaN keeps its sign and top payload bits, quiet bit forced).
// Shared by the CUDA bodies of kernels/norm_rope and kernels/mhc. Device code only (C++17).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::kernels::exact {

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

__device__ __forceinline__ float FmaRn(float a, float b, float c) {
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
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

// Two values rounded to bf16 (F32ToBf16) as one word: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ uint32_t F32x2ToBf16x2(float lo, float hi) {
  return F32ToBf16(lo) | (F32ToBf16(hi) << 16);
}

// The same in one instruction for non-NaN values: cvt.rn (no .ftz) rounds to nearest even, keeps
// subnormals and overflows to inf exactly as F32ToBf16 does; a NaN comes out as the canonical
// 0x7FFF instead of F32ToBf16's quieted payload, so callers rule NaN out first.
__device__ __forceinline__ uint32_t F32x2ToBf16x2NoNan(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Whether `f` is NaN, read from its bits (no compiler flag can fold the test away).
__device__ __forceinline__ bool IsNanBits(float f) {
  return (__float_as_uint(f) & 0x7FFFFFFFu) > 0x7F800000u;
}

// F32x2ToBf16x2's bits in one cvt.rn.bf16x2.f32 where lo + hi is not NaN (neither is NaN; a NaN,
// or inf - inf, takes F32x2ToBf16x2): ~4 instructions instead of ~15.
__device__ __forceinline__ uint32_t F32x2ToBf16x2Fast(float lo, float hi) {
  return IsNanBits(AddRn(lo, hi)) ? F32x2ToBf16x2(lo, hi) : F32x2ToBf16x2NoNan(lo, hi);
}

// Eight values as four F32x2ToBf16x2 words (w[j] holds v[2j] low, v[2j + 1] high): one
// cvt.rn.bf16x2.f32 per pair where the eight values' sum is not NaN (none is NaN; a NaN, or
// inf - inf, sends the eight through F32ToBf16), so the bits are F32ToBf16's always, at ~2
// instructions per value instead of ~7.5.
__device__ __forceinline__ void F32x8ToBf16x8(const float (&v)[8], uint32_t (&w)[4]) {
  const float sum = AddRn(AddRn(AddRn(v[0], v[1]), AddRn(v[2], v[3])),
                          AddRn(AddRn(v[4], v[5]), AddRn(v[6], v[7])));
  if (!IsNanBits(sum)) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = F32x2ToBf16x2NoNan(v[2 * j], v[2 * j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = F32x2ToBf16x2(v[2 * j], v[2 * j + 1]);
  }
}

}  // namespace flashserve::kernels::exact
