// The stream-K tail's reduction (LinearCudaTailPlan; cuda/wgmma_ws_gemm.cuh runs the ranges):
// every tail tile's output = ((+0 + p_0) + p_1) + … over its K ranges in ascending order, + bias,
// one rounding — LinearFp8ReduceKernel's order, so a tail tile has the bits of the split-K plan
// with as many splits. One thread per (tail tile, fragment float4 i, fragment thread t): it loads
// the tile's `ranges` float4s at once (each warp's loads a whole 512 bytes of each slot), sums,
// and stores its 2 × 2 outputs — rows 64·wg + 16·warp + lane / 4 (+ 8) and columns 8i +
// 2·(lane % 4) (+ 1) of the tile, the wgmma m64nNk16 accumulator layout (wgmma_linear::StoreTile).
// Launched as a programmatic dependent of the GEMM (it reads the slots after
// PdlWaitPrerequisites), across every SM: the sums of the last wave's tiles take all SMs' L2
// bandwidth, not only the tail CTAs'. Included by cuda/linear_fp8_launch.cu only (sm_90a).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/cuda/output_pair.cuh"

namespace flashserve::kernels::wgmma_ws {

inline constexpr int kTailReduceThreads = 256;
inline constexpr int kTailMaxRanges = 8;  // = kLinearCudaTailMaxRanges (launcher static_assert)
inline constexpr int kTailTileRows = 128, kTailTileCols = 256, kTailFragThreads = 256;

struct TailReduceArgs {
  const float* partial = nullptr;  // [tail tiles · ranges][128 · 256] fp32, thread order
  const float* bias = nullptr;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
  bool y_pair = false;  // bf16 pairs may be stored as one 4-byte word
  int64_t m = 0, n = 0;
  int64_t m_tiles = 0;
  int64_t begin = 0;       // the first tail tile (tiles m fastest, then n)
  int64_t tail_tiles = 0;  // tiles - begin
  int ranges = 2;          // 2 .. kTailMaxRanges
};

__global__ void __launch_bounds__(kTailReduceThreads) WsTailReduceKernel(const TailReduceArgs r) {
  cuda_common::PdlWaitPrerequisites();
  constexpr int kF4 = kTailTileCols / 8;  // float4s per fragment thread (accumulators / 4)
  constexpr int64_t kSlot4 = int64_t{kTailFragThreads} * kF4;
  const int64_t total = r.tail_tiles * kF4 * kTailFragThreads;
  for (int64_t q = int64_t{blockIdx.x} * kTailReduceThreads + threadIdx.x; q < total;
       q += int64_t{gridDim.x} * kTailReduceThreads) {
    const int t = static_cast<int>(q % kTailFragThreads);
    const int64_t rest = q / kTailFragThreads;
    const int i = static_cast<int>(rest % kF4);
    const int64_t tl = rest / kF4;
    const float4* src = reinterpret_cast<const float4*>(r.partial) + tl * r.ranges * kSlot4 +
                        i * kTailFragThreads + t;
    float4 v[kTailMaxRanges];
#pragma unroll
    for (int k = 0; k < kTailMaxRanges; ++k) {
      if (k < r.ranges) v[k] = __ldcg(src + k * kSlot4);
    }
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kTailMaxRanges; ++k) {
      if (k < r.ranges) {
        s[0] = exact::AddRn(s[0], v[k].x);
        s[1] = exact::AddRn(s[1], v[k].y);
        s[2] = exact::AddRn(s[2], v[k].z);
        s[3] = exact::AddRn(s[3], v[k].w);
      }
    }
    const int64_t tile = r.begin + tl;
    const int wg = t / 128, warp = (t / 32) % 4, lane = t % 32;
    const int64_t row = (tile % r.m_tiles) * kTailTileRows + 64 * wg + 16 * warp + lane / 4;
    const int64_t col = (tile / r.m_tiles) * kTailTileCols + 8 * i + 2 * (lane % 4);
    if (col >= r.n) continue;
    const bool two = col + 1 < r.n;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row + 8 * h < r.m) {
        gemm_device::StoreOutputPair(r, (row + 8 * h) * r.y_stride + col, col, s[2 * h],
                                     s[2 * h + 1], two);
      }
    }
  }
}

// Enqueues WsTailReduceKernel as a programmatic dependent of the kernel before it on `stream`.
inline void LaunchTailReduce(const TailReduceArgs& r, cudaStream_t stream) {
  const int64_t threads = r.tail_tiles * (kTailTileCols / 8) * kTailFragThreads;
  const int64_t blocks = (threads + kTailReduceThreads - 1) / kTailReduceThreads;
  cuda_common::LaunchPdl(WsTailReduceKernel, dim3(static_cast<unsigned>(blocks)),
                         dim3(kTailReduceThreads), 0, stream, r);
}

}  // namespace flashserve::kernels::wgmma_ws
