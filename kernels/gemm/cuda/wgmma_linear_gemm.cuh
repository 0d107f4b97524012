// The large-M main loop shared by LaunchFloatLinear (bf16 x · bf16 W) and LaunchLinearFp8 (QDQ
// bf16 activations · E4M3 × UE8M0 weights): Hopper warpgroup MMA (wgmma.mma_async m64n256k16,
// bf16 operands from shared memory, fp32 accumulators in registers). Included by
// cuda/float_linear_launch.cu and cuda/linear_fp8_launch.cu only (sm_90a). README.md "CUDA:
// the wgmma main loop" documents the design and the numerics.
//
// Work split: a CTA of two warpgroups (256 threads, all of them also load) owns kBM = 128 rows
// (blockIdx.x), kBN = 256 output columns (blockIdx.y) and one (group, K split) pair
// (blockIdx.z = group · splits + split). Warpgroup g computes rows 64g .. 64g+63 × all 256
// columns (128 fp32 accumulators per thread). K advances kBK = 64 per stage.
//
// Shared memory (base rounded up to 1024 bytes, the swizzle atom):
//   A  kStages × [128 rows][64 bf16] x tile, 128-byte rows in the 128-byte swizzle (K-major)
//   B  bf16 W:  kStages × [256 rows][64 bf16], same layout, filled by cp.async
//      FP8 W:   2 × [256][64] bf16 (decoded), plus kStages × [256 rows][64 codes] raw E4M3
//               filled by cp.async, plus the CTA's scale strip [8 scale rows][strip_pitch]
// Pipeline (every thread): stage i+2 is loaded while stage i is multiplied; a warpgroup keeps
// at most two wgmma groups in flight (wait_group 1), so at the barrier of iteration i every
// warpgroup's wgmma of stage i-2 has finished and its slot, (i+2) % 4, may be refilled.
//   top of iteration i: cp.async.wait_group 1 (stage i landed), fence.proxy.async, barrier;
//   issue stage i+2; [FP8: decode raw stage i into B slot i % 2, fence.proxy.async, barrier];
//   wgmma.fence, 4 × m64n256k16 (k16 steps ascending), commit, wait_group 1.
// FP8 decode: a thread takes 8 codes (one 16-byte bf16 chunk) of one weight row, decodes them
// with the mma.sync kernel's exact E4M3 × UE8M0 -> bf16 rule (e4m3_bf16_decode.cuh) and stores
// the chunk swizzled.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cp_async_mma.cuh"
#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/cuda/e4m3_bf16_decode.cuh"
#include "kernels/gemm/cuda/output_pair.cuh"

namespace flashserve::kernels::wgmma_linear {

inline constexpr int kThreads = 256;  // two consumer warpgroups
inline constexpr int kBM = 128;
inline constexpr int kBN = 256;
inline constexpr int kBK = 64;  // bf16: one 128-byte swizzled row per operand row
inline constexpr int kStages = 4;
inline constexpr int kScaleRows = kBN / 32;  // FP8: 32-row scale blocks per CTA
inline constexpr uint32_t kAStage = kBM * 128;
inline constexpr uint32_t kBStage = kBN * 128;
inline constexpr uint32_t kRawStage = kBN * kBK;  // E4M3 codes
inline constexpr uint32_t kKMajorLbo = 16;        // unused by K-major swizzled (encodes 1)
inline constexpr uint32_t kKMajorSbo = 1024;      // 8 rows of 128 bytes

template <bool kFp8>
struct Layout {
  static constexpr uint32_t kAOff = 0;
  static constexpr uint32_t kBOff = kAOff + kStages * kAStage;
  static constexpr int kBSlots = kFp8 ? 2 : kStages;
  static constexpr uint32_t kRawOff = kBOff + kBSlots * kBStage;
  static constexpr uint32_t kStripOff = kRawOff + (kFp8 ? kStages * kRawStage : 0);
  // Dynamic shared memory for a strip of `strip_pitch` bytes per scale row (0 for bf16 W), with
  // 1024 bytes of slack to align the base.
  static constexpr int SmemBytes(int strip_pitch) {
    return static_cast<int>(kStripOff) + (kScaleRows * strip_pitch + 15) / 16 * 16 + 1024;
  }
};

struct Args {
  const uint16_t* x = nullptr;  // bf16 rows: x + group · x_group_stride + r · x_stride
  int64_t x_stride = 0, x_group_stride = 0;
  bool x_vec = false;                // rows 16-byte aligned: cp.async; else element loads
  const void* w = nullptr;           // bf16 [N, K] (elements) or E4M3 codes [N, K] (bytes)
  int64_t w_group_stride = 0;        // elements (bf16 W only)
  const uint8_t* w_scale = nullptr;  // FP8: UE8M0 [ceil(N/32), K/32]
  int strip_pitch = 0;               // FP8: steps_per_split · kBK / 32
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t steps_per_split = 0;
  int splits = 1;
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0, y_group_stride = 0;
  bool y_pair = false;
  float* partial = nullptr;  // [groups, splits, m, n] fp32 when splits > 1
};

// ---- primitives --------------------------------------------------------------------------------
// SmemAddr, CpAsync16 (zero-filled when !valid), CpAsyncCommit, CpAsyncWait<k>:
// kernels/common/cp_async_mma.cuh.
using ::flashserve::kernels::cuda_common::CpAsync16;
using ::flashserve::kernels::cuda_common::CpAsyncCommit;
using ::flashserve::kernels::cuda_common::CpAsyncWait;
using ::flashserve::kernels::cuda_common::SmemAddr;

// ---- loads -------------------------------------------------------------------------------------
// The x tile of K step kt into the A slot at shared address `a`: 128 rows × 8 chunks, 4 per
// thread. Rows past m and columns past k are zero-filled without reading (K % 8 == 0).
__device__ __forceinline__ void LoadA(const Args& g, const uint16_t* x, uint32_t a, int64_t kt,
                                      int64_t row0) {
#pragma unroll
  for (int it = 0; it < kBM * 8 / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / 8, c = i % 8;
    const int64_t row = row0 + r, col = kt * kBK + c * 8;
    const bool valid = row < g.m && col < g.k;
    const uint32_t dst = a + wgmma::Sw128Offset(r, c);
    if (g.x_vec) {
      CpAsync16(dst, valid ? x + row * g.x_stride + col : x, valid);
    } else {
      uint32_t words[4] = {0u, 0u, 0u, 0u};
      if (valid) {
        const uint16_t* src = x + row * g.x_stride + col;
#pragma unroll
        for (int e = 0; e < 8; ++e) words[e / 2] |= static_cast<uint32_t>(src[e]) << (16 * (e % 2));
      }
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(words[0]),
                   "r"(words[1]), "r"(words[2]), "r"(words[3])
                   : "memory");
    }
  }
}

// bf16 W: 256 rows × 8 chunks into the B slot at `b`, 8 per thread.
__device__ __forceinline__ void LoadBBf16(const Args& g, const uint16_t* w, uint32_t b, int64_t kt,
                                          int64_t n0) {
#pragma unroll
  for (int it = 0; it < kBN * 8 / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / 8, c = i % 8;
    const int64_t nrow = n0 + r, col = kt * kBK + c * 8;
    const bool valid = nrow < g.n && col < g.k;
    CpAsync16(b + wgmma::Sw128Offset(r, c), valid ? w + nrow * g.k + col : w, valid);
  }
}

// FP8 W: 256 rows × 4 chunks of 16 codes into the raw slot at `raw` (plain 64-byte rows), 4 per
// thread (K % 32 == 0: a chunk is wholly inside or outside K).
__device__ __forceinline__ void LoadBRaw(const Args& g, const uint8_t* w, uint32_t raw, int64_t kt,
                                         int64_t n0) {
#pragma unroll
  for (int it = 0; it < kBN * 4 / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / 4, c = i % 4;
    const int64_t nrow = n0 + r, col = kt * kBK + c * 16;
    const bool valid = nrow < g.n && col < g.k;
    CpAsync16(raw + r * kBK + c * 16, valid ? w + nrow * g.k + col : w, valid);
  }
}

// FP8 W: decodes the raw stage (local K step `step` of this split) into the bf16 B slot `b`.
// Thread chunk (r, c): codes 8c .. 8c+7 of row r, scale block (r / 32, 2·step + c / 4).
__device__ __forceinline__ void DecodeStage(const uint8_t* raw, uint8_t* b, const uint8_t* strip,
                                            int strip_pitch, int64_t step) {
#pragma unroll
  for (int it = 0; it < kBN * 8 / kThreads; ++it) {
    const int i = static_cast<int>(threadIdx.x) + it * kThreads;
    const int r = i / 8, c = i % 8;
    const uint2 codes = *reinterpret_cast<const uint2*>(raw + r * kBK + c * 8);
    const uint32_t sb = strip[(r / 32) * strip_pitch + step * (kBK / 32) + c / 4];
    uint32_t v[4];
    gemm_device::DecodeB(codes, gemm_device::MakeScaleMul(sb), v);
    *reinterpret_cast<uint4*>(b + wgmma::Sw128Offset(r, c)) = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

// ---- epilogue ----------------------------------------------------------------------------------
// Thread layout of m64n256 (wgmma.cuh): warp w of warpgroup g holds rows 64g + 16w + lane/4 (+8)
// and, per n8 tile j, columns 8j + 2·(lane % 4) + {0, 1}.

// The stores of a tile that lies wholly inside [M, N] where a column pair is one aligned word
// (the usual case at large M): row pointers computed once, no per-element bounds, mode or
// alignment checks. The same values as StoreTile's general loop (the same AddRn and F32ToBf16),
// so the same bits. Both warpgroups store at once, so the tensor cores idle for the whole
// epilogue (README "CUDA: the wgmma epilogue": split-K partials at M = 2,048 / 4,096 13-16 %
// faster; bf16 outputs of the warp-specialised kernel go through shared memory instead,
// wgmma_ws_gemm.cuh StoreTileStaged). kMode: 0 = bf16 y, 1 = fp32 y, 2 = fp32 split partials.
// kAcc: the accumulators per thread, kAcc / 4 n8 column chunks of a tile of 2·kAcc columns (128
// for this kernel's kBN of 256; fewer for wgmma_ws_gemm.cuh's narrower tiles).
template <int kMode, bool kBias, int kAcc>
__device__ __forceinline__ void StoreInterior(const float (&acc)[kAcc], const float* bias_cols,
                                              uint16_t* yb0, uint16_t* yb1, float* yf0,
                                              float* yf1) {
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    float v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
    if constexpr (kBias) {
      const float b0 = __ldg(bias_cols + 8 * j), b1 = __ldg(bias_cols + 8 * j + 1);
      v[0] = exact::AddRn(v[0], b0);
      v[1] = exact::AddRn(v[1], b1);
      v[2] = exact::AddRn(v[2], b0);
      v[3] = exact::AddRn(v[3], b1);
    }
    if constexpr (kMode == 0) {
      *reinterpret_cast<uint32_t*>(yb0 + 8 * j) = exact::F32x2ToBf16x2(v[0], v[1]);
      *reinterpret_cast<uint32_t*>(yb1 + 8 * j) = exact::F32x2ToBf16x2(v[2], v[3]);
    } else {
      *reinterpret_cast<float2*>(yf0 + 8 * j) = make_float2(v[0], v[1]);
      *reinterpret_cast<float2*>(yf1 + 8 * j) = make_float2(v[2], v[3]);
    }
  }
}

// StoreInterior with the bias when bias_cols is set (a runtime choice of two instantiations).
template <int kMode, int kAcc>
__device__ __forceinline__ void StoreInteriorBias(const float (&acc)[kAcc], const float* bias_cols,
                                                  uint16_t* yb0, uint16_t* yb1, float* yf0,
                                                  float* yf1) {
  if (bias_cols != nullptr) {
    StoreInterior<kMode, true, kAcc>(acc, bias_cols, yb0, yb1, yf0, yf1);
  } else {
    StoreInterior<kMode, false, kAcc>(acc, nullptr, yb0, yb1, yf0, yf1);
  }
}

// True (and the tile stored) when StoreInterior applies to this tile (of 2·kAcc columns).
template <int kAcc>
__device__ __forceinline__ bool StoreTileInterior(const Args& g, const float (&acc)[kAcc],
                                                  int64_t group, int64_t split, int64_t row0,
                                                  int64_t n0) {
  if (row0 + kBM > g.m || n0 + 2 * kAcc > g.n) return false;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int64_t r = row0 + 64 * wg + 16 * warp + lane / 4;
  const int64_t col = n0 + 2 * (lane % 4);
  if (g.splits > 1) {
    if (g.n % 2 != 0) return false;  // the workspace is 16-byte aligned: pairs need an even N
    float* p0 = g.partial + ((group * g.splits + split) * g.m + r) * g.n + col;
    StoreInterior<2, false, kAcc>(acc, nullptr, nullptr, nullptr, p0, p0 + 8 * g.n);
    return true;
  }
  const float* bias_cols = g.bias != nullptr ? g.bias + col : nullptr;
  if (g.y_bf16 != nullptr) {
    if (!g.y_pair) return false;
    uint16_t* y0 = g.y_bf16 + group * g.y_group_stride + r * g.y_stride + col;
    StoreInteriorBias<0>(acc, bias_cols, y0, y0 + 8 * g.y_stride, nullptr, nullptr);
    return true;
  }
  if (reinterpret_cast<uintptr_t>(g.y_f32) % 8 != 0 || g.y_stride % 2 != 0 ||
      g.y_group_stride % 2 != 0) {
    return false;
  }
  float* y0 = g.y_f32 + group * g.y_group_stride + r * g.y_stride + col;
  StoreInteriorBias<1>(acc, bias_cols, nullptr, nullptr, y0, y0 + 8 * g.y_stride);
  return true;
}

// A tile of 2·kAcc columns at (row0, n0), any position and output mode.
template <int kAcc>
__device__ __forceinline__ void StoreTile(const Args& g, const float (&acc)[kAcc], int64_t group,
                                          int64_t split, int64_t row0, int64_t n0) {
  if (StoreTileInterior(g, acc, group, split, row0, n0)) return;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const bool partial = g.splits > 1;
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    const int64_t col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= g.n) continue;
    const bool two = col + 1 < g.n;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + 64 * wg + 16 * warp + lane / 4 + 8 * h;
      if (r >= g.m) continue;
      float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (partial) {
        gemm_device::StorePartialPair(
            g.partial + ((group * g.splits + split) * g.m + r) * g.n + col, v0, v1, two);
        continue;
      }
      gemm_device::StoreOutputPair(g, group * g.y_group_stride + r * g.y_stride + col, col, v0, v1,
                                   two);
    }
  }
}

// ---- the kernel --------------------------------------------------------------------------------
template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) WgmmaLinearKernel(Args g) {
  using L = Layout<kFp8>;
  extern __shared__ uint8_t wgmma_linear_smem_raw[];
  const uint32_t raw_addr = SmemAddr(wgmma_linear_smem_raw);
  uint8_t* smem = wgmma_linear_smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t base = SmemAddr(smem);

  const int64_t group = blockIdx.z / g.splits, split = blockIdx.z % g.splits;
  const uint16_t* x = g.x + group * g.x_group_stride;
  const int64_t row0 = int64_t{blockIdx.x} * kBM;
  const int64_t n0 = int64_t{blockIdx.y} * kBN;
  const int64_t k_steps = (g.k + kBK - 1) / kBK;
  const int64_t kt0 = split * g.steps_per_split;
  const int64_t kt_count = min(kt0 + g.steps_per_split, k_steps) - kt0;  // >= 1 (plan)
  const int wg = threadIdx.x / 128;

  const uint16_t* w_bf16 = nullptr;
  const uint8_t* w_codes = nullptr;
  uint8_t* strip = smem + L::kStripOff;
  if constexpr (kFp8) {
    w_codes = static_cast<const uint8_t*>(g.w);
    // strip[r][b] = scale block (n0/32 + r, kt0·2 + b); 127 (1.0) outside the weight. Visible
    // to every thread after the first barrier of the main loop.
    const int64_t scale_rows = (g.n + 31) / 32, k_blocks = g.k / 32, kb0 = kt0 * (kBK / 32);
    for (int i = threadIdx.x; i < kScaleRows * g.strip_pitch; i += kThreads) {
      const int r = i / g.strip_pitch, b = i % g.strip_pitch;
      const int64_t sr = n0 / 32 + r, kb = kb0 + b;
      strip[i] = (sr < scale_rows && kb < k_blocks) ? g.w_scale[sr * k_blocks + kb] : uint8_t{127};
    }
  } else {
    w_bf16 = static_cast<const uint16_t*>(g.w) + group * g.w_group_stride;
  }

  auto load_stage = [&](int64_t step) {
    const int slot = static_cast<int>(step % kStages);
    LoadA(g, x, base + L::kAOff + slot * kAStage, kt0 + step, row0);
    if constexpr (kFp8) {
      LoadBRaw(g, w_codes, base + L::kRawOff + slot * kRawStage, kt0 + step, n0);
    } else {
      LoadBBf16(g, w_bf16, base + L::kBOff + slot * kBStage, kt0 + step, n0);
    }
  };

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < kt_count) load_stage(s);
    CpAsyncCommit();
  }
  for (int64_t i = 0; i < kt_count; ++i) {
    CpAsyncWait<kStages - 3>();  // stage i landed (this thread's copies)
    wgmma::FenceProxyAsyncShared();
    // Stage i is visible to the async proxy; every warpgroup's wgmma of stage i-2 is done.
    __syncthreads();
    if (i + kStages - 2 < kt_count) load_stage(i + kStages - 2);
    CpAsyncCommit();
    const int slot = static_cast<int>(i % kStages);
    uint32_t b_addr;
    if constexpr (kFp8) {
      const int b_slot = static_cast<int>(i % 2);
      DecodeStage(smem + L::kRawOff + slot * kRawStage, smem + L::kBOff + b_slot * kBStage, strip,
                  g.strip_pitch, i);
      wgmma::FenceProxyAsyncShared();
      __syncthreads();
      b_addr = base + L::kBOff + b_slot * kBStage;
    } else {
      b_addr = base + L::kBOff + slot * kBStage;
    }
    const uint32_t a_addr = base + L::kAOff + slot * kAStage + wg * 64 * 128;
    wgmma::FenceOperands(acc);
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      wgmma::WgmmaM64N256K16SS(acc, wgmma::MakeSw128Desc(a_addr + kk * 32, kKMajorLbo, kKMajorSbo),
                               wgmma::MakeSw128Desc(b_addr + kk * 32, kKMajorLbo, kKMajorSbo),
                               true);
    }
    wgmma::CommitGroup();
    wgmma::FenceOperands(acc);
    wgmma::WaitGroup<1>();
  }
  wgmma::WaitGroup<0>();
  wgmma::FenceOperands(acc);
  CpAsyncWait<0>();
  StoreTile(g, acc, group, split, row0, n0);
}

}  // namespace flashserve::kernels::wgmma_linear
