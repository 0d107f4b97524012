// Counting sort of the (token, rank) slots by expert and the FP8 quantise + gather of x. Device
// code of cuda/moe_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kScatterThreads = 256;
inline constexpr int kGatherThreads = 128;

// Block-wide sum of two int64 values (all threads get the totals). `red` holds 2 × warps values.
__device__ __forceinline__ void BlockSum2(int64_t& a, int64_t& b, int64_t* red) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    a += __shfl_xor_sync(0xFFFFFFFFu, a, off);
    b += __shfl_xor_sync(0xFFFFFFFFu, b, off);
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    red[2 * warp] = a;
    red[2 * warp + 1] = b;
  }
  __syncthreads();
  a = 0;
  b = 0;
  for (int w = 0; w < kScatterThreads / 32; ++w) {
    a += red[2 * w];
    b += red[2 * w + 1];
  }
  __syncthreads();
}

// One block per expert e: exclusive scan of the counts below e (offsets and tile base), the tile
// list entries of e, then a stable scatter of e's slots: the slots are visited in (token, rank)
// order in chunks of the block size, and a slot's rank among e's slots is its block-wide prefix
// count (warp ballots + per-warp totals), so tokens stay ascending inside the expert.
__global__ void __launch_bounds__(kScatterThreads) MoeScatterKernel(MoePermuteParams p) {
  __shared__ int64_t red[2 * (kScatterThreads / 32)];
  __shared__ int32_t warp_count[kScatterThreads / 32];
  const int64_t e = blockIdx.x;
  const int64_t tr = p.tile_rows;
  int64_t rows_below = 0, tiles_below = 0;
  for (int64_t i = threadIdx.x; i < e; i += kScatterThreads) {
    const int64_t c = p.expert_counts[i];
    rows_below += c;
    tiles_below += (c + tr - 1) / tr;
  }
  BlockSum2(rows_below, tiles_below, red);
  const int64_t count = p.expert_counts[e];
  const int64_t my_tiles = (count + tr - 1) / tr;
  if (threadIdx.x == 0) {
    p.offsets[e] = static_cast<int32_t>(rows_below);
    if (e == p.n_experts - 1) {
      p.offsets[e + 1] = static_cast<int32_t>(rows_below + count);
      *p.num_tiles = static_cast<int32_t>(tiles_below + my_tiles);
    }
  }
  for (int64_t i = threadIdx.x; i < my_tiles; i += kScatterThreads) {
    p.tiles[2 * (tiles_below + i)] = static_cast<int32_t>(e);
    p.tiles[2 * (tiles_below + i) + 1] = static_cast<int32_t>(rows_below + i * tr);
  }
  if (count == 0) return;
  const int64_t slots = p.m * p.top_k;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  int64_t found = 0;  // block-uniform
  for (int64_t chunk = 0; chunk < slots && found < count; chunk += kScatterThreads) {
    const int64_t i = chunk + threadIdx.x;
    const bool match = i < slots && p.expert_ids[i] == e;
    const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, match);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = 0, total = 0;
    for (int w = 0; w < kScatterThreads / 32; ++w) {
      before += w < warp ? warp_count[w] : 0;
      total += warp_count[w];
    }
    if (match) {
      const int64_t pos = rows_below + found + before + __popc(ballot & ((1u << lane) - 1u));
      p.slot_token[pos] = static_cast<int32_t>(i / p.top_k);
      p.slot_weight[pos] = p.expert_weights[i];
      p.token_slot[i] = static_cast<int32_t>(pos);
    }
    found += total;
    __syncthreads();  // warp_count is rewritten by the next chunk
  }
}

// Tokens over blocks, 32-value blocks of the row over threads: each x block is quantised once
// and its QDQ values written to the token's top_k slot rows.
__global__ void __launch_bounds__(kGatherThreads) MoeQuantGatherKernel(MoePermuteParams p) {
  const int64_t nb = p.dim / 32;
  for (int64_t t = blockIdx.x; t < p.m; t += gridDim.x) {
    const uint16_t* xrow = p.x + t * p.x_stride;
    for (int64_t blk = threadIdx.x; blk < nb; blk += kGatherThreads) {
      uint32_t x[16];
      const uint4* src = reinterpret_cast<const uint4*>(xrow + blk * 32);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 v = src[q];
        x[4 * q] = v.x;
        x[4 * q + 1] = v.y;
        x[4 * q + 2] = v.z;
        x[4 * q + 3] = v.w;
      }
      uint32_t sb, codes[8], qdq[16];
      QuantizeBlock32(x, &sb, codes, qdq);
      if (p.x_codes != nullptr) {
        uint4* dst = reinterpret_cast<uint4*>(p.x_codes + t * p.dim + blk * 32);
        dst[0] = make_uint4(codes[0], codes[1], codes[2], codes[3]);
        dst[1] = make_uint4(codes[4], codes[5], codes[6], codes[7]);
      }
      if (p.x_scales != nullptr) p.x_scales[t * nb + blk] = static_cast<uint8_t>(sb);
      for (int64_t j = 0; j < p.top_k; ++j) {
        const int64_t row = p.token_slot[t * p.top_k + j];
        uint4* dst = reinterpret_cast<uint4*>(p.xg + row * p.dim + blk * 32);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          dst[q] = make_uint4(qdq[4 * q], qdq[4 * q + 1], qdq[4 * q + 2], qdq[4 * q + 3]);
        }
      }
    }
  }
}

}  // namespace flashserve::kernels::moe_device
