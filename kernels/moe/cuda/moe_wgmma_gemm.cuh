// The wgmma expert GEMM (tile_rows 128, MoeCudaGemm::kWgmma): the large-batch (prefill) shape of
// the up and down stages. Device code of cuda/moe_launch.cu only (sm_90a). README.md "CUDA"
// documents the design.
//
// Work split: a CTA of two warpgroups (256 threads, all of them also load and decode) owns one
// tile of up to 128 slot rows of one expert (the permute stage's tile list, walked grid-stride
// over gridDim.y) and 256 weight rows (blockIdx.x): for the up projection the 128 gate (w1) rows
// and the 128 up (w3) rows of the same 128 output columns, so the SwiGLU pairs are in one thread
// (n8 tiles j and j + 16 of its m64n256 accumulators); for the down projection 256 w2 rows.
// Warpgroup g multiplies slot rows 64g .. 64g+63 by all 256 weight rows (128 fp32 accumulators
// per thread) and skips the wgmma when none of its rows is inside the expert (a tile of <= 64
// rows costs one warpgroup's tensor work, as the tiled GEMM's valid_mt does).
//
// K advances kWgBK = 64 per stage. Shared memory (base rounded up to 1024 bytes, the swizzle
// atom): an A ring of kWgStages stages [128 rows][64 bf16] in the 128-byte swizzle (K-major,
// cp.async); a raw ring of kWgRawSlots pairs of stages, [256 rows][64 bytes] of FP4 codes
// (WgRawOffset) and [256 rows][4 bytes] of scale words (the pair's 4 UE8M0 bytes), cp.async;
// two decoded B slots [256 rows][64 bf16] in the 128-byte swizzle.
// Pipeline (every thread): stage i + kWgAhead is loaded (with its pair when even) while stage i
// is decoded and multiplied; a warpgroup keeps at most two wgmma groups in flight (wait_group 1),
// so at the first barrier of iteration i every warpgroup's wgmma of stage i - 2 has finished and
// its A slot and its B slot (i % 2) may be rewritten.
//   iteration i: cp.async.wait_group (stage i landed), fence.proxy.async, barrier; issue stage
//   i + kWgAhead; decode stage i's codes × scales into B slot i % 2, fence.proxy.async,
//   barrier; wgmma.fence, 4 × m64n256k16 (k16 steps ascending), commit, wait_group 1.
// The decode of stage i overlaps the tensor cores' work on stage i - 1.
//
// Operand order: the A rows (xg, ag) are stored in operand order (MoeOperandColumn), and one
// 32-bit word of FP4 codes decoded by DecodeFp4x8 gives the same 8 positions (pairs (j, j + 4))
// as one 16-byte chunk: B chunk 4b + t of a row's 64-wide stage = word t of its 32-wide block b.
// The K positions of A and B are then the same permutation of K, which leaves every dot product
// unchanged. Each weight is code × 2^(scale - 127) exactly in bf16, so no per-block promotion is
// needed: the fp32 accumulators run over all of K (only the summation order differs from the
// CPU's, as in the tiled GEMM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/wgmma.cuh"
#include "kernels/moe/cuda/moe_device.cuh"
#include "kernels/moe/cuda/moe_gemm.cuh"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels::moe_device {

inline constexpr int kWgThreads = 256;  // two warpgroups
inline constexpr int kWgBM = 128;       // slot rows per tile (kMoeCudaWgmmaTileRows)
inline constexpr int kWgNB = 256;       // weight rows per CTA
inline constexpr int kWgBK = 64;        // one 128-byte swizzled bf16 row per operand row
inline constexpr int kWgStages = 6;     // A ring depth; loads run kWgAhead stages ahead
inline constexpr int kWgAhead = kWgStages - 2;
// The FP4 codes and scales come in pairs of stages ("pairs": 128 K, 64 bytes of every weight row
// per request instead of 32, and the pair's 4 scale bytes are one aligned word) through a ring
// of kWgRawSlots pairs: pair q is issued with stage 2q at iteration 2q - kWgAhead and decoded at
// iterations 2q, 2q + 1, so pairs q, q + 1, q + 2 can be alive at once.
inline constexpr int kWgRawSlots = 3;
inline constexpr uint32_t kWgAStage = kWgBM * 128;
inline constexpr uint32_t kWgBSlot = kWgNB * 128;
inline constexpr uint32_t kWgRawPair = kWgNB * kWgBK;  // 64 code bytes per row
inline constexpr uint32_t kWgScalePair = kWgNB * 4;
inline constexpr uint32_t kWgAOff = 0;
inline constexpr uint32_t kWgBOff = kWgAOff + kWgStages * kWgAStage;
inline constexpr uint32_t kWgRawOff = kWgBOff + 2 * kWgBSlot;
inline constexpr uint32_t kWgScaleOff = kWgRawOff + kWgRawSlots * kWgRawPair;
inline constexpr uint32_t kWgRingEnd = kWgScaleOff + kWgRawSlots * kWgScalePair;
static_assert(kWgAhead % 2 == 0, "pairs are issued with their even stage");

// Byte offset of 16-byte code chunk c (0..3) of weight row r in a raw pair (the chunk index XORed
// with bit 1 of the row: conflict-free decode reads; moe_cuda_internal.h, tested on the host).
__device__ __forceinline__ uint32_t WgRawOffset(uint32_t r, uint32_t c) {
  return moe_cuda_internal::MoeWgmmaRawOffset(r, c);
}
inline constexpr uint32_t kWgKMajorLbo = 16;    // unused by K-major swizzled layouts (encodes 1)
inline constexpr uint32_t kWgKMajorSbo = 1024;  // 8 rows of 128 bytes

template <bool kUp>
struct WgShape {
  static constexpr int kBN = kUp ? kWgNB / 2 : kWgNB;  // output columns per CTA
  static constexpr int kTilePitch = kBN + 8;           // bf16 per row of the SwiGLU tile
  static constexpr uint32_t kTileBytes = kUp ? kWgBM * kTilePitch * 2 : 0;
  static constexpr uint32_t kUsed = kWgRingEnd > kTileBytes ? kWgRingEnd : kTileBytes;
  static constexpr int kSmemBytes = static_cast<int>(kUsed) + 1024;  // + alignment slack
  // FP4 codes + scale bytes of one 64-K stage of one CTA.
  static constexpr int kWeightStageBytes = kWgNB * (kWgBK / 2 + kWgBK / 32);
};
static_assert(WgShape<true>::kSmemBytes <= 227 * 1024 && WgShape<false>::kSmemBytes <= 227 * 1024);

// A chunks per thread and stage: thread t copies chunk t % 8 of tile rows t / 8 + 32·it.
inline constexpr int kWgARowsPerThread = kWgBM * 8 / kWgThreads;

// The thread's A rows for the tile (ARow: by slot, or by token through a_row), null past the
// expert's end; looked up once per tile, not per stage.
__device__ __forceinline__ void WgARows(const GemmArgs& g, int64_t row0, int64_t row_end,
                                        const uint16_t* (&rows)[kWgARowsPerThread]) {
#pragma unroll
  for (int it = 0; it < kWgARowsPerThread; ++it) {
    const int64_t r = row0 + threadIdx.x / 8 + 32 * it;
    rows[it] = r < row_end ? ARow(g, r) + (threadIdx.x % 8) * 8 : nullptr;
  }
}

// Issues the cp.async copies of the A rows of K step kt into A ring slot `slot`. Slot rows past
// the expert's end are zero-filled without a read (they reach only outputs never stored).
__device__ __forceinline__ void WgLoadA(const GemmArgs& g, uint8_t* smem, int slot, int64_t kt,
                                        const uint16_t* const (&a_rows)[kWgARowsPerThread]) {
  const int tid = threadIdx.x;
  uint8_t* a = smem + kWgAOff + slot * kWgAStage;
#pragma unroll
  for (int it = 0; it < kWgARowsPerThread; ++it) {
    const bool valid = a_rows[it] != nullptr;
    const uint16_t* src = valid ? a_rows[it] + kt * kWgBK : g.a;
    CpAsync16(a + wgmma::Sw128Offset(tid / 8 + 32 * it, tid % 8), src, valid);
  }
}

// Issues the cp.async copies of pair q (K steps 2q, 2q + 1: 64 code bytes and the aligned scale
// word of every weight row) into raw slot q % kWgRawSlots. Weight rows past N are zero-filled
// without a read and get no scale word (they reach only output columns never stored).
template <bool kUp>
__device__ __forceinline__ void WgLoadPair(const GemmArgs& g, uint8_t* smem, int64_t q, int64_t e,
                                           int64_t n0) {
  using S = WgShape<kUp>;
  const int tid = threadIdx.x;
  const int slot = static_cast<int>(q % kWgRawSlots);
  uint8_t* raw = smem + kWgRawOff + slot * kWgRawPair;
  // Four consecutive threads take the four chunks of one row: 64 contiguous bytes per row.
#pragma unroll
  for (int it = 0; it < kWgNB * 4 / kWgThreads; ++it) {
    const int i = tid + it * kWgThreads;
    const int r = i / 4, c = i % 4;
    const bool up = kUp && r >= S::kBN;
    const int64_t nrow = n0 + (up ? r - S::kBN : r);
    const bool valid = nrow < g.n;
    const uint8_t* w = up ? g.w_up : g.w;
    const uint8_t* src = valid ? w + (e * g.n + nrow) * (g.k / 2) + q * kWgBK + c * 16 : w;
    CpAsync16(raw + WgRawOffset(r, c), src, valid);
  }
  // Scale bytes 4q .. 4q + 3 of the row (K / 32 is a multiple of 4: the word is aligned).
  const int r = tid;
  const bool up = kUp && r >= S::kBN;
  const int64_t nrow = n0 + (up ? r - S::kBN : r);
  if (nrow < g.n) {
    const uint8_t* src = (up ? g.w_up_scale : g.w_scale) + (e * g.n + nrow) * (g.k / 32) + q * 4;
    CpAsync4(smem + kWgScaleOff + slot * kWgScalePair + r * 4, src);
  }
}

// Decodes K step kt (half kt % 2 of pair kt / 2) into the bf16 B slot at `b`: thread unit
// (r, blk) takes the 16 code bytes of row r's 32-wide block blk of the step and writes chunks
// 4·blk .. 4·blk + 3 of the row. A quarter warp's stores (rows r .. r + 3, both blocks) hit 8
// distinct chunk columns, and so do its code reads (WgRawOffset).
__device__ __forceinline__ void WgDecodeStage(const uint8_t* smem, int64_t kt, uint8_t* b) {
  const int slot = static_cast<int>((kt / 2) % kWgRawSlots);
  const int half = static_cast<int>(kt % 2);
  const uint8_t* raw = smem + kWgRawOff + slot * kWgRawPair;
  const uint8_t* sc = smem + kWgScaleOff + slot * kWgScalePair;
#pragma unroll
  for (int it = 0; it < kWgNB * 2 / kWgThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kWgThreads;
    const int r = i / 2, blk = i % 2;
    const uint4 q = LoadShared16(raw + WgRawOffset(r, 2 * half + blk));
    const uint32_t sb = sc[r * 4 + 2 * half + blk];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      uint32_t v[4];
      DecodeFp4x8Wide(words[t], sb, v);
      *reinterpret_cast<uint4*>(b + wgmma::Sw128Offset(r, 4 * blk + t)) =
          make_uint4(v[0], v[1], v[2], v[3]);
    }
  }
}

// Thread layout of m64n256 (kernels/common/wgmma.cuh): warp w of warpgroup wg holds slot rows
// 64·wg + 16w + lane/4 (+ 8) and, per n8 tile j, weight rows 8j + 2·(lane % 4) + {0, 1}.
__device__ __forceinline__ void WgStoreDown(const GemmArgs& g, const float (&acc)[128], int64_t n0,
                                            int64_t row0, int64_t row_end) {
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kWgNB / 8; ++j) {
    const int64_t col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= g.n) continue;  // N is a multiple of 8: the pair is inside or outside
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + 64 * wg + 16 * warp + lane / 4 + 8 * h;
      if (r >= row_end) continue;
      const uint32_t v = exact::F32x2ToBf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      *reinterpret_cast<uint32_t*>(g.out + r * g.n + col) = v;
    }
  }
}

// Up projection: SwiGLU (gate tile j, up tile j + 16) with the slot's weight into a bf16 tile in
// shared memory (the ring is dead), then the FP8 quantiser per 32 columns of each row, as the
// tiled GEMM's StoreUp.
__device__ __forceinline__ void WgStoreUp(const GemmArgs& g, const float (&acc)[128], uint8_t* smem,
                                          int64_t n0, int64_t row0, int64_t row_end,
                                          bool wg_active) {
  using S = WgShape<true>;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  uint16_t* tile = reinterpret_cast<uint16_t*>(smem);
  if (wg_active) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rl = 64 * wg + 16 * warp + lane / 4 + 8 * h;
      const bool valid = row0 + rl < row_end;
      const float w = valid ? g.slot_weight[row0 + rl] : 0.f;
#pragma unroll
      for (int j = 0; j < S::kBN / 8; ++j) {
        const int col = 8 * j + 2 * (lane % 4);
        constexpr int kUpTile = S::kBN / 8;
        const uint32_t lo =
            SwiGluBf16(acc[4 * j + 2 * h], acc[4 * (kUpTile + j) + 2 * h], g.swiglu_limit, w, true);
        const uint32_t hi = SwiGluBf16(acc[4 * j + 2 * h + 1], acc[4 * (kUpTile + j) + 2 * h + 1],
                                       g.swiglu_limit, w, true);
        *reinterpret_cast<uint32_t*>(tile + rl * S::kTilePitch + col) = lo | (hi << 16);
      }
    }
  }
  __syncthreads();
  constexpr int kBlocks = S::kBN / 32;
  for (int u = threadIdx.x; u < kWgBM * kBlocks; u += kWgThreads) {
    const int rl = u / kBlocks, cb = u % kBlocks;
    const int64_t r = row0 + rl;
    if (r >= row_end) continue;
    StoreQuantizedBlock32(tile + rl * S::kTilePitch + cb * 32, g.act, g.out,
                          r * g.n + n0 + cb * 32);
  }
}

template <bool kUp>
__global__ void __launch_bounds__(kWgThreads, 1) MoeExpertWgmmaKernel(GemmArgs g) {
  using S = WgShape<kUp>;
  extern __shared__ uint8_t moe_wgmma_smem_raw[];
  const uint32_t raw_addr = SmemAddr(moe_wgmma_smem_raw);
  uint8_t* smem = moe_wgmma_smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t base = SmemAddr(smem);
  const int64_t n0 = int64_t{blockIdx.x} * S::kBN;
  const int num_tiles = *g.num_tiles;
  const int64_t kt_count = g.k / kWgBK;  // K is a multiple of 128
  // Broadcast from lane 0 so that ptxas sees a warp-uniform value: a wgmma under a condition
  // it cannot prove uniform is serialised (ptxas C7518), as CUTLASS's canonical_warp_group_idx.
  const int wg = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  for (int tile = blockIdx.y; tile < num_tiles; tile += gridDim.y) {
    const int64_t e = g.tiles[2 * tile];
    const int64_t row0 = g.tiles[2 * tile + 1];
    const int64_t row_end = min(row0 + kWgBM, int64_t{g.offsets[e + 1]});
    // Uniform over the warpgroup (wgmma is warpgroup-collective).
    const bool wg_active = row0 + 64 * wg < row_end;

    const uint16_t* a_rows[kWgARowsPerThread];
    WgARows(g, row0, row_end, a_rows);

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
      // Commit group s holds A of stage s and, for even s, pair s / 2 (kt_count is even: K is a
      // multiple of 128), so group i landing means stage i is complete.
#pragma unroll
    for (int s = 0; s < kWgAhead; ++s) {
      if (s < kt_count) {
        WgLoadA(g, smem, s, s, a_rows);
        if (s % 2 == 0) WgLoadPair<kUp>(g, smem, s / 2, e, n0);
      }
      CpAsyncCommit();
    }
    for (int64_t i = 0; i < kt_count; ++i) {
      CpAsyncWait<kWgAhead - 1>();  // stage i landed (this thread's copies)
      wgmma::FenceProxyAsyncShared();
      // Everyone's copies of stage i are visible; every warpgroup's wgmma of stage i - 2 is done,
      // and every thread has decoded stage i - 1 (so the raw slot of pair i / 2 - 1 is free).
      __syncthreads();
      const int64_t next = i + kWgAhead;
      if (next < kt_count) {
        WgLoadA(g, smem, static_cast<int>(next % kWgStages), next, a_rows);
        if (next % 2 == 0) WgLoadPair<kUp>(g, smem, next / 2, e, n0);
      }
      CpAsyncCommit();
      const int slot = static_cast<int>(i % kWgStages);
      const uint32_t b_off = kWgBOff + static_cast<uint32_t>(i % 2) * kWgBSlot;
      WgDecodeStage(smem, i, smem + b_off);
      wgmma::FenceProxyAsyncShared();
      __syncthreads();  // B slot i % 2 written
      if (wg_active) {
        const uint32_t a_addr = base + kWgAOff + slot * kWgAStage + wg * 64 * 128;
        const uint32_t b_addr = base + b_off;
        wgmma::FenceOperands(acc);
        wgmma::Fence();
#pragma unroll
        for (int kk = 0; kk < kWgBK / 16; ++kk) {
          wgmma::WgmmaM64N256K16SS(
              acc, wgmma::MakeSw128Desc(a_addr + kk * 32, kWgKMajorLbo, kWgKMajorSbo),
              wgmma::MakeSw128Desc(b_addr + kk * 32, kWgKMajorLbo, kWgKMajorSbo), true);
        }
        wgmma::CommitGroup();
        wgmma::FenceOperands(acc);
        wgmma::WaitGroup<1>();
      }
    }
    // Unconditional (a no-op for a warpgroup that issued nothing): on every path to the
    // epilogue the accumulators are then complete, so ptxas injects no wait of its own.
    wgmma::WaitGroup<0>();
    wgmma::FenceOperands(acc);
    CpAsyncWait<0>();
    __syncthreads();  // the epilogue tile overlays the ring
    if constexpr (kUp) {
      WgStoreUp(g, acc, smem, n0, row0, row_end, wg_active);
    } else {
      if (wg_active) WgStoreDown(g, acc, n0, row0, row_end);
    }
    __syncthreads();  // the next tile refills the ring
  }
}

}  // namespace flashserve::kernels::moe_device
