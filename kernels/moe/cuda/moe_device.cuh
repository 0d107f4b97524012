// Device helpers of the MoE kernels (cuda/*.cuh, included by cuda/moe_launch.cu only): exact
// fp32 / bf16 operations, the FP8 block quantiser, the FP4 weight decoder, cp.async and mma.sync.
// Every fp32 operation that must match the CPU is an explicit _rn instruction (cuda_exact_math.cuh,
// quant_math.h), so no nvcc flag can contract or flush it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cp_async_mma.cuh"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/moe/moe_fp4_code_order.h"
#include "kernels/moe/moe_fp8_block.h"
#include "kernels/moe/moe_swiglu_table.h"
#include "kernels/quant/cuda/quant_fast.cuh"
#include "kernels/quant/cuda/quant_math.h"

namespace flashserve::kernels::moe_device {

namespace qm = ::flashserve::kernels::quant::math;

// ---- correctly rounded exp / log1p (the double result rounded once to fp32) ------------------
// CUDA's double exp and log1p are within 1 ulp of double, so the fp32 rounding is the correctly
// rounded one except within 2^-29 of a midpoint between floats.
__device__ __forceinline__ float ExpF32(float v) { return exact::DoubleToF32(exp(double(v))); }
__device__ __forceinline__ float Log1pF32(float v) { return exact::DoubleToF32(log1p(double(v))); }

// ---- SwiGLU (MoeSwiGluRow): g, u are the fp32 GEMM sums, rounded to bf16 first ----------------
// The gate factor RN(g / RN(1 + RN(exp(-g)))) of the clamped g. For a bf16 g (every g but a clamp
// limit that is not one) from kMoeSigTable or its closed forms: the formula's bits for every bf16
// g (moe_swiglu_table.h; MoeSwiGluTableTest recomputes them with a correctly rounded exp), one
// read-only global load or one multiply instead of a double-precision exp and an IEEE division
// (~95 instructions, 18 on the FP64 pipe; session 56). Inf, NaN and other limits keep the formula.
__device__ __forceinline__ float SwiGluGateFactor(float gv) {
  const uint32_t bits = __float_as_uint(gv);
  const uint32_t g16 = bits >> 16;
  if ((bits & 0xFFFFu) == 0u && (bits & 0x7F800000u) != 0x7F800000u) {
    return MoeSigFactorOf(g16, gv, kMoeSigTable);
  }
  return exact::DivRn(gv, exact::AddRn(1.f, ExpF32(-gv)));
}

__device__ __forceinline__ uint32_t SwiGluBf16(float g_sum, float u_sum, float limit, float weight,
                                               bool has_weight) {
  float gv = exact::Bf16ToF32(exact::F32ToBf16(g_sum));
  float uv = exact::Bf16ToF32(exact::F32ToBf16(u_sum));
  if (limit > 0.f) {
    // Comparisons, not fminf/fmaxf: a NaN passes through, as in the CPU body.
    uv = uv < -limit ? -limit : (uv > limit ? limit : uv);
    gv = gv > limit ? limit : gv;
  }
  float a = exact::MulRn(SwiGluGateFactor(gv), uv);
  if (has_weight) a = exact::MulRn(weight, a);
  return exact::F32ToBf16(a);
}

// ---- FP8 E4M3 / UE8M0 quantiser of one 32-value block (LinearCpu's activation rule) -----------
// x: the block's 32 bf16 values, two per word (element 2i in the low half of x[i]). Writes the
// scale byte, the 32 E4M3 codes (codes[i] holds elements 4i..4i+3, lowest in the low byte) and
// the 32 QDQ values as bf16 in operand order (MoeOperandColumn): qdq[4t + j] holds logical
// elements 8t + j (low half) and 8t + j + 4 (high half).
// Blocks without Inf or NaN take MoeQuantizeBlock32Fast on the hardware conversions (the same
// bytes, moe_fp8_block.h; session 56), the others the software encoders below.
struct MoeHardwareConversions {
  static __device__ __forceinline__ uint32_t E4m3x2(float hi, float lo) {
    return quant::device::E4m3x2(hi, lo);
  }
  static __device__ __forceinline__ uint32_t Bf16x2(float hi, float lo) {
    return quant::device::Bf16x2(hi, lo);
  }
};

__device__ __forceinline__ void QuantizeBlock32(const uint32_t (&x)[16], uint32_t* scale_byte,
                                                uint32_t (&codes)[8], uint32_t (&qdq)[16]) {
  if (MoeQuantizeBlock32Fast<MoeHardwareConversions>(x, scale_byte, codes, qdq)) return;
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = qm::AmaxOfPair(x[i], amax);
  const uint32_t sb = qm::Fp8ScaleByte(amax);
  *scale_byte = sb;
  const float recip = qm::Ue8m0Reciprocal(sb);
  const float scale = qm::Ue8m0ToF32(sb);
  uint32_t c[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const uint32_t v = (x[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    c[i] = sb == 255u ? qm::EncodeNanScale(v, 0x7Fu, 0x80u) : qm::EncodeFp8(v, recip);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    codes[i] = c[4 * i] | (c[4 * i + 1] << 8) | (c[4 * i + 2] << 16) | (c[4 * i + 3] << 24);
  }
  // code value × power-of-two scale is exact in fp32 and in bf16 (<= 4 significant bits; the
  // scale is >= 2^-22 and the product is at most twice the block's amax).
  uint32_t v[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) v[i] = exact::F32ToBf16(exact::MulRn(qm::E4m3ToF32(c[i]), scale));
#pragma unroll
  for (int t = 0; t < 4; ++t) {
#pragma unroll
    for (int j = 0; j < 4; ++j) qdq[4 * t + j] = v[8 * t + j] | (v[8 * t + j + 4] << 16);
  }
}

// The 32 bf16 values at `src` (16-byte aligned) as QuantizeBlock32's x: two per word, element 2i
// in the low half of x[i]; four 16-byte loads.
__device__ __forceinline__ void LoadBlock32(const uint16_t* src, uint32_t (&x)[16]) {
  const uint4* v4 = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint4 v = v4[q];
    x[4 * q] = v.x;
    x[4 * q + 1] = v.y;
    x[4 * q + 2] = v.z;
    x[4 * q + 3] = v.w;
  }
}

// A block's 16 QDQ words (QuantizeBlock32's qdq, MoeOperandColumn order) to dst (16-byte aligned),
// or with rs_order in MoeRsOperandColumn order (the register-sourced GEMM's: the words as a 4 × 4
// matrix transposed, word 4j + t holding qdq[4t + j]).
__device__ __forceinline__ void StoreQdqBlock(uint4* dst, const uint32_t (&qdq)[16],
                                              bool rs_order) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    dst[q] = rs_order ? make_uint4(qdq[q], qdq[4 + q], qdq[8 + q], qdq[12 + q])
                      : make_uint4(qdq[4 * q], qdq[4 * q + 1], qdq[4 * q + 2], qdq[4 * q + 3]);
  }
}

// The up GEMMs' epilogue for one 32-column block of a slot row: the 32 bf16 SwiGLU values at
// `src` (16-byte aligned, shared memory) copied to act[at ..] when `act` is set, then quantised
// (QuantizeBlock32) and their QDQ values stored in operand order to out[at ..] (16-byte aligned;
// rs_order: the register-sourced GEMM's order, StoreQdqBlock).
__device__ __forceinline__ void StoreQuantizedBlock32(const uint16_t* src_bf16, uint16_t* act,
                                                      uint16_t* out, int64_t at,
                                                      bool rs_order = false) {
  const uint4* src = reinterpret_cast<const uint4*>(src_bf16);
  uint32_t x[16];
  LoadBlock32(src_bf16, x);
  if (act != nullptr) {
    uint4* dst = reinterpret_cast<uint4*>(act + at);
#pragma unroll
    for (int q = 0; q < 4; ++q) dst[q] = src[q];
  }
  uint32_t sb, codes[8], qdq[16];
  QuantizeBlock32(x, &sb, codes, qdq);
  StoreQdqBlock(reinterpret_cast<uint4*>(out + at), qdq, rs_order);
}

// StoreQuantizedBlock32 by a whole warp, lane l handling element l of the block: the block's
// amax as the maximum of the lanes' AmaxOfPair (a maximum: the same value in any order), then each
// lane encodes its own value with QuantizeBlock32's operations and stores its QDQ value at its
// operand-order position (MoeOperandColumn within the block). The same bytes; call warp-uniformly.
__device__ __forceinline__ void StoreQuantizedBlock32Warp(const uint16_t* src_bf16, uint16_t* act,
                                                          uint16_t* out, int64_t at, int lane) {
  const uint32_t v = src_bf16[lane];
  if (act != nullptr) act[at + lane] = static_cast<uint16_t>(v);
  const uint32_t amax = __reduce_max_sync(0xFFFFFFFFu, qm::AmaxOfPair(v, 0u));
  const uint32_t sb = qm::Fp8ScaleByte(amax);
  const uint32_t c =
      sb == 255u ? qm::EncodeNanScale(v, 0x7Fu, 0x80u) : qm::EncodeFp8(v, qm::Ue8m0Reciprocal(sb));
  const int col = 8 * (lane / 8) + 2 * (lane % 4) + (lane % 8) / 4;  // MoeOperandColumn
  out[at + col] =
      static_cast<uint16_t>(exact::F32ToBf16(exact::MulRn(qm::E4m3ToF32(c), qm::Ue8m0ToF32(sb))));
}

// ---- FP4 E2M1 × UE8M0 weights to bf16 pairs --------------------------------------------------
__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// A 32-bit word of 8 packed E2M1 codes in device order (moe_fp4_code_order.h; logical elements
// 0..7) as 4 bf16 pairs out[j] = (value(n = j), value(n = j + 4)) × scale, low half first, given
// the scale as the bf16x2 multiplier m1 = 2^(scale byte - 1) (ScaleMultiplier). Exact: the 3
// magnitude bits at bf16 bits 6..8 make a bf16 equal to the E2M1 value × 2^-126 (E2M1's subnormal
// 0.5 lands on a bf16 subnormal, which mul.bf16x2 keeps), and the multiply by 2^126 · scale only
// moves the exponent. MoeFp4PairBits brings each pair to those bits: pair 0 one LOP3, pairs 1, 2
// a funnel-shift rotate and a LOP3, pair 3 a mask, one multiply making three non-overlapping
// copies, a mask. Per 8 weights 5 LOP3 + 2 SHF on the integer pipe, 1 IMAD + 4 HMUL2 on the FMA
// pipe: 12 instructions. The checkpoint order needed 1 shift + 8 LOP3 +
// 4 IMAD + 4 HMUL2 = 17, and the integer pipe (half rate) bounded the streaming GEMM.
__device__ __forceinline__ void DecodeFp4x8(uint32_t w, uint32_t m1, uint32_t (&out)[4]) {
  out[0] = MulBf16x2(MoeFp4PairBits<0>(w), m1);
  out[1] = MulBf16x2(MoeFp4PairBits<1>(w), m1);
  out[2] = MulBf16x2(MoeFp4PairBits<2>(w), m1);
  out[3] = MulBf16x2(MoeFp4PairBits<3>(w), m1);
}

// a · (half kHalf of b, in both lanes): one HMUL2 whose b operand is .H0_H0 / .H1_H1 (ptxas folds
// the broadcast into the operand; checked in the SASS, kernels/sass.py).
template <int kHalf>
__device__ __forceinline__ uint32_t MulBf16x2ByHalf(uint32_t a, uint32_t b) {
  static_assert(kHalf == 0 || kHalf == 1);
  uint32_t d;
  if constexpr (kHalf == 0) {
    asm("{.reg .b16 l, h; .reg .b32 m; mov.b32 {l, h}, %2; mov.b32 m, {l, l};"
        " mul.rn.bf16x2 %0, %1, m;}"
        : "=r"(d)
        : "r"(a), "r"(b));
  } else {
    asm("{.reg .b16 l, h; .reg .b32 m; mov.b32 {l, h}, %2; mov.b32 m, {h, h};"
        " mul.rn.bf16x2 %0, %1, m;}"
        : "=r"(d)
        : "r"(a), "r"(b));
  }
  return d;
}

// DecodeFp4x8 with the multiplier in half kHalf of `m` (a MoeFp4ScaleMultiplierPairs word): the
// same products, 12 instructions, and no per-block multiplier of its own.
template <int kHalf>
__device__ __forceinline__ void DecodeFp4x8ByHalf(uint32_t w, uint32_t m, uint32_t (&out)[4]) {
  out[0] = MulBf16x2ByHalf<kHalf>(MoeFp4PairBits<0>(w), m);
  out[1] = MulBf16x2ByHalf<kHalf>(MoeFp4PairBits<1>(w), m);
  out[2] = MulBf16x2ByHalf<kHalf>(MoeFp4PairBits<2>(w), m);
  out[3] = MulBf16x2ByHalf<kHalf>(MoeFp4PairBits<3>(w), m);
}

// True when a byte of the 4 scale bytes in `s` is above 128 (a scale above 2, for which
// 2^(byte - 1) does not fit bf16): those take DecodeFp4x8Wide.
__device__ __forceinline__ bool HasWideScale(uint32_t s) {
  return (((s & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) & s & 0x80808080u) != 0u;
}

// The bf16x2 multiplier 2^(b - 1) of byte `blk` of the scale word, from s + 0x7E7E7E7E (every
// byte <= 128, so the per-byte add of 126 carries nowhere): bf16 bits (b + 126) << 7, twice.
__device__ __forceinline__ uint32_t ScaleMultiplier(uint32_t s_plus_126, int blk) {
  return __byte_perm(s_plus_126, 0u, static_cast<uint32_t>(blk) | 0x4040u | (blk << 8)) << 7;
}

// DecodeFp4x8 for any scale byte sb: bytes above 128 take two multiplies (by 2^126, then by
// 2^(sb - 127)); byte 255 (NaN) gives NaN, as the CPU's fp32 dequantisation does.
__device__ __forceinline__ void DecodeFp4x8Wide(uint32_t w, uint32_t sb, uint32_t (&out)[4]) {
  if (sb <= 128u) {
    DecodeFp4x8(w, ((sb + 126u) << 7) * 0x10001u, out);
    return;
  }
  DecodeFp4x8(w, 0x7E807E80u, out);  // 2^126: the code values themselves
  const uint32_t m2 = sb == 255u ? 0x7FC07FC0u : (sb << 7) * 0x10001u;  // 2^(sb - 127)
#pragma unroll
  for (int j = 0; j < 4; ++j) out[j] = MulBf16x2(out[j], m2);
}

// ---- cp.async / mma.sync ---------------------------------------------------------------------
// SmemAddr, CpAsync16 (zero-filled when !valid), CpAsync4, CpAsyncCommit, CpAsyncWait<k>, MmaBf16
// (m16n8k16 bf16, fp32 accumulators): kernels/common/cp_async_mma.cuh.
using ::flashserve::kernels::cuda_common::CpAsync16;
using ::flashserve::kernels::cuda_common::CpAsync4;
using ::flashserve::kernels::cuda_common::CpAsyncCommit;
using ::flashserve::kernels::cuda_common::CpAsyncMbarrierArriveNoinc;
using ::flashserve::kernels::cuda_common::CpAsyncWait;
using ::flashserve::kernels::cuda_common::CpAsyncWaitAll;
using ::flashserve::kernels::cuda_common::MmaBf16;
using ::flashserve::kernels::cuda_common::SmemAddr;

__device__ __forceinline__ uint4 LoadShared16(const void* p) {
  return *reinterpret_cast<const uint4*>(p);
}

__device__ __forceinline__ uint32_t LoadShared4(const void* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

}  // namespace flashserve::kernels::moe_device
