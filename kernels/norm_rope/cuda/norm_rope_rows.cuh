// Row helpers of the RMSNorm kernel (norm_rope_kernels.cuh) that other kernels reuse to produce
// its bits (kernels/mhc's fused site boundary): 8-value bf16 / fp32 loads and stores and the
// block's double sum of squares. Inline device functions only (no __global__), so any
// translation unit may include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/norm_rope/cuda/norm_rope_math.cuh"

namespace flashserve::kernels::norm_rope_device {

inline constexpr int kNormThreads = 256;
// RmsNormKernel's modes of keeping a row between its two passes (norm_rope_kernels.cuh).
inline constexpr int kNormCacheNone = 0;
inline constexpr int kNormCacheRow = 1;
inline constexpr int kNormCacheRaw = 2;
// Chunks per thread an RMSNorm row may have to stay in registers between the two passes (kRow).
inline constexpr int kNormCache = 4;
// The most chunks per thread of kRaw (16-byte words: 32 registers; launches use 2, 4 or 8).
inline constexpr int kNormRawCache = 8;

// ---- loads and stores of kW consecutive values (kW = 8: one 16-byte access) -----------------

// The 8 bf16 of a 16-byte word as fp32 (low half first).
__device__ __forceinline__ void UnpackBf16x8(const uint4& u, float (&v)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = Bf16ToF32(w[j] & 0xFFFFu);
    v[2 * j + 1] = Bf16ToF32(w[j] >> 16);
  }
}

template <int kW>
__device__ __forceinline__ void LoadBf16(const uint16_t* p, float (&v)[kW]) {
  if constexpr (kW == 8) {
    UnpackBf16x8(*reinterpret_cast<const uint4*>(p), v);
  } else {
    static_assert(kW == 1);
    v[0] = Bf16ToF32(p[0]);
  }
}

template <int kW>
__device__ __forceinline__ void LoadWeight(const uint16_t* w, float (&v)[kW]) {
  LoadBf16<kW>(w, v);
}

template <int kW>
__device__ __forceinline__ void LoadWeight(const float* w, float (&v)[kW]) {
  if constexpr (kW == 8) {
    const float4 a = *reinterpret_cast<const float4*>(w);
    const float4 b = *reinterpret_cast<const float4*>(w + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    v[0] = w[0];
  }
}

template <int kW>
__device__ __forceinline__ void StoreBf16(uint16_t* p, const float (&v)[kW]) {
  if constexpr (kW == 8) {
    uint32_t w[4];
    F32x8ToBf16x8(v, w);  // F32ToBf16's bits, one cvt per pair unless a value is NaN
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    p[0] = static_cast<uint16_t>(F32ToBf16(v[0]));
  }
}

__device__ __forceinline__ float WeightAt(const uint16_t* w, int64_t c) { return Bf16ToF32(w[c]); }
__device__ __forceinline__ float WeightAt(const float* w, int64_t c) { return w[c]; }

// Sum of `v` over a group of kGroup threads (4, 8 or 16 aligned lanes, a warp, or the whole block),
// the same value in every thread. A group narrower than a warp shuffles within itself only, so the
// groups of a warp may run different numbers of rows. The terms are fp32 squares of bf16 values (16
// significant bits each), so the double sum is exact, whatever its order, while the row's squares
// span less than ~2^(37 - log2(cols)); past that it may differ from the CPU's sequential double sum
// by a few double ulps, which changes the fp32 rounding only at an fp32 tie (probability ~2^-29 per
// row).
template <int kGroup>
__device__ __forceinline__ double GroupSum(double v, double* warp_sums) {
  static_assert(
      kGroup == 4 || kGroup == 8 || kGroup == 16 || kGroup == 32 || kGroup == kNormThreads,
      "group of threads");
  constexpr int kLanes = kGroup < 32 ? kGroup : 32;
  const unsigned mask = kGroup < 32 ? ((1u << kLanes) - 1u)
                                          << (static_cast<int>(threadIdx.x) % 32 / kLanes * kLanes)
                                    : 0xFFFFFFFFu;
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  if constexpr (kGroup <= 32) {
    return v;
  } else {
    static_assert(kGroup == kNormThreads);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    double total = warp_sums[0];
#pragma unroll
    for (int w = 1; w < kGroup / 32; ++w) total += warp_sums[w];
    __syncthreads();  // warp_sums is rewritten for the next row
    return total;
  }
}

// RmsNormKernel's 1 / rms of a row from its sum of squares (GroupSum's double) and inv_n =
// fp32(1 / cols): 1 / sqrt(fp32(sum) · inv_n + eps), each operation rounded on its own (the
// other kernels that reproduce the norm's bits call it too: the mHC boundary, the FP8 Linear's
// fused x_norm).
__device__ __forceinline__ float InverseRmsFromSum(double sum, float inv_n, float eps) {
  return DivRn(1.0f, SqrtRn(AddRn(MulRn(DoubleToF32(sum), inv_n), eps)));
}

}  // namespace flashserve::kernels::norm_rope_device
