// Fast device paths of the quant kernels, for units without NaN (inputs and codes) and with a
// finite scale; everything else takes the software paths of quant_math.h. Each fast path equals
// its software path bit for bit:
// - E4M3 encoding uses the hardware `cvt.rn.satfinite.e4m3x2.f32` (RNE, saturating at ±448 like
//   formats' clamp). The sign is OR-ed in from the bf16 input, so a zero or an underflow keeps the
//   input's sign whatever the hardware does with it. quant_gpu_cvt_test.cc compares this recipe
//   with math::F32ToE4m3 for all 2^32 floats.
// - bf16 rounding uses the hardware `cvt.rn.bf16x2.f32` (RNE, subnormals kept); equal to
//   math::F32ToBf16 for every non-NaN float (same test).
// - FP4 encoding rounds the quotients times 2^-14 to f16 (`cvt.rn.f16x2.f32`), whose bits are
//   then E2M1's up to one rounding at bit 9, done in 16-bit lanes (Fp4NibblePair); the argument
//   is in quant_math.h (EncodeFp4ViaF16), the lane arithmetic is checked end to end by
//   quant_gpu_exhaustive_test.cc.
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

// E2M1 codes of the two bf16 values of word w (low half first) under a positive finite scale with
// r14 = Fp4*Reciprocal14: math::EncodeFp4ViaF16 on both 16-bit lanes at once, as nibbles (sign at
// the top) at bits 9-12 and 25-28, every other bit zero. Both scaled quotients go to f16 in one
// instruction (|q| * 2^-14: each lane's sign bit is clear; NaN gives 0x7FFF), the clamp at 0x0E00
// is an unsigned 16-bit min (Inf and NaN clamp too), so a lane stays <= 0x0F00 through the
// rounding and never carries into the next; the input's sign goes to bit 12 of its lane first.
__device__ __forceinline__ uint32_t Fp4NibblePair(uint32_t w, float r14) {
  const float q0 = math::MulAbsRn(math::F32(w << 16), r14);
  const float q1 = math::MulAbsRn(math::F32(w & 0xFFFF0000u), r14);
  uint32_t h;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(q1), "f"(q0));
  h = __vminu2(h, 0x0E000E00u) | ((w >> 3) & 0x10001000u);
  return (h + 0x00FF00FFu + ((h >> 9) & 0x00010001u)) & 0x1E001E00u;
}

// The 4 E2M1 code bytes of 8 bf16 values (byte i from word x[i], first value in the low nibble).
// A pair's nibbles times 2^15 + 2^3 sit side by side in the top byte (the first's copy shifted by
// 15 to bits 24-27, the second's by 3 to bits 28-31; the other copies land at bits 12-15 and past
// bit 31, so nothing overlaps or carries); three byte permutes gather the four top bytes.
__device__ __forceinline__ uint32_t EncodeFp4Unit(const uint32_t (&x)[4], float r14) {
  uint32_t b[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = Fp4NibblePair(x[i], r14) * 0x8008u;
  return __byte_perm(__byte_perm(b[0], b[1], 0x0073), __byte_perm(b[2], b[3], 0x0073), 0x5410);
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

// Eight E2M1 codes (the nibbles of `w`, value i in nibble i) times the bf16 scale pair `s2`
// (the E4M3 scale as bf16, in both halves): bf16 pairs out[j] = values 2j, 2j + 1. The magnitude
// comes from a byte table (prmt on the 3-bit magnitudes), the sign bits are gathered into bit 7
// of each high byte by one more prmt (of w and w << 4: the sign of an even value is bit 3 of its
// byte, of an odd one bit 7), and one bf16x2 multiply applies the scale — exact: an E2M1 value
// times an E4M3 scale has at most 6 significant bits and lies in bf16's normal range, so the
// product is the fp32 product's value. 19 instructions per 8 values.
__device__ __forceinline__ void Fp4x8ToBf16(uint32_t w, uint32_t s2, uint32_t (&out)[4]) {
  // bf16 of E2M1 magnitudes 0..7 (0, 0.5, 1, 1.5, 2, 3, 4, 6): low bytes, high bytes (bit 7
  // clear: the sign is ORed in).
  constexpr uint32_t kLo0 = 0xC0800000u, kLo1 = 0xC0804000u;
  constexpr uint32_t kHi0 = 0x3F3F3F00u, kHi1 = 0x40404040u;
  const uint32_t mag = w & 0x77777777u;
  const uint32_t w4 = w << 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t sel = mag >> (16 * h);  // values 4h .. 4h + 3: prmt reads bits 0..15
    uint32_t lo, hi, sign;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lo) : "r"(kLo0), "r"(kLo1), "r"(sel));
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hi) : "r"(kHi0), "r"(kHi1), "r"(sel));
    // Byte j = the byte holding value 4h + j's sign at bit 7: w4's byte 2h (j = 0), w's byte 2h
    // (j = 1), w4's byte 2h + 1 (j = 2), w's byte 2h + 1 (j = 3).
    if (h == 0) {
      asm("prmt.b32 %0, %1, %2, 0x1504;" : "=r"(sign) : "r"(w), "r"(w4));
    } else {
      asm("prmt.b32 %0, %1, %2, 0x3726;" : "=r"(sign) : "r"(w), "r"(w4));
    }
    hi |= sign & 0x80808080u;
    uint32_t v01, v23;
    asm("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(v01) : "r"(lo), "r"(hi));
    asm("prmt.b32 %0, %1, %2, 0x7362;" : "=r"(v23) : "r"(lo), "r"(hi));
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(out[2 * h]) : "r"(v01), "r"(s2));
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(out[2 * h + 1]) : "r"(v23), "r"(s2));
  }
}

}  // namespace flashserve::kernels::quant::device
