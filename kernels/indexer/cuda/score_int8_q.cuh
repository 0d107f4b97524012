// The int8 scorer's q preparation (score_int8_kernel.cuh only; not a public header): one
// (row, head) of q split into int8 mma fragments and the per-head facts the kernel reads
// (README.md "CUDA", "Scores on int8 tensor cores").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/indexer/cuda/indexer_kernels.cuh"
#include "kernels/indexer/cuda/score_int8_common.cuh"

namespace flashserve::kernels::indexer_device {

// The 32 bf16 values of one 32-block of q into v (value d in half d % 2 of v[d / 2]): four 16-byte
// loads where the block is 16-byte aligned, else 32-bit pairs of 2-byte loads.
__device__ __forceinline__ void LoadQBlock(const uint16_t* src, uint32_t (&v)[16]) {
  if ((reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(src) + i);
      v[4 * i] = x.x;
      v[4 * i + 1] = x.y;
      v[4 * i + 2] = x.z;
      v[4 * i + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = static_cast<uint32_t>(__ldg(src + 2 * i)) |
             static_cast<uint32_t>(__ldg(src + 2 * i + 1)) << 16;
    }
  }
}

// A bf16 magnitude (bits without the sign) is Bf16Sig · 2^Bf16Exp: the significand with its
// hidden bit (none for subnormals) and the exponent of its last bit.
__device__ __forceinline__ uint32_t Bf16Sig(uint32_t mag) {
  return (mag & 0x7Fu) | (min(mag, 0x80u) & 0x80u);
}
__device__ __forceinline__ int Bf16Exp(uint32_t mag) {
  return max(static_cast<int>(mag >> 7), 1) - 134;
}

// x >> n with n >= 32 giving 0 (PTX shr clamps the amount; n >= 0 here).
__device__ __forceinline__ uint32_t ShrClamp(uint32_t x, int n) {
  uint32_t r;
  asm("shr.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(n));
  return r;
}

// A nonzero finite bf16 magnitude (bits without the sign): its lowest and highest set bits'
// exponents.
__device__ __forceinline__ void Bf16Exponents(uint32_t mag, int& low, int& top) {
  const int sig = static_cast<int>(Bf16Sig(mag));
  low = Bf16Exp(mag) + __ffs(sig) - 1;
  top = Bf16Exp(mag) + 31 - __clz(sig);
}

// Where PrepareQHeadQuad writes one (row, head): pointers at that entry of the row's arrays (qc:
// block 0's entry; block c is kMmaHeads entries further).
struct QHeadOut {
  uint32_t* dq;
  int* min_q;
  int* budget;
  float* w;
  int* qtot;  // −128·Σ of the head's 128 q bytes: the fast path's accumulator start
  int* klo;   // the head's bounds on min_k for the scaled epilogue (kI8Never: never)
  int* khi;
  uint16_t* wp;  // bf16(w·2^min_q)
  int* qc;       // −128·Σ of block c's q bytes: the shift-combine path's partial start
};

// Splits one (row, head) of q into int8 fragments (q_frag: [block c][n-tile j][lane] uint2) and
// its per-head info (QHeadOut): dq (byte b: block b's exponent above min_q), min_q, budget
// (largest key span the exactness bound allows; −1: every key falls back), w, the bias
// corrections and the scaled epilogue's bounds. A lane quad per (row, head): lane c = 0..3 of the
// quad scans 32-block c of d and writes its fragment bytes; the head's exponent range, validity,
// dq and max |m| are combined over the quad with shuffles (every lane of the warp must call this),
// and lane 0 of the quad stores the head's info.
__device__ __forceinline__ void PrepareQHeadQuad(const uint16_t* qh, uint16_t wbits,
                                                 unsigned char* q_frag, int head, int c,
                                                 const QHeadOut& out) {
  uint32_t qv[16];
  LoadQBlock(qh + 32 * c, qv);
  auto value = [&](int d) { return (qv[d / 2] >> (16 * (d % 2))) & 0xFFFFu; };
  const float wv = Bf16ToFloat(wbits);
  bool ok = fabsf(wv) <= 3.4028234663852886e38f;
  // The block's lowest set bit (lo) over its nonzero values, and its largest magnitude (whose top
  // bit is the block's highest; an inf or NaN makes it >= 0x7F80 and the head falls back).
  int lo = kI8Never;
  uint32_t maxmag = 0;
#pragma unroll
  for (int d = 0; d < 32; ++d) {
    const uint32_t mag = value(d) & 0x7FFFu;
    maxmag = max(maxmag, mag);
    int lsb, top;
    Bf16Exponents(mag, lsb, top);  // top unused: the block's comes from its largest magnitude
    lo = mag != 0 ? min(lo, lsb) : lo;
  }
  if (maxmag >= 0x7F80u) ok = false;
  int hi = -kI8Never;
  if (maxmag != 0) {
    int low;
    Bf16Exponents(maxmag, low, hi);
  }
  const bool nz = lo <= hi;           // a nonzero block; lo = its exponent
  if (nz && hi - lo > 6) ok = false;  // |m| would exceed 127
  int min_q = nz ? lo : kI8Never, max_q = nz ? lo : -kI8Never, top_q = nz ? hi : -kI8Never;
  int ok_all = ok ? 1 : 0;
#pragma unroll
  for (int o = 1; o < kI8Blocks; o *= 2) {
    ok_all &= __shfl_xor_sync(0xFFFFFFFFu, ok_all, o);
    min_q = min(min_q, __shfl_xor_sync(0xFFFFFFFFu, min_q, o));
    max_q = max(max_q, __shfl_xor_sync(0xFFFFFFFFu, max_q, o));
    top_q = max(top_q, __shfl_xor_sync(0xFFFFFFFFu, top_q, o));
  }
  ok = ok_all != 0;
  if (min_q > max_q) min_q = max_q = top_q = 0;  // an all-zero head
  if (min_q < kI8MinQLo || min_q > kI8MinQHi || max_q - min_q > 24) ok = false;
  // Folded: every value of the head is an integer multiple of 2^min_q below 2^(top_q + 1), so
  // v / 2^min_q fits int8 when top_q − min_q <= 6; the bytes then carry the block shifts and dq is
  // 0 (the same value per d: the block's integer P_b comes out already shifted).
  const bool fold = ok && top_q - min_q <= 6;
  // m = value / 2^base exactly (an integer: base <= the value's lowest set bit; 0 for ±0);
  // Mq (the budget's, unfolded) is that of the largest magnitude.
  const int base = fold ? min_q : lo;
  int mq =
      nz && ok ? static_cast<int>(ShrClamp(Bf16Sig(maxmag) << 7, 7 + lo - Bf16Exp(maxmag))) : 0;
  int qsum = 0;
  uint32_t dq = nz && ok && !fold ? static_cast<uint32_t>(lo - min_q) << (8 * c) : 0u;
  const int j = (head % 8) / 2, gg = 2 * (head / 8) + head % 2;
  uint32_t frag = 0;  // the 4 bytes d − d % 4 .. of the register being built
#pragma unroll
  for (int d = 0; d < 32; ++d) {
    const uint32_t b = value(d);
    const uint32_t mag = b & 0x7FFFu;
    const int mu = static_cast<int>(ShrClamp(Bf16Sig(mag) << 7, 7 + base - Bf16Exp(mag)));
    const int m = (b & 0x8000u) != 0 ? -mu : mu;  // garbage on a head that falls back: unused
    qsum += m;
    // d = 8t + i within the block: lane (gg, t), register i / 4, byte i % 4; one 4-byte store
    // per register.
    const uint32_t byte = static_cast<uint32_t>(m) & 0xFFu;
    frag = d % 4 == 0 ? byte : frag | byte << (8 * (d % 4));
    if (d % 4 == 3) {
      *reinterpret_cast<uint32_t*>(q_frag + ((c * 4 + j) * 32 + gg * 4 + d / 8) * 8 +
                                   ((d % 8) / 4) * 4) = frag;
    }
  }
  out.qc[c * kMmaHeads] = -128 * qsum;
  int qtot = qsum;
#pragma unroll
  for (int o = 1; o < kI8Blocks; o *= 2) {
    dq |= __shfl_xor_sync(0xFFFFFFFFu, dq, o);
    mq = max(mq, __shfl_xor_sync(0xFFFFFFFFu, mq, o));
    qtot += __shfl_xor_sync(0xFFFFFFFFu, qtot, o);
  }
  if (c != 0) return;
  int budget = -1;
  if (ok) {
    if (mq == 0) {
      budget = 64;  // every product is ±0
    } else {
      for (int s = 24 - (max_q - min_q); s >= 0; --s) {
        if ((int64_t{1536} * mq << (s + max_q - min_q)) < (int64_t{1} << 24)) {
          budget = s;
          break;
        }
      }
    }
  }
  // The scaled epilogue's bounds (README "The scaled epilogue"): with w = ±0 only q's own grid
  // counts; otherwise the lowest bit of w·2^min_q must stay on the bf16 grid and its top below
  // 2^kI8TopExp in both scalings.
  int klo = kI8Never, khi = -kI8Never;
  if (ok) {
    int low = min_q, top = -kI8Never;
    if ((wbits & 0x7FFFu) != 0) {
      int wl, wt;
      Bf16Exponents(wbits & 0x7FFFu, wl, wt);
      low = min(low, wl + min_q);
      top = wt + min_q;
    }
    if (low >= kI8GridExp && top <= kI8TopExp) {
      klo = kI8GridExp - low;
      khi = top == -kI8Never ? kI8Never : kI8TopExp - top;
    }
  }
  *out.dq = dq;
  *out.min_q = min_q;
  *out.budget = budget;
  *out.w = wv;
  *out.qtot = -128 * qtot;
  *out.klo = klo;
  *out.khi = khi;
  // Exact wherever klo is finite (w·2^min_q is then a bf16 value); unused otherwise.
  *out.wp = FloatToBf16(wv * Pow2(min(max(min_q, kI8MinQLo), kI8MinQHi)));
}

}  // namespace flashserve::kernels::indexer_device
