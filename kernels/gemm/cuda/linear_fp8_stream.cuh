// The weight-streaming FP8 Linear for few rows (gemm_cuda.h, LinearCudaKernel::kStream; README.md
// "CUDA: the weight-streaming decode kernel"). Device code of cuda/linear_fp8_launch.cu only.
//
// One launch does the whole call: the activation quantisation, the GEMM and the split-K
// reduction. The operand roles of linear_fp8_gemm.cuh are swapped: the weights are the mma.sync
// m16n8k16 A operand (16 weight rows × k16), loaded into registers with 8-byte ld.global.nc a
// few units ahead (nothing of the weights passes through shared memory, no barrier in the K
// loop); the x rows (<= 16 per CTA: kNT n8 tiles) are the B operand, quantised by the CTA itself
// into shared memory.
//
// Work split: the weight rows are cut into m16 tiles of 16 rows; CTA blockIdx.x of gridDim.x (the
// plan's n_tiles) takes tiles blockIdx.x + gridDim.x·w, one per warp w (at most 8: kStreamRows =
// 128 rows per CTA), so that consecutive tiles go to consecutive CTAs and every SM gets about the
// same number of active warps when the plan raises gridDim.x above ceil(N / 128) (round 4; before,
// 128 consecutive rows per CTA left 64 of the 132 SMs with one CTA and 68 with two at
// engram.wkv's 200 CTAs); one K split (blockIdx.y; steps_per_split units of 128) and up to 16 x
// rows (blockIdx.z). K is streamed in units of 128 (four 32-blocks): in a unit, quad lane
// tig holds codes 8·tig .. 8·tig + 7 of every block of its two rows grp and grp + 8 (a quad's
// load reads a row's whole 32-byte block: one sector) and the 4 blocks' scale bytes (rows grp and
// grp + 8 share a 32-row scale row: m16 tiles start at multiples of 16).
//
// Numerics (session 16; before, every code was decoded to a bf16 weight × its scale, 5
// instructions per pair): the mma runs on the raw E4M3 codes of both operands as f16 (exact,
// one cvt.rn.f16x2.e4m3x2 per pair), one 32-block at a time into a zeroed fp32 tile, and the
// tile is added to the accumulators with one fma by (weight scale · x scale of the accumulator's
// x row): both scales are powers of two, so each product is the CPU's w · QDQ(x) exactly and
// only the fp32 summation order differs (as in linear_fp8_gemm.cuh).
//
// Activations: the split's K range is processed in slabs of at most kStreamSlabUnits units. Per
// slab, after a barrier, the CTA quantises its x rows of the slab exactly as kernels/quant's
// QdqKernel does (the same device functions, quant::device::Fmt / BlockAmax: per 32-block of a
// row, 4 adjacent lanes) into shared memory — the E4M3 codes row-major and every block's scale
// value — then a barrier. The weight loads of the slab's first units are issued before the
// quantiser runs (the register ring runs across slabs).
//
// Operand order: for block b and word j of the thread's 8 codes (codes 4j .. 4j + 3), codes
// 4j, 4j + 1 fill k slots 2tig, 2tig + 1 and codes 4j + 2, 4j + 3 slots 2tig + 8, 2tig + 9 —
// a0 / a2 from row grp, a1 / a3 from row grp + 8, b0 / b1 from x row grp of the n8 tile (one
// 8-byte shared load per block and tile). The two mma of a block (j = 0, 1) cover its 32 columns.
//
// Split-K in the same launch: every split stores its fp32 partials ([split, m, n] in the
// workspace), then one thread per CTA arrives at the tile's counter (workspace); the CTA that
// arrives last sums the tile's partials in ascending split order from +0 (LinearFp8ReduceKernel's
// order: the bits do not depend on which CTA is last; the loads of 8 (4) splits are issued
// before they are added), adds the bias, stores y, and resets the counter to 0 (tile_counter.cuh:
// a tagged 64-bit word per tile, which needs no zeroing).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"
#include "kernels/common/fp8_convert.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/stream_load.cuh"
#include "kernels/gemm/cuda/linear_fp8_gemm.cuh"
#include "kernels/gemm/cuda/tile_counter.cuh"
#include "kernels/norm_rope/cuda/norm_rope_rows.cuh"
#include "kernels/quant/cuda/quant_kernels.cuh"

namespace flashserve::kernels::gemm_device {

inline constexpr int kStreamThreads = 256;
inline constexpr int kStreamWarps = kStreamThreads / 32;
inline constexpr int kStreamRows = 16 * kStreamWarps;  // weight rows (output columns) per CTA
inline constexpr int kStreamUnitK = 128;               // K per unit
// Register ring: units in flight per warp (3 ahead of the one computed: 6 KB per warp, 48 KB
// per CTA).
inline constexpr int kStreamDepth = 4;
// K units per activation slab in shared memory (a multiple of kStreamDepth): 16 rows × 2048
// bf16 = 64 KB + padding at most, so two CTAs fit an SM.
inline constexpr int kStreamSlabUnits = 16;
static_assert(kStreamSlabUnits % kStreamDepth == 0);

struct StreamArgs {
  const uint16_t* x = nullptr;  // bf16 [m, x_stride]
  int64_t x_stride = 0;
  const uint8_t* w = nullptr;        // E4M3 [n, k]
  const uint8_t* w_scale = nullptr;  // UE8M0 [ceil(n/32), k/32]
  const float* bias = nullptr;       // [n] or null
  int64_t m = 0, n = 0, k = 0;
  int steps_per_split = 0;  // units of kStreamUnitK per split (blockIdx.y)
  int slab_units = 0;       // min(kStreamSlabUnits, steps_per_split): the shared-memory slab
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
  float* partial = nullptr;                // [gridDim.y, m, n] fp32 when gridDim.y > 1
  unsigned long long* counters = nullptr;  // [gridDim.z · gridDim.x] when gridDim.y > 1
  unsigned long long tag = 0;              // this call's counter tag: nonzero, low 16 bits zero
  // The fused RMSNorm of x (LinearCudaParams::x_norm; the kernel's kNorm instantiations only):
  // its bf16 weight [k] and eps, and the normed rows' destination [m, norm_out_stride] (written
  // by the CTAs with blockIdx.x == 0, each its split's K range), or null.
  const uint16_t* norm_w = nullptr;
  float norm_eps = 0.f;
  uint16_t* norm_out = nullptr;
  int64_t norm_out_stride = 0;
};

// The shared-memory slab: x's E4M3 codes row-major (pitch: units · 128 + 32 bytes, so rows
// grp .. grp + 3 of a half warp's 8-byte loads start 8 banks apart: 32 distinct banks), then the
// fp32 value of every (32-block, row) scale byte, block-major ([local block][row]: the scales of
// a thread's accumulator rows 2·tig, 2·tig + 1 are one 8-byte load).
__host__ __device__ constexpr int StreamPitch(int slab_units) { return slab_units * 128 + 32; }
__host__ __device__ constexpr int StreamScaleOffset(int slab_units, int n8_tiles) {
  return 8 * n8_tiles * StreamPitch(slab_units);
}
__host__ __device__ constexpr int StreamSmemBytes(int slab_units, int n8_tiles) {
  return StreamScaleOffset(slab_units, n8_tiles) + 4 * (4 * slab_units) * (8 * n8_tiles);
}

using cuda_common::LoadStream8;  // kernels/common/stream_load.cuh

// A UE8M0 scale byte as fp32: 2^(b - 127) (byte 0: the subnormal 2^-127), byte 255 NaN (the
// CPU's Ue8m0ToFloat).
__device__ __forceinline__ float Ue8m0Value(uint32_t b) {
  return __uint_as_float(b == 0u ? 0x00400000u : (b == 255u ? 0x7FC00000u : b << 23));
}

// One unit of a thread's weights: for each 32-block b = 0..3 of the unit, the 8 codes at K
// offsets 32b + 8·tig .. + 7 of rows grp (h = 0) and grp + 8 (h = 1) — a quad reads a row's
// whole block, one 32-byte sector per load — and the 4 blocks' scale bytes (byte b).
struct StreamUnitRegs {
  uint2 q[2][4];
  uint32_t scales;
};

// Loads unit u (absolute) of the thread's rows. A block past K (the last unit of a K that is
// not a multiple of 128) reads its row's first block instead with scale byte 127: finite values,
// multiplied by the zero activations stored there.
__device__ __forceinline__ void LoadUnit(const uint8_t* row0, const uint8_t* row1,
                                         const uint8_t* scale_row, int64_t k_blocks, int64_t u,
                                         int tig, StreamUnitRegs& r) {
  r.scales = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int64_t kb = 4 * u + b;
    const bool ok = kb < k_blocks;
    const int64_t off = (ok ? 32 * kb : 0) + 8 * tig;
    r.q[0][b] = LoadStream8(row0 + off);
    r.q[1][b] = LoadStream8(row1 + off);
    r.scales |= (ok ? static_cast<uint32_t>(__ldg(scale_row + kb)) : 127u) << (8 * b);
  }
}

using cuda_common::E4m3x4ToF16;  // kernels/common/fp8_convert.cuh

// c = a · b + c: m16n8k16, f16 operands, fp32 accumulators.
__device__ __forceinline__ void MmaF16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc[nt] += the unit's products. Per 32-block b and n8 tile: two m16n8k16 on the raw codes as
// f16 (word j of the thread's 8 codes: bytes 0, 1 in k slots 2tig, 2tig + 1 and bytes 2, 3 in
// 2tig + 8, 2tig + 9, for the weight rows (A) and x row grp of the tile (B) alike) sum the
// block's 32 exact products into a zeroed fp32 tile t; then acc += t · (weight scale · x scale
// of the accumulator's x row) by one fma each — the block's scales applied once, after the sum
// (both are powers of two: the products are the CPU's exactly). xrow: the slab's codes row grp
// (tile 0); xscale: the slab's scale array; lu: the unit's index in the slab.
template <int kNT>
__device__ __forceinline__ void ComputeUnit(const StreamUnitRegs& r, const unsigned char* xrow,
                                            const float* xscale, int pitch, int lu, int tig,
                                            float (&acc)[kNT][4]) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int lb = 4 * lu + b;  // block within the slab
    const float pw = Ue8m0Value((r.scales >> (8 * b)) & 0xFFu);
    uint32_t a[2][2][2];  // [word j][row h][lo / hi]
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        E4m3x4ToF16(j == 0 ? r.q[h][b].x : r.q[h][b].y, a[j][h][0], a[j][h][1]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const uint2 xw = *reinterpret_cast<const uint2*>(xrow + nt * 8 * pitch + 32 * lb + 8 * tig);
      uint32_t bx[2][2];
      E4m3x4ToF16(xw.x, bx[0][0], bx[0][1]);
      E4m3x4ToF16(xw.y, bx[1][0], bx[1][1]);
      float t[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        MmaF16(t, a[j][0][0], a[j][1][0], a[j][0][1], a[j][1][1], bx[j][0], bx[j][1]);
      }
      const float2 sx =
          *reinterpret_cast<const float2*>(xscale + lb * (8 * kNT) + nt * 8 + 2 * tig);
      const float p0 = exact::MulRn(pw, sx.x), p1 = exact::MulRn(pw, sx.y);
      acc[nt][0] = exact::FmaRn(t[0], p0, acc[nt][0]);
      acc[nt][1] = exact::FmaRn(t[1], p1, acc[nt][1]);
      acc[nt][2] = exact::FmaRn(t[2], p0, acc[nt][2]);
      acc[nt][3] = exact::FmaRn(t[3], p1, acc[nt][3]);
    }
  }
}

// 8 bf16 of x (16 bytes) from global memory; kVec: 16-byte aligned.
template <bool kVec>
__device__ __forceinline__ void LoadX8(const uint16_t* p, uint32_t (&w)[4]) {
  if constexpr (kVec) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = p[2 * j] | (static_cast<uint32_t>(p[2 * j + 1]) << 16);
  }
}

template <bool kVec>
__device__ __forceinline__ void StoreX8(uint16_t* p, const uint32_t (&w)[4]) {
  if constexpr (kVec) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      p[2 * j] = static_cast<uint16_t>(w[j] & 0xFFFFu);
      p[2 * j + 1] = static_cast<uint16_t>(w[j] >> 16);
    }
  }
}

// The fused RMSNorm's 1 / rms of the CTA's x rows [row0, row0 + rows) over the whole K into
// row_r (one warp per row): RmsNormKernel's arithmetic (norm_rope_rows.cuh) — fp32 squares
// summed in double (exact whatever the order while a row's squares span less than
// ~2^(37 - log2(K)), as there), the mean by the fp32 reciprocal of K, 1 / sqrt(mean + eps), each
// operation rounded on its own. K is a multiple of 32 (the weight's blocks).
template <bool kVec>
__device__ __forceinline__ void StreamRowRms(const StreamArgs& g, int64_t row0, int rows,
                                             float* row_r) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float inv_n = exact::DivRn(1.0f, exact::Int64ToF32(g.k));
  for (int r = warp; r < rows; r += kStreamWarps) {
    const uint16_t* xr = g.x + (row0 + r) * g.x_stride;
    double sum = 0.0;
    for (int64_t c = 8 * lane; c < g.k; c += 8 * 32) {
      uint32_t w[4];
      LoadX8<kVec>(xr + c, w);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float lo = exact::Bf16ToF32(w[j] & 0xFFFFu), hi = exact::Bf16ToF32(w[j] >> 16);
        sum += static_cast<double>(exact::MulRn(lo, lo));
        sum += static_cast<double>(exact::MulRn(hi, hi));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) row_r[r] = norm_rope_device::InverseRmsFromSum(sum, inv_n, g.norm_eps);
  }
}

// 8 bf16 values x (4 words, low half first) normed in place: bf16(w · (x · r)), RmsNormKernel's
// products and rounding.
__device__ __forceinline__ void NormX8(uint32_t (&x)[4], const uint32_t (&w)[4], float r) {
  float v[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = exact::MulRn(exact::Bf16ToF32(w[j] & 0xFFFFu),
                            exact::MulRn(exact::Bf16ToF32(x[j] & 0xFFFFu), r));
    v[2 * j + 1] =
        exact::MulRn(exact::Bf16ToF32(w[j] >> 16), exact::MulRn(exact::Bf16ToF32(x[j] >> 16), r));
  }
  exact::F32x8ToBf16x8(v, x);
}

// The CTA's x rows [row0, row0 + rows) × the slab's `units` units from column k0 into the
// slab: the E4M3 codes and the value of each 32-block's UE8M0 scale of kernels/quant's
// QdqKernel arithmetic (its QDQ value is code × scale exactly: the scale is at least 2^-22, so
// every product is a bf16); columns past K get zero codes. Every thread of the CTA's
// kStreamThreads calls it (the block amax shuffles name whole warps). n8_rows: the slab's rows
// (8 · kNT). kBatch: 16-byte chunks per thread whose loads are issued together before any is
// encoded (one global round trip per kBatch · kStreamThreads chunks: the TMA-ring kernel
// quantises the whole K of up to 8 rows, 20+ chunks per thread; the stream kernel's 128-register
// budget keeps 1). kNorm: x is first normed by the fused RMSNorm (row_r: StreamRowRms's 1 / rms
// of each of the CTA's rows; NormX8), and the CTAs with blockIdx.x == 0 store the normed values
// to g.norm_out when it is set.
template <bool kVec, int kBatch = 1, bool kNorm = false>
__device__ __forceinline__ void QuantizeSlab(const StreamArgs& g, unsigned char* slab,
                                             float* scales, int pitch, int n8_rows, int64_t row0,
                                             int rows, int64_t k0, int units,
                                             const float* row_r = nullptr) {
  using F = quant::device::Fmt<quant::BlockFormat::kFp8E4m3Ue8m0B32>;
  const int per_row = units * (kStreamUnitK / 8);  // 8-value chunks per row, a multiple of 4
  const int total = rows * per_row;
  for (int base = 0; base < total; base += kBatch * kStreamThreads) {
    uint32_t x[kBatch][4];
    uint32_t nw[kNorm ? kBatch : 1][4];  // kNorm: the norm weight's 8 values at x's columns
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kStreamThreads + static_cast<int>(threadIdx.x);
      const int r = i / per_row, c = i % per_row;
      const int64_t col = k0 + 8 * c;
      // A 32-block is 4 adjacent lanes; it lies either wholly inside K or wholly past it.
      x[j][0] = x[j][1] = x[j][2] = x[j][3] = 0;
      if (i < total && col < g.k) {
        LoadX8<kVec>(g.x + (row0 + r) * g.x_stride + col, x[j]);
        if constexpr (kNorm) LoadX8<kVec>(g.norm_w + col, nw[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kStreamThreads + static_cast<int>(threadIdx.x);
      if (base + j * kStreamThreads >= total) break;  // CTA-uniform
      const int r = i / per_row, c = i % per_row;
      const bool active = i < total && k0 + 8 * c < g.k;
      if constexpr (kNorm) {
        if (active) {
          NormX8(x[j], nw[j], row_r[r]);
          if (g.norm_out != nullptr && blockIdx.x == 0) {
            StoreX8<kVec>(g.norm_out + (row0 + r) * g.norm_out_stride + k0 + 8 * c, x[j]);
          }
        }
      }
      bool has_nan = false;
      const uint32_t sb = F::ScaleByte(quant::device::BlockAmax<F::kLanes>(x[j], &has_nan));
      if (i >= total) continue;
      uint32_t codes[F::kCodeWords] = {0, 0};
      if (active) F::Encode(x[j], sb, has_nan, /*tables=*/nullptr, codes);
      *reinterpret_cast<uint2*>(slab + r * pitch + 8 * c) = make_uint2(codes[0], codes[1]);
      if (c % 4 == 0) scales[(c / 4) * n8_rows + r] = Ue8m0Value(sb);
    }
  }
}

// y (+ bias, one rounding to bf16, or fp32) of output (row m, column n) from the fp32 sum v.
__device__ __forceinline__ void StoreOutput(const StreamArgs& g, int64_t m, int64_t n, float v) {
  if (g.bias != nullptr) v = exact::AddRn(v, g.bias[n]);
  if (g.y_f32 != nullptr) {
    g.y_f32[m * g.y_stride + n] = v;
  } else {
    g.y_bf16[m * g.y_stride + n] = static_cast<uint16_t>(exact::F32ToBf16(v));
  }
}

template <int kNT, bool kVec, bool kNorm = false>
__global__ void __launch_bounds__(kStreamThreads, 2) LinearFp8StreamKernel(const StreamArgs g) {
  extern __shared__ __align__(128) unsigned char stream_smem[];
  __shared__ int is_last;
  __shared__ float row_r[kNorm ? 8 * kNT : 1];  // kNorm: the rows' 1 / rms (StreamRowRms)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / 4, tig = lane % 4;
  const int pitch = StreamPitch(g.slab_units);
  const int64_t row0 = int64_t{blockIdx.z} * 16;
  const int rows = static_cast<int>(min(g.m - row0, int64_t{8 * kNT}));
  const int64_t k_units = (g.k + kStreamUnitK - 1) / kStreamUnitK;
  const int64_t k_blocks = g.k / 32;
  const int64_t u0 = int64_t{blockIdx.y} * g.steps_per_split;
  const int count = static_cast<int>(min(int64_t{g.steps_per_split}, k_units - u0));  // >= 1

  // This warp's m16 tile (see the top of the file; rows clamped into the matrix: rows past N
  // compute outputs never stored).
  const int64_t wrow = 16 * (int64_t{blockIdx.x} + int64_t{gridDim.x} * warp);
  const bool warp_active = wrow < g.n;  // warp-uniform
  const int64_t r0 = min(wrow + grp, g.n - 1), r1 = min(wrow + grp + 8, g.n - 1);
  const uint8_t* wrow0 = g.w + r0 * g.k;
  const uint8_t* wrow1 = g.w + r1 * g.k;
  const uint8_t* scale_row = g.w_scale + (min(wrow, g.n - 1) / 32) * k_blocks;

  // Launched with LaunchPdl: the next kernel may be scheduled now (it waits for this one before
  // reading anything), and the weights — which no kernel writes — are requested before this
  // kernel waits for the ones before it (cuda_common::PdlWaitPrerequisites, below).
  cuda_common::PdlLaunchDependents();
  // The first units in flight before the activations are quantised.
  StreamUnitRegs ring[kStreamDepth];
#pragma unroll
  for (int i = 0; i < kStreamDepth; ++i) {
    if (warp_active && i < count) LoadUnit(wrow0, wrow1, scale_row, k_blocks, u0 + i, tig, ring[i]);
  }

  // Slab rows past m stay zero codes with scale 1 for the whole call.
  float* xscale = reinterpret_cast<float*>(stream_smem + StreamScaleOffset(g.slab_units, kNT));
  for (int i = threadIdx.x; i < (8 * kNT - rows) * (pitch / 16); i += kStreamThreads) {
    *reinterpret_cast<uint4*>(stream_smem + rows * pitch + 16 * i) = make_uint4(0, 0, 0, 0);
  }
  for (int i = threadIdx.x; i < 4 * g.slab_units * (8 * kNT); i += kStreamThreads) {
    if (i % (8 * kNT) >= rows) xscale[i] = 1.f;
  }

  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[nt][q] = 0.f;
  }
  const unsigned char* xrow = stream_smem + grp * pitch;
  // x, y, the partials and the counters are read or written only after the earlier kernels of
  // the stream have finished.
  cuda_common::PdlWaitPrerequisites();
  // The fused RMSNorm's row scales (the slab loop's first barrier publishes them).
  if constexpr (kNorm) StreamRowRms<kVec>(g, row0, rows, row_r);
  for (int s0 = 0; s0 < count; s0 += g.slab_units) {
    const int units = min(g.slab_units, count - s0);
    __syncthreads();  // every warp is done with the previous slab
    QuantizeSlab<kVec, 1, kNorm>(g, stream_smem, xscale, pitch, 8 * kNT, row0, rows,
                                 (u0 + s0) * kStreamUnitK, units, row_r);
    __syncthreads();
    if (!warp_active) continue;
    // Ring slot i holds unit s0 + ub + i of the split: s0 is a multiple of slab_units, which is
    // kStreamSlabUnits (a multiple of kStreamDepth) whenever there is more than one slab.
    for (int ub = 0; ub < units; ub += kStreamDepth) {
#pragma unroll
      for (int i = 0; i < kStreamDepth; ++i) {
        const int u = ub + i;  // unit within the slab
        if (u < units) {
          ComputeUnit<kNT>(ring[i], xrow, xscale, pitch, u, tig, acc);
          const int next = s0 + u + kStreamDepth;  // unit within the split
          if (next < count) LoadUnit(wrow0, wrow1, scale_row, k_blocks, u0 + next, tig, ring[i]);
        }
      }
    }
  }

  // Thread's outputs: acc[nt][q] is (x row row0 + 8nt + 2tig + (q & 1), weight row
  // wrow + grp + 8 (q >> 1)).
  const bool split = gridDim.y > 1;
  if (!split) {
    if (!warp_active) return;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t m = row0 + 8 * nt + 2 * tig + (q & 1), n = wrow + grp + 8 * (q >> 1);
        if (m < g.m && n < g.n) StoreOutput(g, m, n, acc[nt][q]);
      }
    }
    return;
  }
  if (warp_active) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t m = row0 + 8 * nt + 2 * tig + (q & 1), n = wrow + grp + 8 * (q >> 1);
        if (m < g.m && n < g.n) g.partial[(int64_t{blockIdx.y} * g.m + m) * g.n + n] = acc[nt][q];
      }
    }
  }
  // Release the partials, then arrive; the last CTA of the tile reduces.
  __threadfence();
  __syncthreads();
  unsigned long long* counter = g.counters + blockIdx.z * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) is_last = Arrive(counter, g.tag) == gridDim.y ? 1 : 0;
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // acquire: the other splits' partials are visible below
  // Every split has arrived: 0 is no call's tag, so the next call (or replay) starts afresh.
  if (threadIdx.x == 0) *counter = 0ull;
  if (!warp_active) return;
  // The thread's outputs o = 4nt + q, each summed from +0 in ascending split order (32 loads in
  // flight per thread: 16 per output at kNT = 1 made 128 registers, and 8 at kNT = 2 spilled).
  constexpr int kOut = 4 * kNT;
  bool valid[kOut];
  int64_t off[kOut];
  float sum[kOut];
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    const int64_t m = row0 + 8 * (o / 4) + 2 * tig + (o & 1), n = wrow + grp + 8 * ((o >> 1) & 1);
    valid[o] = m < g.m && n < g.n;
    off[o] = valid[o] ? m * g.n + n : 0;  // loads below are unconditional (no branches)
  }
  SumSplitPartials<kOut, 8 / kNT>(g.partial, g.m * g.n, gridDim.y, off, sum);
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    if (valid[o]) {
      StoreOutput(g, row0 + 8 * (o / 4) + 2 * tig + (o & 1), wrow + grp + 8 * ((o >> 1) & 1),
                  sum[o]);
    }
  }
}

}  // namespace flashserve::kernels::gemm_device
