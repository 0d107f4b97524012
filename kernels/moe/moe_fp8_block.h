// The FP8 E4M3 / UE8M0 quantiser of one 32-value block (LinearCpu's activation rule) on the
// kernels' fast path: the hardware conversions of kernels/quant's fast quantisers (quant_fast.cuh:
// cvt.rn.satfinite.e4m3x2.f32 for the codes, cvt.rn.bf16x2.f32 for the QDQ values), each of which
// kernels/quant's exhaustive GPU tests hold equal to the software encoders for every input. For
// blocks without Inf or NaN; the MoE's QuantizeBlock32 (cuda/moe_device.cuh) keeps its software
// path for the others. ~360 instructions a block instead of ~1,500 (session 56). Host and device
// code: `Ops` supplies the two conversions (the hardware on the device, quant_math's software
// encoders in moe_fp8_block_test.cc, which checks the plumbing against formats' quantiser).
#pragma once

#include <cstdint>

#include "kernels/quant/cuda/quant_math.h"

#if defined(__CUDACC__)
#define FS_MOE_FP8_HD __host__ __device__ __forceinline__
#define FS_MOE_FP8_UNROLL _Pragma("unroll")
#else
#define FS_MOE_FP8_HD inline
#define FS_MOE_FP8_UNROLL
#endif

namespace flashserve::kernels {

// Bytes i, j of (a, b) in the low 16 bits (byte i low): __byte_perm(a, b, i | j << 4), j >= 4
// naming b's byte j - 4. The upper 16 bits are unspecified (the device repeats a's byte 0 there,
// the host leaves zeros); callers read only the low two bytes.
FS_MOE_FP8_HD uint32_t MoeBytePair(uint32_t a, uint32_t b, int i, int j) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, static_cast<uint32_t>(i | (j << 4)));
#else
  const uint64_t ab = (static_cast<uint64_t>(b) << 32) | a;
  return static_cast<uint32_t>((ab >> (8 * i)) & 0xFFu) |
         (static_cast<uint32_t>((ab >> (8 * j)) & 0xFFu) << 8);
#endif
}

// The lane-wise unsigned maximum of two pairs of 16-bit values.
FS_MOE_FP8_HD uint32_t MoeMaxU16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  const uint32_t lo = (a & 0xFFFFu) > (b & 0xFFFFu) ? (a & 0xFFFFu) : (b & 0xFFFFu);
  const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
  return lo | (hi << 16);
#endif
}

// The sign bits of elements 4i .. 4i + 3 (words a, b as in MoeQuantizeBlock32Fast) at bit 7 of
// bytes 0 .. 3.
FS_MOE_FP8_HD uint32_t MoeSignBytes(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, 0x7531u) & 0x80808080u;
#else
  return ((a >> 8) & 0x80u) | ((a >> 16) & 0x8000u) | ((b << 8) & 0x800000u) | (b & 0x80000000u);
#endif
}

// The E4M3 codes of the 4 bf16 values of words a, b (a's low half first, lowest code in the low
// byte) under the block's finite scale (`recip` = Ue8m0Reciprocal of its byte), no NaN among them.
// The sign is OR-ed in from the input, so a zero or an underflow keeps it whatever the conversion
// does. Ops::E4m3x2(hi, lo): the E4M3 codes of two floats (lo in bits 0-7), RNE, saturating at
// ±448.
template <class Ops>
FS_MOE_FP8_HD uint32_t MoeEncode4Fast(uint32_t a, uint32_t b, float recip) {
  namespace qm = ::flashserve::kernels::quant::math;
  const uint32_t c =
      Ops::E4m3x2(qm::MulRn(qm::F32(a & 0xFFFF0000u), recip), qm::MulRn(qm::F32(a << 16), recip)) |
      (Ops::E4m3x2(qm::MulRn(qm::F32(b & 0xFFFF0000u), recip), qm::MulRn(qm::F32(b << 16), recip))
       << 16);
  return c | MoeSignBytes(a, b);
}

// The QDQ word j of 8 values whose codes are c0 (values 0..3) and c1 (4..7): bf16 of value j (low
// half) and value j + 4 (high half) times `scale` (Ue8m0ToF32 of the block's byte). Code value ×
// the power-of-two scale is exact in fp32 and in bf16 (<= 4 significant bits, at most twice the
// block's amax); E4m3ToF32ByShift is exact for every non-NaN code. Ops::Bf16x2(hi, lo): two
// non-NaN floats to bf16 (lo in bits 0-15), RNE.
template <class Ops>
FS_MOE_FP8_HD uint32_t MoeQdqWordFast(uint32_t c0, uint32_t c1, int j, float scale) {
  namespace qm = ::flashserve::kernels::quant::math;
  const uint32_t pair = MoeBytePair(c0, c1, j, j + 4);
  return Ops::Bf16x2(qm::MulRn(qm::E4m3ToF32ByShift(pair >> 8), scale),
                     qm::MulRn(qm::E4m3ToF32ByShift(pair & 0xFFu), scale));
}

// Eight values of a block (elements 8t .. 8t + 7: x[0..3], element 2i in the low half of x[i])
// without NaN, under the block's finite scale: their codes (codes[0] elements 8t .. 8t + 3,
// codes[1] the next four) and their QDQ values in operand order (w[j] = element 8t + j (low
// half), 8t + j + 4 (high half)). The MoE front's quads (cuda/moe_front.cuh) run it.
template <class Ops>
FS_MOE_FP8_HD void MoeQuantize8Fast(const uint32_t (&x)[4], float recip, float scale,
                                    uint32_t (&codes)[2], uint32_t (&w)[4]) {
  codes[0] = MoeEncode4Fast<Ops>(x[0], x[1], recip);
  codes[1] = MoeEncode4Fast<Ops>(x[2], x[3], recip);
  FS_MOE_FP8_UNROLL
  for (int j = 0; j < 4; ++j) w[j] = MoeQdqWordFast<Ops>(codes[0], codes[1], j, scale);
}

// True when one of the 8 values of x[0..3] is NaN.
FS_MOE_FP8_HD bool MoeAnyNan8(const uint32_t (&x)[4]) {
  uint32_t m = 0;
  FS_MOE_FP8_UNROLL
  for (int i = 0; i < 4; ++i) m = MoeMaxU16x2(m, x[i] & 0x7FFF7FFFu);
  return (m >> 16) > 0x7F80u || (m & 0xFFFFu) > 0x7F80u;
}

// x: the block's 32 bf16 values, two per word (element 2i in the low half of x[i]). When no value
// is Inf or NaN: writes the scale byte, the 32 E4M3 codes (codes[i] holds elements 4i..4i+3,
// lowest in the low byte) and the 32 QDQ values as bf16 in operand order (qdq[4t + j] holds
// logical elements 8t + j (low half) and 8t + j + 4 (high half)), and returns true; otherwise
// writes nothing and returns false.
// Ops as for MoeEncode4Fast / MoeQdqWordFast. The same steps as four MoeQuantize8Fast calls, in
// another order: all codes, then the QDQ values. Interleaved per 8 values, the RS up kernel's
// epilogue spilled (164 bytes at the 128-row width set: kernels_moe_rs_ptxas_test, session 56).
template <class Ops>
FS_MOE_FP8_HD bool MoeQuantizeBlock32Fast(const uint32_t (&x)[16], uint32_t* scale_byte,
                                          uint32_t (&codes)[8], uint32_t (&qdq)[16]) {
  namespace qm = ::flashserve::kernels::quant::math;
  uint32_t m = 0;  // per 16-bit lane, the largest magnitude's bits
  FS_MOE_FP8_UNROLL
  for (int i = 0; i < 16; ++i) m = MoeMaxU16x2(m, x[i] & 0x7FFF7FFFu);
  const uint32_t amax =
      (m >> 16) > (m & 0xFFFFu) ? (m >> 16) : (m & 0xFFFFu);  // >= 0x7F80: Inf/NaN
  if (amax >= 0x7F80u) return false;
  const uint32_t sb = qm::Fp8ScaleByte(amax);
  const float recip = qm::Ue8m0Reciprocal(sb);
  const float scale = qm::Ue8m0ToF32(sb);
  // All codes first, then the QDQ values (see above).
  FS_MOE_FP8_UNROLL
  for (int i = 0; i < 8; ++i) codes[i] = MoeEncode4Fast<Ops>(x[2 * i], x[2 * i + 1], recip);
  FS_MOE_FP8_UNROLL
  for (int t = 0; t < 4; ++t) {
    FS_MOE_FP8_UNROLL
    for (int j = 0; j < 4; ++j) {
      qdq[4 * t + j] = MoeQdqWordFast<Ops>(codes[2 * t], codes[2 * t + 1], j, scale);
    }
  }
  *scale_byte = sb;
  return true;
}

}  // namespace flashserve::kernels
