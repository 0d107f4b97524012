// The compress kernels' vector path (CompressArgs::vec; compressor_kernels.cuh's CompressBody
// only, not a public header): a warp per latent row, lane l taking channels 128 j + 4 l .. + 3 of
// every 128-channel chunk j with 16-byte (fp32) or 8-byte (bf16) accesses, the row's bf16 words
// kept in registers for the norm's second pass. The same operations per channel as the scalar
// path, so the same bits (README.md "CUDA"); what differs is how much each costs:
// - ratio 2's softmax exp through ExpRnFast (exp_rn_fast.cuh) and a straight-line PoolPair
//   (PoolQuadFast), warp-uniform per chunk, the scalar PoolPair where a lane declines;
// - the exactness check of the norm's double sum from two packed 16-bit max / min per bf16 word
//   (VecStats) instead of per-term exponents; rows it cannot vouch for re-run the per-term check
//   (SquareStats) on the kept words.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/compressor/compressor_params.h"
#include "kernels/compressor/cuda/exp_rn_fast.cuh"
#include "kernels/compressor/exp_rn.h"

namespace flashserve::kernels::compressor_device {

namespace vec_ex = ::flashserve::kernels::exact;

// The 128-channel chunks of a row on the vector path: C == 512, the released width, exactly (other
// widths take the scalar path), so that a row's inputs fit the registers and every chunk loop
// has a compile-time trip count (a runtime count cost ~60 of 483 instructions per row and lane).
inline constexpr int kVecChunks = 4;

// What pass 1 turns into the bf16 pre-norm latent.
enum class Input {
  kPool,     // ratio >= 2: softmax-gated pooling of fp32 kv by fp32 score, then one cast
  kCastF32,  // ratio 1, fp32 kv: one cast
  kBf16,     // ratio 1, bf16 kv: as it is
};

__device__ __forceinline__ uint32_t MaxU16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t MinU16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("min.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// A lane's share of a row for the norm's sum of squares: the double sum of the bf16 values'
// squares (each an exact double product) and, per 16-bit half, the largest magnitude bits and
// the smallest nonzero one minus one (zero reads as 0x7FFF).
struct VecStats {
  double sum = 0.0;
  uint32_t mx2 = 0u;
  uint32_t mn2 = 0x7FFF7FFFu;
  __device__ __forceinline__ void Add(uint32_t w) {
    const uint32_t a = w & 0x7FFF7FFFu;
    mx2 = MaxU16x2(mx2, a);
    mn2 = MinU16x2(mn2, (a + 0x7FFF7FFFu) & 0x7FFF7FFFu);  // no carry across the halves
    const double lo = vec_ex::Bf16ToF32(w & 0xFFFFu);
    const double hi = vec_ex::Bf16ToF32(w >> 16);
    sum = fma(lo, lo, sum);
    sum = fma(hi, hi, sum);
  }
};

// Whether the row's double sum of fp32 squares is exact in any order, from the warp's largest
// magnitude and smallest nonzero magnitude (bf16 bits, the smallest minus one): a nonzero bf16
// value is M·2^(e − 7) with M in [128, 255] and e = E − 127 (E its exponent field), so its square
// has its top bit at <= 2e + 1 and its lowest set bit at >= 2e − 14; with every e in
// [e_min, e_max] ⊂ [−62, 62] each fp32 square is exact (normal, 16 significant bits) and every
// partial sum is a multiple of 2^(2 e_min − 14) below 2^(2 e_max + 2 + sum_bits): exact in double
// when 2 (e_max − e_min) + 16 + sum_bits <= 53. This implies SquareStats's test (its top / low are
// the same bounds, attained), so both paths take the exact tree sum on these rows. No nonzero
// value (all zeros) is exact too; NaN / inf (E = 255) and bf16 subnormals (E = 0) fail.
__device__ __forceinline__ bool VecSumExact(uint32_t max_mag, uint32_t min_mag_m1, int sum_bits) {
  const int e_max = static_cast<int>(max_mag >> 7);
  const int e_min = static_cast<int>((min_mag_m1 + 1u) >> 7);  // 256 when every value is zero
  return e_max <= 127 + 62 && e_min >= 127 - 62 && 2 * (e_max - e_min) + 16 + sum_bits <= 53;
}

// Whether every bf16 value of the row has an exact, finite fp32 square (its exponent within
// ±62, or zero), so that VecStats's double terms are the CPU's fp32(x²) (max_mag / min_mag_m1 as
// for VecSumExact; an all-zero row is VecSumExact's).
__device__ __forceinline__ bool VecSquaresExact(uint32_t max_mag, uint32_t min_mag_m1) {
  const int e_max = static_cast<int>(max_mag >> 7);
  const int e_min = static_cast<int>((min_mag_m1 + 1u) >> 7);
  return e_max <= 127 + 62 && e_min >= 127 - 62;
}

// For a double sum s of n nonnegative terms: any two summation orders give double sums within
// 2(n − 1)·2^-53 of the exact total, i.e. within 2n units of s's last place (s >= 2^e has units
// of 2^(e − 52) >= 2^-53·s). So where s's 29 bits below fp32's last place lie more than 4n units
// from the tie 2^28 (the fp32 midpoints of s's binade sit exactly there; its top is an fp32 value,
// and the tie below its bottom is 2^27 units away), every order — the CPU's sequential one
// included — rounds to the same fp32. Needs n < 2^25 (channels are at most 2^24) and a normal
// fp32 result (VecSquaresExact: every nonzero term >= 2^-130; a zero sum is exact anyway).
__device__ __forceinline__ bool SumRoundsAsAnyOrder(double s, int64_t n) {
  const uint32_t below = static_cast<uint32_t>(__double2loint(s)) & 0x1FFFFFFFu;
  const uint32_t w = static_cast<uint32_t>(4 * n);
  return below - (0x10000000u - w) > 2 * w;
}

// a / b rounded to nearest even for a in [2^-92, 1] and b in [1, 2]: the fast path of div.rn.f32
// (reciprocal estimate, one Newton step, quotient, remainder, correction) without its range check
// (FCHK) and slow-path branch, which the compiler turns into a divergent region per division that
// keeps the four channels of a chunk from interleaving. In this range the reciprocal, quotient
// and correction stay normal and the remainder a − q·b is exact (a multiple of 2^-139; kept where
// it is subnormal: the fma and mul are inline PTX without .ftz, whatever the nvcc flags);
// kernels_compressor_gpu_test compares the result with div.rn.f32 for every pair the pooling can
// form (b = 1 + a, numerators a and 1, every fp32 a in [2^-92, 1]).
__device__ __forceinline__ float DivRnPooled(float a, float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));  // b in [1, 2]: .ftz changes nothing
  const float e = vec_ex::FmaRn(-b, r, 1.0f);
  r = vec_ex::FmaRn(r, e, r);
  const float q = vec_ex::MulRn(a, r);
  const float rem = vec_ex::FmaRn(-b, q, a);
  return vec_ex::FmaRn(r, rem, q);
}

// Ratio 2's pooled values of four channels (PoolPair's operations, exp by ExpRnFast): where the
// max m is finite exactly one of the pair's exps is exp(m − m) = 1, so sum = 1 + e either way
// (0 + e + 1 = e + 1: e > 0 here), w_first = 1 / sum, w_other = e / sum. Returns, warp-uniform,
// whether every lane's four channels took it (ExpRnFast accepted and x = z_other − m > −64, so
// m is finite and e >= e^-63.5 > 2^-92 (= e^-63.77) for DivRnPooled; no pooled NaN, whose bf16 cast
// F32x2ToBf16x2NoNan would not reproduce); otherwise the caller pools the chunk with PoolPair.
__device__ __forceinline__ bool PoolQuadFast(const float4& z0, const float4& z1, const float4& k0,
                                             const float4& k1, float (&out)[4]) {
  const float za[4] = {z0.x, z0.y, z0.z, z0.w}, zb[4] = {z1.x, z1.y, z1.z, z1.w};
  const float ka[4] = {k0.x, k0.y, k0.z, k0.w}, kb[4] = {k1.x, k1.y, k1.z, k1.w};
  bool ok = true;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float mx = fmaxf(za[i], zb[i]);
    const bool first = za[i] == mx;
    const float x = vec_ex::SubRn(first ? zb[i] : za[i], mx);
    float e = 0.0f;
    ok &= ExpRnFast(x, &e) & (x > -63.5f);
    const float sum = vec_ex::AddRn(1.0f, e);
    const float wa = DivRnPooled(1.0f, sum), wb = DivRnPooled(e, sum);
    const float w0 = first ? wa : wb, w1 = first ? wb : wa;
    out[i] = vec_ex::AddRn(vec_ex::AddRn(0.0f, vec_ex::MulRn(w0, ka[i])), vec_ex::MulRn(w1, kb[i]));
    ok &= !isnan(out[i]);
  }
  return __all_sync(0xFFFFFFFFu, ok);
}

// One chunk's inputs on the vector path: ratio 2 both tokens' z and kv, ratio 1 the kv values.
template <Input kInput>
struct VecChunkIn;
template <>
struct VecChunkIn<Input::kPool> {
  float4 z0, z1, k0, k1;
};
template <>
struct VecChunkIn<Input::kCastF32> {
  float4 x;
};
template <>
struct VecChunkIn<Input::kBf16> {
  uint2 x;
};

// 16 bytes of ratio 1's fp32 kv, read once: the read-only path without an L1 line, the L2
// fetching the 256-byte neighbourhood (the row's next chunks). Session 49, [16384, 512]: 26.4–26.5
// → 25.2–25.8 µs; level for bf16 kv and ratio 2 (whose state rows the kernel also writes, so not
// read-only there), and .nc + L2::256B with L1 lines made ratio 2 slower (34.2–34.4 vs 32.5–32.8).
__device__ __forceinline__ float4 LoadReadOnce16(const float* p) {
  float4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "l"(p));
  return v;
}

// Chunk j's inputs of row g (lane's channels 128 j + 4 lane .. + 3).
template <Input kInput>
__device__ __forceinline__ VecChunkIn<kInput> LoadVecChunk(const CompressProjectedParams& p,
                                                           const float* const* kv_rows,
                                                           const float* const* z_rows, int64_t g,
                                                           int j, int lane) {
  const int64_t c = 128 * j + 4 * lane;
  VecChunkIn<kInput> in;
  if constexpr (kInput == Input::kPool) {
    in.z0 = *reinterpret_cast<const float4*>(z_rows[0] + c);
    in.z1 = *reinterpret_cast<const float4*>(z_rows[1] + c);
    in.k0 = *reinterpret_cast<const float4*>(kv_rows[0] + c);
    in.k1 = *reinterpret_cast<const float4*>(kv_rows[1] + c);
  } else if constexpr (kInput == Input::kCastF32) {
    in.x = LoadReadOnce16(p.kv + g * p.kv_stride + c);
  } else {
    in.x = *reinterpret_cast<const uint2*>(p.kv_bf16 + g * p.kv_stride + c);
  }
  return in;
}

// Whether the bf16 words `w` hold no inf or NaN (exponent field 0xFF in either half).
__device__ __forceinline__ bool Bf16x2Finite(uint32_t w) {
  return (w & 0x7F800000u) != 0x7F800000u && (w & 0x7F80u) != 0x7F80u;
}

// Pass 2 of the kept words: bf16(w * (x * rs)) with the lane's norm weight words `wt`, 8-byte
// stores; kCvt: F32x2ToBf16x2NoNan (the caller's row has no inf / NaN x, w or rs, so no product is
// NaN and the cvt rounds as F32ToBf16 does, overflow to inf included), else F32ToBf16.
template <bool kCvt>
__device__ __forceinline__ void NormRowVec(const uint32_t (&words)[kVecChunks][2],
                                           const uint2 (&wt)[kVecChunks], int lane, float rs,
                                           uint16_t* lat) {
#pragma unroll
  for (int j = 0; j < kVecChunks; ++j) {
    const uint32_t w[2] = {wt[j].x, wt[j].y};
    uint32_t o[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float x0 = vec_ex::Bf16ToF32(words[j][h] & 0xFFFFu);
      const float x1 = vec_ex::Bf16ToF32(words[j][h] >> 16);
      const float v0 = vec_ex::MulRn(vec_ex::Bf16ToF32(w[h] & 0xFFFFu), vec_ex::MulRn(x0, rs));
      const float v1 = vec_ex::MulRn(vec_ex::Bf16ToF32(w[h] >> 16), vec_ex::MulRn(x1, rs));
      o[h] = kCvt ? vec_ex::F32x2ToBf16x2NoNan(v0, v1) : vec_ex::F32x2ToBf16x2(v0, v1);
    }
    *reinterpret_cast<uint2*>(lat + 128 * j + 4 * lane) = make_uint2(o[0], o[1]);
  }
}

}  // namespace flashserve::kernels::compressor_device
