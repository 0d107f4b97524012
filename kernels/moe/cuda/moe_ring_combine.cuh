// The combine of a MoeCuda call whose down GEMM ran on the TMA ring without its epilogue kernel
// (MoeCudaParams::ring_fused_combine): per token and column, each routed slot's expert output is
// the down ring's partials summed in ordinal order and cast to bf16 — MoeRingEpilogueKernel's
// operations, so the same ye — and those are summed from 0 in ascending expert id, then the
// shared expert's output, one RNE cast (MoeCombineKernel's operations). The same bits as the
// down epilogue followed by MoeCombineKernel, one launch fewer. Device code of
// cuda/moe_ring_launch.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_combine_row.cuh"
#include "kernels/moe/cuda/moe_ring_gemm.cuh"

namespace flashserve::kernels::moe_device {

struct RingCombineArgs {
  MoeCombineParams c;              // c.ye is not read
  const float* partial = nullptr;  // the down ring's partials (RingArgs::partial, N = c.dim)
  int32_t* counters = nullptr;     // its counter (RingArgs::counters), reset here
  const int32_t* num_tiles = nullptr;
  int64_t slots = 0;
  int64_t units = 0;  // the down GEMM's units per pair: I / 256
  RingCut cut;        // the down ring's
};

// A block per (token, 1,024 columns), a thread per 8 columns (grid.y = ceil(D / 1024)), so that
// a thread can keep every slot's first partials and its first later partials in flight at once:
// a token costs about three dependent L2 round trips (ids, slot records, partials).
inline constexpr int kRingCombineThreads = 128;
inline constexpr int kRingCombineBatch = 8;  // slots whose loads are in flight together

__host__ __device__ inline int RingCombineSplits(int64_t dim) {
  return static_cast<int>((dim / 8 + kRingCombineThreads - 1) / kRingCombineThreads);
}

template <bool kDynamic>  // the down ring's cut (RingCut::dynamic)
__global__ void __launch_bounds__(kRingCombineThreads) MoeRingCombineKernel(RingCombineArgs a) {
  constexpr int kBlocks = kRingCombineThreads * 8 / 128;  // 128-column blocks of a CTA
  __shared__ int32_t ids[kMoeCudaMaxTopK];
  __shared__ int32_t slot[kMoeCudaMaxTopK];
  __shared__ int32_t rows[kMoeCudaMaxTopK];  // slot rows in ascending expert id
  __shared__ int32_t recs[kMoeCudaMaxTopK];  // their RingSlotRecords entries
  // Per (rank, the CTA's 128-column block): the first chunk that met the slot's pair << 3 | the
  // number of later chunks (< kRingMaxOrdinals).
  __shared__ int32_t meets[kMoeCudaMaxTopK][kBlocks];
  const MoeCombineParams& p = a.c;
  const int64_t k = p.top_k, blocks = p.dim / 128;
  const int64_t c = (int64_t{blockIdx.y} * kRingCombineThreads + threadIdx.x) * 8;
  const int64_t cb0 = int64_t{blockIdx.y} * kBlocks;
  if (kDynamic && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *a.counters = 0;
  const RingSplit<kDynamic> split(int64_t{*a.num_tiles} * blocks, a.units, a.cut);
  const float* later_base = a.partial + a.slots * p.dim;
  const int32_t* records = RingSlotRecords(a.partial, a.slots, p.dim);
  for (int64_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    const int rank = CombineOrderSlots(p, t, ids, slot, rows);
    if (rank >= 0) recs[rank] = records[slot[threadIdx.x]];
    __syncthreads();
    for (int64_t i = threadIdx.x; i < k * kBlocks; i += blockDim.x) {
      const int64_t j = i / kBlocks, cb = cb0 + i % kBlocks;
      if (cb < blocks) {
        const int64_t pair = int64_t{recs[j] >> 4} * blocks + cb;
        const int64_t first = split.RangeOf(pair * split.units);
        const int64_t last = split.RangeOf(pair * split.units + split.units - 1);
        meets[j][i % kBlocks] = static_cast<int32_t>(first << 3 | (last - first));
      }
    }
    __syncthreads();
    if (c < p.dim) {
      const uint4 sh = LoadSharedY(p, t, c);  // issued before the routed rows' loads
      const HcPostCols hp = LoadHcPost(p, t, c);
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      const int cbl = static_cast<int>(c / 128 - cb0);
      for (int64_t j0 = 0; j0 < k; j0 += kRingCombineBatch) {
        // The batch's first partials and the first later range's, all in flight together.
        float4 v[kRingCombineBatch][2], e[kRingCombineBatch][2];
#pragma unroll
        for (int j = 0; j < kRingCombineBatch; ++j) {
          if (j0 + j < k) {
            const float4* f =
                reinterpret_cast<const float4*>(a.partial + int64_t{rows[j0 + j]} * p.dim + c);
            v[j][0] = f[0];
            v[j][1] = f[1];
            const int32_t meet = meets[j0 + j][cbl];
            if ((meet & 7) != 0) {
              const float4* q = reinterpret_cast<const float4*>(
                  later_base + (int64_t{meet >> 3} + 1) * kRingBlockFloats +
                  (recs[j0 + j] & 15) * 128 + c % 128);
              e[j][0] = q[0];
              e[j][1] = q[1];
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kRingCombineBatch; ++j) {
          if (j0 + j >= k) continue;
          float s[8] = {v[j][0].x, v[j][0].y, v[j][0].z, v[j][0].w,
                        v[j][1].x, v[j][1].y, v[j][1].z, v[j][1].w};
          const int32_t meet = meets[j0 + j][cbl];
          const float* later = later_base + int64_t{meet >> 3} * kRingBlockFloats +
                               (recs[j0 + j] & 15) * 128 + c % 128;
          for (int o = 1; o <= (meet & 7); ++o) {  // ordinal order
            float4 q0 = e[j][0], q1 = e[j][1];
            if (o > 1) {  // a pair met by three chunks or more
              const float4* q = reinterpret_cast<const float4*>(later + o * kRingBlockFloats);
              q0 = q[0];
              q1 = q[1];
            }
            const float qs[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i) s[i] = exact::AddRn(s[i], qs[i]);
          }
          // The expert output (MoeRingEpilogueKernel's bf16 cast), then the combine's add.
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            acc[i] = exact::AddRn(acc[i], exact::Bf16ToF32(exact::F32ToBf16(s[i])));
          }
        }
      }
      StoreCombined(p, t, c, acc, sh, hp);
    }
    __syncthreads();  // ids / rows / recs / meets are rewritten for the next token
  }
}

}  // namespace flashserve::kernels::moe_device
