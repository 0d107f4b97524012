// Per-value arithmetic of the quant kernels, written once for host and device so that the
// algorithms can be checked exhaustively on the CPU (quant_math_test.cc, against common/formats)
// and on the GPU through the kernels (quant_gpu_exhaustive_test.cc). Compiles with nvcc (host and
// device) and with a plain C++17/20 compiler (host only).
//
// Bit-exactness with common/formats, and why each shortcut is exact:
// - Encoders (E4M3, E2M1) work on fp32 bits and take the sign from the INPUT x, never from the
//   quotient: every quantiser divides by a positive scale, so sign(x / s) == sign(x) for all
//   non-NaN x (zeros and underflows included), and formats keeps a NaN x's own sign.
// - Power-of-two scales (UE8M0): x / s == x * (1 / s) exactly in the reals, and 1 / s = 2^(127-b)
//   is representable for every byte b < 255, so the one rounding of the product equals the one
//   rounding of the quotient (subnormal results too).
// - FP4 codes are found from the quotient rounded to f16, without a division per value (see
//   EncodeFp4ViaF16 for why that is exact for bf16 inputs); the E4M3 scale rule divides by 6 with
//   Markstein's correction (DivBy6Rn). Both checked for every input they can see.
// - The device float operations are inline PTX without .ftz (subnormals kept, never contracted to
//   FMA) so no nvcc flag (-ftz, -use_fast_math, -fmad) can change a bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FS_QUANT_HD __host__ __device__ __forceinline__
#else
#define FS_QUANT_HD inline
#endif

namespace flashserve::kernels::quant::math {

FS_QUANT_HD float F32(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

FS_QUANT_HD uint32_t Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
#endif
}

// Correctly rounded fp32 a * b, a + b, a / b and fma(a, b, c), subnormals kept.
FS_QUANT_HD float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a * b;
#endif
}

// Correctly rounded |a| * b (the abs folds into the multiply's operand on the GPU).
FS_QUANT_HD float MulAbsRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("{\n\t.reg .f32 t;\n\tabs.f32 t, %1;\n\tmul.rn.f32 %0, t, %2;\n\t}"
      : "=f"(r)
      : "f"(a), "f"(b));
  return r;
#else
  return std::fabs(a) * b;
#endif
}

FS_QUANT_HD float AddRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a + b;
#endif
}

FS_QUANT_HD float DivRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a / b;
#endif
}

FS_QUANT_HD float FmaRn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
  return r;
#else
  return std::fma(a, b, c);
#endif
}

FS_QUANT_HD bool IsNanBits(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

// ---- bf16 ------------------------------------------------------------------------------------

FS_QUANT_HD float Bf16ToF32(uint32_t bf16) { return F32(bf16 << 16); }

// formats::FloatToBf16Bits: RNE; NaN keeps its sign and top payload bits, quiet bit forced.
FS_QUANT_HD uint32_t F32ToBf16(float x) {
  const uint32_t bits = Bits(x);
  if (IsNanBits(bits)) return ((bits >> 16) | 0x0040u) & 0xFFFFu;
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

// Largest |x| of a bf16 pair packed in a word (low and high halves), as 15-bit magnitude bits;
// NaN magnitudes (> 0x7F80) are skipped, as formats' `a > amax` skips them.
FS_QUANT_HD uint32_t AmaxOfPair(uint32_t word, uint32_t amax) {
  const uint32_t lo = word & 0x7FFFu;
  const uint32_t hi = (word >> 16) & 0x7FFFu;
  if (lo <= 0x7F80u && lo > amax) amax = lo;
  if (hi <= 0x7F80u && hi > amax) amax = hi;
  return amax;
}

// ---- UE8M0 -----------------------------------------------------------------------------------

// formats::Ue8m0CeilFromFloat: biased exponent + (mantissa != 0), 255 above 2^127.
FS_QUANT_HD uint32_t Ue8m0Ceil(float x) {
  const uint32_t bits = Bits(x) & 0x7FFFFFFFu;
  const uint32_t e = (bits >> 23) + ((bits & 0x7FFFFFu) != 0u ? 1u : 0u);
  return e > 255u ? 255u : e;
}

// formats::Ue8m0ToFloat: 2^(b - 127); byte 0 is the fp32 subnormal 2^-127; 255 is a quiet NaN.
// (Selects, not branches: the kernels call these once per unit.)
FS_QUANT_HD float Ue8m0ToF32(uint32_t b) {
  const uint32_t bits = b == 0u ? 0x00400000u : b << 23;
  return F32(b == 255u ? 0x7FC00000u : bits);
}

// 1 / Ue8m0ToF32(b), exact: 2^(127 - b) is Ue8m0ToF32(254 - b). NaN for b == 255.
FS_QUANT_HD float Ue8m0Reciprocal(uint32_t b) {
  const uint32_t e = 254u - b;
  const uint32_t bits = e == 0u ? 0x00400000u : e << 23;
  return F32(b == 255u ? 0x7FC00000u : bits);
}

// ---- E4M3 ------------------------------------------------------------------------------------

// E4M3 magnitude code (0..0x7F) of a non-negative value given by its bits `a` (sign cleared):
// formats::FloatToE4m3 without the sign. RNE over normals and subnormals, saturating at 448.
FS_QUANT_HD uint32_t E4m3Magnitude(uint32_t a) {
  if (a > 0x7F800000u) return 0x7Fu;   // NaN
  if (a >= 0x43E00000u) return 0x7Eu;  // >= 448 (Inf too)
  if (a >= 0x3C800000u) {
    // Normal E4M3 (>= 2^-6): round the fp32 bits to 3 mantissa bits (RNE: add 0x7FFFF plus the
    // kept LSB); a carry into the exponent is the right answer, and below 448 the result stays
    // <= 0x7E. Rebias the exponent from 127 to 7: (127 - 7) << 3 = 960.
    return ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - 960u;
  }
  // Subnormal E4M3: the code is RNE(|x| * 2^9) in [0, 8]. Adding 2^14, whose fp32 ulp is 2^-9,
  // rounds |x| to a multiple of 2^-9 in hardware (RNE); the bit difference is that multiple.
  return Bits(AddRn(F32(a), 16384.0f)) - 0x46800000u;
}

// formats::FloatToE4m3(x) for any x.
FS_QUANT_HD uint32_t F32ToE4m3(float x) {
  const uint32_t bits = Bits(x);
  return ((bits >> 24) & 0x80u) | E4m3Magnitude(bits & 0x7FFFFFFFu);
}

// formats::E4m3ToFloat: exact; 0x7F / 0xFF give a quiet NaN with the code's sign.
FS_QUANT_HD float E4m3ToF32(uint32_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xFu;
  const uint32_t mant = code & 0x7u;
  if (exp == 0xFu && mant == 0x7u) return F32(sign | 0x7FC00000u);
  uint32_t magnitude = ((exp + 120u) << 23) | (mant << 20);
  if (exp == 0u) {
    // m * 2^-9: float(m) with the exponent lowered by 9 (m <= 7, exact); 0 stays 0.
    magnitude = mant == 0u ? 0u : Bits(static_cast<float>(mant)) - (9u << 23);
  }
  return F32(sign | magnitude);
}

// The same value without branches, for non-NaN codes: the magnitude bits shifted into an fp32
// exponent and mantissa read as a float are value * 2^-120 (subnormal codes become fp32
// subnormals), and the multiply by 2^120 is exact.
FS_QUANT_HD float E4m3ToF32ByShift(uint32_t code) {
  return MulRn(F32(((code & 0x7Fu) << 20) | ((code & 0x80u) << 24)), F32(247u << 23));
}

// ---- E2M1 ------------------------------------------------------------------------------------

// E2M1 magnitude code (0..7) of a non-negative value given by its bits `a`: formats::FloatToE2m1
// without the sign. Clamp to 6, RNE with ties to the even code; NaN gives 7.
FS_QUANT_HD uint32_t E2m1Magnitude(uint32_t a) {
  if (a >= 0x3F800000u) {
    // [1, 6] and above: round to 1 mantissa bit, rebias (127 - 1) << 1 = 252, clamp to 7.
    // a <= 0x7FFFFFFF, so the sum cannot wrap.
    const uint32_t code = ((a + 0x1FFFFFu + ((a >> 22) & 1u)) >> 22) - 252u;
    return code > 7u ? 7u : code;
  }
  // [0, 1): RNE(|v| * 2) in [0, 2] by adding 2^22 (ulp 0.5), as for E4M3 subnormals.
  return Bits(AddRn(F32(a), 4194304.0f)) - 0x4A800000u;
}

// formats::E2m1ToFloat of the low 4 bits: {0, 0.5, 1, 1.5, 2, 3, 4, 6}, code | 8 negative.
FS_QUANT_HD float E2m1ToF32(uint32_t code) {
  const uint32_t e = (code >> 1) & 0x3u;
  const uint32_t m = code & 0x1u;
  const uint32_t magnitude =
      e == 0u ? (m != 0u ? 0x3F000000u : 0u) : ((e + 126u) << 23) | (m << 22);
  return F32(((code & 0x8u) << 28) | magnitude);
}

// The same value without branches: the code's bits shifted into fp32 read as value * 2^-126,
// restored by an exact multiply by 2^126.
FS_QUANT_HD float E2m1ToF32ByShift(uint32_t code) {
  return MulRn(F32(((code & 0x7u) << 22) | ((code & 0x8u) << 28)), F32(253u << 23));
}

// ---- block scale rules (formats::Fp8Ue8m0ScaleByte etc.), from the amax's bf16 magnitude bits --

// UE8M0 byte of pow2ceil(max(amax, 1e-4) * fp32(1/448)).
FS_QUANT_HD uint32_t Fp8ScaleByte(uint32_t amax_bf16) {
  const uint32_t a = amax_bf16 << 16;
  const uint32_t floored = a > 0x38D1B717u ? a : 0x38D1B717u;  // 1e-4f
  return Ue8m0Ceil(MulRn(F32(floored), F32(0x3B124925u)));     // fp32(1/448)
}

// RN(a / 6) by Markstein's correction with r = RN(1/6), for a >= 6 * 2^-9 (no underflow).
FS_QUANT_HD float DivBy6Rn(float a) {
  const float r = F32(0x3E2AAAABu);  // fp32(1/6)
  const float q0 = MulRn(a, r);
  return FmaRn(FmaRn(-q0, 6.0f, a), r, q0);
}

// max(amax, 6 * 2^-9) / 6, the value whose E4M3 rounding is the FP4 main-KV scale. An amax above
// 4096 (Inf included) is taken as 4096: its scale saturates to 448 either way, and DivBy6Rn
// stays finite.
FS_QUANT_HD float Fp4E4m3ScaleValue(uint32_t amax_bf16) {
  uint32_t a = amax_bf16 << 16;
  a = a > 0x3C400000u ? a : 0x3C400000u;  // floor 6 * 2^-9
  a = a < 0x45800000u ? a : 0x45800000u;  // 4096
  return DivBy6Rn(F32(a));
}

// E4M3 byte of max(amax, 6 * 2^-9) / 6 (correctly rounded division, then RNE to E4M3).
FS_QUANT_HD uint32_t Fp4E4m3ScaleByte(uint32_t amax_bf16) {
  return F32ToE4m3(Fp4E4m3ScaleValue(amax_bf16));
}

// UE8M0 byte of pow2ceil(max(amax, 6 * 2^-126) * fp32(1/6)).
FS_QUANT_HD uint32_t Fp4Ue8m0ScaleByte(uint32_t amax_bf16) {
  const uint32_t a = amax_bf16 << 16;
  const uint32_t floored = a > 0x01C00000u ? a : 0x01C00000u;  // 6 * 2^-126
  return Ue8m0Ceil(MulRn(F32(floored), F32(0x3E2AAAABu)));     // fp32(1/6)
}

// ---- per-value quantisers: code of bf16 x under a block scale ----------------------------------

// FP8 under a UE8M0 scale: formats' E4M3(clamp(x / s, ±448)). `recip` = Ue8m0Reciprocal(byte),
// finite (the NaN-scale case is EncodeFp8NanScale). The clamp is the encoder's saturation.
FS_QUANT_HD uint32_t EncodeFp8(uint32_t x_bf16, float recip) {
  // |x| * recip is non-negative, or NaN (for a NaN x), which E4m3Magnitude maps to 0x7F.
  const float v = MulRn(Bf16ToF32(x_bf16 & 0x7FFFu), recip);
  return ((x_bf16 >> 8) & 0x80u) | E4m3Magnitude(Bits(v) & 0x7FFFFFFFu);
}

// When a block's UE8M0 scale is NaN (an Inf in the block), formats divides by NaN: every value
// becomes that positive NaN, except a NaN x, which keeps its own sign. `nan_code` is 0x7F (E4M3)
// or 0x7 (E2M1); `sign_bit` is 0x80 or 0x8.
FS_QUANT_HD uint32_t EncodeNanScale(uint32_t x_bf16, uint32_t nan_code, uint32_t sign_bit) {
  const bool x_nan = (x_bf16 & 0x7FFFu) > 0x7F80u;
  return (x_nan && (x_bf16 & 0x8000u) != 0u ? sign_bit : 0u) | nan_code;
}

// ---- FP4 through f16 (the kernels' fast FP4 encoder) ------------------------------------------
// For bf16 x and a scale s that is a power of two or an E4M3 value, the exact quotient |x| / s
// either equals an E2M1 rounding threshold T (0.25, 0.75, ..., 5) or lies at least 2^-8.3 * T
// away from it (x has 8 significant bits, T * s at most 9). So q = RN32(|x| * RN32(1/s)), within
// 2^-23 of |x| / s, may be rounded once more on its way to the code if that rounding moves it by
// less than the margin: it then lands exactly on T at a tie and on the right side of T otherwise.
//
// E2M1 is f16 scaled by 2^-14 with 9 fewer mantissa bits. In the f16 bits of q * 2^-14, bits 9-11
// are E2M1's code of q: below q = 1 the f16 value is subnormal, steps of 2^-24 = 2^-10 in q, and
// bit 9 counts halves like E2M1's subnormals; from q = 1 the f16 exponent is 1, 2, 3 for q in [1,
// 2), [2, 4), [4, 8), which are E2M1's exponents, and bit 9 is the top mantissa bit, E2M1's one.
// So the code is the f16 bits rounded to bit 9 (RNE), after clamping them at 6 * 2^-14 (0x0E00;
// Inf and NaN clamp there too: code 7). Rounding q * 2^-14 to f16 first moves q by at most 2^-11
// (absolute below 1, relative above), inside the margin (2^-10.3 at T = 0.25). Scaling by 2^-14 is
// exact: it is folded into the reciprocal, r14 = RN32(1/s) * 2^-14 = RN32(2^-14 / s), and
// q * 2^-14 stays normal in fp32 wherever its code is not 0. Checked for every bf16 x and every
// scale byte by quant_math_test.cc.

// RN to f16 of a float: IEEE binary16 bits, subnormals kept, overflow to Inf, NaN -> 0x7E00.
FS_QUANT_HD uint32_t F32ToF16Bits(float f) {
  const uint32_t bits = Bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65536: Inf
  if (a >= 0x38800000u) {                       // >= 2^-14: normal f16
    return sign | (((a + 0xFFFu + ((a >> 13) & 1u)) >> 13) - (112u << 10));
  }
  // Subnormal f16: RNE(|f| / 2^-24), by adding 0.5 (fp32 ulp 2^-24).
  return sign | (Bits(AddRn(F32(a), 0.5f)) - 0x3F000000u);
}

// The reciprocals the FP4 encoder takes: RN32(1 / s) * 2^-14 for an E4M3 scale s (one division,
// RN(2^-14 / s), the same bits: s >= 2^-9 keeps the result normal) and 2^(113 - b) for a UE8M0
// byte b < 255 (exact, subnormal from b = 240).
FS_QUANT_HD float Fp4E4m3Reciprocal14(float s) { return DivRn(0x1p-14f, s); }
FS_QUANT_HD float Fp4Ue8m0Reciprocal14(uint32_t b) {
  return F32(b < 240u ? (240u - b) << 23 : 1u << (262u - b));
}

// E2M1 magnitude code of q from h, the f16 bits of q * 2^-14 (sign clear): clamp at 6, RNE to
// bit 9.
FS_QUANT_HD uint32_t E2m1FromScaledF16(uint32_t h) {
  const uint32_t c = h < 0x0E00u ? h : 0x0E00u;
  return (c + 0xFFu + ((c >> 9) & 1u)) >> 9;
}

// formats' E2M1(x / s) through f16, for r14 from Fp4E4m3Reciprocal14 / Fp4Ue8m0Reciprocal14. The
// kernels' packed version is device::Fp4NibblePair.
FS_QUANT_HD uint32_t EncodeFp4ViaF16(uint32_t x_bf16, float r14) {
  const float q14 = MulAbsRn(Bf16ToF32(x_bf16), r14);
  return ((x_bf16 >> 12) & 0x8u) | E2m1FromScaledF16(F32ToF16Bits(q14));
}

// ---- per-value dequantisers: bf16 of value(code) * scale -------------------------------------

// bf16(value * scale) with formats' NaN results: a NaN value comes back as itself (x86 returns
// the NaN operand), else a NaN scale comes back as itself.
FS_QUANT_HD uint32_t DequantValue(float value, float scale) {
  if (IsNanBits(Bits(value))) return F32ToBf16(value);
  if (IsNanBits(Bits(scale))) return F32ToBf16(scale);
  return F32ToBf16(MulRn(value, scale));
}

}  // namespace flashserve::kernels::quant::math
