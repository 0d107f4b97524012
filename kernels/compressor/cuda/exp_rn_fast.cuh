// ExpRnFast: the device's quick route to compressor_math::ExpRn (exp_rn.h) for the ratio-2
// pooling, device code only (compressor_kernels.cuh, exp_rn_probe.cu).
//
// ExpRn rounds CUDA's double exp once to fp32 and looks up a table near rounding boundaries; the
// double exp costs ~45 issued instructions (its 11 polynomial coefficients are 64-bit immediates,
// two uniform moves each) and the boundary test ~12 more. Here:
//   d = 2^k · P(r), k = rint(x / ln2), r = x − k·ln2 (Cody–Waite: ln2_hi has 32 significant bits,
//   so k·ln2_hi and x − k·ln2_hi are exact for |k| <= 125 and fp32 x), P = the degree-12 Taylor
//   polynomial of exp in Horner form with its coefficients in constant memory (operands of the
//   DFMAs, no moves). |r| <= 0.3466: truncation <= r^13/13!·e^r < 2^-51.9 relative, the
//   reduction's error ~2^-54 and Horner's roundings a few 2^-53, so |d − exp(x)| < 2^-49·d, i.e.
//   below 8 units of d's last place.
//   The fp32 rounding of d is that of exp(x) unless a midpoint between consecutive fp32 values
//   lies between them; within d's binade the midpoints are exactly where the 29 mantissa bits of
//   d below fp32's last place read 2^28 (the next binade's boundary is 2^27 units away). So the
//   fast result is taken when those bits are more than kWindow = 64 units from 2^28 (8 times the
//   error bound), and only for |x| < 86, where exp(x) and the pooling's quotients stay normal
//   fp32 values. Everything else — NaN, |x| >= 86, the window (120 of the 2.2e9 inputs below 86) —
//   returns false and the caller runs ExpRn.
// So wherever ExpRnFast returns true its value is the correctly rounded exp(x), i.e. ExpRn(x);
// kernels_compressor_gpu_test checks that on the device for all 2^32 fp32 inputs (and ExpRn on
// the device against the host's).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::kernels::compressor_device {

// 1/n! for n = 12 down to 2 (n! is exact in double, so each is the correctly rounded quotient).
static __constant__ double kExpRnFastPoly[11] = {
    1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
    1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
    1.0 / 24.0,        1.0 / 6.0,        1.0 / 2.0};

inline constexpr uint32_t kExpRnFastWindow = 64;  // units of d's last place around a midpoint

// The correctly rounded fp32 exp(x) in *y when this returns true (see the file comment); false:
// *y is garbage and the caller takes ExpRn(x).
__device__ __forceinline__ bool ExpRnFast(float x, float* y) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3FE62E42FEE00000: 32 bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // 0x3DEA39EF35793C76
  constexpr double kShift = 6755399441055744.0;          // 1.5·2^52: t's low word is k
  const double xd = static_cast<double>(x);
  const double t = fma(xd, kLog2e, kShift);
  const double kd = t - kShift;
  double r = fma(kd, -kLn2Hi, xd);
  r = fma(kd, -kLn2Lo, r);
  double p = kExpRnFastPoly[0];
#pragma unroll
  for (int i = 1; i < 11; ++i) p = fma(p, r, kExpRnFastPoly[i]);
  p = fma(p, r, 1.0);
  p = fma(p, r, 1.0);
  // d = p·2^k (p in [0.70, 1.42], |k| <= 125: a normal double, no rounding).
  const int k = __double2loint(t);
  const uint32_t lo = static_cast<uint32_t>(__double2loint(p));
  const double d = __hiloint2double(__double2hiint(p) + (k << 20), static_cast<int>(lo));
  float f;
  asm("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(d));
  *y = f;
  const uint32_t below = lo & 0x1FFFFFFFu;  // d's bits under fp32's last place
  return fabsf(x) < 86.0f && below - (0x10000000u - kExpRnFastWindow) > 2 * kExpRnFastWindow;
}

}  // namespace flashserve::kernels::compressor_device
