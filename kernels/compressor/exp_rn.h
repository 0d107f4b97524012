// Correctly rounded fp32 exp, the same bits on the host and on the device: the softmax of the
// compressor's pooling (cpu/compress_projected_cpu.cc and cuda/compressor_kernels.cuh) calls it
// on both sides, so the GPU pooling equals the CPU's bit for bit. (glibc's expf is not correctly
// rounded — 0.502 ulp: on glibc 2.36 it misrounds 97,052 of the 1.1e9 fp32 x in [-104, 0] — and
// CUDA's expf is 2 ulp, so neither can be matched by the other side.)
//
// Method: d = exp((double)x) (glibc: < 0.52 double ulp; CUDA: <= 1 double ulp), then one rounding
// to fp32. That is the correctly rounded fp32 exp unless exp(x) lies within a double ulp or so of
// a midpoint between consecutive fp32 values. When d lies within 2^-50·d of such a midpoint (so
// that the exact value is within 2^-49 of it), the result comes from a table of every fp32 x whose
// exact exp lies within 2^-49 (relative) of a midpoint: an exhaustive scan of all 2.24e9 fp32 x in
// [-104, 89] against __float128 expq found the 25 below. Outside [-104, 89], exp(x) is below
// 0.98·2^-150 (result +0) or above the fp32 range (+inf), far from any midpoint. So ExpRn is the
// correctly rounded exp of every fp32 x, on both sides, given only the documented error bounds of
// the two double exps (the scan also found glibc's double route right everywhere else).
// NaN returns the input NaN, quieted. Compiles with nvcc (host and device) and plain C++.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/quant/cuda/quant_math.h"

#if defined(__CUDACC__)
#define FS_EXP_RN_HD __host__ __device__ __forceinline__
#else
#define FS_EXP_RN_HD inline
#endif

namespace flashserve::kernels::compressor_math {

// Bit casts on host and device (kernels/quant/cuda/quant_math.h's).
FS_EXP_RN_HD float BitsToF32(uint32_t bits) { return quant::math::F32(bits); }
FS_EXP_RN_HD uint32_t F32ToBits(float f) { return quant::math::Bits(f); }

// One rounding to nearest even, subnormals kept (no .ftz whatever the nvcc flags).
FS_EXP_RN_HD float RoundToF32(double d) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(d));
  return r;
#else
  return static_cast<float>(d);
#endif
}

// The fp32 x whose exact exp lies within 2^-49 (relative) of a midpoint between consecutive fp32
// values, with the correctly rounded result (from the exhaustive scan described above).
FS_EXP_RN_HD bool ExpHardCase(uint32_t x_bits, uint32_t* y_bits) {
  switch (x_bits) {
    case 0x33800000u:
      *y_bits = 0x3F800001u;
      return true;  // 0x1p-24
    case 0x343FFFFFu:
      *y_bits = 0x3F800002u;
      return true;  // 0x1.7ffffep-23
    case 0x34DFFFFDu:
      *y_bits = 0x3F800004u;
      return true;  // 0x1.bffffap-22
    case 0x356FFFF9u:
      *y_bits = 0x3F800008u;
      return true;  // 0x1.dffff2p-21
    case 0x35F7FFF1u:
      *y_bits = 0x3F800010u;
      return true;  // 0x1.efffe2p-20
    case 0x367BFFE1u:
      *y_bits = 0x3F800020u;
      return true;  // 0x1.f7ffc2p-19
    case 0x36FDFFC1u:
      *y_bits = 0x3F800040u;
      return true;  // 0x1.fbff82p-18
    case 0x377EFF81u:
      *y_bits = 0x3F800080u;
      return true;  // 0x1.fdff02p-17
    case 0x383A3EF1u:
      *y_bits = 0x3F800175u;
      return true;  // 0x1.747de2p-15
    case 0x38E69CC1u:
      *y_bits = 0x3F80039Au;
      return true;  // 0x1.cd3982p-14
    case 0x39C6BE5Bu:
      *y_bits = 0x3F800C6Du;
      return true;  // 0x1.8d7cb6p-12
    case 0x39E5BB1Du:
      *y_bits = 0x3F800E5Du;
      return true;  // 0x1.cb763ap-12
    case 0x3D1A274Eu:
      *y_bits = 0x3F84E8BAu;
      return true;  // 0x1.344e9cp-5
    case 0x3FE67199u:
      *y_bits = 0x40C1A7A6u;
      return true;  // 0x1.cce332p+0
    case 0x4001B249u:
      *y_bits = 0x40F2CD14u;
      return true;  // 0x1.036492p+1
    case 0x40315B33u:
      *y_bits = 0x417FA47Du;
      return true;  // 0x1.62b666p+1
    case 0x41CBF87Bu:
      *y_bits = 0x51DC50BEu;
      return true;  // 0x1.97f0f6p+4
    case 0x4288942Bu:
      *y_bits = 0x70B7A4C5u;
      return true;  // 0x1.112856p+6
    case 0xB3000000u:
      *y_bits = 0x3F800000u;
      return true;  // -0x1p-25
    case 0xBAE0E25Cu:
      *y_bits = 0x3F7F8FA7u;
      return true;  // -0x1.c1c4b8p-10
    case 0xBBB70EE8u:
      *y_bits = 0x3F7E92E8u;
      return true;  // -0x1.6e1ddp-8
    case 0xBBF0EDF1u:
      *y_bits = 0x3F7E1FE9u;
      return true;  // -0x1.e1dbe2p-8
    case 0xBC2A461Au:
      *y_bits = 0x3F7D5A6Eu;
      return true;  // -0x1.548c34p-7
    case 0xC13D6631u:
      *y_bits = 0x36F28E33u;
      return true;  // -0x1.7acc62p+3
    case 0xC16912CDu:
      *y_bits = 0x34FD331Bu;
      return true;  // -0x1.d2259ap+3
    default:
      return false;
  }
}

// Correctly rounded fp32 exp(x) (see the file comment).
FS_EXP_RN_HD float ExpRn(float x) {
  const uint32_t x_bits = F32ToBits(x);
  if ((x_bits & 0x7FFFFFFFu) > 0x7F800000u) return BitsToF32(x_bits | 0x00400000u);
  const double d = ::exp(static_cast<double>(x));
  const float y = RoundToF32(d);
  const uint32_t y_bits = F32ToBits(y);
  if (y_bits >= 0x7F800000u) return y;  // +inf: exp(x) > 2^128 − 2^103, no midpoint near
  // The rounding boundary nearest d: the midpoint on d's side of y (y >= 0, so d >= y at y == 0).
  const double neighbour =
      static_cast<double>(BitsToF32(d >= static_cast<double>(y) ? y_bits + 1u : y_bits - 1u));
  const double mid = (static_cast<double>(y) + neighbour) * 0.5;
  if (::fabs(d - mid) <= d * 0x1p-50) {
    uint32_t hard = 0;
    if (ExpHardCase(x_bits, &hard)) return BitsToF32(hard);
  }
  return y;
}

}  // namespace flashserve::kernels::compressor_math
