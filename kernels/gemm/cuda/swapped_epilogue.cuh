// The epilogue of the swapped-role kernels (linear_fp8_rs.cuh, float_linear_swap.cuh), whose
// warpgroup MMA computes y^T: a warp's m64nN accumulators hold (weight row, x row). Lane (grp,
// tig) holds weight rows n and n + 8 (hr = 0, 1; n = its first row, for kernels/common/wgmma.cuh's
// fragment layout n = 16·warp + grp or the kernel's own row map) and x rows 2·tig + 8j + h
// (j < N / 8, h = 0, 1) relative to the tile: d[4j + 2hr + h]. Rows at or past `rows_left` (x)
// and columns at or past `n_limit` (weights) are not stored. Device code only.
//
// Unsplit bf16 outputs go through shared memory (session 40): each warp rounds its accumulator
// pairs (adjacent x rows) to bf16x2 and `stmatrix ... .trans` writes them as [x row][weight row]
// rows of a staging block that spans the CTA's weight rows; then the CTA stores whole 16-byte
// pieces of y rows (a warp: 512 / 256 contiguous bytes of one row). The direct form stores 2-byte
// elements, 4 x rows × 16 bytes per warp instruction. fp32 outputs and split partials (4-byte
// elements: whole 32-byte sectors already) keep the direct form.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"

namespace flashserve::kernels::gemm_device {

// fp32 split partials: out points at (x row 2·tig, weight row n) of a row-major [rows][ld] array.
template <int kN>
__device__ __forceinline__ void StoreSwappedPartial(const float (&acc)[kN / 2], float* out,
                                                    int64_t ld, int64_t n, int64_t n_limit,
                                                    int64_t rows_left) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (n + 8 * hr >= n_limit) continue;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (8 * j + h >= rows_left) continue;
        out[(8 * j + h) * ld + 8 * hr] = acc[4 * j + 2 * hr + h];
      }
    }
  }
}

// The output: + bias[column] (fp32, one rounding) when bias is set, then fp32 or one RNE rounding
// to bf16 (exactly one of y_f32 / y_bf16). Element (x row 2·tig + r, weight row c) goes to
// y[at0 + r·y_stride + c].
template <int kN>
__device__ __forceinline__ void StoreSwappedOutput(const float (&acc)[kN / 2], uint16_t* y_bf16,
                                                   float* y_f32, int64_t at0, int64_t y_stride,
                                                   int64_t n, int64_t n_limit, int64_t rows_left,
                                                   const float* bias) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t c = n + 8 * hr;
    if (c >= n_limit) continue;
    const float b = bias != nullptr ? bias[c] : 0.f;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (8 * j + h >= rows_left) continue;
        float v = acc[4 * j + 2 * hr + h];
        if (bias != nullptr) v = exact::AddRn(v, b);
        const int64_t at = at0 + (8 * j + h) * y_stride + c;
        if (y_f32 != nullptr) {
          y_f32[at] = v;
        } else {
          y_bf16[at] = static_cast<uint16_t>(exact::F32ToBf16(v));
        }
      }
    }
  }
}

// ---- the staged bf16 output -------------------------------------------------------------------

// Whether the staged path may store y: bf16, every 8-column piece of a row 16-byte aligned and
// either wholly inside N or wholly outside (N % 8 == 0).
__device__ __forceinline__ bool SwappedStagedOk(const uint16_t* y_bf16, int64_t y_stride,
                                                int64_t group_stride, int64_t n) {
  return y_bf16 != nullptr && reinterpret_cast<uintptr_t>(y_bf16) % 16 == 0 && y_stride % 8 == 0 &&
         group_stride % 8 == 0 && n % 8 == 0;
}

// The staging block of a CTA with kCols weight rows: [x rows][kCols bf16] at a pitch of 16 bytes
// more than a row, so the 8 rows one stmatrix matrix writes (consecutive x rows, one 16-byte
// column piece) fall in distinct banks.
template <int kCols>
struct SwapStage {
  static constexpr uint32_t kPitch = 2 * kCols + 16;
  static constexpr uint32_t Bytes(int rows) { return static_cast<uint32_t>(rows) * kPitch; }
};

// Writes the warp's 16 weight rows (fragment rows, in the kernel's row order) × kN x rows into
// the staging block: `slab` is the shared address of x row 0 at the warp's first column (16
// columns = 32 bytes per warp). Per stmatrix.x4.trans, matrices (j, hr) for j = 2q, 2q + 1:
// register (j, hr) = the bf16 pair (x rows 8j + 2tig, + 1) of fragment row grp (+ 8hr), which the
// transposed store puts at staging row 8j + 2tig (+ 1), position grp of the 16-byte piece hr. So
// position g of each piece holds fragment row g: the kernel's row order, undone by the reader.
// bias_lo / bias_hi: the bias of fragment rows grp / grp + 8 (added, one fp32 rounding, when
// has_bias), then one RNE rounding to bf16: the direct form's bits.
template <int kN, int kCols>
__device__ __forceinline__ void StageSwappedBf16(const float (&acc)[kN / 2], uint32_t slab,
                                                 int lane, bool has_bias, float bias_lo,
                                                 float bias_hi) {
  constexpr uint32_t kPitch = SwapStage<kCols>::kPitch;
  const int mat = lane / 8;
  const uint32_t addr = slab + static_cast<uint32_t>(8 * (mat / 2) + lane % 8) * kPitch +
                        16u * static_cast<uint32_t>(mat % 2);
#pragma unroll
  for (int q = 0; q < kN / 16; ++q) {
    uint32_t r[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = 2 * q + u / 2, hr = u % 2;
      float v0 = acc[4 * j + 2 * hr], v1 = acc[4 * j + 2 * hr + 1];
      if (has_bias) {
        const float b = hr == 0 ? bias_lo : bias_hi;
        v0 = exact::AddRn(v0, b);
        v1 = exact::AddRn(v1, b);
      }
      r[u] = exact::F32x2ToBf16x2(v0, v1);
    }
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     addr + static_cast<uint32_t>(16 * q) * kPitch),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  }
}

// The CTA's kThreads store the staging block's first `rows_left` rows (x rows) to y (its x row 0,
// weight row 0): per row, kCols / 8 pieces of 16 bytes, those at or past `cols_left` skipped.
// kPairRows: the pieces hold fragment rows in the RS kernel's order (fragment row g = weight row
// 2·(g % 4) + g / 4): position g -> column P(g) is undone with 4 byte permutes per piece.
template <int kN, int kCols, int kThreads, bool kPairRows>
__device__ __forceinline__ void StoreSwappedStage(uint32_t stage, uint16_t* y, int64_t y_stride,
                                                  int64_t rows_left, int64_t cols_left, int tid) {
  constexpr uint32_t kPitch = SwapStage<kCols>::kPitch;
  constexpr int kPieces = kCols / 8;
  constexpr int kRowsPerPass = kThreads / kPieces;
  static_assert(kThreads % kPieces == 0 && kN % kRowsPerPass == 0);
  const int piece = tid % kPieces;
  if (8 * piece >= cols_left) return;
#pragma unroll
  for (int r = tid / kPieces; r < kN; r += kRowsPerPass) {
    if (r >= rows_left) break;
    uint4 w;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                 : "r"(stage + static_cast<uint32_t>(r) * kPitch + 16u * piece)
                 : "memory");
    if constexpr (kPairRows) {
      // Position g holds column P(g): columns 2k, 2k + 1 are positions k, k + 4.
      w = make_uint4(__byte_perm(w.x, w.z, 0x5410), __byte_perm(w.x, w.z, 0x7632),
                     __byte_perm(w.y, w.w, 0x5410), __byte_perm(w.y, w.w, 0x7632));
    }
    *reinterpret_cast<uint4*>(y + r * y_stride + 8 * piece) = w;
  }
}

}  // namespace flashserve::kernels::gemm_device
