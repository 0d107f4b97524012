// Device code of the tensor-core scorer (indexer_launch.cu only; not a public header), for the
// released dims (32 heads × 128) with 16-byte aligned q and key rows. Bit-identical to
// IndexerScoreCpu; README.md "CUDA" gives the proof. In short: mma.sync m16n8k16 (bf16 in, fp32
// accumulation) computes s_tc ≈ Σ_d q·k for a (key, head) pair; the CPU's sequential fp32 sum
// s_cpu and s_tc both lie within their error bounds of the exact sum, so |s_cpu − s_tc| <= D with
//   D = ((d·2^-22 [tensor core, conservative] + d·2^-24 [sequential fp32])·‖q_h‖₂ + 2^-100)
//       · (‖k_t‖₂ + 2^-16)
// (norms rounded upward; the pads cover every underflow / flush effect, and a zero norm gives
// D = 0: the sum is then exactly ±0).
// If every fp32 value in [s_tc − D, s_tc + D] gives the same ReLU(bf16(·)), that is the CPU's
// value; otherwise the pair is recomputed exactly in the CPU's order (fp32 mul + add, d ascending)
// on the CUDA cores ("recheck"). ReLU, × w, the roundings and the head sum from +0 ascending are
// the CPU's operations.
//
// Layout. A CTA of 4 warps holds the q of up to kMmaRows rows of the call in shared memory (in
// mma fragment order) and walks key tiles of 128 positions, grid-stride; each warp takes 32 keys
// straight from global memory into registers (the A operand: M = keys), once for all rows. The
// head dimension d is permuted identically for q and k (lane quad t holds d = 32c + 8t .. + 7 of
// chunk c, one 16-byte load), which leaves every dot product's set of products unchanged. Heads
// are permuted over the B columns so that lane t of a quad holds heads 8t .. 8t + 7 of its keys;
// the bf16 head terms go through shared memory (a key per lane) for the ascending head sum.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels::indexer_device {

inline constexpr int kMmaHeads = 32;
inline constexpr int kMmaDim = 128;
inline constexpr int kMmaRows = 8;  // rows of the call per CTA (keys read once per 8 rows)
inline constexpr int kMmaWarps = 4;
inline constexpr int kMmaThreads = 32 * kMmaWarps;
inline constexpr int kMmaWarpKeys = 32;
inline constexpr int kMmaTileKeys = kMmaWarps * kMmaWarpKeys;
inline constexpr int kMmaQFragWords = kMmaHeads * kMmaDim / 2;  // bf16 pairs of one row's q
inline constexpr int kMmaVRowBytes = 80;  // 32 bf16 head terms + 16 bytes of padding (no conflicts)
inline constexpr int kMmaVBytes = kMmaWarpKeys * kMmaVRowBytes;  // per warp
inline constexpr int kMmaQueue = kMmaWarpKeys * kMmaHeads;       // rechecks per warp and row
// (d·2^-22 + d·2^-24) for d = 128: 2^-15 + 2^-17.
inline constexpr float kMmaErrorCoef = 3.814697265625e-05f;
inline constexpr float kMmaQPad = 7.888609052210118e-31f;    // 2^-100
inline constexpr float kMmaKPad = 1.52587890625e-05f;        // 2^-16
inline constexpr float kMmaMaxNorm = 1.125899906842624e15f;  // 2^50

// Dynamic shared memory of IndexerScoreMmaKernel for `rows` (<= kMmaRows) rows per CTA.
inline size_t ScoreMmaSmemBytes(int rows) {
  return static_cast<size_t>(rows) * (kMmaQFragWords * 4 + 2 * kMmaHeads * 4) + 32 +
         static_cast<size_t>(kMmaWarps) * (kMmaVBytes + kMmaQueue * 2);
}

__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// fp32 bits whose upper half is bf16(x), round to nearest even: FloatToBf16 without its NaN branch
// (subnormal and overflowing x included; no reliance on the conversion instructions' FTZ rules).
__device__ __forceinline__ uint32_t RneBf16High(float x) {
  const uint32_t bits = __float_as_uint(x);
  return bits + 0x7FFFu + ((bits >> 16) & 1u);
}

// {hi: bf16(a), lo: bf16(b)} for non-NaN a, b.
__device__ __forceinline__ uint32_t PackBf16x2(float a, float b) {
  return __byte_perm(RneBf16High(b), RneBf16High(a), 0x7632);
}

__device__ __forceinline__ float LowBf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float HighBf16(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// Upper bound of Σ x² over the 8 bf16 of v, added to acc (every step rounded up).
__device__ __forceinline__ float AddSquaresUp(const uint4& v, float acc) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float lo = LowBf16(words[i]), hi = HighBf16(words[i]);
    acc = __fmaf_ru(lo, lo, acc);
    acc = __fmaf_ru(hi, hi, acc);
  }
  return acc;
}

// The CPU's qk for (q row qh, key row kr): fp32 mul then add, d ascending, from +0.
__device__ __forceinline__ float ExactDot(const uint16_t* qh, const uint16_t* kr) {
  float acc = 0.0f;
#pragma unroll 4
  for (int c = 0; c < kMmaDim / 8; ++c) {
    const uint4 qv = __ldg(reinterpret_cast<const uint4*>(qh) + c);
    const uint4 kv = __ldg(reinterpret_cast<const uint4*>(kr) + c);
    const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w}, kw[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc = __fadd_rn(acc, __fmul_rn(LowBf16(qw[i]), LowBf16(kw[i])));
      acc = __fadd_rn(acc, __fmul_rn(HighBf16(qw[i]), HighBf16(kw[i])));
    }
  }
  return acc;
}

__device__ __forceinline__ bool Visible(const IndexerScoreParams& p, int64_t row, int64_t reach,
                                        int64_t t) {
  return t < reach && (p.candidates == nullptr || p.candidates[row * p.candidates_stride + t] != 0);
}

// grid.x walks key tiles (grid-stride), grid.y groups of kMmaRows rows.
__global__ void __launch_bounds__(kMmaThreads) IndexerScoreMmaKernel(IndexerScoreParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int rows_cap = static_cast<int>(p.tokens < kMmaRows ? p.tokens : kMmaRows);
  uint4* q_frag = reinterpret_cast<uint4*>(smem);  // [row][n-tile j][chunk c][lane]
  float* a_s = reinterpret_cast<float*>(q_frag + rows_cap * (kMmaQFragWords / 4));  // [row][h]
  float* w_s = a_s + rows_cap * kMmaHeads;                                          // [row][h]
  int* row_ok = reinterpret_cast<int*>(w_s + rows_cap * kMmaHeads);
  unsigned char* v_s = reinterpret_cast<unsigned char*>(row_ok + 8) + warp * kMmaVBytes;
  uint16_t* queue = reinterpret_cast<uint16_t*>(reinterpret_cast<unsigned char*>(row_ok + 8) +
                                                kMmaWarps * kMmaVBytes) +
                    warp * kMmaQueue;
  const int64_t tiles = (p.width + kMmaTileKeys - 1) / kMmaTileKeys;
  const int64_t groups = (p.tokens + kMmaRows - 1) / kMmaRows;
  unsigned long long rechecks = 0;

  for (int64_t group = blockIdx.y; group < groups; group += gridDim.y) {
    const int64_t row0 = group * kMmaRows;
    const int nrows = static_cast<int>(p.tokens - row0 < kMmaRows ? p.tokens - row0 : kMmaRows);
    __syncthreads();  // the previous group's readers are done
    if (tid < kMmaRows) row_ok[tid] = 1;
    __syncthreads();
    // q in fragment order: n-tile j, column gg holds head 8(gg / 2) + 2j + gg % 2; chunk c of
    // lane (gg, tt) is q[head][32c + 8tt .. + 7].
    for (int i = tid; i < nrows * (kMmaQFragWords / 4); i += kMmaThreads) {
      const int r = i / (kMmaQFragWords / 4), rem = i % (kMmaQFragWords / 4);
      const int j = rem / 128, c = (rem / 32) % 4, l = rem % 32;
      const int gg = l / 4, tt = l % 4;
      const int head = 8 * (gg / 2) + 2 * j + gg % 2;
      q_frag[i] = __ldg(reinterpret_cast<const uint4*>(p.q + (row0 + r) * p.q_stride +
                                                       head * kMmaDim + 32 * c + 8 * tt));
    }
    // Per (row, head): the error coefficient times ‖q_h‖ (rounded up) and w as fp32.
    for (int i = tid; i < nrows * kMmaHeads; i += kMmaThreads) {
      const int r = i / kMmaHeads, h = i % kMmaHeads;
      const uint16_t* qh = p.q + (row0 + r) * p.q_stride + h * kMmaDim;
      float sq = 0.0f;
      for (int c = 0; c < kMmaDim / 8; ++c) {
        sq = AddSquaresUp(__ldg(reinterpret_cast<const uint4*>(qh) + c), sq);
      }
      const float norm = __fsqrt_ru(sq);
      const float wv = Bf16ToFloat(p.w[(row0 + r) * p.w_stride + h]);
      a_s[i] = norm == 0.0f ? 0.0f : __fadd_ru(__fmul_ru(kMmaErrorCoef, norm), kMmaQPad);
      w_s[i] = wv;
      if (!(norm <= kMmaMaxNorm) || !(fabsf(wv) <= 3.4028234663852886e38f)) row_ok[r] = 0;
    }
    __syncthreads();

    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int64_t wk0 = tile * kMmaTileKeys + warp * kMmaWarpKeys;  // the warp's first key
      if (wk0 >= Reach(p.start_pos, p.ratio, row0 + nrows - 1)) {     // no row sees these keys
        for (int r = 0; r < nrows; ++r) {
          if (wk0 + lane < p.width)
            p.scores[(row0 + r) * p.scores_stride + wk0 + lane] = kBf16NegInf;
        }
        continue;
      }
      // A operand: key slot kk = 2·mt + half is key wk0 + 16·mt + 8·half + g; chunk c holds
      // k[32c + 8t .. + 7].
      uint4 kf[4][4];
      float knorm[4];
      uint32_t bad_keys = 0;  // element bits (8 per key slot) of keys outside the norm bound
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int64_t key = wk0 + 16 * (kk / 2) + 8 * (kk % 2) + g;
        float sq = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          kf[kk][c] =
              key < p.width
                  ? __ldg(reinterpret_cast<const uint4*>(p.k + key * p.k_stride + 32 * c + 8 * t))
                  : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) sq = AddSquaresUp(kf[kk][c], sq);
        sq = __fadd_ru(sq, __shfl_xor_sync(0xFFFFFFFFu, sq, 1));
        sq = __fadd_ru(sq, __shfl_xor_sync(0xFFFFFFFFu, sq, 2));
        const float norm = __fsqrt_ru(sq);
        if (!(norm <= kMmaMaxNorm)) bad_keys |= 0xFFu << (8 * kk);
        knorm[kk] = norm == 0.0f ? 0.0f : __fadd_ru(norm, kMmaKPad);
      }

      for (int r = 0; r < nrows; ++r) {
        const int64_t row = row0 + r;
        const int64_t reach = Reach(p.start_pos, p.ratio, row);
        uint16_t* out = p.scores + row * p.scores_stride;
        if (wk0 >= reach) {  // warp-uniform
          if (wk0 + lane < p.width) out[wk0 + lane] = kBf16NegInf;
          continue;
        }
        float acc[2][4][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.0f;
          }
        }
        const uint4* qf = q_frag + r * (kMmaQFragWords / 4);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint4 b = qf[(j * 4 + c) * 32 + lane];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              const uint4& k0 = kf[2 * mt][c];
              const uint4& k1 = kf[2 * mt + 1][c];
              MmaBf16(acc[mt][j], k0.x, k1.x, k0.y, k1.y, b.x, b.y);  // k-step 2c
              MmaBf16(acc[mt][j], k0.z, k1.z, k0.w, k1.w, b.z, b.w);  // k-step 2c + 1
            }
          }
        }
        // Heads 8t .. 8t + 7 of this lane: error coefficients and w.
        float a[8], wv[8];
        {
          const float4* a4 = reinterpret_cast<const float4*>(a_s + r * kMmaHeads + 8 * t);
          const float4* w4 = reinterpret_cast<const float4*>(w_s + r * kMmaHeads + 8 * t);
          const float4 a0 = a4[0], a1 = a4[1], w0 = w4[0], w1 = w4[1];
          a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w;
          a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
          wv[0] = w0.x, wv[1] = w0.y, wv[2] = w0.z, wv[3] = w0.w;
          wv[4] = w1.x, wv[5] = w1.y, wv[6] = w1.z, wv[7] = w1.w;
        }
        uint32_t fail = 0, visible = 0;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int mt = kk / 2, half = kk % 2;
          const int key_local = 16 * mt + 8 * half + g;
          if (Visible(p, row, reach, wk0 + key_local)) visible |= 0xFFu << (8 * kk);
          float v[8];
#pragma unroll
          for (int hh = 0; hh < 8; ++hh) {
            const float s = acc[mt][hh / 2][2 * half + hh % 2];
            const float bound = __fmul_ru(a[hh], knorm[kk]);
            const float hi = __fadd_ru(s, bound), lo = __fsub_rd(s, bound);
            const uint32_t hb = __float_as_uint(hi) + 0x8000u, lb = __float_as_uint(lo) + 0x7FFFu;
            // Every value in [lo, hi] rounds to bf16 hb >> 16 (no tie at either end), or hi <= 0
            // (ReLU gives 0 throughout).
            const bool ok = (hb ^ lb) < 0x10000u || !(hi > 0.0f);
            fail |= (ok ? 0u : 1u) << (8 * kk + hh);
            const float relu = fmaxf(__uint_as_float(hb & 0xFFFF0000u), 0.0f);
            v[hh] = __fmul_rn(wv[hh], relu);  // a ±0 term does not change the head sum
          }
          uint4 packed;
          packed.x = PackBf16x2(v[1], v[0]);
          packed.y = PackBf16x2(v[3], v[2]);
          packed.z = PackBf16x2(v[5], v[4]);
          packed.w = PackBf16x2(v[7], v[6]);
          *reinterpret_cast<uint4*>(v_s + key_local * kMmaVRowBytes + 16 * t) = packed;
        }
        fail = row_ok[r] != 0 ? (fail | bad_keys) & visible : visible;
        if (__any_sync(0xFFFFFFFFu, fail != 0)) {
          // Compact the failing (lane, element) pairs into the warp's queue, then recompute them
          // 32 at a time, each in the CPU's exact order.
          const int cnt = __popc(fail);
          int incl = cnt;
#pragma unroll
          for (int o = 1; o < 32; o *= 2) {
            const int y = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += y;
          }
          const int total = __shfl_sync(0xFFFFFFFFu, incl, 31);
          int at = incl - cnt;
          for (uint32_t f = fail; f != 0; f &= f - 1) {
            queue[at++] = static_cast<uint16_t>(lane * 32 + __ffs(static_cast<int>(f)) - 1);
          }
          __syncwarp();
          for (int e = lane; e < total; e += 32) {
            const int entry = queue[e];
            const int el = entry / 32, i = entry % 32;
            const int kk = i / 8, head = 8 * (el % 4) + i % 8;
            const int key_local = 16 * (kk / 2) + 8 * (kk % 2) + el / 4;
            const float dot = ExactDot(p.q + row * p.q_stride + head * kMmaDim,
                                       p.k + (wk0 + key_local) * p.k_stride);
            const float qk = RoundToBf16(dot);
            const float relu = qk > 0.0f ? qk : 0.0f;
            const uint16_t term = FloatToBf16(__fmul_rn(w_s[r * kMmaHeads + head], relu));
            *reinterpret_cast<uint16_t*>(v_s + key_local * kMmaVRowBytes + 2 * head) = term;
          }
          rechecks += lane == 0 ? static_cast<unsigned long long>(total) : 0ull;
        }
        __syncwarp();
        // Head sum of key wk0 + lane, heads ascending from +0.
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const uint4 x = *reinterpret_cast<const uint4*>(v_s + lane * kMmaVRowBytes + 16 * c);
          const uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            sum = __fadd_rn(sum, LowBf16(words[i]));
            sum = __fadd_rn(sum, HighBf16(words[i]));
          }
        }
        const int64_t key = wk0 + lane;
        if (key < p.width) out[key] = Visible(p, row, reach, key) ? FloatToBf16(sum) : kBf16NegInf;
        __syncwarp();  // the next row's terms overwrite v_s
      }
    }
  }
  if (p.cuda_rechecks != nullptr && rechecks != 0) atomicAdd(p.cuda_rechecks, rechecks);
}

}  // namespace flashserve::kernels::indexer_device
