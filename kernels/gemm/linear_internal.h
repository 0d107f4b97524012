// Internals shared by the Linear launcher files (linear_params.cc, cpu/*.cc). Not a public API:
// other modules include gemm.h only.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "kernels/gemm/gemm.h"

namespace flashserve::kernels::gemm_internal {

inline constexpr int64_t kKBlock = 32;      // K block of the activation and weight scales
inline constexpr int64_t kExactTileN = 64;  // output columns per exact-mode tile
inline constexpr int64_t kFastTileN = 128;  // output columns per fast-mode tile (sgemm call)
inline constexpr size_t kAlign = 64;        // alignment of every workspace region
// Below this many multiply-adds per thread, extra threads cost more than they save.
inline constexpr int64_t kMinMacsPerSlot = int64_t{1} << 18;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Threads that may run tiles at once: the pool's workers plus the caller (1 without a pool).
size_t NumSlots(const ThreadPool* pool);

// Byte offsets of the workspace regions, relative to the 64-byte-aligned base.
struct WorkspaceLayout {
  size_t x = 0;           // float [M, K]: activations (QDQ'd in fast mode, code values in exact)
  size_t x_scale = 0;     // float [M, ceil(K/32)]: activation scales (exact mode)
  size_t slots = 0;       // first per-thread region
  size_t slot_bytes = 0;  // bytes of one per-thread region
  // Offsets inside a per-thread region. Fast: output tile at 0, dequantised weight tile at
  // slot_b. Exact: weight block at 0, column scales at slot_b, accumulators at slot_c.
  size_t slot_b = 0;
  size_t slot_c = 0;
  size_t total = 0;  // bytes needed including kAlign slack for an unaligned base
};
WorkspaceLayout ComputeLayout(const PreparedLinear& w, int64_t m, LinearMode mode, size_t slots);

// InvalidArgumentError naming the first bad field of p (see gemm.h), else OK.
absl::Status ValidateLinearParams(const LinearParams& p, const ThreadPool* pool);

// fn(begin, end) over [0, n) on the pool plus the caller, or inline without a pool.
void ParallelRange(ThreadPool* pool, size_t n, size_t min_chunk,
                   const std::function<void(size_t, size_t)>& fn);

// The E4M3 value nearest to v (round to nearest, ties to even, E4M3 subnormals included) with
// v's sign, for |v| <= 448 (callers clamp first) or NaN (returned as is). Equal to
// formats::E4m3ToFloat(formats::FloatToE4m3(v)) there — the test checks every bf16 value, which
// covers every input this file produces (a bf16 value times a power of two) — but branch-free.
inline float RoundToE4m3(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  // Normal range, |v| >= 2^-6: keep 3 mantissa bits; a rounding carry bumps the exponent.
  const float normal = std::bit_cast<float>((mag + 0x7FFFFu + ((mag >> 20) & 1u)) & 0xFFF00000u);
  // Subnormal range: multiples of 2^-9. Adding 2^14 (whose fp32 ulp is 2^-9) rounds to them RNE.
  const float a = std::bit_cast<float>(mag);
  const float sub = (a + 16384.0f) - 16384.0f;
  const float r = a < 0x1.0p-6f ? sub : normal;
  const float signed_r = std::bit_cast<float>(std::bit_cast<uint32_t>(r) | (bits & 0x80000000u));
  return mag > 0x7F800000u ? v : signed_r;
}

// One input row to fp32 values. Without quantize: values = x (bf16 upcast). With quantize: per
// 32-wide K block (the last one may be partial) the FP8 E4M3 / UE8M0 rule of
// formats::QuantizeFp8Ue8m0B32; values get the E4M3 code values times the scale when
// fold_scale, else the bare code values with scales[b] = the block's scale (ceil(k/32) floats).
void PrepareActivationRow(const uint16_t* x_bf16, const float* x_f32, int64_t k, bool quantize,
                          bool fold_scale, float* values, float* scales);

// Rows [n0, n0 + nn) of the weight dequantised / upcast to fp32, row-major [nn, K] into dst.
void DequantizeRows(const PreparedLinear& w, int64_t n0, int64_t nn, float* dst);

// Weight block for exact mode: tile[k * kExactTileN + j] = value of weight (n0 + j, k0 + k) for
// k < kk, j < nn (FP8/FP4: the bare code value; bf16/f32: the weight), zero for j >= nn;
// col_scale[j] = the UE8M0 scale of that block for FP8/FP4 (0 for j >= nn), untouched otherwise.
void DecodeWeightBlock(const PreparedLinear& w, int64_t n0, int64_t nn, int64_t k0, int64_t kk,
                       float* tile, float* col_scale);

// y[j] = acc[j] (+ bias[j] when bias is non-null), j < n: rounded once to bf16 into y_bf16, or
// stored as fp32 into y_f32 (which may alias acc). Exactly one of y_bf16 / y_f32 is non-null.
void StoreRow(const float* acc, const float* bias, int64_t n, uint16_t* y_bf16, float* y_f32);

// The bodies, on validated params and an aligned workspace base laid out as `layout`.
void RunLinearFast(const LinearParams& p, ThreadPool* pool, uint8_t* ws,
                   const WorkspaceLayout& layout, size_t slots);
void RunLinearExact(const LinearParams& p, ThreadPool* pool, uint8_t* ws,
                    const WorkspaceLayout& layout, size_t slots);

}  // namespace flashserve::kernels::gemm_internal
