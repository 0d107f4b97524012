// The FP8-native large-M main loop of LaunchLinearFp8: Hopper warpgroup MMA on E4M3 codes
// (wgmma.mma_async m64n128k32 .e4m3 × .e4m3 -> f32, both operands K-major from shared memory)
// with the block scales applied in registers per 32-wide K block. Included by
// cuda/linear_fp8_launch.cu only (sm_90a). README.md "CUDA: the FP8 wgmma kernel" documents the
// design and the numerics.
//
// Work split: a CTA of two warpgroups (256 threads, all of them also load) owns kBM = 128 rows
// (blockIdx.x), kBN = 128 output columns (blockIdx.y) and one K split (blockIdx.z). Warpgroup g
// computes rows 64g .. 64g+63 × all 128 columns. K advances kBK = 128 per stage (one 128-byte
// swizzled row of codes per operand row; four 32-wide scale blocks).
//
// Per 32-wide K block b (the model's scale block) a warpgroup issues one m64n128k32 into a
// partial accumulator with scale-d = 0 (partial = Σ of the block's 32 code products, summed by
// the tensor core), then acc += partial · (a_scale[row, b] · w_scale[col / 32, b]) in fp32 FMAs,
// blocks in ascending order. Blocks go in pairs: two wgmmas (partials p0, p1) issued back to back,
// the pair's scale products computed meanwhile, wait_group 0, two promotions. While one
// warpgroup promotes, the other's wgmmas keep the tensor cores busy. (wait_group 1 with the
// promotion of block b-1 behind block b's wgmma makes ptxas serialise every wgmma, C7514.)
// Registers: acc 64 + 2 × 64 partials.
//
// Shared memory (base rounded up to 1024 bytes, the swizzle atom):
//   A  kStages × [128 rows][128 codes] activation codes, 128-byte swizzle (K-major)
//   B  kStages × [128 rows][128 codes] weight codes, same layout
//   AS kStages × [128 rows][4] activation scale bytes of the stage's four blocks
//   WS the CTA's weight scale strip [4 scale rows][strip_pitch] (steps_per_split · 4 bytes)
// Pipeline (every thread loads with cp.async): stages i+1 .. i+3 are in flight while stage i is
// multiplied. At the barrier of iteration i every warpgroup has waited for all its wgmmas of
// stage i-1, so that stage's slot, (i+3) % 4, may be refilled.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cp_async_mma.cuh"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/output_pair.cuh"

namespace flashserve::kernels::wgmma_fp8 {

inline constexpr int kThreads = 256;  // two consumer warpgroups
inline constexpr int kBM = 128;
inline constexpr int kBN = 128;
inline constexpr int kBK = 128;  // codes: one 128-byte swizzled row per operand row
inline constexpr int kBlocks = kBK / 32;
inline constexpr int kStages = 4;
inline constexpr int kScaleRows = kBN / 32;
inline constexpr uint32_t kAStage = kBM * kBK;
inline constexpr uint32_t kBStage = kBN * kBK;
inline constexpr uint32_t kAsStage = kBM * kBlocks;
inline constexpr uint32_t kAOff = 0;
inline constexpr uint32_t kBOff = kAOff + kStages * kAStage;
inline constexpr uint32_t kAsOff = kBOff + kStages * kBStage;
inline constexpr uint32_t kStripOff = kAsOff + kStages * kAsStage;
inline constexpr uint32_t kKMajorLbo = 16;    // unused by K-major swizzled (encodes 1)
inline constexpr uint32_t kKMajorSbo = 1024;  // 8 rows of 128 bytes

// Dynamic shared memory for a strip of `strip_pitch` bytes per scale row, with 1024 bytes of
// slack to align the base.
constexpr int SmemBytes(int strip_pitch) {
  return static_cast<int>(kStripOff) + (kScaleRows * strip_pitch + 15) / 16 * 16 + 1024;
}

struct Args {
  const uint8_t* a = nullptr;        // activation E4M3 codes [m, k], row stride k, 16-B aligned
  const uint8_t* a_scale = nullptr;  // UE8M0 [m, a_scale_stride], a_scale_stride % 4 == 0
  int64_t a_scale_stride = 0;        // >= ceil(k / 128) · 4
  const uint8_t* w = nullptr;        // weight E4M3 codes [n, k]
  const uint8_t* w_scale = nullptr;  // UE8M0 [ceil(n/32), k/32]
  int strip_pitch = 0;               // steps_per_split · kBlocks
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t steps_per_split = 0;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
  bool y_pair = false;
  float* partial = nullptr;  // [splits, m, n] fp32 when gridDim.z > 1
};

// ---- primitives --------------------------------------------------------------------------------
// SmemAddr, CpAsync16 / CpAsync4 (zero-filled when !valid), CpAsyncCommit, CpAsyncWait<k>:
// kernels/common/cp_async_mma.cuh.
using ::flashserve::kernels::cuda_common::CpAsync16;
using ::flashserve::kernels::cuda_common::CpAsync4;
using ::flashserve::kernels::cuda_common::CpAsyncCommit;
using ::flashserve::kernels::cuda_common::CpAsyncWait;
using ::flashserve::kernels::cuda_common::SmemAddr;

// D (64 x 128 fp32) = A·B, A (64 x 32) and B (128 x 32) E4M3 from shared memory, both K-major
// (8-bit types have no transpose immediates), scale-d = 0: D is overwritten, not accumulated.
__device__ __forceinline__ void WgmmaM64N128K32E4m3(float (&d)[64], uint64_t desc_a,
                                                    uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, "
      "%26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
      "%62, %63}, %64, %65, p, 1, 1;\n"
      "}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
        "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
        "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
        "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]),
        "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]),
        "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]),
        "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]),
        "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]),
        "=f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(0));
}

// formats::Ue8m0ToFloat: 2^(b - 127); byte 0 is 2^-127 (a subnormal), byte 255 NaN.
// Branch-free (selects): no control flow may sit between a wgmma and its wait_group, or ptxas
// serialises the wgmmas (C7514).
__device__ __forceinline__ float Ue8m0ToFloat(uint32_t b) {
  uint32_t bits = b << 23;
  bits = b == 0u ? 0x00400000u : bits;
  bits = b == 255u ? 0x7FC00000u : bits;
  return __uint_as_float(bits);
}

// ---- loads -------------------------------------------------------------------------------------
// Stage `step` (local to the split; absolute K step kt) into slot `slot`: A codes 128 rows × 8
// chunks and B codes 128 rows × 8 chunks (4 + 4 cp.async per thread; rows past m / n and columns
// past k zero-filled, K % 32 == 0 so a chunk is wholly inside or outside), and the 128 rows' four
// activation scale bytes (threads 0..127, one 4-byte copy each; bytes past k / 32 are never used).
__device__ __forceinline__ void LoadStage(const Args& g, uint32_t base, int slot, int64_t kt,
                                          int64_t row0, int64_t n0) {
  const uint32_t a = base + kAOff + slot * kAStage;
  const uint32_t b = base + kBOff + slot * kBStage;
#pragma unroll
  for (int it = 0; it < kBM * 8 / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / 8, c = i % 8;
    const int64_t row = row0 + r, col = kt * kBK + c * 16;
    const bool valid = row < g.m && col < g.k;
    CpAsync16(a + wgmma::Sw128Offset(r, c), valid ? g.a + row * g.k + col : g.a, valid);
  }
#pragma unroll
  for (int it = 0; it < kBN * 8 / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / 8, c = i % 8;
    const int64_t nrow = n0 + r, col = kt * kBK + c * 16;
    const bool valid = nrow < g.n && col < g.k;
    CpAsync16(b + wgmma::Sw128Offset(r, c), valid ? g.w + nrow * g.k + col : g.w, valid);
  }
  if (threadIdx.x < kBM) {
    const int r = static_cast<int>(threadIdx.x);
    const int64_t row = row0 + r;
    const bool valid = row < g.m;
    CpAsync4(base + kAsOff + slot * kAsStage + r * kBlocks,
             valid ? g.a_scale + row * g.a_scale_stride + kt * kBlocks : g.a_scale, valid);
  }
}

// ---- epilogue ----------------------------------------------------------------------------------
// Thread layout of m64n128 (wgmma.cuh): warp w of warpgroup g holds rows 64g + 16w + lane/4 (+8)
// and, per n8 tile j, columns 8j + 2·(lane % 4) + {0, 1}.
__device__ __forceinline__ void StoreTile(const Args& g, const float (&acc)[64], int64_t row0,
                                          int64_t n0) {
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const bool partial = gridDim.z > 1;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int64_t col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= g.n) continue;
    const bool two = col + 1 < g.n;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + 64 * wg + 16 * warp + lane / 4 + 8 * h;
      if (r >= g.m) continue;
      float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (partial) {
        gemm_device::StorePartialPair(g.partial + (int64_t{blockIdx.z} * g.m + r) * g.n + col, v0,
                                      v1, two);
        continue;
      }
      gemm_device::StoreOutputPair(g, r * g.y_stride + col, col, v0, v1, two);
    }
  }
}

// acc += p · s, s per (row half h, 32-column group j / 4): acc[4j + 2h + e] for the thread's
// columns 8j + 2·(lane % 4) + e. fmaf(p, s, acc) == acc + (p · a) · w of the reference whenever
// p · a · w stays in the normal range (s = a · w is then exact and so is p · s).
__device__ __forceinline__ void Promote(float (&acc)[64], const float (&p)[64],
                                        const float (&s)[2][kScaleRows]) {
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q = 4 * j + 2 * h + e;
        acc[q] = __fmaf_rn(p[q], s[h][j / 4], acc[q]);
      }
    }
  }
}

// ---- the kernel --------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads, 1) WgmmaFp8LinearKernel(Args g) {
  extern __shared__ uint8_t wgmma_fp8_smem_raw[];
  const uint32_t raw_addr = SmemAddr(wgmma_fp8_smem_raw);
  uint8_t* smem = wgmma_fp8_smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t base = SmemAddr(smem);

  const int64_t row0 = int64_t{blockIdx.x} * kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  const int64_t k_steps = (g.k + kBK - 1) / kBK;
  const int64_t k_blocks = g.k / 32;
  const int64_t kt0 = int64_t{blockIdx.z} * g.steps_per_split;
  const int64_t kt_count = min(kt0 + g.steps_per_split, k_steps) - kt0;  // >= 1 (plan)
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;

  // strip[r][b] = weight scale block (n0/32 + r, kt0·4 + b); 127 (1.0) outside the weight.
  // Visible to every thread after the first barrier of the main loop.
  uint8_t* strip = smem + kStripOff;
  {
    const int64_t scale_rows = (g.n + 31) / 32, kb0 = kt0 * kBlocks;
    for (int i = threadIdx.x; i < kScaleRows * g.strip_pitch; i += kThreads) {
      const int r = i / g.strip_pitch, b = i % g.strip_pitch;
      const int64_t sr = n0 / 32 + r, kb = kb0 + b;
      strip[i] = (sr < scale_rows && kb < k_blocks) ? g.w_scale[sr * k_blocks + kb] : uint8_t{127};
    }
  }

  float acc[64], p0[64], p1[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = p0[i] = p1[i] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kt_count) LoadStage(g, base, s, kt0 + s, row0, n0);
    CpAsyncCommit();
  }
  // This thread's rows inside the CTA tile (activation scales).
  const int r_lo = 64 * wg + 16 * warp + lane / 4;
  for (int64_t i = 0; i < kt_count; ++i) {
    CpAsyncWait<kStages - 2>();  // stage i landed (this thread's copies)
    wgmma::FenceProxyAsyncShared();
    // Stage i is visible to the async proxy and every thread; every warpgroup has waited for all
    // its wgmmas of stage i-1, so that stage's slot, (i+3) % 4, may be refilled.
    __syncthreads();
    if (i + kStages - 1 < kt_count) {
      LoadStage(g, base, static_cast<int>((i + kStages - 1) % kStages), kt0 + i + kStages - 1, row0,
                n0);
    }
    CpAsyncCommit();
    const int slot = static_cast<int>(i % kStages);
    const uint32_t a_addr = base + kAOff + slot * kAStage + wg * 64 * 128;
    const uint32_t b_addr = base + kBOff + slot * kBStage;
    // The stage's scale bytes: the thread's two rows (4 blocks each), the 4 column groups.
    const uint32_t as_lo =
        *reinterpret_cast<const uint32_t*>(smem + kAsOff + slot * kAsStage + r_lo * kBlocks);
    const uint32_t as_hi =
        *reinterpret_cast<const uint32_t*>(smem + kAsOff + slot * kAsStage + (r_lo + 8) * kBlocks);
    uint32_t ws[kScaleRows];
#pragma unroll
    for (int c = 0; c < kScaleRows; ++c) {
      ws[c] = *reinterpret_cast<const uint32_t*>(strip + c * g.strip_pitch + i * kBlocks);
    }
    const int64_t kb_first = (kt0 + i) * kBlocks;
    // Blocks in pairs: both wgmmas issued back to back (p0, p1), one wait, then both promotions
    // (the other warpgroup's wgmmas keep the tensor cores busy meanwhile).
#pragma unroll
    for (int pair = 0; pair < kBlocks / 2; ++pair) {
      wgmma::FenceOperands(p0);
      wgmma::FenceOperands(p1);
      wgmma::Fence();
      WgmmaM64N128K32E4m3(p0, wgmma::MakeSw128Desc(a_addr + pair * 64, kKMajorLbo, kKMajorSbo),
                          wgmma::MakeSw128Desc(b_addr + pair * 64, kKMajorLbo, kKMajorSbo));
      WgmmaM64N128K32E4m3(p1, wgmma::MakeSw128Desc(a_addr + pair * 64 + 32, kKMajorLbo, kKMajorSbo),
                          wgmma::MakeSw128Desc(b_addr + pair * 64 + 32, kKMajorLbo, kKMajorSbo));
      wgmma::CommitGroup();
      // The pair's scales while the wgmmas run. A block past K (zero codes, its scale bytes never
      // written) gets scale +0: acc + (+0 · +0) = acc, since acc is never -0 (a sum that starts
      // at +0 only reaches -0 by adding -0 to -0).
      float s[2][2][kScaleRows];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int blk = 2 * pair + q;
        const bool valid = kb_first + blk < k_blocks;
        const float a_lo = Ue8m0ToFloat((as_lo >> (8 * blk)) & 0xFFu);
        const float a_hi = Ue8m0ToFloat((as_hi >> (8 * blk)) & 0xFFu);
#pragma unroll
        for (int c = 0; c < kScaleRows; ++c) {
          const float w = Ue8m0ToFloat((ws[c] >> (8 * blk)) & 0xFFu);
          s[q][0][c] = valid ? a_lo * w : 0.f;
          s[q][1][c] = valid ? a_hi * w : 0.f;
        }
      }
      wgmma::WaitGroup<0>();
      wgmma::FenceOperands(p0);
      wgmma::FenceOperands(p1);
      Promote(acc, p0, s[0]);  // ascending block order
      Promote(acc, p1, s[1]);
    }
  }
  CpAsyncWait<0>();
  StoreTile(g, acc, row0, n0);
}

}  // namespace flashserve::kernels::wgmma_fp8
