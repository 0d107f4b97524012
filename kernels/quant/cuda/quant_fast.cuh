// Fast device paths of the quant kernels, for units without NaN (inputs and codes) and with a
// finite scale; everything else takes the software paths of quant_math.h. Each fast path equals
// its software path bit for bit:
// - E4M3 encoding uses the hardware `cvt.rn.satfinite.e4m3x2.f32` (RNE, saturating at ±448 like
//   formats' clamp). The sign is OR-ed in from the bf16 input, so a zero or an underflow keeps the
//   input's sign whatever the hardware does with it. quant_gpu_cvt_test.cc compares this recipe
//   with math::F32ToE4m3 for all 2^32 floats.
// - bf16 rounding uses the hardware `cvt.rn.bf16x2.f32` (RNE, subnormals kept); equal to
//   math::F32ToBf16 for every non-NaN float (same test).
// - FP4 encoding folds and rounds the quotients to f16 (`cvt.rn.f16x2.f32`) and finishes in
//   16-bit lanes (EncodeFp4x2); the rounding argument is in quant_math.h (EncodeFp4ViaF16), the
//   lane arithmetic is checked end to end by quant_gpu_exhaustive_test.cc.
// - Code decoding needs no hardware: the code's magnitude bits shifted into an fp32 exponent and
//   mantissa read as a float are value * 2^-120 (E4M3) or value * 2^-126 (E2M1), subnormal codes
//   included (they become fp32 subnormals), so one exact multiply restores the value and a second
//   one applies the scale with the single rounding formats does.
#pragma once

#include <cstdint>

#include "kernels/quant/cuda/quant_math.h"

namespace flashserve::kernels::quant::device {

// Two floats to E4M3 codes: `lo` in bits 0-7, `hi` in bits 8-15.
__device__ __forceinline__ uint32_t E4m3x2(float hi, float lo) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two floats to bf16 bits: `lo` in bits 0-15, `hi` in bits 16-31. Not for NaN inputs.
__device__ __forceinline__ uint32_t Bf16x2(float hi, float lo) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Largest bf16 magnitude of an 8-value unit, NaN skipped; *has_nan tells whether any was seen.
__device__ __forceinline__ uint32_t UnitAmax(const uint32_t (&x)[4], bool* has_nan) {
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) m = __vmaxu2(m, x[j] & 0x7FFF7FFFu);
  uint32_t amax = (m >> 16) > (m & 0xFFFFu) ? (m >> 16) : (m & 0xFFFFu);
  *has_nan = amax > 0x7F80u;
  if (*has_nan) {
    amax = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) amax = math::AmaxOfPair(x[j], amax);
  }
  return amax;
}

// E4M3 codes of 4 bf16 values (words a, b) scaled by `recip`, without NaN inputs: byte i is value
// i (a's low half first).
__device__ __forceinline__ uint32_t EncodeFp8x4(uint32_t a, uint32_t b, float recip) {
  const float v0 = math::MulRn(math::F32(a << 16), recip);
  const float v1 = math::MulRn(math::F32(a & 0xFFFF0000u), recip);
  const float v2 = math::MulRn(math::F32(b << 16), recip);
  const float v3 = math::MulRn(math::F32(b & 0xFFFF0000u), recip);
  const uint32_t codes = E4m3x2(v1, v0) | (E4m3x2(v3, v2) << 16);
  return codes | (__byte_perm(a, b, 0x7531) & 0x80808080u);  // the inputs' sign bits
}

// E2M1 codes of two bf16 values (word w, low half first) under a positive finite scale s with
// r = RN(1 / s): one code byte, the first value in the low nibble. Packed form of
// math::EncodeFp4ViaF16 (see there why folding and rounding the quotient to f16 is exact): both
// folded quotients go to f16 in one instruction; each 16-bit lane then holds h in
// [0x3800, 0x7FFF] (y >= 0.5, or NaN as 0x7FFF), so (h + 0xFF + lsb) >> 9 never carries across
// lanes and is >= 28 in both lanes, and min(t, 35) - 28 never borrows.
__device__ __forceinline__ uint32_t EncodeFp4x2(uint32_t w, float r) {
  const float y0 = math::E2m1Fold(math::MulAbsRn(math::F32(w << 16), r));
  const float y1 = math::E2m1Fold(math::MulAbsRn(math::F32(w & 0xFFFF0000u), r));
  uint32_t h;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(y1), "f"(y0));
  const uint32_t t = ((h + 0x00FF00FFu + ((h >> 9) & 0x00010001u)) >> 9) & 0x007F007Fu;
  const uint32_t code = (__vminu2(t, 0x00230023u) - 0x001C001Cu) | ((w >> 12) & 0x00080008u);
  return (code & 0xFu) | ((code >> 12) & 0xF0u);
}

// True when any of the 4 E4M3 codes in `w` is NaN (0x7F or 0xFF).
__device__ __forceinline__ bool AnyE4m3Nan(uint32_t w) {
  return (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0u;
}

// bf16(value(code) * scale) for two E4M3 codes (bits 0-7 and 8-15 of `c`), no NaN code, finite
// scale; the result holds the first value in its low half.
__device__ __forceinline__ uint32_t DecodeFp8x2(uint32_t c, float scale) {
  return Bf16x2(math::MulRn(math::E4m3ToF32ByShift((c >> 8) & 0xFFu), scale),
                math::MulRn(math::E4m3ToF32ByShift(c & 0xFFu), scale));
}

// bf16(value(code) * scale) for the two E2M1 codes of byte `c` (low nibble first), finite scale.
__device__ __forceinline__ uint32_t DecodeFp4x2(uint32_t c, float scale) {
  return Bf16x2(math::MulRn(math::E2m1ToF32ByShift((c >> 4) & 0xFu), scale),
                math::MulRn(math::E2m1ToF32ByShift(c & 0xFu), scale));
}

}  // namespace flashserve::kernels::quant::device
