// The decode-size front of the MoE layer in one launch: block 0 routes, sorts (+ tile list) and
// scatters the slot table; the FP8 quantise + gather of x runs on extra CTAs of the same launch
// while block 0 routes when the rows go by token (xg_by_token, MoeCuda's default: they do not
// depend on the routing), else in block 0 after the scatter when one pass covers x (top_k copies
// need the slot rows). Device code of cuda/moe_launch.cu only.
//
// The same bytes as LaunchMoeRoute followed by LaunchMoePermute (tested): the block computes all
// m·E scores (RouteScore, a thread each, into shared memory), then each token's top-k is chosen by
// RouteTokenWarp (the warp-per-token kernel's selection), which also counts the chosen experts into
// a shared-memory histogram and copies ids and weights into a shared slot table; the offsets and
// the tile list come from SortOffsetsAndTiles (the one-block sort's phase 3, same code); a slot's
// row is its expert's offset + the number of earlier slots ((token, rank) order) of the same
// expert: the stable order MoeCpu and both sorts write. At one token the separate kernels cost
// ~10 µs each (a block argmax with a barrier per pass; the sort's per-warp histograms and scans
// over all E experts, README "Where one token's 88 µs go"). The quantise + gather runs 4 lanes per
// 32-value block (QuantGatherBlockQuad: 8 values of ILP per lane, the block amax by two shuffles):
// one thread per block chained all 32 values' encodes in one thread, ~10K of the kernel's ~21K
// cycles at one token (clock64-timed, README "The decode-size front"); on the side CTAs it no
// longer follows the route at all (session 28: 1 token 13.6 -> 9.0-9.3 µs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/moe/cuda/moe_permute.cuh"
#include "kernels/moe/cuda/moe_route.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kFrontMaxSlots = static_cast<int>(kMoeCudaFrontMaxTokens * kMoeCudaMaxTopK);
static_assert(kFrontMaxSlots <= kSortThreads, "one slot per thread in the scatter");

// Dynamic shared memory: the unbiased and the biased score of every (token, expert); at most
// 64 KB (8 tokens × 1024 experts).
__host__ __device__ inline size_t FrontSmemBytes(int64_t m, int64_t n_experts) {
  return static_cast<size_t>(8 * m * n_experts);
}

// QuantGatherBlock (moe_permute.cuh) by the 4 adjacent lanes of a quad: lane `sub` holds elements
// 8·sub .. 8·sub + 7 (QuantizeBlock32's qdq words 4·sub .. 4·sub + 3, one 16-byte chunk of the
// operand-order block); the block amax is the maximum of the four lanes' AmaxOfPair (an integer
// maximum: the same in any order), then QuantizeBlock32's per-value operations: the same bytes.
// The slot rows come from `slot_pos` (token_slot in shared memory). Every lane of the warp calls
// it (the shuffles); `active` false: a quad past the last block (computes, stores nothing).
__device__ __forceinline__ void QuantGatherBlockQuad(const MoePermuteParams& p, int64_t t,
                                                     int64_t blk, int sub, bool active,
                                                     const int32_t* slot_pos) {
  uint32_t x[4] = {0u, 0u, 0u, 0u};
  if (active) {
    const uint4 v = *reinterpret_cast<const uint4*>(p.x + t * p.x_stride + blk * 32 + 8 * sub);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  }
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = qm::AmaxOfPair(x[i], amax);
  amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
  amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
  const uint32_t sb = qm::Fp8ScaleByte(amax);
  const float recip = qm::Ue8m0Reciprocal(sb);
  const float scale = qm::Ue8m0ToF32(sb);
  uint32_t codes[2], w[4];  // w[j]: qdq word 4·sub + j
  if (sb != 255u && !MoeAnyNan8(x)) {
    // The hardware conversions (moe_fp8_block.h; session 56): the same bytes.
    MoeQuantize8Fast<MoeHardwareConversions>(x, recip, scale, codes, w);
  } else {
    uint32_t c[8], v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t e = (x[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
      c[i] = sb == 255u ? qm::EncodeNanScale(e, 0x7Fu, 0x80u) : qm::EncodeFp8(e, recip);
      v[i] = exact::F32ToBf16(exact::MulRn(qm::E4m3ToF32(c[i]), scale));
    }
    codes[0] = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
    codes[1] = c[4] | (c[5] << 8) | (c[6] << 16) | (c[7] << 24);
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = v[j] | (v[j + 4] << 16);
  }
  if (!active) return;
  if (p.x_codes != nullptr) {
    *reinterpret_cast<uint2*>(p.x_codes + t * p.dim + blk * 32 + 8 * sub) =
        make_uint2(codes[0], codes[1]);
  }
  if (p.x_scales != nullptr && sub == 0) {
    p.x_scales[t * (p.dim / 32) + blk] = static_cast<uint8_t>(sb);
  }
  const int64_t copies = p.xg_by_token ? 1 : p.top_k;
  for (int64_t j = 0; j < copies; ++j) {
    const int64_t row = p.xg_by_token ? t : slot_pos[t * p.top_k + j];
    uint16_t* dst = p.xg + row * p.dim + blk * 32;
    if (p.wgmma_rs_order) {  // StoreQdqBlock's transposed order: word 4·sub + j at 4·j + sub
#pragma unroll
      for (int q = 0; q < 4; ++q) reinterpret_cast<uint32_t*>(dst)[4 * q + sub] = w[q];
    } else {
      reinterpret_cast<uint4*>(dst)[sub] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// The block quantise by quads: quad threadIdx.x / 4 takes 32-value block first + threadIdx.x / 4,
// then every `stride` blocks on (quantiser CTA q of n: first q·128, stride n·128; block 0 after
// its scatter: 0, 128). The trip count is the same for every thread of the CTA (the shuffles).
__device__ __forceinline__ void FrontQuantiseQuads(const MoePermuteParams& p, int64_t first,
                                                   int64_t stride, const int32_t* slot_pos) {
  const int64_t nb = p.dim / 32, blocks = p.m * nb;
  for (int64_t u0 = first; u0 < blocks; u0 += stride) {
    const int64_t u = u0 + threadIdx.x / 4;
    const bool active = u < blocks;
    const int64_t uu = active ? u : 0;
    QuantGatherBlockQuad(p, uu / nb, uu % nb, static_cast<int>(threadIdx.x % 4), active, slot_pos);
  }
}

// How the front's launch quantises x (MoeFrontKernel's `gather`).
enum class FrontGather : int {
  kNone = 0,      // a separate MoeQuantGatherKernel follows
  kInBlock = 1,   // block 0 after the scatter (needs the slot rows: top_k copies)
  kSideCtas = 2,  // xg_by_token: CTAs 1.. quantise while block 0 routes (no slot rows needed)
};

template <int kPerLane>
__global__ void __launch_bounds__(kSortThreads)
    MoeFrontKernel(MoeRouteParams rp, MoePermuteParams p, FrontGather gather) {
  if (p.launch_dependents) cuda_common::PdlLaunchDependents();  // the up ring may take its SMs
  // A programmatic dependent (MoePermuteParams::programmatic): the logits and x are read only
  // after the kernel ahead has finished.
  if (p.programmatic) cuda_common::PdlWaitPrerequisites();
  constexpr int kQuads = kSortThreads / 4;
  if (blockIdx.x > 0) {  // a quantiser CTA (FrontGather::kSideCtas): the rows by token
    FrontQuantiseQuads(p, int64_t{blockIdx.x - 1} * kQuads, int64_t{gridDim.x - 1} * kQuads,
                       nullptr);
    return;
  }
  extern __shared__ __align__(16) float front_scores[];  // [m][E] unbiased, then [m][E] biased
  __shared__ int32_t first[kMoeCudaMaxExperts];          // counts, then offsets
  __shared__ int32_t slot_id[kFrontMaxSlots];            // (token, rank) order
  __shared__ float slot_w[kFrontMaxSlots];
  __shared__ int32_t red[2 * kSortWarps];
  __shared__ int32_t slot_pos[kFrontMaxSlots];  // token_slot, for the gather
  const int64_t n = p.n_experts, k = p.top_k, slots = p.m * k;
  float* score = front_scores;
  float* biased = front_scores + p.m * n;

  // Every (token, expert) score at once, a thread each (the block route's parallelism: a warp
  // walking its token's E/32 experts per lane would chain their exp / log1p).
  const float temp = rp.options.gate_temp;
  for (int64_t u = threadIdx.x; u < p.m * n; u += kSortThreads) {
    const int64_t t = u / n, e = u % n;
    const bool image = rp.is_image != nullptr && rp.is_image[t] != 0;
    const float* bias = image ? rp.bias_vl : rp.bias;
    RouteScore(rp.logits[u], temp, bias != nullptr, bias != nullptr ? bias[e] : 0.f, score[u],
               biased[u]);
  }
  for (int64_t e = threadIdx.x; e < n; e += kSortThreads) first[e] = 0;
  __syncthreads();
  for (int64_t t = threadIdx.x / 32; t < p.m; t += kSortWarps) {
    RouteTokenWarp<kPerLane, true>(rp, t, first, slot_id, slot_w, score + t * n, biased + t * n,
                                   p.route_redux);
  }
  __syncthreads();
  SortOffsetsAndTiles(p, first, red);  // ends with a barrier: `first` holds the offsets
  for (int64_t i = threadIdx.x; i < slots; i += kSortThreads) {
    const int32_t e = slot_id[i];  // always in range: the route chose it
    int32_t before = 0;
    for (int64_t j = 0; j < i; ++j) before += slot_id[j] == e ? 1 : 0;
    const int32_t pos = first[e] + before;
    p.slot_token[pos] = static_cast<int32_t>(i / k);
    p.slot_weight[pos] = slot_w[i];
    p.token_slot[i] = pos;
    slot_pos[i] = pos;
  }
  if (gather != FrontGather::kInBlock) return;
  __syncthreads();  // slot_pos is complete
  FrontQuantiseQuads(p, 0, kQuads, slot_pos);
}

}  // namespace flashserve::kernels::moe_device
