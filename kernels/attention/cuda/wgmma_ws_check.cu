// RunWgmmaWsRingCheck (wgmma_ws_check.h): the warp-specialised kernel's producer and ring with
// S-only consumers, S written in plain row-major order through the accumulator layout.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/base/check.h"
#include "kernels/attention/cuda/sparse_attn_wgmma_ws.cuh"
#include "kernels/attention/cuda/wgmma_ws_check.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels {
namespace attn_device {
namespace {

__global__ void __launch_bounds__(WgmmaWsShape::kThreads, 1)
    WgmmaWsRingCheckKernel(const SparseAttnParams p, const Geometry geo, float* s_out) {
  using W = WgmmaShape;
  using WS = WgmmaWsShape;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = AlignedSmem(smem_raw);
  const uint32_t base = SmemAddr(smem);
  const int64_t n_blocks = (p.width + kBlock - 1) / kBlock;
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < WS::kStages; ++s) {
      MbarInit(WsFullBar(base, s), WS::kFullArrivals);
      MbarInit(WsEmptyBar(base, s), WS::kEmptyArrivals);
    }
    MbarInit(WsQEmptyBar(base), WS::kQEmptyArrivals);
  }
  __syncthreads();
  uint32_t it = 0;
  uint32_t units = 0;
  const int wg = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  if (wg == 2) {
    SetMaxRegsDec<WS::kProducerRegs>();
    for (int64_t unit = blockIdx.x; unit < geo.units; unit += gridDim.x) {
      const UnitSpan u = UnitOf(geo, unit, n_blocks, WgmmaShape::kHeads);
      WsProduceUnit<false>(p, geo.rope, u.t, u.h0, u.blk_begin, u.blk_end, base, smem,
                           smem + WS::kEnd, it, units++);
    }
    CpAsyncWaitAll();
    return;
  }
  SetMaxRegsInc<WS::kConsumerRegs>();
  const int lane = threadIdx.x % 32;
  const int r0 = ((threadIdx.x % 128) / 32) * 16 + lane / 4;
  const int c2 = 2 * (lane % 4);
  for (int64_t unit = blockIdx.x; unit < geo.units; unit += gridDim.x) {
    const UnitSpan u = UnitOf(geo, unit, n_blocks, WgmmaShape::kHeads);
    for (int64_t blk = u.blk_begin; blk < WsBlockStop(u.blk_begin, u.blk_end); ++blk, ++it) {
      const uint32_t stage = it % WS::kStages;
      MbarWait(WsFullBar(base, stage), (it / WS::kStages) & 1);
      wgmma::FenceProxyAsyncShared();
      float s[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) s[i] = 0.0f;
      WgmmaQkIssue(s, base + W::kQOff, base + W::kKvOff + stage * W::kTileBytes, wg);
      WgmmaWait(s);
      MbarArrive(WsEmptyBar(base, stage));
      if (blk >= u.blk_end) continue;  // WsBlockStop's empty block of a unit without blocks
      float* out = s_out + (u.t * n_blocks + blk) * 64 * 64;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          out[(r0 + 8 * (i >> 1)) * 64 + wg * 32 + 8 * j + c2 + (i & 1)] = s[4 * j + i];
        }
      }
    }
    MbarArrive(WsQEmptyBar(base));  // every S of the unit was waited for: Q may be replaced
  }
}

}  // namespace
}  // namespace attn_device

namespace attention_internal {

void RunWgmmaWsRingCheck(const SparseAttnParams& p, int ctas, float* s) {
  using WS = attn_device::WgmmaWsShape;
  CHECK(p.heads == attn_device::WgmmaShape::kHeads && p.head_dim == attn_device::WgmmaShape::kD)
      << "RunWgmmaWsRingCheck: 64 heads x 512";
  attn_device::Geometry geo;
  geo.groups = 1;
  geo.splits = 1;
  geo.blocks_per_split = (p.width + kSparseAttnBlock - 1) / kSparseAttnBlock;
  geo.units = p.tokens;
  auto* kernel = attn_device::WgmmaWsRingCheckKernel;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(WS::kSmemBytes)));
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ctas, p.tokens)));
  kernel<<<grid, WS::kThreads, WS::kSmemBytes>>>(p, geo, s);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace attention_internal
}  // namespace flashserve::kernels
