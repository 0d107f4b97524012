// The decode-size bf16 / fp32 Linear (gemm_float_cuda.h, tile_rows kFloatLinearCudaGemvRows):
// y = x · W^T for at most kFloatLinearCudaGemvMaxM rows of x, on the CUDA cores. Device code of
// cuda/float_linear_launch.cu only.
//
// At one to four rows a Linear is a weight stream; the tensor-core kernels spend their time on
// the tile machinery around it: a split-K plan (the MoE gate at M = 1: 3 column tiles × 40 K
// splits of 128) and a second kernel that reduces the splits, ~11 µs for 7.9 MB of fp32 gate
// weights. Here a CTA of 8 warps owns kRows weight rows, each row's K cut into kSlices contiguous
// ranges, a warp per (row, range): lane l reads 8-element chunks l, l + 32, ... of its range
// (16-byte loads, kUnroll chunks in flight per lane, not kept in L1), the matching x elements
// (16-byte loads through L1: every warp of the CTA reads the same x), and accumulates
// acc[m] = fma(x, w, acc[m]) in fp32 in ascending k. Then a butterfly shuffle sum over the lanes
// (a fixed tree), the kSlices partials through shared memory summed in slice order from +0,
// + bias, one RNE rounding (bf16) or the fp32 sum. One launch, no workspace.
//
// The FP8 form of a bf16 weight (TW = Fp8Weight, FloatLinearCudaParams::w_fp8; session 80): a
// chunk is 8 E4M3 codes (one 8-byte load) and its 32 × 32 block's UE8M0 byte; each code becomes
// its f16 (cvt, exact), then fp32, times 2^(byte - 127) (exact: the weight's bf16 value, as
// NarrowFloatLinearWeightToFp8 verified). The same values in the same fma order as the bf16
// weight: the same bits, from half the bytes.
//
// Numerics: each fma rounds the exact product plus the running sum once, so the result is an
// fp32 sum of exact products (also for fp32 x · fp32 W, where the tensor-core kernels drop the
// products of the small pieces) in a fixed order that depends only on (K, lane, slice): the bits
// are reproducible run to run. ±Inf operands give what the CPU gives (the split kernels: NaN).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/fp8_convert.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/stream_load.cuh"
#include "kernels/gemm/cuda/float_linear_gemm.cuh"

namespace flashserve::kernels::float_gemv {

inline constexpr int kThreads = 256;       // 8 warps
inline constexpr int kRows = 2;            // weight rows per CTA
inline constexpr int kWideRows = 8;        // ... with FloatLinearCudaParams::gemv_wide
inline constexpr int kSlices = 8 / kRows;  // warps (K ranges) per row
inline constexpr int kChunk = 8;           // elements per lane step
inline constexpr int kUnroll = 4;          // chunks in flight per lane
inline constexpr int kMaxM = 4;            // x rows

// The mma.sync kernel's argument block (the launcher fills one for every kernel); this kernel
// reads the operands, dims, strides, bias and outputs (x rows 16-byte aligned, validated).
using GemvArgs = float_gemm_device::GemmArgs;

// The FP8 weight form's tag type (TW).
struct Fp8Weight {};

// Chunk of 8 elements as fp32: bf16 (one 16-byte word) or fp32 (two).
template <typename T>
struct Chunk {
  uint4 v[sizeof(T) == 2 ? 1 : 2];
};
// 8 E4M3 codes and their block's scale 2^(byte - 127) as a float.
template <>
struct Chunk<Fp8Weight> {
  uint2 codes;
  float scale;
};

// The chunk's codes 4i .. 4i + 3 (word i) as fp32 times the chunk's scale, into w[4i ..].
__device__ __forceinline__ void Fp8WordValues(const Chunk<Fp8Weight>& c, int i, float* w) {
  uint32_t h01, h23;
  cuda_common::E4m3x4ToF16(i == 0 ? c.codes.x : c.codes.y, h01, h23);
  float v[4];
  cuda_common::F16x2ToF32(h01, v[0], v[1]);
  cuda_common::F16x2ToF32(h23, v[2], v[3]);
#pragma unroll
  for (int e = 0; e < 4; ++e) w[e] = exact::MulRn(v[e], c.scale);
}

template <typename T>
__device__ __forceinline__ float ChunkAt(const Chunk<T>& c, int e) {
  if constexpr (sizeof(T) == 2) {
    const int i = e / 2;  // element 2i in the low half of word i
    const uint32_t word = i == 0 ? c.v[0].x : (i == 1 ? c.v[0].y : (i == 2 ? c.v[0].z : c.v[0].w));
    return exact::Bf16ToF32(e % 2 == 0 ? (word & 0xFFFFu) : (word >> 16));
  } else {
    const uint4& q = c.v[e / 4];
    const int i = e % 4;
    return __uint_as_float(i == 0 ? q.x : (i == 1 ? q.y : (i == 2 ? q.z : q.w)));
  }
}

template <typename T>
__device__ __forceinline__ Chunk<T> LoadWeightChunk(const T* row, int64_t c) {
  Chunk<T> out;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(row + c * kChunk);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T)) / 2; ++i) {
    out.v[i] = cuda_common::LoadStream16(p + 16 * i);
  }
  return out;
}

// Chunk c of a row of codes and its scale byte (scale_row: the row's 32-row block of scales).
__device__ __forceinline__ Chunk<Fp8Weight> LoadFp8Chunk(const uint8_t* row,
                                                         const uint8_t* scale_row, int64_t c) {
  Chunk<Fp8Weight> out;
  out.codes = cuda_common::LoadStream8(row + c * kChunk);
  out.scale = __uint_as_float(static_cast<uint32_t>(__ldg(scale_row + c * kChunk / 32)) << 23);
  return out;
}

// The chunk's 8 weights as fp32.
template <typename T>
__device__ __forceinline__ void ChunkValues(const Chunk<T>& c, float (&w)[kChunk]) {
  if constexpr (std::is_same_v<T, Fp8Weight>) {
#pragma unroll
    for (int i = 0; i < kChunk / 4; ++i) Fp8WordValues(c, i, w + 4 * i);
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) w[e] = ChunkAt(c, e);
  }
}

template <typename T>
__device__ __forceinline__ Chunk<T> LoadXChunk(const T* row, int64_t c) {
  Chunk<T> out;
  const uint4* p = reinterpret_cast<const uint4*>(row + c * kChunk);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T)) / 2; ++i) out.v[i] = __ldg(p + i);
  return out;
}

// kM: x rows the kernel is compiled for (1, 2 or 4); g.m <= kM rows are used. kCtaRows: weight
// rows per CTA — kRows (2, a warp per (row, quarter of K)) or kWideRows (8, a warp per row over
// all of K: FloatLinearCudaParams::gemv_wide; another fixed fma order, x read once per 8 rows).
template <typename TX, typename TW, int kM, int kCtaRows = kRows>
__global__ void __launch_bounds__(kThreads) FloatLinearGemvKernel(GemvArgs g) {
  static_assert(kCtaRows == kRows || kCtaRows == kWideRows, "2 or 8 rows per CTA");
  constexpr int kSl = 8 / kCtaRows;  // warps (K ranges) per row
  __shared__ float part[kCtaRows][kSl][kM];
  // A LaunchPdl kernel after this one (the FP8 stream Linear) may start streaming its weights now;
  // it waits for this grid before it reads our output. Without it, a graph of the decode step
  // lost that overlap: 1 token 212 -> 226 µs though this kernel is 5 µs faster than the split one.
  cuda_common::PdlLaunchDependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_local = warp / kSl, slice = warp % kSl;
  const int64_t group = blockIdx.y;
  const int64_t row = int64_t{blockIdx.x} * kCtaRows + row_local;
  const int64_t chunks = g.k / kChunk;
  const int64_t per_slice = (chunks + kSl - 1) / kSl;
  const int64_t c0 = slice * per_slice;
  const int64_t c1 = min(chunks, c0 + per_slice);

  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.f;
  constexpr bool kFp8 = std::is_same_v<TW, Fp8Weight>;
  const int64_t w_row = row < g.n ? row : 0;
  // bf16 / fp32: the row; FP8: the row's codes and its 32-row block of scale bytes.
  const void* w = kFp8 ? static_cast<const void*>(static_cast<const uint8_t*>(g.w) +
                                                  group * g.w_group_stride + w_row * g.k)
                       : static_cast<const void*>(static_cast<const TW*>(g.w) +
                                                  group * g.w_group_stride + w_row * g.k);
  const uint8_t* w_scale_row =
      kFp8 ? g.w_scales + group * g.w_scale_group_stride + (w_row / 32) * (g.k / 32) : nullptr;
  // The lane's first kUnroll weight chunks are requested before the wait: launched with
  // LaunchPdl (FloatLinearCudaParams::programmatic), the CTA reads its weights while the kernel
  // ahead (the site boundary that writes x) still runs; x is read only after the wait.
  Chunk<TW> wc[kUnroll];
  auto load_weights = [&](int64_t cb) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (cb + 32 * u >= c1) continue;
      if constexpr (kFp8) {
        wc[u] = LoadFp8Chunk(static_cast<const uint8_t*>(w), w_scale_row, cb + 32 * u);
      } else {
        wc[u] = LoadWeightChunk(static_cast<const TW*>(w), cb + 32 * u);
      }
    }
  };
  if (row < g.n) load_weights(c0 + lane);
  cuda_common::PdlWaitPrerequisites();
  if (row < g.n) {
    const TX* x[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      x[m] = static_cast<const TX*>(g.x) + group * g.x_group_stride + m * g.x_stride;
    }
    for (int64_t cb = c0 + lane; cb < c1; cb += 32 * kUnroll) {
      if (cb != c0 + lane) load_weights(cb);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = cb + 32 * u;
        if (c >= c1) break;
        float wv[kChunk];
        ChunkValues(wc[u], wv);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= g.m) break;
          const Chunk<TX> xc = LoadXChunk(x[m], c);
#pragma unroll
          for (int e = 0; e < kChunk; ++e) acc[m] = exact::FmaRn(ChunkAt(xc, e), wv[e], acc[m]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      acc[m] = exact::AddRn(acc[m], __shfl_xor_sync(0xFFFFFFFFu, acc[m], off));
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < kM; ++m) part[row_local][slice][m] = acc[m];
  }
  __syncthreads();
  if (threadIdx.x < kCtaRows * kM) {
    const int r = threadIdx.x / kM, m = threadIdx.x % kM;
    const int64_t out_row = int64_t{blockIdx.x} * kCtaRows + r;
    if (out_row < g.n && m < g.m) {
      float s = 0.f;
#pragma unroll
      for (int sl = 0; sl < kSl; ++sl) s = exact::AddRn(s, part[r][sl][m]);
      if (g.bias != nullptr) s = exact::AddRn(s, g.bias[out_row]);
      const int64_t off = group * g.y_group_stride + m * g.y_stride + out_row;
      if (g.y_f32 != nullptr) {
        g.y_f32[off] = s;
      } else {
        g.y_bf16[off] = static_cast<uint16_t>(exact::F32ToBf16(s));
      }
    }
  }
}

}  // namespace flashserve::kernels::float_gemv
