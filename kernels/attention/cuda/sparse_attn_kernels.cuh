// Device bodies of LaunchSparseAttn (launcher in sparse_attn_launch.cu; design in README.md
// "CUDA").
//
// TensorKernel<kD, kMT>: a CTA of 4·kMT warps takes one unit = (token, group of 16·kMT heads,
// split of the list). The group's queries sit in shared memory (bf16, zero rows for missing heads)
// for the whole unit; the list is walked in blocks of 64 entries, each block's rows gathered with
// cp.async into one of two buffers (the next block loads while this one is computed; invalid
// entries are zero-filled). Per block:
//   S = Q·K^T   warp (mt, quarter) computes heads mt·16.., entries quarter·16.. over all kD dims
//               (mma.sync m16n8k16, bf16 in, fp32 out), × scale, -inf where the entry is invalid;
//   softmax     warp w owns heads 4w..4w+3: block max, m' = max(m, ·), α = exp(m − m'),
//               p = exp(l − m') (fp32, summed by a warp tree into denom·α + Σp), bf16(p) to smem;
//   P·V         warp (mt, quarter) computes heads mt·16.., dims quarter·kD/4.. as a block partial
//               Σ bf16(p)·v (fresh fp32 accumulators, 4 n-tiles at a time), then acc·α + partial.
// The last split step either writes o = bf16(acc / (denom + exp(sink − m))) or, with several
// splits, the state (m, denom, acc) to the workspace for CombineKernel. Shared-memory rows are
// XOR-swizzled in 16-byte chunks (chunk ^ (row & 7)) so that ldmatrix hits 8 distinct bank groups.
//
// ScalarKernel: a CTA of kScalarThreads per (token, head), the CPU body's fp32 operations in its
// order (dot products ascending over head_dim, block sums in list order, products and sums
// rounded separately), for shapes the tensor path does not take.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_device.cuh"

namespace flashserve::kernels::attn_device {

// ---- tensor-core path -------------------------------------------------------------------------

template <int kD, int kMT>
struct TensorShape {
  static constexpr int kHeads = 16 * kMT;  // head slots per CTA
  static constexpr int kWarps = 4 * kMT;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kChunks = kD / 8;            // 16-byte chunks per row
  static constexpr int kWarpDims = kD / 4;          // P·V columns per warp
  static constexpr int kWarpTiles = kWarpDims / 8;  // n-tiles per warp
  static constexpr size_t kQBytes = size_t{kHeads} * kD * 2;
  static constexpr size_t kKvBytes = size_t{kBlock} * kD * 2;
  static constexpr size_t kSBytes = size_t{kHeads} * kSRowFloats * 4;
  static constexpr size_t kPBytes = size_t{kHeads} * kBlock * 2;
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKvOff = kQOff + kQBytes;  // two buffers
  static constexpr size_t kSOff = kKvOff + 2 * kKvBytes;
  static constexpr size_t kPOff = kSOff + kSBytes;
  static constexpr size_t kIdxOff = kPOff + kPBytes;  // int32 [2][64]
  static constexpr size_t kAlphaOff = kIdxOff + 2 * kBlock * 4;
  static constexpr size_t kDenOff = kAlphaOff + kHeads * 4;
  static constexpr size_t kSmemBytes = kDenOff + kHeads * 4;
  static_assert(kD % 128 == 0 && kWarpTiles % 4 == 0, "P·V walks 4 n-tiles at a time");
  static_assert(kChunks >= 8, "the swizzle needs 8 chunks per row");
};

// Issues the cp.async copies of block `blk` (list positions blk·64 ..) into buffer `buf`, and the
// block's rows (or -1) into s_idx[buf].
template <int kD, int kMT>
__device__ __forceinline__ void LoadBlock(const SparseAttnParams& p, int64_t t, int64_t blk,
                                          int buf, uint8_t* smem) {
  using S = TensorShape<kD, kMT>;
  const uint32_t kv_base = SmemAddr(smem + S::kKvOff + buf * S::kKvBytes);
  const int64_t pos0 = blk * kBlock;
  for (int c = threadIdx.x; c < kBlock * S::kChunks; c += S::kThreads) {
    const int e = c / S::kChunks;
    const int chunk = c % S::kChunks;
    const int64_t row = RowOf(p, t, pos0 + e);
    const uint16_t* src = row >= 0 ? p.kv + row * p.kv_stride + chunk * 8 : p.q;
    CpAsync16(kv_base + Swz<S::kChunks>(e, chunk), src, row >= 0);
  }
  if (threadIdx.x < kBlock) {
    auto* s_idx = reinterpret_cast<int32_t*>(smem + S::kIdxOff) + buf * kBlock;
    s_idx[threadIdx.x] = static_cast<int32_t>(RowOf(p, t, pos0 + threadIdx.x));
  }
}

template <int kD, int kMT>
__global__ void __launch_bounds__(TensorShape<kD, kMT>::kThreads, 1)
    TensorKernel(const SparseAttnParams p, const Geometry geo) {
  using S = TensorShape<kD, kMT>;
  extern __shared__ __align__(128) uint8_t smem[];
  auto* s_s = reinterpret_cast<float*>(smem + S::kSOff);
  auto* s_p = reinterpret_cast<uint16_t*>(smem + S::kPOff);
  auto* s_idx = reinterpret_cast<const int32_t*>(smem + S::kIdxOff);
  auto* s_alpha = reinterpret_cast<float*>(smem + S::kAlphaOff);
  auto* s_den = reinterpret_cast<float*>(smem + S::kDenOff);
  const uint32_t q_base = SmemAddr(smem + S::kQOff);
  const uint32_t p_base = SmemAddr(s_p);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int mt = warp / 4;       // m-tile (16 heads) of this warp in S and P·V
  const int quarter = warp % 4;  // entries quarter·16.. in S, dims quarter·kD/4.. in P·V
  const int g = lane / 4;        // accumulator rows g, g + 8; columns 2·(lane % 4) + {0, 1}
  const int c2 = 2 * (lane % 4);
  const int64_t n_blocks = (p.width + kBlock - 1) / kBlock;
  LaunchDependents();  // the combine kernel (if any) may take idle SMs and wait there

  for (int64_t unit = blockIdx.x; unit < geo.units; unit += gridDim.x) {
    const UnitSpan u = UnitOf(geo, unit, n_blocks, S::kHeads);
    const int64_t t = u.t, h0 = u.h0, blk_begin = u.blk_begin, blk_end = u.blk_end;

    // Queries of the group (zero rows past the last head).
    for (int c = threadIdx.x; c < S::kHeads * S::kChunks; c += S::kThreads) {
      const int r = c / S::kChunks;
      const int chunk = c % S::kChunks;
      const bool valid = h0 + r < p.heads;
      const uint16_t* src =
          valid ? p.q + t * p.q_stride + (h0 + r) * p.q_head_stride + chunk * 8 : p.q;
      CpAsync16(q_base + Swz<S::kChunks>(r, chunk), src, valid);
    }
    if (blk_begin < blk_end) LoadBlock<kD, kMT>(p, t, blk_begin, 0, smem);
    CpAsyncCommit();

    float acc[S::kWarpTiles][4];
#pragma unroll
    for (int n = 0; n < S::kWarpTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m_run[4], den_run[4];  // softmax state of heads 4·warp + i (same in every lane)
#pragma unroll
    for (int i = 0; i < 4; ++i) m_run[i] = kInitMax, den_run[i] = 0.0f;
    bool seen = false;  // any valid entry in this unit's range (uniform over the CTA)

    for (int64_t blk = blk_begin; blk < blk_end; ++blk) {
      const int buf = static_cast<int>((blk - blk_begin) & 1);
      if (blk + 1 < blk_end) LoadBlock<kD, kMT>(p, t, blk + 1, buf ^ 1, smem);
      CpAsyncCommit();
      CpAsyncWait<1>();  // everything but the group just committed: this block (and Q) landed
      __syncthreads();
      const int32_t* idx = s_idx + buf * kBlock;
      if (!__any_sync(0xFFFFFFFFu, idx[lane] >= 0 || idx[lane + 32] >= 0)) {
        __syncthreads();  // skipped block: nothing to fold (the CPU skips it too)
        continue;
      }
      seen = true;
      const uint32_t kv_base = SmemAddr(smem + S::kKvOff + buf * S::kKvBytes);

      // S = Q·K^T for heads mt·16.., entries quarter·16..
      float sacc[2][4] = {};
#pragma unroll 4
      for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t a[4], b[4];
        LdMatrixX4(a, q_base + Swz<S::kChunks>(mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                               2 * ks + (lane >> 4)));
        LdMatrixX4(b, kv_base + Swz<S::kChunks>(quarter * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                2 * ks + ((lane >> 3) & 1)));
        Mma(sacc[0], a, b[0], b[1]);
        Mma(sacc[1], a, b[2], b[3]);
      }
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = mt * 16 + g + (i >> 1) * 8;
          const int e = quarter * 16 + n * 8 + c2 + (i & 1);
          s_s[row * kSRowFloats + e] =
              idx[e] >= 0 ? __fmul_rn(sacc[n][i], p.softmax_scale) : -INFINITY;
        }
      }
      __syncthreads();

      // Online softmax of heads 4·warp + i over this block.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = warp * 4 + i;
        const float l0 = s_s[row * kSRowFloats + lane];
        const float l1 = s_s[row * kSRowFloats + lane + 32];
        float bmax = fmaxf(l0, l1);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) bmax = fmaxf(bmax, __shfl_xor_sync(0xFFFFFFFFu, bmax, o));
        const float m_new = fmaxf(m_run[i], bmax);
        const float alpha = ExpF(__fsub_rn(m_run[i], m_new));
        const float p0 = ExpF(__fsub_rn(l0, m_new));
        const float p1 = ExpF(__fsub_rn(l1, m_new));
        float bsum = __fadd_rn(p0, p1);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          bsum = __fadd_rn(bsum, __shfl_xor_sync(0xFFFFFFFFu, bsum, o));
        }
        den_run[i] = __fadd_rn(__fmul_rn(den_run[i], alpha), bsum);
        m_run[i] = m_new;
        // bf16(p) at entry e of row `row`: chunk e / 8 of the swizzled [heads][8 chunks] tile.
        const int e1 = lane + 32;
        s_p[Swz<8>(row, lane / 8) / 2 + lane % 8] = Bf16Bits(p0);
        s_p[Swz<8>(row, e1 / 8) / 2 + e1 % 8] = Bf16Bits(p1);
        if (lane == 0) s_alpha[row] = alpha;
      }
      __syncthreads();

      // acc = acc·α + Σ bf16(p)·v for heads mt·16.., dims quarter·kD/4..
      const float alpha_lo = s_alpha[mt * 16 + g];
      const float alpha_hi = s_alpha[mt * 16 + g + 8];
#pragma unroll
      for (int c = 0; c < S::kWarpTiles / 4; ++c) {
        float part[4][4] = {};
#pragma unroll
        for (int ks = 0; ks < kBlock / 16; ++ks) {
          uint32_t a[4];
          LdMatrixX4(a, p_base + Swz<8>(mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                        2 * ks + (lane >> 4)));
#pragma unroll
          for (int pair = 0; pair < 2; ++pair) {
            const int chunk = quarter * (S::kWarpDims / 8) + c * 4 + pair * 2 + (lane >> 4);
            uint32_t b[4];
            LdMatrixX4Trans(
                b, kv_base + Swz<S::kChunks>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, chunk));
            Mma(part[pair * 2], a, b[0], b[1]);
            Mma(part[pair * 2 + 1], a, b[2], b[3]);
          }
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float& x = acc[c * 4 + n][i];
            x = __fadd_rn(__fmul_rn(x, i < 2 ? alpha_lo : alpha_hi), part[n][i]);
          }
        }
      }
      __syncthreads();  // the next iteration's loads reuse this block's buffer and s_idx
    }

    if (geo.splits == 1) {
      // o = bf16(acc / (denom + exp(sink − m))), or +0 for a row without any valid entry.
      if (lane == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t h = h0 + warp * 4 + i;
          const float sink = h < p.heads ? p.attn_sink[h] : 0.0f;
          s_den[warp * 4 + i] = __fadd_rn(den_run[i], ExpF(__fsub_rn(sink, m_run[i])));
        }
      }
      __syncthreads();
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = mt * 16 + g + half * 8;
        const int64_t h = h0 + row;
        if (h >= p.heads) continue;
        const float den = s_den[row];
        uint16_t* o = p.out + t * p.out_stride + h * p.out_head_stride + quarter * S::kWarpDims;
#pragma unroll
        for (int n = 0; n < S::kWarpTiles; ++n) {
          const float v0 = seen ? __fdiv_rn(acc[n][half * 2], den) : 0.0f;
          const float v1 = seen ? __fdiv_rn(acc[n][half * 2 + 1], den) : 0.0f;
          const uint32_t packed =
              static_cast<uint32_t>(Bf16Bits(v0)) | (static_cast<uint32_t>(Bf16Bits(v1)) << 16);
          *reinterpret_cast<uint32_t*>(o + n * 8 + c2) = packed;
        }
      }
    } else {
      // The split's state for CombineKernel: [m, denom, acc[kD]] per head slot.
      float* st = geo.state + unit * S::kHeads * (kD + 2);
      if (lane == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          st[(warp * 4 + i) * (kD + 2)] = m_run[i];
          st[(warp * 4 + i) * (kD + 2) + 1] = den_run[i];
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float* row = st + (mt * 16 + g + half * 8) * (kD + 2) + 2 + quarter * S::kWarpDims;
#pragma unroll
        for (int n = 0; n < S::kWarpTiles; ++n) {
          row[n * 8 + c2] = acc[n][half * 2];
          row[n * 8 + c2 + 1] = acc[n][half * 2 + 1];
        }
      }
    }
    CpAsyncWait<0>();
    __syncthreads();  // the next unit reuses Q, the buffers and s_den
  }
}

// Merges the split states of one (token, head) per CTA: M = max m_s, w_s = exp(m_s − M),
// o = bf16(Σ_s w_s·acc_s / (Σ_s w_s·denom_s + exp(sink − M))), splits in ascending order; +0 when
// no split saw a valid entry (then every denom_s is 0, while a valid entry contributes p = 1).
// The weights are computed once per (token, head) into shared memory (at most
// kSparseAttnCudaSplitCtas splits); thread i then owns dims i, i + 128, .. (head_dim <= 512) and
// walks the splits in order, so the loads of a split do not wait on the previous split's sums.
// Launched as a programmatic dependent of the split kernel: it waits for it before reading.
template <int kHeadsPerCta>
__global__ void __launch_bounds__(kCombineThreads)
    CombineKernel(const SparseAttnParams p, const Geometry geo) {
  __shared__ float s_w[kSparseAttnCudaSplitCtas];
  __shared__ float s_den;
  // The kernel after the attention (wo_a's swapped-role Linear, a LaunchPdl launch) may take the
  // idle SMs now and request its weights there; it waits for this grid before it reads o.
  LaunchDependents();
  WaitPrerequisiteGrids();
  const int64_t d = p.head_dim;
  const int tid = threadIdx.x;
  for (int64_t th = blockIdx.x; th < p.tokens * p.heads; th += gridDim.x) {
    const int64_t t = th / p.heads;
    const int64_t h = th % p.heads;
    const int64_t item = t * geo.groups + h / kHeadsPerCta;
    const float* st0 = geo.state + (item * geo.splits * kHeadsPerCta + h % kHeadsPerCta) * (d + 2);
    const int64_t split_pitch = kHeadsPerCta * (d + 2);
    // Every thread takes the max (the m_s are few and cached); thread s computes w_s.
    float mx = kInitMax;
    for (int64_t s = 0; s < geo.splits; ++s) mx = fmaxf(mx, st0[s * split_pitch]);
    for (int64_t s = tid; s < geo.splits; s += kCombineThreads) {
      s_w[s] = ExpF(__fsub_rn(st0[s * split_pitch], mx));
    }
    __syncthreads();
    if (tid == 0) {
      float den = 0.0f;
      for (int64_t s = 0; s < geo.splits; ++s) {
        den = __fadd_rn(den, __fmul_rn(st0[s * split_pitch + 1], s_w[s]));
      }
      // seen ⇔ den > 0; the sink is added after the test (see above).
      s_den = den > 0.0f ? __fadd_rn(den, ExpF(__fsub_rn(p.attn_sink[h], mx))) : 0.0f;
    }
    float a[kCombinePerThread];
#pragma unroll
    for (int j = 0; j < kCombinePerThread; ++j) a[j] = 0.0f;
#pragma unroll 2
    for (int64_t s = 0; s < geo.splits; ++s) {
      const float* st = st0 + s * split_pitch + 2;
      const float w = s_w[s];
#pragma unroll
      for (int j = 0; j < kCombinePerThread; ++j) {
        const int64_t i = tid + j * kCombineThreads;
        if (i < d) a[j] = __fadd_rn(a[j], __fmul_rn(st[i], w));
      }
    }
    __syncthreads();  // s_den written
    const float den = s_den;
    uint16_t* o = p.out + t * p.out_stride + h * p.out_head_stride;
#pragma unroll
    for (int j = 0; j < kCombinePerThread; ++j) {
      const int64_t i = tid + j * kCombineThreads;
      if (i < d) o[i] = den > 0.0f ? Bf16Bits(__fdiv_rn(a[j], den)) : uint16_t{0};
    }
    __syncthreads();  // s_w / s_den are rewritten for the next (token, head)
  }
}

// ---- scalar path ------------------------------------------------------------------------------

// Dynamic shared memory: q and acc (fp32 [head_dim] each), then the block's logits, bf16(p) as
// fp32 and rows (64 each), and the broadcast scalars.
__global__ void __launch_bounds__(kScalarThreads) ScalarKernel(const SparseAttnParams p) {
  extern __shared__ __align__(16) float sm[];
  const int64_t d = p.head_dim;
  float* s_q = sm;
  float* s_acc = s_q + d;
  float* s_logit = s_acc + d;
  float* s_pb = s_logit + kBlock;
  auto* s_row = reinterpret_cast<int64_t*>(s_pb + kBlock);    // 8-byte aligned: d, 64 even
  float* s_bcast = reinterpret_cast<float*>(s_row + kBlock);  // alpha, denominator, skip flag
  const int tid = threadIdx.x;
  for (int64_t th = blockIdx.x; th < p.tokens * p.heads; th += gridDim.x) {
    const int64_t t = th / p.heads;
    const int64_t h = th % p.heads;
    const uint16_t* q = p.q + t * p.q_stride + h * p.q_head_stride;
    for (int64_t i = tid; i < d; i += kScalarThreads) {
      s_q[i] = Bf16ToFloat(q[i]);
      s_acc[i] = 0.0f;
    }
    float m = kInitMax;  // thread 0's copy is the one used
    float den = 0.0f;
    bool seen = false;
    for (int64_t b0 = 0; b0 < p.width; b0 += kBlock) {
      if (tid < kBlock) s_row[tid] = RowOf(p, t, b0 + tid);
      __syncthreads();
      if (tid < kBlock && s_row[tid] >= 0) {
        const uint16_t* k = p.kv + s_row[tid] * p.kv_stride;
        float dot = 0.0f;
        for (int64_t i = 0; i < d; ++i) dot = __fadd_rn(dot, __fmul_rn(s_q[i], Bf16ToFloat(k[i])));
        s_logit[tid] = __fmul_rn(dot, p.softmax_scale);
      }
      __syncthreads();
      if (tid == 0) {
        float bmax = -INFINITY;
        bool any = false;
        for (int e = 0; e < kBlock; ++e) {
          if (s_row[e] >= 0) bmax = fmaxf(bmax, s_logit[e]), any = true;
        }
        if (any) {
          const float m_new = fmaxf(m, bmax);
          const float alpha = ExpF(__fsub_rn(m, m_new));
          float bsum = 0.0f;
          for (int e = 0; e < kBlock; ++e) {
            if (s_row[e] < 0) {
              s_pb[e] = 0.0f;
              continue;
            }
            const float pe = ExpF(__fsub_rn(s_logit[e], m_new));
            bsum = __fadd_rn(bsum, pe);
            s_pb[e] = Bf16Round(pe);
          }
          den = __fadd_rn(__fmul_rn(den, alpha), bsum);
          m = m_new;
          s_bcast[0] = alpha;
        }
        s_bcast[2] = any ? 1.0f : 0.0f;
      }
      __syncthreads();
      if (s_bcast[2] != 0.0f) {
        seen = true;
        const float alpha = s_bcast[0];
        for (int64_t i = tid; i < d; i += kScalarThreads) {
          float part = 0.0f;
          for (int e = 0; e < kBlock; ++e) {
            const float pb = s_pb[e];
            if (s_row[e] < 0 || pb == 0.0f) continue;
            part = __fadd_rn(part, __fmul_rn(pb, Bf16ToFloat(p.kv[s_row[e] * p.kv_stride + i])));
          }
          s_acc[i] = __fadd_rn(__fmul_rn(s_acc[i], alpha), part);
        }
      }
      __syncthreads();
    }
    if (tid == 0) s_bcast[1] = __fadd_rn(den, ExpF(__fsub_rn(p.attn_sink[h], m)));
    __syncthreads();
    const float total = s_bcast[1];
    uint16_t* o = p.out + t * p.out_stride + h * p.out_head_stride;
    for (int64_t i = tid; i < d; i += kScalarThreads) {
      o[i] = seen ? Bf16Bits(__fdiv_rn(s_acc[i], total)) : uint16_t{0};
    }
    __syncthreads();  // s_q / s_acc are reloaded for the next unit
  }
}

inline size_t ScalarSmemBytes(int64_t head_dim) {
  return static_cast<size_t>(2 * head_dim + 2 * kBlock) * sizeof(float) + kBlock * sizeof(int64_t) +
         4 * sizeof(float);
}

}  // namespace flashserve::kernels::attn_device
