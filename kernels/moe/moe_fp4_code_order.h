// The device order of the routed experts' FP4 codes: a bit permutation inside every 32-bit word
// of packed E2M1 codes, applied once when the weights are uploaded, that lets the GEMMs decode a
// word with 12 instructions instead of 17 (fp4_code_order.md). Host and device code
// (C++17, no CUDA header); the host test checks every claim below.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FS_MOE_FP4_HD __host__ __device__ __forceinline__
#else
#define FS_MOE_FP4_HD inline
#endif

namespace flashserve::kernels {

// The checkpoint word: 8 E2M1 codes, element n (0..7) in bits 4n..4n+3 (element 2j in the low
// nibble of byte j, little endian); code bit 0 is the mantissa, bits 1, 2 the exponent, bit 3 the
// sign.
//
// What the decoder needs, per pair p (0..3) = elements (p, p + 4): the bits of a bf16x2 equal to
// (value(p), value(p + 4)) × 2^-126 — element p's 3 magnitude bits at bf16 bits 6..8 and its sign
// at bit 15, element p + 4's at 22..24 and 31 (the mask kMoeFp4PairMask) — before one mul.bf16x2
// by 2^126 · scale places the exponent (see DecodeFp4x8 in cuda/moe_device.cuh).
inline constexpr uint32_t kMoeFp4PairMask = 0x81C081C0u;

// The device word stores each pair where one or three instructions bring it to those positions:
//   pair 0: in place                        w & kMoeFp4PairMask
//   pair 1: rotated right by 10             rotl(w, 10) & kMoeFp4PairMask
//   pair 2: rotated right by 13             rotl(w, 13) & kMoeFp4PairMask
//   pair 3: in bits {0,1,3,4} + {0,16}      ((w & kMoeFp4Pair3Bits) · kMoeFp4Pair3Copies) & mask
// Pair 3's multiply makes three shifted copies of its 8 bits (<< 3: the mantissa and the low
// exponent bit; << 8: the high exponent bit; << 14: the sign) that do not overlap, so the sum
// carries nowhere. Per word: 5 LOP3 + 2 SHF (integer pipe), 1 IMAD, and the 4 HMUL2 of the scale
// — against 9 integer-pipe and 4 IMAD instructions for the checkpoint order. No layout makes all
// four pairs one shift and one mask away: the four rotations would have to tile 16 bits with
// copies of {6, 7, 8, 15}, and no four do (searched exhaustively).
inline constexpr int kMoeFp4Pair1Rotate = 10;
inline constexpr int kMoeFp4Pair2Rotate = 13;
inline constexpr uint32_t kMoeFp4Pair3Bits = 0x001B001Bu;
inline constexpr uint32_t kMoeFp4Pair3Copies = (1u << 3) | (1u << 8) | (1u << 14);

FS_MOE_FP4_HD uint32_t MoeFp4Rotl(uint32_t w, int r) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(w, w, static_cast<unsigned>(r));
#else
  return r == 0 ? w : (w << r) | (w >> (32 - r));
#endif
}

// Pair p of a device-order word, as bf16x2 bits × 2^-126 (before the scale multiply).
template <int kPair>
FS_MOE_FP4_HD uint32_t MoeFp4PairBits(uint32_t w) {
  static_assert(kPair >= 0 && kPair < 4);
  if constexpr (kPair == 0) {
    return w & kMoeFp4PairMask;
  } else if constexpr (kPair == 1) {
    return MoeFp4Rotl(w, kMoeFp4Pair1Rotate) & kMoeFp4PairMask;
  } else if constexpr (kPair == 2) {
    return MoeFp4Rotl(w, kMoeFp4Pair2Rotate) & kMoeFp4PairMask;
  } else {
    return ((w & kMoeFp4Pair3Bits) * kMoeFp4Pair3Copies) & kMoeFp4PairMask;
  }
}

// Where checkpoint bit b (element b / 4, code bit b % 4) lives in the device word.
FS_MOE_FP4_HD int MoeFp4DeviceBit(int b) {
  const int n = b / 4, i = b % 4, pair = n % 4, half = n / 4;
  const int target = (i == 3 ? 15 : 6 + i) + 16 * half;  // its bit in the decoded pair
  switch (pair) {
    case 0:
      return target;
    case 1:
      return (target - kMoeFp4Pair1Rotate + 32) % 32;
    case 2:
      return (target - kMoeFp4Pair2Rotate + 32) % 32;
    default: {
      // The copy shift of each code bit (mantissa, exponent 0, exponent 1, sign): 3, 3, 8, 14.
      const int shift = i == 3 ? 14 : (i == 2 ? 8 : 3);
      return target - shift;
    }
  }
}

// The scale side of that multiply. A row's stage scale word s (UE8M0 bytes s_b of its 32-wide
// blocks b = 0..3, every byte <= 128) as two bf16x2 words whose halves are the multipliers
// 2^126 · 2^(s_b - 127) = 2^(s_b - 1), bf16 bits (s_b + 126) << 7: `even` holds blocks 0 (low half)
// and 2, `odd` blocks 1 and 3. The decode of block b multiplies by half b / 2 of word b % 2
// broadcast to both lanes (mul.bf16x2 with a .H0_H0 / .H1_H1 operand, no instruction of its own),
// so a stage's four blocks cost these 5 instructions per row instead of a byte_perm and a shift
// per block (kernels/moe/wgmma_rs_gemm_sessions.md "Session 56").
struct MoeFp4ScalePairs {
  uint32_t even, odd;
};
FS_MOE_FP4_HD MoeFp4ScalePairs MoeFp4ScaleMultiplierPairs(uint32_t s) {
  const uint32_t s126 = s + 0x7E7E7E7Eu;  // no carry between bytes: each is <= 128
  return {(s126 & 0x00FF00FFu) << 7, (s126 & 0xFF00FF00u) >> 1};
}
// The multiplier of block b (0..3) as one bf16: half b / 2 of word b % 2.
FS_MOE_FP4_HD uint32_t MoeFp4ScaleMultiplierOf(const MoeFp4ScalePairs& p, int b) {
  return ((b % 2 == 0 ? p.even : p.odd) >> (16 * (b / 2))) & 0xFFFFu;
}

// A checkpoint word in device order, and back (bit loops: for tests and the upload kernel, where
// the compiler folds the positions; bulk host conversion: MoeFp4CodesToDeviceOrder in moe_cuda.h).
FS_MOE_FP4_HD uint32_t MoeFp4ToDeviceOrder(uint32_t w) {
  uint32_t out = 0;
  for (int b = 0; b < 32; ++b) out |= ((w >> b) & 1u) << MoeFp4DeviceBit(b);
  return out;
}
FS_MOE_FP4_HD uint32_t MoeFp4ToCheckpointOrder(uint32_t w) {
  uint32_t out = 0;
  for (int b = 0; b < 32; ++b) out |= ((w >> MoeFp4DeviceBit(b)) & 1u) << b;
  return out;
}

}  // namespace flashserve::kernels
