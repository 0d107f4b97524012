// The weight-streaming expert GEMM (tile_rows 8; README.md "CUDA", "Weight-streaming GEMM"): for
// few slot rows per expert the operand roles of moe_gemm.cuh are swapped. The FP4 weights are the
// mma A operand (m16: 16 weight rows × k16), decoded straight from registers loaded with 16-byte
// ld.global.nc; the (up to 8) slot rows of a tile are the B operand (n8), read from shared memory.
// No m16 tile is mostly empty, nothing of the weights passes through shared memory, and a CTA
// needs no barrier inside its K loop (32-row tiles: one pair per K chunk of the activations).
// Device code of cuda/moe_stream_launch.cu only.
//
// Work split: a CTA of 8 warps (16 for 16- and 32-row tiles) owns one tile (expert e, <= 8·kN8
// slot rows, the permute stage's tile list with tile_rows 8·kN8, walked grid-stride over
// gridDim.y) and kRows weight rows (blockIdx.x). kN8 = 2 / 4 (tile_rows 16 / 32,
// MoeCudaGemm::kStream16 / kStream32): every decoded A fragment feeds two / four n8 mma, one per
// 8 slot rows, so each weight word decoded serves that many more slot rows; 32 rows of D do not
// fit shared memory, so kN8 = 4 stages them a K chunk at a time (StreamChunkK).
// Warp w owns kRT m16 row tiles; for the up projection an m16 tile is 8 w1 (gate) rows and the
// same 8 rows of w3 (up), so the SwiGLU pairs meet in one thread (accumulators c0/c2, c1/c3).
// K is streamed in units of kG·128: in a unit, the quad lane tig holds the kG consecutive 32-K
// blocks kG·tig .. kG·tig + kG - 1 of its two rows (grp and grp + 8): kG 16-byte loads per row,
// the quad reads kG·64 contiguous bytes of every row (a whole 128-byte line at kG = 2), and its
// scale bytes are one 8- or 16-bit load per row.
//
// Operand order: word s of a block (logical columns 8s .. 8s+7) decodes into the pairs (8s + j,
// 8s + j + 4), j < 4 (DecodeFp4x8); the activation rows are stored in the matching order
// (MoeOperandColumn), so one 16-byte shared load at stored column 32·block + 8s gives the same
// four pairs of the slot row. mma k slots (2tig, 2tig+1 | 2tig+8, 2tig+9) of a thread then carry
// pairs (0 | 1) (first mma) and (2 | 3) (second) of its own block; the slot rows' B fragments of
// quad lane tig come from the same block, so each mma sums a permutation of real products (its
// 16 k slots span 4 blocks, one per quad lane: fine, every product is an exact bf16 product and
// only the fp32 summation order is the hardware's, as in moe_gemm.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/stream_load.cuh"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels::moe_device {

namespace moe_cuda_internal = ::flashserve::kernels::moe_cuda_internal;

template <int kRT, bool kUp, int kG, int kN8 = 1>
struct StreamShape {
  static_assert(kRT == 1 || kRT == 2);
  static_assert(kG == 1 || kG == 2);
  static_assert(kN8 == 1 || kN8 == 2 || kN8 == 4);
  static constexpr int kSlots = 8 * kN8;  // slot rows per tile: kN8 mma n8 tiles
  // Warps per CTA: 8, and 16 for 16- and 32-slot tiles, whose activation rows (16 × K bf16: 160
  // KB at D 5120) leave room for one CTA per SM; one CTA of 8 warps streamed weights at 2.0–2.4
  // TB/s against the 8-slot kernel's 3.0 (two CTAs of 8 warps).
  static constexpr int kWarps = kN8 >= 2 ? 16 : 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kRT * kWarps;      // weight rows per CTA
  static constexpr int kBN = kUp ? kRows / 2 : kRows;  // output columns per CTA
  static constexpr int kUnitK = 128 * kG;              // K per unit
  static constexpr int kRowUnitBytes = kUnitK / 2;     // FP4 bytes of one row per unit
  // CTAs per SM the kernel is compiled for: either way 16 warps of <= 128 registers.
  static constexpr int kMinBlocks = kN8 >= 2 ? 1 : 2;
  // Register ring depth (units loaded ahead + the one being computed): 4 for one row tile per
  // warp (3 units, 6 KB per warp in flight), 2 for two (4 KB per warp; registers). Twice as many
  // 128-K units (the same registers, more bytes in flight) was slower at every batch (README.md).
  static constexpr int kDepth = kRT == 1 ? 4 : 2;
  static constexpr int kTilePitch = kBN + 8;  // bf16 elements per row of the SwiGLU tile
  static constexpr int kTileBytes = kUp ? kSlots * kTilePitch * 2 : 0;
  static_assert(!kUp || kBN % 32 == 0, "the quantiser needs whole 32-blocks per CTA");
};

// The activation rows of a tile are staged in shared memory whole (8- and 16-row tiles) or, for
// 32-row tiles, a K chunk of MoeStreamChunkK columns at a time (moe_cuda_internal.h, host-tested).
__host__ __device__ constexpr int64_t StreamChunkK(int64_t k, int n8, int unit_k) {
  return moe_cuda_internal::MoeStreamChunkK(k, n8, unit_k);
}
inline constexpr int64_t kStreamActBytes = moe_cuda_internal::kMoeStreamActBytes;

// Shared-memory bytes of a tile's activation chunk: 8·n8 rows of kc bf16 (row pitch 2·kc, a
// multiple of 256 bytes), plus nothing else (the up epilogue tile overlays them).
__host__ __device__ constexpr int64_t StreamSmemBytes(int64_t k, int n8, int unit_k) {
  return 8 * n8 * 2 * StreamChunkK(k, n8, unit_k);
}

// The 16-byte chunk c of activation row t is stored at chunk StreamSwizzle(c, t)
// (moe_cuda_internal.h's MoeStreamSwizzle: a bijection per 8 chunks; the 8 chunks a quarter warp
// reads fall into 8 distinct bank quads for kG = 1 and 2, tested on the host).
__device__ __forceinline__ uint32_t StreamSwizzle(uint32_t c, uint32_t t) {
  return moe_cuda_internal::MoeStreamSwizzle(c, t);
}

using cuda_common::LoadStream16;  // kernels/common/stream_load.cuh

template <int kG>
__device__ __forceinline__ uint32_t LoadScaleBytes(const uint8_t* p) {
  if constexpr (kG == 2) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
  } else {
    return __ldg(reinterpret_cast<const unsigned char*>(p));
  }
}

// One unit of one warp's rows in registers: kG 16-byte chunks per row (h = 0: row grp, 1: row
// grp + 8) and per row tile, and the kG scale bytes of each row (low byte first).
template <int kRT, int kG>
struct StreamUnit {
  uint4 q[kRT][2][kG];
  uint32_t s[kRT][2];
};

// The thread's weight and scale reads for the current unit (advanced by Load): the tile's expert's
// codes and scales of each projection, and per row tile a 32-bit byte offset of the thread's row
// grp into them (an expert's projection is N·K/2 bytes: at most 32 MiB with K <= 8192). Row grp
// + 8 (down) is h_off = 8·K/2 bytes on. A row's scale bytes are at offset / 16 in the scales (K/2
// code bytes per K/32 scale bytes, 16·kG·tig per kG·tig, a unit's 64·kG per 4·kG), so one offset
// serves both: fewer live registers than a pointer per row and array.
template <int kRT, int kG, bool kUp>
struct StreamCursor {
  const uint8_t* w[kUp ? 2 : 1];  // up: w1 (h = 0) and w3 (h = 1) rows; down: w2
  const uint8_t* s[kUp ? 2 : 1];
  uint32_t off[kRT];
  uint32_t h_off;  // down: row grp + 8; up: 0 (h selects the projection instead)

  __device__ __forceinline__ void Load(StreamUnit<kRT, kG>& u) {
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int p = kUp ? h : 0;
        const uint32_t o = off[rt] + (kUp || h == 0 ? 0u : h_off);
#pragma unroll
        for (int b = 0; b < kG; ++b) u.q[rt][h][b] = LoadStream16(w[p] + o + 16 * b);
        u.s[rt][h] = LoadScaleBytes<kG>(s[p] + (o >> 4));
      }
      off[rt] += 64 * kG;
    }
  }
};

__device__ __forceinline__ uint32_t Word(const uint4& v, int s) {
  return s == 0 ? v.x : (s == 1 ? v.y : (s == 2 ? v.z : v.w));
}

// acc[n][rt] += the unit's products. `act` is the byte offset in shared memory of this lane's
// slot row's first chunk of the unit after the swizzle's XOR (chunk j of the thread's kG blocks
// is at act ^ (16·j)); n8 tile n reads the row 8·n below it, `n8_stride` bytes on (rows t and
// t + 8 share the swizzle: it depends on the row's parity only). kWide: a scale byte of the
// warp's rows is above 128 (DecodeFp4x8Wide).
template <int kRT, int kG, int kN8, bool kWide>
__device__ __forceinline__ void StreamComputeUnit(const StreamUnit<kRT, kG>& u,
                                                  const unsigned char* smem, uint32_t act,
                                                  uint32_t n8_stride, int n8_used,
                                                  float (&acc)[kN8][kRT][4]) {
#pragma unroll
  for (int b = 0; b < kG; ++b) {
    uint32_t m1[kRT][2];
    if constexpr (!kWide) {
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) m1[rt][h] = ScaleMultiplier(u.s[rt][h] + 0x7E7E7E7Eu, b);
      }
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint4 x[kN8];
#pragma unroll
      for (int n = 0; n < kN8; ++n) {
        if (n == 0 || n < n8_used) {  // CTA-uniform: n8 tiles past the tile's rows are skipped
          x[n] =
              LoadShared16(smem + n * n8_stride + (act ^ static_cast<uint32_t>(16 * (4 * b + s))));
        }
      }
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
        uint32_t p[4], q[4];
        if constexpr (kWide) {
          DecodeFp4x8Wide(Word(u.q[rt][0][b], s), (u.s[rt][0] >> (8 * b)) & 0xFFu, p);
          DecodeFp4x8Wide(Word(u.q[rt][1][b], s), (u.s[rt][1] >> (8 * b)) & 0xFFu, q);
        } else {
          DecodeFp4x8(Word(u.q[rt][0][b], s), m1[rt][0], p);
          DecodeFp4x8(Word(u.q[rt][1][b], s), m1[rt][1], q);
        }
#pragma unroll
        for (int n = 0; n < kN8; ++n) {
          if (n == 0 || n < n8_used) {
            MmaBf16(acc[n][rt], p[0], q[0], p[1], q[1], x[n].x, x[n].y);
            MmaBf16(acc[n][rt], p[2], q[2], p[3], q[3], x[n].z, x[n].w);
          }
        }
      }
    }
  }
}

template <int kRT, int kG, int kN8>
__device__ __forceinline__ void StreamCompute(const StreamUnit<kRT, kG>& u,
                                              const unsigned char* smem, uint32_t act,
                                              uint32_t n8_stride, int n8_used,
                                              float (&acc)[kN8][kRT][4]) {
  bool wide = false;
#pragma unroll
  for (int rt = 0; rt < kRT; ++rt) wide |= HasWideScale(u.s[rt][0]) || HasWideScale(u.s[rt][1]);
  // Warp-uniform: mma.sync.aligned must be executed by all lanes together.
  if (!__any_sync(0xFFFFFFFFu, wide)) {
    StreamComputeUnit<kRT, kG, kN8, false>(u, smem, act, n8_stride, n8_used, acc);
  } else {
    StreamComputeUnit<kRT, kG, kN8, true>(u, smem, act, n8_stride, n8_used, acc);
  }
}

// The FP8 quantiser over a CTA's SwiGLU tile (`rows` slot rows × blocks·32 columns, `pitch`
// elements per row), StoreUp's second half: a warp per 32-column block, a lane per value
// (StoreQuantizedBlock32Warp, the same bytes as QuantizeBlock32). A tile has few rows at the batch
// sizes this GEMM serves (1–2 slot rows per expert: 2–8 blocks per CTA), so a thread per block
// left most of the CTA waiting at the tile's last barrier while a few threads encoded 32 values
// each. Not inlined: ptxas spilled in the main loop at the 128-register cap otherwise.
// Arguments by value: a reference to the kernel's GemmArgs would make it copy its parameters to
// the stack.
static __device__ __noinline__ void StreamQuantizeRows(uint16_t* out, uint16_t* act, int64_t n,
                                                       const uint16_t* tile, int pitch, int blocks,
                                                       int64_t n0, int64_t row0, int rows,
                                                       int warps) {
  const int lane = threadIdx.x % 32;
  for (int u = threadIdx.x / 32; u < rows * blocks; u += warps) {  // warp-uniform
    const int rl = u / blocks, cb = u % blocks;
    const int64_t r = row0 + rl;
    StoreQuantizedBlock32Warp(tile + rl * pitch + cb * 32, act, out, r * n + n0 + cb * 32, lane);
  }
}

// Up projection epilogue: SwiGLU (the tiled GEMM's SwiGluBf16) into a bf16 tile in shared memory
// (overlaying the activations: the caller has synchronised), then the FP8 quantiser per 32
// columns of each slot row (StoreUp's second half, same code).
template <int kRT, int kG, int kN8>
__device__ __forceinline__ void StreamStoreUp(const GemmArgs& g, const float (&acc)[kN8][kRT][4],
                                              unsigned char* smem, int64_t n0, int64_t row0,
                                              int rows) {
  // Columns past N (the last CTA column of a partial width) are in the tile but not quantised.
  using S = StreamShape<kRT, true, kG, kN8>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
  uint16_t* tile = reinterpret_cast<uint16_t*>(smem);
#pragma unroll
  for (int n = 0; n < kN8; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int t = 8 * n + 2 * tig + c;
      if (t >= rows) continue;
      const float w = g.slot_weight[row0 + t];
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
        const int col = (warp * kRT + rt) * 8 + grp;
        const uint32_t a = SwiGluBf16(acc[n][rt][c], acc[n][rt][2 + c], g.swiglu_limit, w, true);
        tile[t * S::kTilePitch + col] = static_cast<uint16_t>(a);
      }
    }
  }
  __syncthreads();
  const int blocks = static_cast<int>(min(int64_t{S::kBN}, g.n - n0) / 32);
  StreamQuantizeRows(g.out, g.act, g.n, tile, S::kTilePitch, blocks, n0, row0, rows, S::kWarps);
}

// Down projection epilogue: ye = bf16(acc), c0/c1 the row grp column, c2/c3 the row grp + 8 one.
template <int kRT, int kN8>
__device__ __forceinline__ void StreamStoreDown(const GemmArgs& g, const float (&acc)[kN8][kRT][4],
                                                int64_t n0, int64_t row0, int rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
#pragma unroll
  for (int n = 0; n < kN8; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int t = 8 * n + 2 * tig + c;
      if (t >= rows) continue;
      uint16_t* out = g.out + (row0 + t) * g.n + n0;
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
        const int col = (warp * kRT + rt) * 16 + grp;
        out[col] = static_cast<uint16_t>(exact::F32ToBf16(acc[n][rt][c]));
        out[col + 8] = static_cast<uint16_t>(exact::F32ToBf16(acc[n][rt][2 + c]));
      }
    }
  }
}

// Copies K chunk q (columns q·kc .. min(K, (q + 1)·kc)) of the tile's activation rows into shared
// memory (row t at t·2·kc bytes, operand order, swizzled 16-byte chunks) and commits the group.
template <int kThreads>
__device__ __forceinline__ void StreamLoadActChunk(const GemmArgs& g, int64_t row0, int rows,
                                                   int64_t q, int64_t kc, unsigned char* smem) {
  const int64_t k0 = q * kc;
  const int chunks = static_cast<int>(min(kc, g.k - k0) / 8);
  for (int t = 0; t < rows; ++t) {
    const uint16_t* src = ARow(g, row0 + t) + k0;
    unsigned char* dst = smem + t * 2 * kc;
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      CpAsync16(dst + 16 * StreamSwizzle(static_cast<uint32_t>(c), static_cast<uint32_t>(t)),
                src + 8 * c, true);
    }
  }
  CpAsyncCommit();
}

template <int kRT, bool kUp, int kG, int kN8>
__global__ void __launch_bounds__((StreamShape<kRT, kUp, kG, kN8>::kThreads),
                                  (StreamShape<kRT, kUp, kG, kN8>::kMinBlocks))
    MoeExpertStreamKernel(GemmArgs g) {
  using S = StreamShape<kRT, kUp, kG, kN8>;
  extern __shared__ __align__(128) unsigned char stream_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
  const int64_t n0 = int64_t{blockIdx.x} * S::kBN;
  const int num_tiles = *g.num_tiles;
  // The last CTA column may reach past N (a multiple of 128, so whole warps): those warps load
  // and compute nothing, store nothing, and only take part in the barriers.
  const bool active = n0 + warp * kRT * (kUp ? 8 : 16) < g.n;  // warp-uniform
  // 32-row tiles stage the activations in K chunks, with barriers that every warp meets: there
  // every warp walks the units and only active ones compute; otherwise inactive warps walk none.
  constexpr bool kChunked = kN8 == 4;
  const int units = kChunked || active ? static_cast<int>(g.k / S::kUnitK) : 0;
  const int64_t kc = StreamChunkK(g.k, kN8, S::kUnitK);  // K per activation chunk
  const int chunk_units = static_cast<int>(kc / S::kUnitK);
  const int64_t row_bytes = g.k / 2, scale_bytes = g.k / 32;
  for (int tile = blockIdx.y; tile < num_tiles; tile += gridDim.y) {
    const int64_t e = g.tiles[2 * tile];
    const int64_t row0 = g.tiles[2 * tile + 1];
    const int rows = static_cast<int>(min(row0 + S::kSlots, int64_t{g.offsets[e + 1]}) - row0);
    const int n8_used = (rows + 7) / 8;

    // Weight cursors, then the first units in flight before the activations are waited for.
    StreamCursor<kRT, kG, kUp> cur;
    const int64_t expert_rows = e * g.n;
#pragma unroll
    for (int p = 0; p < (kUp ? 2 : 1); ++p) {
      cur.w[p] = (p == 0 ? g.w : g.w_up) + expert_rows * row_bytes;
      cur.s[p] = (p == 0 ? g.w_scale : g.w_up_scale) + expert_rows * scale_bytes;
    }
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt) {
      // Up: row grp of the 8 gate (w1) and the same 8 up (w3) rows; down: rows grp, grp + 8.
      const int64_t nrow = n0 + (warp * kRT + rt) * (kUp ? 8 : 16) + grp;
      cur.off[rt] = static_cast<uint32_t>(nrow * row_bytes + 16 * kG * tig);
    }
    cur.h_off = static_cast<uint32_t>(8 * row_bytes);
    StreamUnit<kRT, kG> ring[S::kDepth];
#pragma unroll
    for (int i = 0; i < S::kDepth; ++i) {
      if (active && i < units) cur.Load(ring[i]);
    }

    // The first K chunk of the tile's activation rows.
    StreamLoadActChunk<S::kThreads>(g, row0, rows, 0, kc, stream_smem);
    CpAsyncWait<0>();
    __syncthreads();

    float acc[kN8][kRT][4];
#pragma unroll
    for (int n = 0; n < kN8; ++n) {
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[n][rt][q] = 0.f;
      }
    }
    // Lane (grp, tig) reads slot row grp, and grp + 8·n for n8 tile n (rows past the tile's hold
    // stale data: they reach only output columns that are never stored). Its first 16-byte chunk
    // of unit u (the uc-th of its K chunk) is c0 = 4·kG·(4·uc + tig); the swizzle's XOR term
    // depends on bits 3 and 4 only, which adding the chunk index j < 4·kG does not change (c0's
    // low 3 bits are 0, or 4 with kG = 1 where j < 4), so chunk j sits at StreamSwizzle(c0) ^ j.
    const uint32_t row_base = static_cast<uint32_t>(grp * 2 * kc);
    const uint32_t n8_stride = static_cast<uint32_t>(8 * 2 * kc);
    int uc = 0;  // unit within the current K chunk (every warp walks every unit: the barriers)
    for (int u0 = 0; u0 < units; u0 += S::kDepth) {
#pragma unroll
      for (int i = 0; i < S::kDepth; ++i) {
        const int u = u0 + i;
        if (u < units) {
          if constexpr (kChunked) {
            if (uc == chunk_units) {  // CTA-uniform: the next K chunk of the activations
              __syncthreads();        // every warp is done with this one
              StreamLoadActChunk<S::kThreads>(g, row0, rows, u / chunk_units, kc, stream_smem);
              CpAsyncWait<0>();
              __syncthreads();
              uc = 0;
            }
          }
          if (!kChunked || active) {
            const int uk = kChunked ? uc : u;
            const uint32_t c0 = static_cast<uint32_t>(4 * kG * (4 * uk + tig));
            const uint32_t act = row_base + 16 * StreamSwizzle(c0, static_cast<uint32_t>(grp));
            StreamCompute<kRT, kG, kN8>(ring[i], stream_smem, act, n8_stride, n8_used, acc);
            if (u + S::kDepth < units) cur.Load(ring[i]);
          }
          if constexpr (kChunked) ++uc;
        }
      }
    }
    __syncthreads();  // every warp is done with the activations (the up tile overlays them)
    if constexpr (kUp) {
      StreamStoreUp<kRT, kG, kN8>(g, acc, stream_smem, n0, row0, rows);
    } else {
      if (active) StreamStoreDown<kRT, kN8>(g, acc, n0, row0, rows);
    }
    __syncthreads();  // the next tile refills the shared memory
  }
}

}  // namespace flashserve::kernels::moe_device
