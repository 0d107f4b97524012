// Exact decoders of the row form's serving rows (attention.h SparseAttnKvRows) into bf16 values
// for the wgmma kernels' tiles (sparse_attn_wgmma.cuh DecodeRowPair): the values of
// DecodeRowsCpu / quant's Fmt<>::Decode bit for bit, from a byte table (FP4) or the hardware
// E4M3 conversion (FP8) instead of the value-by-value decoders (kernels/attention/README.md "FP4
// table decode"). Device code only (sm_90a: cvt.rn.f16x2.e4m3x2).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/cuda/quant_kernels.cuh"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::attn_device {

// An E4M3 scale byte as a bf16 pair (both halves): the hardware E4M3 -> f16 conversion (exact,
// subnormals included), then f16 -> fp32 and the top half (exact: at most 4 significant bits).
// Not for the NaN bytes 0x7F / 0xFF.
__device__ __forceinline__ uint32_t E4m3ByteToBf16x2(uint32_t sb) {
  uint32_t h2;
  asm("{\n.reg .b16 t;\ncvt.u16.u32 t, %1;\ncvt.rn.f16x2.e4m3x2 %0, t;\n}\n" : "=r"(h2) : "r"(sb));
  float f;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.f32.f16 %0, lo;\n}\n" : "=f"(f) : "r"(h2));
  const uint32_t b = __float_as_uint(f) >> 16;
  return b | (b << 16);
}

// Fp4x8ToBf16 (eight E2M1 codes times a bf16 scale pair by a byte table) is quant's
// (kernels/quant/cuda/quant_fast.cuh), shared with the compressor's finalize.
using quant::device::Fp4x8ToBf16;

// One 16-value scale block of an FP4 (E2M1 + E4M3 per 16) serving row: codes `w` (value i in
// nibble i of w.x, value 8 + i of w.y), scale byte `sb`; out[h] = values 8h .. 8h + 7 as bf16
// pairs — the values of quant's Fmt<kFp4E2m1E4m3B16>::Decode (= DecodeRowsCpu): the table decode
// above for every non-NaN scale; a NaN scale byte (0x7F, 0xFF) makes every value the scale's
// quiet NaN, sign kept (quant's DequantValue), whatever the code.
__device__ __forceinline__ void DecodeFp4E4m3Block16(uint2 w, uint32_t sb, uint32_t (&out)[2][4]) {
  if ((sb & 0x7Fu) != 0x7Fu) {
    const uint32_t s2 = E4m3ByteToBf16x2(sb);
    Fp4x8ToBf16(w.x, s2, out[0]);
    Fp4x8ToBf16(w.y, s2, out[1]);
  } else {
    const uint32_t nan2 = (sb & 0x80u) != 0u ? 0xFFC0FFC0u : 0x7FC07FC0u;
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j / 4][j % 4] = nan2;
  }
}

// The reference's values where a window row's decode meets a NaN: a NaN code (0x7F, 0xFF) gives
// its quiet NaN with its sign, any other code under the NaN scale byte 255 gives +qNaN (quant's
// DequantValue); every other value of `out` is kept. Rare: selects only, no branch per value.
__device__ __forceinline__ void FixFp8Nans(const uint32_t (&w)[4], uint32_t sb,
                                           uint32_t (&out)[2][4]) {
#pragma unroll
  for (int v = 0; v < 16; ++v) {
    const uint32_t code = (w[v / 4] >> (8 * (v % 4))) & 0xFFu;
    const bool nan_code = (code & 0x7Fu) == 0x7Fu;
    const uint32_t bits = nan_code ? (((code & 0x80u) << 8) | 0x7FC0u) : 0x7FC0u;
    const uint32_t shift = 16 * (v % 2);
    uint32_t& pair = out[v / 8][(v % 8) / 2];
    if (nan_code || sb == 255u) pair = (pair & ~(0xFFFFu << shift)) | (bits << shift);
  }
}

// 16 E4M3 codes (byte i of c = value i) times the UE8M0 scale 2^(sb - 127) as bf16 pairs (out[h] =
// values 8h .. 8h + 7): the values of quant's Fmt<kFp8E4m3Ue8m0B32>::Decode (= DecodeRowsCpu),
// bf16(RN(value · scale)). The hardware E4M3 -> f16 conversion (exact, subnormals included),
// f16 -> fp32, one fp32 multiply by the scale (2^-127 for byte 0: a subnormal; IEEE multiply,
// no flush) and the RNE pack give it for every finite input, 3 instructions per value; NaN codes
// and the NaN scale byte 255 are then fixed up (FixFp8Nans).
__device__ __forceinline__ void DecodeFp8Ue8m0Block16(uint4 c, uint32_t sb, uint32_t (&out)[2][4]) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
  const float scale = __uint_as_float(sb == 0u ? 0x00400000u : sb << 23);
#pragma unroll
  for (int k = 0; k < 8; ++k) {  // values 2k, 2k + 1: bytes 2 (k % 2), + 1 of word k / 2
    uint32_t h2;
    asm("{\n.reg .b16 t;\ncvt.u16.u32 t, %1;\ncvt.rn.f16x2.e4m3x2 %0, t;\n}\n"
        : "=r"(h2)
        : "r"(w[k / 2] >> (16 * (k % 2))));
    float lo, hi;
    asm("{\n.reg .b16 a, b;\nmov.b32 {a, b}, %2;\ncvt.f32.f16 %0, a;\ncvt.f32.f16 %1, b;\n}\n"
        : "=f"(lo), "=f"(hi)
        : "r"(h2));
    out[k / 4][k % 4] = quant::device::Bf16x2(__fmul_rn(hi, scale), __fmul_rn(lo, scale));
  }
  const bool nan_code = quant::device::AnyE4m3Nan(c.x) || quant::device::AnyE4m3Nan(c.y) ||
                        quant::device::AnyE4m3Nan(c.z) || quant::device::AnyE4m3Nan(c.w);
  if (nan_code || sb == 255u) FixFp8Nans(w, sb, out);
}

// Values 16q .. 16q + 15 of the serving row `row` (< n_window: a window row, FP8 + UE8M0 per
// 32, code byte v = value v, scale byte 512 + v / 32; else a compressed row, FP4 + E4M3 per 16,
// code byte v / 2 with the even value in the low nibble, scale byte 256 + v / 16; -1: zeros)
// whose landed bytes start at `slot` (16-byte aligned): out[h] = values 16q + 8h .. + 7 as bf16
// pairs (DecodeFp8Ue8m0Block16 for window rows, DecodeFp4E4m3Block16 for compressed ones).
__device__ __forceinline__ void DecodeRowValues16(int64_t n_window, int32_t row,
                                                  const uint8_t* slot, int q,
                                                  uint32_t (&out)[2][4]) {
  constexpr int kD = 512;
  if (row < 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 4; ++j) out[h][j] = 0u;
    }
  } else if (row < n_window) {
    DecodeFp8Ue8m0Block16(*reinterpret_cast<const uint4*>(slot + 16 * q), slot[kD + q / 2], out);
  } else {
    DecodeFp4E4m3Block16(*reinterpret_cast<const uint2*>(slot + 8 * q), slot[kD / 2 + q], out);
  }
}

}  // namespace flashserve::kernels::attn_device
