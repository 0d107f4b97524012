// a / b rounded to nearest even from one reciprocal of b, for the attention epilogues that divide
// many values by the same denominator (README.md "Epilogue division"). Host and device (nvcc),
// header only.
//
// Markstein's theorem (Muller et al., Handbook of Floating-Point Arithmetic, "Newton-Raphson-based
// division with an FMA"): in binary floating point with round to nearest, if y is within half an
// ulp of 1/b and q within one ulp of a/b, then r = a - b·q is exactly representable (one FMA
// computes it exactly) and RN(q + r·y) = RN(a/b), provided nothing underflows or overflows.
// Here y = RN(1/b) and q = RN(a·y), which is within one ulp of a/b. The range guards keep every
// intermediate normal and finite: 2^-60 <= |a|, |b| <= 2^60 puts a/b in [2^-120, 2^120] and r
// near 2^-24·|a|; outside them (zeros, whose sign the sequence would lose, tiny, huge, inf,
// NaN) the plain division is taken. DivByRcpTest checks the sequence against a / b on the host
// (the same IEEE operations), the GPU tests bit for bit against the CPU bodies.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define FS_DIV_HD __host__ __device__
#else
#define FS_DIV_HD
#endif

namespace flashserve::kernels::attention_internal {

// RN(1/b): the y of DivByRcp.
FS_DIV_HD inline float RcpRn(float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(b));
  return r;
#else
  return 1.0f / b;
#endif
}

// Whether DivByRcp's sequence applies to a / b (the guards above).
FS_DIV_HD inline bool DivByRcpInRange(float x) {
  const float m = std::fabs(x);
  return m >= 0x1p-60f && m <= 0x1p60f;  // false for NaN
}

// RN(a / b) given y = RcpRn(b), when DivByRcpInRange(a) and DivByRcpInRange(b): three
// operations, each spelled out (inline PTX on the device, std::fma on the host), so that no
// contraction or fast-math flag changes a bit. Callers check the ranges first (once per row for
// b; for a, an OR of the checks over the row, then one branch: DivByRcp's per-value branch costs
// more than the sequence).
FS_DIV_HD inline float DivByRcpInRangeOnly(float a, float b, float y) {
#if defined(__CUDA_ARCH__)
  float q, r, out;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(q) : "f"(a), "f"(y));
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(-q), "f"(b), "f"(a));
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(out) : "f"(r), "f"(y), "f"(q));
  return out;
#else
  const float q = a * y;
  const float r = std::fma(-q, b, a);
  return std::fma(r, y, q);
#endif
}

// RN(a / b) given y = RcpRn(b), any a and b: the sequence in range, the IEEE division outside.
FS_DIV_HD inline float DivByRcp(float a, float b, float y) {
  if (DivByRcpInRange(a) && DivByRcpInRange(b)) return DivByRcpInRangeOnly(a, b, y);
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace flashserve::kernels::attention_internal

#undef FS_DIV_HD
