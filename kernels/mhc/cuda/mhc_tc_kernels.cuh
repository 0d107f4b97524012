// Tensor-core body of the mixes pass (the default of LaunchMhcMixes; the fp32-FMA body in
// mhc_kernels.cuh stays selectable). README.md "CUDA" has the design and the byte / FLOP figures.
//
// MixesPartialTcKernel: X·fn^T as mma.sync m16n8k16 bf16 products with fp32 accumulation. X is
// bf16 already; fn (fp32) is split exactly into three bf16 pieces, fn = hi + mid + lo (8 + 8 + 8
// significand bits, RNE each), so every product x·piece is exact and the only rounding is in the
// sums. A block owns one slice (256 dims of each stream) at a time: it stages the slice's pieces
// in shared memory (144 KB, in mma fragment order), then each warp walks its token tiles of 16
// tokens through the slice's 32 chunks (chunk = 32 dims of one stream; group j = the 4 streams of
// dims 32j..32j+31). Per chunk and n-tile (8 mixes) one chain of 6 mma (lo, mid, hi; two k16 halves
// each) starts from zero and its result is added (fp32, round to nearest) to the accumulator, in
// chunk order. Lane (g, q) of a warp loads the 16 contiguous bytes (dims 8q..8q+7 of the chunk) of
// tokens g and g+8 as four 32-bit words each, straight into the A fragments (XGroup): inside a
// chunk the k order is permuted (logical k 2q, 2q+1 <-> dims 8q + 4h, +1; 2q+8, 2q+9 <-> 8q + 4h +
// 2, +3 in half h), and the B fragments are staged with the same permutation. Σx² is an fp32 FMA
// chain per lane, the 4 lanes of a row combined as (q0 + q1) + (q2 + q3). Register buffers keep X
// in flight (the narrow block shape: three groups per warp, 8 warps; wide: two, 16 warps;
// mhc_tc_plan.h); the wide shape's default is mhc_tc_tma_kernel.cuh (X by the TMA unit). The
// partial sums go to the workspace [slice][25][tokens] as in the fp32 body. With pre_in, the
// collapse of the group's 4 streams is HcPre's exact order.
//
// MixesFinishLanesKernel: 16 lanes per token: slices summed in ascending order (lane e: values e
// and 16 + e), then r and the mixes with MhcMixesCpu's operations, and the Sinkhorn tail with one
// comb element per lane; every row / column sum gathers its 4 values by shuffles and adds them in
// ascending order, so the tail is MhcSplitSinkhorn operation for operation.
//
// The small-batch body (mhc_small_kernels.cuh) builds its fragments with LoadFnFrag, runs the same
// mma chains and finishes with FinishTokenLanes, so its results equal this body's bit for bit.
//
// Batch invariance: a token's partial sums depend on its row of X, D and fn only (the mma rows
// are independent, every tile slot and every block runs the same chain); the slice count is a
// function of D.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cp_async_mma.cuh"
#include "kernels/mhc/cuda/mhc_math.cuh"
#include "kernels/mhc/cuda/mhc_tc_plan.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels::mhc_device {

inline constexpr int kTcChunkDims = 32;  // dims of one stream
inline constexpr int kTcGroups = static_cast<int>(kMhcMixesSliceDims) / kTcChunkDims;  // 8
inline constexpr int kTcChunks = kTcGroups * kMhcStreams;  // 32 per slice
inline constexpr int kTcNTiles = kMhcMixes / 8;            // 3 n-tiles of 8 mixes
inline constexpr int kTcPieces = 3;                        // hi, mid, lo
// X groups each warp keeps in registers: two in the wide block shape, three in the narrow one
// (mhc_tc_plan.h).
__host__ __device__ constexpr int TcBuffers(bool wide) { return wide ? 2 : 3; }
__host__ __device__ constexpr int TcThreads(bool wide) { return mhc_tc::WarpsOf(wide) * 32; }
inline constexpr int kTcFinishThreads = 256;  // 2 tokens per warp
inline constexpr size_t kTcSmemBytes =
    sizeof(uint4) * kTcChunks * kTcNTiles * kTcPieces * 32;  // 147456 = 144 KB
// uint4 fragments of one slice (staged in shared memory, or prepared in device memory).
inline constexpr int kTcSliceFrags = kTcChunks * kTcNTiles * kTcPieces * 32;  // 9216
static_assert(MhcFnFragmentBytes(kMhcMixesSliceDims) == kTcSliceFrags * sizeof(uint4) &&
                  kTcSmemBytes == kTcSliceFrags * sizeof(uint4),
              "a prepared slice is exactly what the kernels stage");

// Fragments a block stages per slice, and per thread of a block of `threads`.
inline constexpr int kTcFragEntries = kTcChunks * kTcNTiles * 32;  // 3072

// Fragment entry e of a slice (0 .. kTcFragEntries): lane fastest, then the n-tile, then the chunk
// — the order every stager and PrepareFnKernel walk.
struct TcFragEntry {
  int lane, nt, chunk;
};
__host__ __device__ __forceinline__ TcFragEntry TcFragEntryOf(int e) {
  return {e % 32, (e / 32) % kTcNTiles, e / (32 * kTcNTiles)};
}

static_assert(kMhcMixes % 8 == 0, "whole n-tiles");
static_assert(kMhcMixesSliceDims % kTcChunkDims == 0, "whole chunks per slice");
static_assert(mhc_tc::kTileTokens == 16, "one m16 tile per warp");
static_assert(kMhcMixes + 1 <= 32 && kMhcStreams * kMhcStreams == 16, "finish lane layout");

// d += a · b: m16n8k16 bf16, fp32 accumulators (kernels/common/cp_async_mma.cuh).
using ::flashserve::kernels::cuda_common::MmaBf16;

// f = hi + mid + lo exactly (finite f above ~1e-33): each piece is the RNE bf16 of what is left,
// and each remainder is exact in fp32 (Sterbenz), having <= 16 and then <= 8 significant bits.
__device__ __forceinline__ void SplitBf16x3(float f, uint32_t (&piece)[kTcPieces]) {
  piece[0] = F32ToBf16(f);
  const float r1 = SubRn(f, Bf16ToF32(piece[0]));
  piece[1] = F32ToBf16(r1);
  const float r2 = SubRn(r1, Bf16ToF32(piece[1]));
  piece[2] = F32ToBf16(r2);
}

// Shared-memory index (uint4 units) of the B fragment of chunk c, n-tile nt, piece, lane.
__device__ __forceinline__ int FragIndex(int chunk, int nt, int piece, int lane) {
  return ((chunk * kTcNTiles + nt) * kTcPieces + piece) * 32 + lane;
}

// The B fragment of (chunk, n-tile nt) that lane (g, qd) holds, in its three bf16 pieces:
// fn[8 nt + g][c·D + d0 + 32j + 8qd + 0..7] (chunk = 4j + c) as 4 bf16 pairs (low half = lower
// dim), zeros past D. kFnVec: fn 16-byte aligned and D % 4 == 0. Both bodies build their fragments
// here, so their products are the same.
template <bool kFnVec>
__device__ __forceinline__ void LoadFnFrag(const MhcMixesParams& p, int64_t d0, int chunk, int nt,
                                           int lane, uint4 (&frag)[kTcPieces]) {
  const int64_t dim = p.dim;
  const int64_t width = kMhcStreams * dim;
  const int c = chunk % kMhcStreams;
  const int j = chunk / kMhcStreams;
  const int64_t d = d0 + kTcChunkDims * j + 8 * (lane % 4);
  const int64_t row = (8 * nt + lane / 4) * width + c * dim;
  float f[8];
  if constexpr (kFnVec) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float4 v = d + 4 * h < dim
                           ? __ldg(reinterpret_cast<const float4*>(p.fn + row + d + 4 * h))
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      f[4 * h] = v.x;
      f[4 * h + 1] = v.y;
      f[4 * h + 2] = v.z;
      f[4 * h + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = d + k < dim ? __ldg(p.fn + row + d + k) : 0.0f;
  }
  uint32_t w[kTcPieces][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t a[kTcPieces];
    uint32_t b[kTcPieces];
    SplitBf16x3(f[2 * k], a);
    SplitBf16x3(f[2 * k + 1], b);
#pragma unroll
    for (int pc = 0; pc < kTcPieces; ++pc) w[pc][k] = a[pc] | (b[pc] << 16);
  }
#pragma unroll
  for (int pc = 0; pc < kTcPieces; ++pc)
    frag[pc] = make_uint4(w[pc][0], w[pc][1], w[pc][2], w[pc][3]);
}

// Stages the three bf16 pieces of fn for slice dims [d0, d0 + 256) of every stream: entry (chunk,
// n-tile nt, lane) holds LoadFnFrag's fragment.
template <int kThreads, bool kFnVec>
__device__ __forceinline__ void StageFnPieces(const MhcMixesParams& p, int64_t d0,
                                              uint4* __restrict__ s_frag) {
  static_assert(kTcFragEntries % kThreads == 0, "whole staging rounds");
  // All entries of a thread (12 at 256 threads) unrolled, so their loads are in flight together.
#pragma unroll
  for (int it = 0; it < kTcFragEntries / kThreads; ++it) {
    const TcFragEntry f = TcFragEntryOf(static_cast<int>(threadIdx.x) + it * kThreads);
    uint4 frag[kTcPieces];
    LoadFnFrag<kFnVec>(p, d0, f.chunk, f.nt, f.lane, frag);
#pragma unroll
    for (int pc = 0; pc < kTcPieces; ++pc) s_frag[FragIndex(f.chunk, f.nt, pc, f.lane)] = frag[pc];
  }
}

// A slice's fragments from a prepared fn (LaunchMhcPrepareFn: StageFnPieces' fragments of every
// slice, slice-major), copied into s_frag by 16-byte cp.async from every thread; each thread waits
// for its own copies, the caller's __syncthreads publishes them.
template <int kThreads>
__device__ __forceinline__ void CopyFnFrags(const uint4* __restrict__ frags, int64_t slice,
                                            uint4* __restrict__ s_frag) {
  static_assert(kTcSliceFrags % kThreads == 0, "whole copy rounds");
  const uint4* src = frags + slice * kTcSliceFrags;
#pragma unroll 4
  for (int i = static_cast<int>(threadIdx.x); i < kTcSliceFrags; i += kThreads) {
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(s_frag + i));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + i));
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// How a kernel gets fn's fragments (its kFn template argument): split from fn read as scalars or
// as 16-byte vectors (fn 16-byte aligned, D % 4 == 0), or copied from p.fn_frags (prepared once;
// the launchers take it whenever fn_frags is set). A kernel instantiation holds one way only: with
// both, the unprepared kernels' registers grew (the collapse kernel at 16,384 tokens 489 -> 506
// us on an H200).
inline constexpr int kFnScalar = 0;
inline constexpr int kFnVector = 1;
inline constexpr int kFnPrepared = 2;

// A slice's fragments into s_frag.
template <int kThreads, int kFn>
__device__ __forceinline__ void StageFn(const MhcMixesParams& p, int64_t d0,
                                        uint4* __restrict__ s_frag) {
  if constexpr (kFn == kFnPrepared) {
    CopyFnFrags<kThreads>(static_cast<const uint4*>(p.fn_frags), d0 / kMhcMixesSliceDims, s_frag);
  } else {
    StageFnPieces<kThreads, kFn == kFnVector>(p, d0, s_frag);
  }
}

// One lane's fragment of (chunk, n-tile nt) of the slice at d0: three 16-byte loads of the
// prepared fn, or LoadFnFrag's split of fn. Same values either way.
template <int kFn>
__device__ __forceinline__ void FnFrag(const MhcMixesParams& p, int64_t d0, int chunk, int nt,
                                       int lane, uint4 (&frag)[kTcPieces]) {
  if constexpr (kFn == kFnPrepared) {
    const uint4* src =
        static_cast<const uint4*>(p.fn_frags) + (d0 / kMhcMixesSliceDims) * kTcSliceFrags;
#pragma unroll
    for (int pc = 0; pc < kTcPieces; ++pc) frag[pc] = __ldg(src + FragIndex(chunk, nt, pc, lane));
  } else {
    LoadFnFrag<kFn == kFnVector>(p, d0, chunk, nt, lane, frag);
  }
}

// LaunchMhcPrepareFn: thread i (grid-stride) writes entry i % kTcFragEntries of slice i /
// kTcFragEntries, exactly as StageFnPieces stages it.
template <bool kFnVec>
__global__ void __launch_bounds__(256)
    PrepareFnKernel(MhcMixesParams p, int64_t slices, uint4* __restrict__ out) {
  const int64_t total = slices * kTcFragEntries;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t slice = i / kTcFragEntries;
    // TcFragEntryOf's walk, spelled out: with the helper this kernel's SASS came out different
    // (the same values; unvalidated on a device), the stagers' byte-identical (session 73).
    const int e = static_cast<int>(i - slice * kTcFragEntries);
    const int lane = e % 32;
    const int nt = (e / 32) % kTcNTiles;
    const int chunk = e / (32 * kTcNTiles);
    uint4 frag[kTcPieces];
    LoadFnFrag<kFnVec>(p, slice * kMhcMixesSliceDims, chunk, nt, lane, frag);
#pragma unroll
    for (int pc = 0; pc < kTcPieces; ++pc) {
      out[slice * kTcSliceFrags + FragIndex(chunk, nt, pc, lane)] = frag[pc];
    }
  }
}

// 8 bf16 of one stream row at dims d..d+7 (zeros past D or for a missing token). kVec: D % 8 == 0
// and the row 16-byte aligned, so d < D means the whole 16 bytes are inside.
template <bool kVec>
__device__ __forceinline__ uint4 LoadX8(const uint16_t* stream_row, int64_t dim, int64_t d,
                                        bool valid) {
  if constexpr (kVec) {
    if (valid && d < dim) return *reinterpret_cast<const uint4*>(stream_row + d);
    return make_uint4(0u, 0u, 0u, 0u);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = valid && d + 2 * k < dim ? stream_row[d + 2 * k] : 0u;
      const uint32_t hi = valid && d + 2 * k + 1 < dim ? stream_row[d + 2 * k + 1] : 0u;
      w[k] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The 4 words (dims 8q .. 8q + 7) of one token's chunk as 32-bit loads, so that each word can land
// in its mma A-fragment register (XGroup); LoadX8's zero fill for rows / dims outside.
template <bool kVec>
__device__ __forceinline__ void LoadX8Words(const uint16_t* stream_row, int64_t dim, int64_t d,
                                            bool valid, uint32_t (&w)[4]) {
  if constexpr (kVec) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(stream_row + d);
    const bool in = valid && d < dim;
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = in ? src[k] : 0u;
  } else {
    const uint4 v = LoadX8<false>(stream_row, dim, d, valid);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  }
}

// One group of X in registers, in mma A-fragment order: q[stream][half h] = {token g word 2h,
// token g + 8 word 2h, token g word 2h + 1, token g + 8 word 2h + 1} — the a0..a3 of the chunk's
// k16 half h. Loaded word by word straight into these registers: with whole 16-byte rows per token
// (the first layout) ptxas rebuilt the interleaved quad with 4 register moves before every HMMA
// (Nsight: IMAD.MOV was 49 % of the kernel's instructions, and the first move of each group
// waited on its loads).
struct XGroup {
  uint32_t q[kMhcStreams][2][4];
};

// Word k (dims 8q + 2k, + 1) of token g + 8·r in stream c of the group.
__device__ __forceinline__ uint32_t& XWord(XGroup& x, int c, int r, int k) {
  return x.q[c][k / 2][r + 2 * (k % 2)];
}
__device__ __forceinline__ uint32_t XWord(const XGroup& x, int c, int r, int k) {
  return XWord(const_cast<XGroup&>(x), c, r, k);
}

__device__ __forceinline__ uint32_t Word(const uint4& u, int k) {
  return k == 0 ? u.x : k == 1 ? u.y : k == 2 ? u.z : u.w;
}

// The per-warp state of one unit (16 tokens of one slice) while its 8 groups pass.
struct TcTileState {
  float acc[kTcNTiles][4];  // [n-tile][c0..c3 of the m16n8 fragment]
  float sq[2];              // Σx² of this lane's dims, tokens g and g + 8

  __device__ __forceinline__ void Clear() {
#pragma unroll
    for (int nt = 0; nt < kTcNTiles; ++nt) {
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[nt][k] = 0.0f;
    }
    sq[0] = 0.0f;
    sq[1] = 0.0f;
  }
};

template <int kWarps, int kBuffers, bool kVec, bool kCollapse>
struct TcWarp {
  const MhcMixesParams p;
  const uint4* __restrict__ s_frag;
  float* __restrict__ slice_ws;  // workspace + slice * 25 * tokens
  int64_t d0;                    // first dim of the slice
  int64_t tile_first;            // tile of the warp's first unit
  bool coll_vec;                 // collapsed rows 16-byte aligned and D % 8 == 0
  int lane;

  __device__ __forceinline__ int64_t TileOf(int64_t item) const {
    return tile_first + kWarps * (item / kTcGroups);
  }

  __device__ __forceinline__ void Load(int64_t item, XGroup& x) const {
    const int64_t tok0 = TileOf(item) * mhc_tc::kTileTokens + lane / 4;
    const int64_t d = d0 + kTcChunkDims * (item % kTcGroups) + 8 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t t = tok0 + 8 * r;
      const bool valid = t < p.tokens;
      const uint16_t* row = p.x + (valid ? t : 0) * p.x_stride;
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) {
        uint32_t w[4];
        LoadX8Words<kVec>(row + c * p.dim, p.dim, d, valid, w);
#pragma unroll
        for (int k = 0; k < 4; ++k) XWord(x, c, r, k) = w[k];
      }
    }
  }

  __device__ __forceinline__ void LoadPre(int64_t tile, float (&pre)[2][kMhcStreams]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t t = tile * mhc_tc::kTileTokens + lane / 4 + 8 * r;
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) {
        pre[r][c] = t < p.tokens ? p.pre_in[t * kMhcStreams + c] : 0.0f;
      }
    }
  }

  // At a tile's first group (item % kTcGroups == 0): `pre` takes the tile's weights from
  // `pre_next`, which loads the next tile's (one tile ahead, so the load's latency runs under the
  // tile's groups).
  __device__ __forceinline__ void AdvancePre(int64_t item, int64_t items,
                                             float (&pre)[2][kMhcStreams],
                                             float (&pre_next)[2][kMhcStreams]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int c = 0; c < kMhcStreams; ++c) pre[r][c] = pre_next[r][c];
    }
    if (item + kTcGroups < items) LoadPre(TileOf(item + kTcGroups), pre_next);
  }

  // The 4 chunks of group j: products, Σx², and (kCollapse) the collapse of these 8 dims.
  __device__ __forceinline__ void Group(const XGroup& x, int j, TcTileState& s, int64_t tile,
                                        const float (&pre)[2][kMhcStreams]) const {
#pragma unroll
    for (int c = 0; c < kMhcStreams; ++c) {
      const int chunk = kMhcStreams * j + c;
      const uint32_t(&h0)[4] = x.q[c][0];  // dims 8q + 0..3 of tokens g, g + 8
      const uint32_t(&h1)[4] = x.q[c][1];  // dims 8q + 4..7
#pragma unroll
      for (int nt = 0; nt < kTcNTiles; ++nt) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        // Smallest piece first, so the chain's truncations are relative to the growing sum.
#pragma unroll
        for (int pc = kTcPieces - 1; pc >= 0; --pc) {
          const uint4 f = s_frag[FragIndex(chunk, nt, pc, lane)];
          MmaBf16(d, h0[0], h0[1], h0[2], h0[3], f.x, f.y);  // half 0: dims 8q + 0..3
          MmaBf16(d, h1[0], h1[1], h1[2], h1[3], f.z, f.w);  // half 1: dims 8q + 4..7
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) s.acc[nt][k] = AddRn(s.acc[nt][k], d[k]);
      }
      SumSquares(x, c, s);
    }
    if constexpr (kCollapse) Collapse(x, j, tile, pre);
  }

  // Σx² of chunk c's words, per row an fp32 FMA chain in word order (every body's order).
  __device__ __forceinline__ void SumSquares(const XGroup& x, int c, TcTileState& s) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t w = XWord(x, c, r, k);
        const float lo = Bf16ToF32(w & 0xFFFFu);
        const float hi = Bf16ToF32(w >> 16);
        s.sq[r] = FmaRn(lo, lo, s.sq[r]);
        s.sq[r] = FmaRn(hi, hi, s.sq[r]);
      }
    }
  }

  // HcPre's collapse of group j's 8 dims of tokens g, g + 8 by `pre`, stored to p.collapsed.
  __device__ __forceinline__ void Collapse(const XGroup& x, int j, int64_t tile,
                                           const float (&pre)[2][kMhcStreams]) const {
    const int64_t d = d0 + kTcChunkDims * j + 8 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t t = tile * mhc_tc::kTileTokens + lane / 4 + 8 * r;
      uint32_t out[4];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        // HcPre's order: p0*x0, then + p1*x1, + p2*x2, + p3*x3, each rounded.
        float v = 0.0f;
#pragma unroll
        for (int c = 0; c < kMhcStreams; ++c) {
          const uint32_t w = XWord(x, c, r, k / 2);
          const float xv = Bf16ToF32(k % 2 == 0 ? (w & 0xFFFFu) : (w >> 16));
          const float term = MulRn(pre[r][c], xv);
          v = c == 0 ? term : AddRn(v, term);
        }
        const uint32_t bits = F32ToBf16(v);
        out[k / 2] = k % 2 == 0 ? bits : (out[k / 2] | (bits << 16));
      }
      if (t < p.tokens && d < p.dim) {
        uint16_t* dst = p.collapsed + t * p.collapsed_stride + d;
        if (coll_vec) {
          *reinterpret_cast<uint4*>(dst) = make_uint4(out[0], out[1], out[2], out[3]);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            if (d + k < p.dim) dst[k] = static_cast<uint16_t>(out[k / 2] >> (16 * (k % 2)));
          }
        }
      }
    }
  }

  // Writes the unit's 24 partial dot products and Σx² per token, then clears the state.
  __device__ __forceinline__ void Store(int64_t tile, TcTileState& s) const {
    const int64_t tokens = p.tokens;
    const int g = lane / 4;
    const int q = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t t = tile * mhc_tc::kTileTokens + g + 8 * r;
      // Σx² of the row: (q0 + q1) + (q2 + q3); fp32 addition commutes, so all 4 lanes agree.
      float v = AddRn(s.sq[r], __shfl_xor_sync(0xFFFFFFFFu, s.sq[r], 1));
      v = AddRn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
      if (t < tokens) {
#pragma unroll
        for (int nt = 0; nt < kTcNTiles; ++nt) {
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            slice_ws[(8 * nt + 2 * q + k) * tokens + t] = s.acc[nt][2 * r + k];
          }
        }
        if (q == 0) slice_ws[kMhcMixes * tokens + t] = v;
      }
    }
    s.Clear();
  }

  // The warp's units of one segment: `items` = 8 groups per unit, X kBuffers groups deep.
  __device__ __forceinline__ void Run(int64_t units) const {
    const int64_t items = units * kTcGroups;
    if (items == 0) return;
    XGroup buf[kBuffers];
#pragma unroll
    for (int k = 0; k < kBuffers; ++k) {
      if (k < items) Load(k, buf[k]);
    }
    float pre[2][kMhcStreams] = {};
    float pre_next[2][kMhcStreams] = {};
    if constexpr (kCollapse) LoadPre(TileOf(0), pre_next);
    TcTileState s;
    s.Clear();
#pragma unroll 1
    for (int64_t i0 = 0; i0 < items; i0 += kBuffers) {
#pragma unroll
      for (int k = 0; k < kBuffers; ++k) {
        const int64_t item = i0 + k;
        if (item < items) {  // warp-uniform
          const int j = static_cast<int>(item % kTcGroups);
          const int64_t tile = TileOf(item);
          if constexpr (kCollapse) {
            if (j == 0) AdvancePre(item, items, pre, pre_next);
          }
          Group(buf[k], j, s, tile, pre);
          if (item + kBuffers < items) Load(item + kBuffers, buf[k]);
          if (j == kTcGroups - 1) Store(tile, s);
        }
      }
    }
  }
};

// Grid: mhc_tc::BlocksFor(units) blocks of TcThreads(kWide) threads, kTcSmemBytes of dynamic
// shared memory, one block per SM. kVec: D % 8 == 0 and X rows 16-byte aligned. kFn: how fn's
// fragments are staged (kFnScalar / kFnVector / kFnPrepared).
template <bool kWide, bool kVec, int kFn, bool kCollapse>
__global__ void __launch_bounds__(TcThreads(kWide), 1)
    MixesPartialTcKernel(MhcMixesParams p, float* __restrict__ workspace, bool coll_vec) {
  constexpr int kWarps = mhc_tc::WarpsOf(kWide);
  constexpr int kBuffers = TcBuffers(kWide);
  extern __shared__ uint4 s_frag[];
  const int64_t tiles = mhc_tc::Tiles(p.tokens);
  const int64_t units = mhc_tc::Units(p.tokens, p.dim);
  const int64_t end = mhc_tc::BlockUnitBegin(units, gridDim.x, int64_t{blockIdx.x} + 1);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t u = mhc_tc::BlockUnitBegin(units, gridDim.x, blockIdx.x); u < end;) {
    const int64_t slice = u / tiles;
    const int64_t seg_end = (slice + 1) * tiles < end ? (slice + 1) * tiles : end;
    const int64_t d0 = slice * kMhcMixesSliceDims;
    __syncthreads();  // the previous segment's fragments are no longer read
    StageFn<kWarps * 32, kFn>(p, d0, s_frag);
    __syncthreads();
    const TcWarp<kWarps, kBuffers, kVec, kCollapse> w{
        p,
        s_frag,
        workspace + slice * (kMhcMixes + 1) * p.tokens,
        d0,
        u - slice * tiles + warp,
        coll_vec,
        lane};
    w.Run(mhc_tc::WarpUnits(u, seg_end, warp, kWarps));
    u = seg_end;
  }
}

// The per-token tail after the slice sums: `dot` (shared memory, this half-warp's token) holds
// the 24 dot products and Σx² of token t. Lane e of the half (e = lane % 16) owns comb element e.
// Every lane of the warp must call it (full-warp shuffles); `valid` false computes without storing.
// Both finish paths (MixesFinishLanesKernel, the small-batch kernel) run exactly this code.
__device__ __forceinline__ void FinishTokenLanes(const MhcMixesParams& p, const float* dot,
                                                 int64_t t, bool valid, int lane) {
  constexpr int kS = kMhcStreams;
  const int e = lane % 16;      // this lane's comb element: row e / 4, column e % 4
  const int first = lane & 16;  // lane 0 of this token's half
  const int row = e / kS;
  const int col = e % kS;
  const float width_f = Int64ToF32(kS * p.dim);
  // MhcMixesCpu: mean = sum / fp32(width) (a division), r = 1 / sqrt(mean + norm_eps).
  const float mean = DivRn(dot[kMhcMixes], width_f);
  const float r = DivRn(1.0f, SqrtRn(AddRn(mean, p.norm_eps)));
  if (valid && p.mixes != nullptr) {
    p.mixes[t * kMhcMixes + e] = MulRn(dot[e], r);
    if (e + 16 < kMhcMixes) p.mixes[t * kMhcMixes + 16 + e] = MulRn(dot[16 + e], r);
  }
  if (valid && e < kS) {
    const float mix = MulRn(dot[e], r);
    p.pre[t * kS + e] = AddRn(Sigmoid(AddRn(MulRn(mix, p.scale[0]), p.base[e])), p.hc_eps);
  } else if (valid && e < 2 * kS) {
    const float mix = MulRn(dot[e], r);
    p.post[t * kS + e - kS] = MulRn(2.0f, Sigmoid(AddRn(MulRn(mix, p.scale[1]), p.base[e])));
  }
  const int k = 2 * kS + e;
  float m = AddRn(MulRn(MulRn(dot[k], r), p.scale[2]), p.base[k]);
  // Round 1: softmax over the row (max-subtracted; std::max's a < b ? b : a), + eps.
  float mx = __shfl_sync(0xFFFFFFFFu, m, first + kS * row);
#pragma unroll
  for (int j = 1; j < kS; ++j) {
    const float v = __shfl_sync(0xFFFFFFFFu, m, first + kS * row + j);
    mx = mx < v ? v : mx;
  }
  const float ex = ExpF(SubRn(m, mx));
  float sum = __shfl_sync(0xFFFFFFFFu, ex, first + kS * row);
#pragma unroll
  for (int j = 1; j < kS; ++j) sum = AddRn(sum, __shfl_sync(0xFFFFFFFFu, ex, first + kS * row + j));
  m = AddRn(DivRn(ex, sum), p.hc_eps);
  // Then column sums; then sinkhorn_iters - 1 rounds of rows, columns. Sums ascend.
  for (int it = 0; it < 2 * p.sinkhorn_iters - 1; ++it) {
    const bool by_rows = it % 2 == 1;
    const int src0 = by_rows ? first + kS * row : first + col;
    const int step = by_rows ? 1 : kS;
    float s = __shfl_sync(0xFFFFFFFFu, m, src0);
#pragma unroll
    for (int j = 1; j < kS; ++j) s = AddRn(s, __shfl_sync(0xFFFFFFFFu, m, src0 + j * step));
    m = DivRn(m, AddRn(s, p.hc_eps));
  }
  if (valid) p.comb[t * kS * kS + e] = m;
}

// 16 lanes per token, two tokens per warp (see the file comment).
__global__ void __launch_bounds__(kTcFinishThreads)
    MixesFinishLanesKernel(MhcMixesParams p, const float* __restrict__ workspace, int64_t slices) {
  constexpr int kWarpsPerBlock = kTcFinishThreads / 32;
  __shared__ float s_dot[kWarpsPerBlock][2][kMhcMixes + 1];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int half = lane / 16;
  const int e = lane % 16;
  const int64_t tokens = p.tokens;
  const int64_t pairs = (tokens + 1) / 2;
  float* dot = s_dot[warp][half];
  for (int64_t pair = int64_t{blockIdx.x} * kWarpsPerBlock + warp; pair < pairs;
       pair += int64_t{gridDim.x} * kWarpsPerBlock) {
    const int64_t t = 2 * pair + half;
    const bool valid = t < tokens;
    const int64_t tr = valid ? t : tokens - 1;  // a spare half computes on a real row
    const bool two = e + 16 <= kMhcMixes;       // lanes 0..8 also sum value 16 + e
    float v0 = workspace[e * tokens + tr];
    float v1 = two ? workspace[(16 + e) * tokens + tr] : 0.0f;
    // The slices in ascending order, loaded kBatch at a time so that their L2 round trips overlap
    // (one at a time they were ~20 dependent trips per token pair).
    constexpr int kBatch = 8;
    for (int64_t s0 = 1; s0 < slices; s0 += kBatch) {
      float a[kBatch];
      float b[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const bool in = s0 + i < slices;
        const float* w = workspace + (in ? s0 + i : 0) * (kMhcMixes + 1) * tokens + tr;
        a[i] = in ? w[e * tokens] : 0.0f;
        b[i] = in && two ? w[(16 + e) * tokens] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        if (s0 + i < slices) {
          v0 = AddRn(v0, a[i]);
          if (two) v1 = AddRn(v1, b[i]);
        }
      }
    }
    __syncwarp();
    dot[e] = v0;
    if (two) dot[16 + e] = v1;
    __syncwarp();
    FinishTokenLanes(p, dot, t, valid, lane);
  }
}

}  // namespace flashserve::kernels::mhc_device
