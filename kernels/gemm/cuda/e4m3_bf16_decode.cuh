// E4M3 × UE8M0 -> bf16 decoding (exact), shared by the FP8 Linear's mma.sync kernel
// (linear_fp8_gemm.cuh, in registers) and the wgmma kernel (wgmma_linear_gemm.cuh, into shared
// memory). Device code only; no kernels (safe to include from several .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::kernels::gemm_device {

__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// ---- E4M3 × UE8M0 -> bf16 --------------------------------------------------------------------
// Bytes (sel = 0x1404: bytes 0, 1; 0x3424: bytes 2, 3) of `word` as a bf16 pair equal to the
// E4M3 values × 2^-120: the code's 7 magnitude bits go to bf16 bits 4..10 (mantissa bits 4..6,
// exponent bits 0..3; E4M3's bias 7 vs bf16's 127), the sign to bit 15. E4M3 subnormals land on
// bf16 subnormals (0.mmm × 2^-126 = 0.mmm × 2^-6 × 2^-120). NaN codes (0x7F, 0xFF) would read
// as ±480 · 2^-120; DeviceFp8Linear::Upload rejects them.
// Three instructions (session 81; until then prmt, shift, and, and-or: four): prmt in its default
// mode puts code a in byte 0 and code b in byte 2, each with its sign replicated into the byte
// above (selector nibbles with bit 3 set: 0x9180 / 0xB3A2), so after << 4 each half holds the 7
// magnitude bits at 4..10 and the sign at 15 — bits 11..14 are sign copies and bits 0..3 of the
// upper half the lower half's spilled sign copies, which one mask clears. The same bits as the
// four-instruction form for every code pair (checked by emulating prmt over all 65,536 pairs).
// FS_E4M3_DECODE_FOUR_OPS (a kit variant's compile flag) restores the four-instruction form for
// a same-run A/B.
template <uint32_t kSel>
__device__ __forceinline__ uint32_t E4m3PairScaled(uint32_t word) {
  static_assert(kSel == 0x1404u || kSel == 0x3424u, "bytes 0, 1 or bytes 2, 3");
#ifdef FS_E4M3_DECODE_FOUR_OPS
  const uint32_t t = __byte_perm(word, 0u, kSel);  // code a in bits 8..15, code b in 24..31
  return ((t >> 4) & 0x07F007F0u) | (t & 0x80008000u);
#else
  constexpr uint32_t kSigned = kSel == 0x1404u ? 0x9180u : 0xB3A2u;
  uint32_t t;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(t) : "r"(word), "n"(kSigned));
  return (t << 4) & 0x87F087F0u;
#endif
}

// The bf16x2 multipliers of a scale byte sb: one multiply by 2^(sb - 7) = 2^120 · 2^(sb - 127)
// when it is a normal bf16 (sb <= 134); else 2^120 (the code values) then 2^(sb - 127), NaN for
// byte 255 (the CPU's Ue8m0ToFloat(255) is NaN, and NaN × anything is NaN there too). Exact:
// only exponents move, and for sb >= 3 every E4M3 value × 2^(sb-127) is a bf16 number
// (subnormals included, which mul.rn.bf16x2 keeps).
struct ScaleMul {
  uint32_t m1, m2;
  bool wide;
};
__device__ __forceinline__ ScaleMul MakeScaleMul(uint32_t sb) {
  ScaleMul s;
  s.wide = sb > 134u;
  s.m1 = s.wide ? 0x7B807B80u : ((sb + 120u) << 7) * 0x10001u;
  s.m2 = sb == 255u ? 0x7FC07FC0u : (sb << 7) * 0x10001u;
  return s;
}

// Byte b of a word of four scale bytes as ScaleMul. `wide` says whether any byte of the word is
// above 134: when none is, one multiplier (sb | sb << 16) << 7 + 0x3C003C00 = 2^(sb - 7) in both
// halves, in three instructions (prmt, shift, add); else MakeScaleMul's pair.
__device__ __forceinline__ ScaleMul ScaleMulOfByte(uint32_t word, int b, bool wide) {
  ScaleMul s;  // m2 is read only where wide (DecodeB / the callers test the same flag)
  if (!wide) {
    const uint32_t pair = __byte_perm(word, 0u, 0x4040u | (0x0101u * b));  // sb | sb << 16
    s.m1 = (pair << 7) + 0x3C003C00u;
  } else {
    s = MakeScaleMul((word >> (8 * b)) & 0xFFu);
  }
  return s;
}

// The thread's 8 codes of one n8 tile and block (two words: columns 8tig+0..3, 8tig+4..7) as the
// B registers of the two mma instructions.
__device__ __forceinline__ void DecodeB(uint2 w, const ScaleMul& s, uint32_t (&b)[4]) {
  b[0] = MulBf16x2(E4m3PairScaled<0x1404u>(w.x), s.m1);
  b[1] = MulBf16x2(E4m3PairScaled<0x3424u>(w.x), s.m1);
  b[2] = MulBf16x2(E4m3PairScaled<0x1404u>(w.y), s.m1);
  b[3] = MulBf16x2(E4m3PairScaled<0x3424u>(w.y), s.m1);
  if (s.wide) {
#pragma unroll
    for (int q = 0; q < 4; ++q) b[q] = MulBf16x2(b[q], s.m2);
  }
}

}  // namespace flashserve::kernels::gemm_device
