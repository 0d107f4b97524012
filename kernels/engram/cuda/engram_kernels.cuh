// Device code of the Engram gather (engram_launch.cu only; not a public header). The per-value
// arithmetic is kernels/quant/cuda/quant_math.h's (E4M3 and UE8M0 decoding, the NaN rule and the
// exact fp32 multiply as inline PTX without .ftz), checked there against common/formats.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/engram/engram.h"
#include "kernels/quant/cuda/quant_math.h"

namespace flashserve::kernels::engram_device {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
// Values per lane step: 8 codes (one 8-byte load), 8 bf16 (one 16-byte store).
inline constexpr int kChunk = 8;

namespace math = ::flashserve::kernels::quant::math;

__device__ __forceinline__ uint32_t DequantPair(uint32_t code_lo, uint32_t code_hi, float scale) {
  return math::DequantValue(math::E4m3ToF32(code_lo), scale) |
         (math::DequantValue(math::E4m3ToF32(code_hi), scale) << 16);
}

// A warp per (token, column) item, grid-stride; lane j handles values [8j, 8j + 8) (and every
// 32nd chunk after). kVec: code rows 8-byte aligned and output rows 16-byte aligned.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) EngramGatherKernel(EngramGatherParams p) {
  cuda_common::PdlLaunchDependents();  // a LaunchPdl kernel after this one may start loading
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t items = p.tokens * p.ids_per_token;
  const int64_t chunks = p.dim / kChunk;
  uint64_t foreign = 0;
  for (int64_t item = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; item < items;
       item += int64_t{gridDim.x} * kWarps) {
    const int64_t t = item / p.ids_per_token;
    const int64_t col = item - t * p.ids_per_token;
    const int64_t id = p.ids[t * p.ids_stride + col];
    uint16_t* out = p.out + t * p.out_stride + col * p.dim;
    if (id < p.row_begin || id - p.row_begin >= p.rows) {  // foreign: the masked lookup's +0
      for (int64_t j = lane; j < chunks; j += 32) {
        if constexpr (kVec) {
          *reinterpret_cast<uint4*>(out + j * kChunk) = make_uint4(0, 0, 0, 0);
        } else {
          for (int i = 0; i < kChunk; ++i) out[j * kChunk + i] = 0;
        }
      }
      foreign += lane == 0 ? 1 : 0;
      continue;
    }
    const int64_t row = id - p.row_begin;
    const uint8_t* codes = p.codes + row * p.codes_stride;
    const uint8_t* scales = p.scales + row * p.scales_stride;
    for (int64_t j = lane; j < chunks; j += 32) {
      const float scale = math::Ue8m0ToF32(scales[j * kChunk / kEngramScaleBlock]);
      uint32_t w[kChunk / 2];
      if constexpr (kVec) {
        const uint2 c = __ldg(reinterpret_cast<const uint2*>(codes + j * kChunk));
        const uint32_t c4[2] = {c.x, c.y};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          w[2 * h] = DequantPair(c4[h] & 0xFFu, (c4[h] >> 8) & 0xFFu, scale);
          w[2 * h + 1] = DequantPair((c4[h] >> 16) & 0xFFu, c4[h] >> 24, scale);
        }
        *reinterpret_cast<uint4*>(out + j * kChunk) = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kChunk / 2; ++i) {
          w[i] = DequantPair(codes[j * kChunk + 2 * i], codes[j * kChunk + 2 * i + 1], scale);
        }
#pragma unroll
        for (int i = 0; i < kChunk / 2; ++i) {
          out[j * kChunk + 2 * i] = static_cast<uint16_t>(w[i] & 0xFFFFu);
          out[j * kChunk + 2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
        }
      }
    }
  }
  if (p.foreign_ids != nullptr && foreign > 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p.foreign_ids),  // NOLINT(runtime/int)
              static_cast<unsigned long long>(foreign));             // NOLINT(runtime/int)
  }
}

}  // namespace flashserve::kernels::engram_device
