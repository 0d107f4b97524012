// Device helpers shared by the CUDA bodies of LaunchSparseAttn (sparse_attn_kernels.cuh: the
// mma.sync and scalar paths; sparse_attn_wgmma.cuh: the wgmma path): constants, the launch
// geometry, exact fp32 helpers and the PTX wrappers. No kernels here, so any .cu may include it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/common/cp_async_mma.cuh"
#include "kernels/common/pdl.cuh"

namespace flashserve::kernels::attn_device {

inline constexpr int kBlock = static_cast<int>(kSparseAttnBlock);  // list entries per block
inline constexpr float kInitMax = -1e30f;                          // the reference's start
inline constexpr int kScalarThreads = 128;
inline constexpr int kCombineThreads = 128;
inline constexpr int kCombineMaxDim = 512;  // the tensor paths' largest head_dim
inline constexpr int kCombinePerThread = kCombineMaxDim / kCombineThreads;
inline constexpr int kSRowFloats = kBlock + 4;  // fp32 logits row pitch in shared memory

static_assert(kBlock == 64, "the warp layout assumes 64-entry blocks");

// How a launch is cut into units (see the launcher).
// The RoPE the wgmma family applies itself (SparseAttnParams::rope; README.md "RoPE inside the
// attention"): pairs = rd / 2 (0: none), dims first = head_dim − rd onward, the caller's cos/sin
// of every token's position (rope_cos_sin); q: rotate the Q tile before the first S; out: the
// inverse rotation of the output as it is written. The launcher fills it for rd <=
// 2·kRopeMaxPairs with a table; the output's inverse RoPE otherwise and on the other paths runs
// as norm_rope's kernel after the attention. The kernels never compute a sin/cos themselves: the
// double-precision sincos compiled into them (even when a table made it dead code) cost the RoPE
// instantiations ~10 µs at 256 tokens (README.md "RoPE table").
inline constexpr int kRopeMaxPairs = 32;
struct AttnRope {
  const float2* cos_sin = nullptr;  // device, [tokens][pairs] (SparseAttnParams::rope_cos_sin)
  int pairs = 0;
  int first = 0;
  bool q = false;
  bool out = false;
};

// Launch constants the launcher derives: the cut into units, the split states, the fused RoPE.
struct Geometry {
  int64_t groups = 1;            // head groups per token
  int64_t splits = 1;            // list ranges per (token, group)
  int64_t blocks_per_split = 0;  // 64-blocks per range
  int64_t units = 0;             // tokens · groups · splits
  // Split states (splits > 1), 16-byte aligned: mma.sync path [units][heads per CTA][kD + 2]
  // (m, denom, acc); wgmma family in fragment order (sparse_attn_wgmma_epilogue.cuh
  // WgmmaStoreSplitState).
  float* state = nullptr;
  AttnRope rope;  // wgmma family only
};

// Where unit `unit` of a launch sits (every unit kernel's grid-stride loop): token t, first head h0
// of its group of `heads_per_cta`, list blocks [blk_begin, blk_end) of its split.
struct UnitSpan {
  int64_t t, h0, blk_begin, blk_end;
};
__device__ __forceinline__ UnitSpan UnitOf(const Geometry& geo, int64_t unit, int64_t n_blocks,
                                           int64_t heads_per_cta) {
  const int64_t item = unit / geo.splits;
  const int64_t split = unit % geo.splits;
  UnitSpan u;
  u.t = item / geo.groups;
  u.h0 = (item % geo.groups) * heads_per_cta;
  u.blk_begin = split * geo.blocks_per_split;
  u.blk_end = min(n_blocks, u.blk_begin + geo.blocks_per_split);
  return u;
}

// exp as double, rounded once to fp32: agrees with glibc's expf (< 0.502 ulp) but for ~never.
__device__ __forceinline__ float ExpF(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

__device__ __forceinline__ uint16_t Bf16Bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ float Bf16Round(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

__device__ __forceinline__ float Bf16ToFloat(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// Row `idx` of the pool, or -1 when the entry is unused or (unvalidated on the device) out of
// range.
__device__ __forceinline__ int64_t RowOf(const SparseAttnParams& p, int64_t t, int64_t pos) {
  if (pos >= p.width) return -1;
  const int32_t idx = p.indices[t * p.indices_stride + pos];
  return (idx >= 0 && idx < p.n_kv) ? idx : -1;
}

// ---- PTX wrappers -----------------------------------------------------------------------------

// SmemAddr, CpAsync16 / CpAsync4 (zero-filled when !valid), CpAsyncCommit, CpAsyncWait<k>:
// kernels/common/cp_async_mma.cuh.
using ::flashserve::kernels::cuda_common::CpAsync16;
using ::flashserve::kernels::cuda_common::CpAsync4;
using ::flashserve::kernels::cuda_common::CpAsyncCommit;
using ::flashserve::kernels::cuda_common::CpAsyncMbarrierArriveNoinc;
using ::flashserve::kernels::cuda_common::CpAsyncWait;
using ::flashserve::kernels::cuda_common::CpAsyncWaitAll;
using ::flashserve::kernels::cuda_common::SmemAddr;

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a·b, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Programmatic dependent launch (kernels/common/pdl.cuh). The split kernels signal at their start
// that the combine kernel, launched after them with LaunchPdl, may be scheduled; its CTAs then
// occupy idle SMs and block in WaitPrerequisiteGrids until the split kernel has completed and
// its memory operations are visible, which hides the second launch's latency.
__device__ __forceinline__ void LaunchDependents() { cuda_common::PdlLaunchDependents(); }
__device__ __forceinline__ void WaitPrerequisiteGrids() { cuda_common::PdlWaitPrerequisites(); }

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][kChunks × 16 B] tile.
template <int kChunks>
__device__ __forceinline__ uint32_t Swz(int row, int chunk) {
  return static_cast<uint32_t>((row * kChunks + (chunk ^ (row & 7))) * 16);
}

}  // namespace flashserve::kernels::attn_device
