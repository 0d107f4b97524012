// Device bodies of the block quantisers (launchers in quant_launch.cu; per-value arithmetic in
// quant_math.h and quant_fast.cuh).
//
// Work split: the matrix is cut into units of 8 consecutive values of a row (16 bf16 bytes). A
// warp takes 32 * kUnitsPerLane consecutive units per step, lane l the units l + 32k, so every
// load and store instruction of the warp covers one contiguous stretch of memory (whole 32-byte
// sectors; half-written sectors cost a DRAM read). A block of 32 values is 4 adjacent lanes, a
// block of 16 is 2; they combine their amax with whole-warp shuffles, which every lane runs (past
// the end of the matrix with zeros; rows hold whole blocks and steps start at multiples of 32
// units, so a block never straddles the end). The warps stride over the flattened unit index
// (grid-stride, persistent grid). Memory-bound: one read of the input, one write of the output, no
// shared memory, loads with the streaming hint.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/cuda/quant_fast.cuh"
#include "kernels/quant/cuda/quant_math.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::quant::device {

inline constexpr int kThreads = 256;
inline constexpr int kUnit = 8;  // values per unit (one 16-byte bf16 access)
// Independent units per lane and warp step. 4 measured the same as 2 on an H200 (FP4 quantise is
// issue-bound, the rest near the copy roofline) and costs registers.
inline constexpr int kUnitsPerLane = 2;

// How a row of codes may be accessed: whole units (8 bytes FP8, 4 bytes FP4), 4-byte words, or
// single bytes. Chosen per launch from the pointer and stride.
enum class CodeAccess { kUnit, kWord, kByte };

// ---- per-format traits ---------------------------------------------------------------------
// Encode(x, scale byte, unit has NaN, codes) and Decode(codes, scale byte, out) of one unit:
// x[j] holds values 2j (low half) and 2j + 1; so does out[j]. The fast paths (quant_fast.cuh)
// cover units without NaN and finite scales; the rest goes value by value through quant_math.h.

template <BlockFormat F>
struct Fmt;

template <>
struct Fmt<BlockFormat::kFp8E4m3Ue8m0B32> {
  static constexpr uint32_t kLanes = 4;  // lanes per 32-value block
  static constexpr int kCodeWords = 2;   // 8 code bytes per unit, value i in byte i
  __device__ static uint32_t ScaleByte(uint32_t amax) { return math::Fp8ScaleByte(amax); }

  __device__ static void Encode(const uint32_t (&x)[4], uint32_t byte, bool has_nan,
                                uint32_t (&codes)[2]) {
    const float recip = math::Ue8m0Reciprocal(byte);
    if (byte != 255u && !has_nan) {
#pragma unroll
      for (int k = 0; k < 2; ++k) codes[k] = EncodeFp8x4(x[2 * k], x[2 * k + 1], recip);
      return;
    }
    uint32_t c[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (byte != 255u) {
        c[2 * j] = math::EncodeFp8(x[j] & 0xFFFFu, recip);
        c[2 * j + 1] = math::EncodeFp8(x[j] >> 16, recip);
      } else {
        c[2 * j] = math::EncodeNanScale(x[j] & 0xFFFFu, 0x7Fu, 0x80u);
        c[2 * j + 1] = math::EncodeNanScale(x[j] >> 16, 0x7Fu, 0x80u);
      }
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      codes[k] = c[4 * k] | (c[4 * k + 1] << 8) | (c[4 * k + 2] << 16) | (c[4 * k + 3] << 24);
    }
  }

  __device__ static void Decode(const uint32_t (&codes)[2], uint32_t byte, uint32_t (&out)[4]) {
    const float scale = math::Ue8m0ToF32(byte);
    if (byte != 255u && !AnyE4m3Nan(codes[0]) && !AnyE4m3Nan(codes[1])) {
#pragma unroll
      for (int j = 0; j < 4; ++j) out[j] = DecodeFp8x2(codes[j / 2] >> (16 * (j % 2)), scale);
      return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = codes[j / 2] >> (16 * (j % 2));
      const uint32_t lo = math::DequantValue(math::E4m3ToF32(word & 0xFFu), scale);
      const uint32_t hi = math::DequantValue(math::E4m3ToF32((word >> 8) & 0xFFu), scale);
      out[j] = lo | (hi << 16);
    }
  }
};

// Shared by both FP4 formats: code byte i holds values 2i (low nibble) and 2i + 1, so code byte
// i comes from bf16 word x[i].
template <typename EncodeValue>
__device__ __forceinline__ uint32_t PackFp4(const uint32_t (&x)[4], EncodeValue encode) {
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    word |= (encode(x[i] & 0xFFFFu) | (encode(x[i] >> 16) << 4)) << (8 * i);
  }
  return word;
}

__device__ __forceinline__ void UnpackFp4(uint32_t codes, float scale, uint32_t (&out)[4]) {
  if (!math::IsNanBits(math::Bits(scale))) {
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = DecodeFp4x2(codes >> (8 * j), scale);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t byte = (codes >> (8 * j)) & 0xFFu;
    const uint32_t lo = math::DequantValue(math::E2m1ToF32(byte & 0xFu), scale);
    const uint32_t hi = math::DequantValue(math::E2m1ToF32(byte >> 4), scale);
    out[j] = lo | (hi << 16);
  }
}

// Both FP4 encoders: 4 code bytes from 4 bf16 words under a positive finite scale with
// reciprocal r = RN(1 / s).
__device__ __forceinline__ uint32_t EncodeFp4Unit(const uint32_t (&x)[4], float r) {
  return EncodeFp4x2(x[0], r) | (EncodeFp4x2(x[1], r) << 8) | (EncodeFp4x2(x[2], r) << 16) |
         (EncodeFp4x2(x[3], r) << 24);
}

template <>
struct Fmt<BlockFormat::kFp4E2m1E4m3B16> {
  static constexpr uint32_t kLanes = 2;  // lanes per 16-value block
  static constexpr int kCodeWords = 1;   // 4 code bytes per unit
  // E4M3 rounding of max(amax, 6 * 2^-9) / 6 in hardware (a positive finite value; see
  // quant_fast.cuh for why it equals math::Fp4E4m3ScaleByte).
  __device__ static uint32_t ScaleByte(uint32_t amax) {
    return E4m3x2(0.0f, math::Fp4E4m3ScaleValue(amax)) & 0xFFu;
  }

  // The scale rule only yields positive finite scales (0x01..0x7E), and NaN inputs encode as ±6
  // in EncodeFp4x2, so there is no slow path. One true division per unit for the reciprocal.
  __device__ static void Encode(const uint32_t (&x)[4], uint32_t byte, bool /*has_nan*/,
                                uint32_t (&codes)[1]) {
    codes[0] = EncodeFp4Unit(x, math::DivRn(1.0f, math::E4m3ToF32ByShift(byte)));
  }

  __device__ static void Decode(const uint32_t (&codes)[1], uint32_t byte, uint32_t (&out)[4]) {
    UnpackFp4(codes[0], math::E4m3ToF32(byte), out);
  }
};

template <>
struct Fmt<BlockFormat::kFp4E2m1Ue8m0B32> {
  static constexpr uint32_t kLanes = 4;
  static constexpr int kCodeWords = 1;
  __device__ static uint32_t ScaleByte(uint32_t amax) { return math::Fp4Ue8m0ScaleByte(amax); }

  __device__ static void Encode(const uint32_t (&x)[4], uint32_t byte, bool /*has_nan*/,
                                uint32_t (&codes)[1]) {
    if (byte != 255u) {
      codes[0] = EncodeFp4Unit(x, math::Ue8m0Reciprocal(byte));
    } else {
      codes[0] = PackFp4(x, [](uint32_t v) { return math::EncodeNanScale(v, 0x7u, 0x8u); });
    }
  }

  __device__ static void Decode(const uint32_t (&codes)[1], uint32_t byte, uint32_t (&out)[4]) {
    UnpackFp4(codes[0], math::Ue8m0ToF32(byte), out);
  }
};

// ---- memory access ---------------------------------------------------------------------------

template <bool kVec>
__device__ __forceinline__ void LoadBf16(const uint16_t* p, uint32_t (&w)[4]) {
  if constexpr (kVec) {
    const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = p[2 * j] | (static_cast<uint32_t>(p[2 * j + 1]) << 16);
  }
}

template <bool kVec>
__device__ __forceinline__ void StoreBf16(uint16_t* p, const uint32_t (&w)[4]) {
  if constexpr (kVec) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      p[2 * j] = static_cast<uint16_t>(w[j]);
      p[2 * j + 1] = static_cast<uint16_t>(w[j] >> 16);
    }
  }
}

template <CodeAccess kAccess, int kWords>
__device__ __forceinline__ void StoreCodes(uint8_t* p, const uint32_t (&w)[kWords]) {
  if constexpr (kAccess == CodeAccess::kUnit && kWords == 2) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else if constexpr (kAccess != CodeAccess::kByte) {
#pragma unroll
    for (int k = 0; k < kWords; ++k) reinterpret_cast<uint32_t*>(p)[k] = w[k];
  } else {
#pragma unroll
    for (int i = 0; i < 4 * kWords; ++i) p[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
  }
}

template <CodeAccess kAccess, int kWords>
__device__ __forceinline__ void LoadCodes(const uint8_t* p, uint32_t (&w)[kWords]) {
  if constexpr (kAccess == CodeAccess::kUnit && kWords == 2) {
    const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p));
    w[0] = v.x, w[1] = v.y;
  } else if constexpr (kAccess != CodeAccess::kByte) {
#pragma unroll
    for (int k = 0; k < kWords; ++k) w[k] = __ldcs(reinterpret_cast<const uint32_t*>(p) + k);
  } else {
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      w[k] = p[4 * k] | (p[4 * k + 1] << 8) | (p[4 * k + 2] << 16) |
             (static_cast<uint32_t>(p[4 * k + 3]) << 24);
    }
  }
}

// The amax of a block: this unit's, combined with the other lanes' of the block (kLanes adjacent
// lanes of one warp). Every lane of the warp must call it (inactive lanes with zeros), so the
// shuffles can name the whole warp. *has_nan tells whether this unit holds a NaN.
template <uint32_t kLanes>
__device__ __forceinline__ uint32_t BlockAmax(const uint32_t (&x)[4], bool* has_nan) {
  uint32_t amax = UnitAmax(x, has_nan);
#pragma unroll
  for (uint32_t offset = 1; offset < kLanes; offset *= 2) {
    const uint32_t other = __shfl_xor_sync(0xFFFFFFFFu, amax, offset);
    amax = other > amax ? other : amax;
  }
  return amax;
}

// ---- kernels ---------------------------------------------------------------------------------
// Each warp step covers units seg .. seg + 32 * kUnitsPerLane - 1: lane l takes units
// seg + l + 32k, all loaded before any is processed. `units_per_row` = cols / 8 and `total` = rows
// * units_per_row < 2^31 (checked by the launcher, so nothing wraps).

struct UnitPos {
  uint32_t row;
  uint32_t unit;  // unit index within the row
  bool active;
};

__device__ __forceinline__ uint32_t FirstSegment() {
  return (blockIdx.x * (kThreads / 32) + threadIdx.x / 32) * (32u * kUnitsPerLane);
}
__device__ __forceinline__ uint32_t SegmentStride() {
  return gridDim.x * (kThreads / 32) * (32u * kUnitsPerLane);
}

// Positions of this lane's units seg + lane + 32k: one division for the first, then steps of 32
// units (at most one row carry each once rows hold >= 32 units, a short loop for narrower rows).
__device__ __forceinline__ void Locate(uint32_t seg, uint32_t units_per_row, uint32_t total,
                                       UnitPos (&pos)[kUnitsPerLane]) {
  const uint32_t u = seg + (threadIdx.x & 31u);
  const uint32_t row = u / units_per_row;
  pos[0] = {row, u - row * units_per_row, u < total};
#pragma unroll
  for (int k = 1; k < kUnitsPerLane; ++k) {
    pos[k] = {pos[k - 1].row, pos[k - 1].unit + 32u, u + 32u * k < total};
    while (pos[k].unit >= units_per_row) {
      pos[k].unit -= units_per_row;
      ++pos[k].row;
    }
  }
}

template <BlockFormat F, bool kVec, CodeAccess kAccess>
__global__ void __launch_bounds__(kThreads)
    QuantizeKernel(const QuantizeParams p, uint32_t units_per_row, uint32_t total) {
  using T = Fmt<F>;
  for (uint32_t seg = FirstSegment(); seg < total; seg += SegmentStride()) {
    UnitPos pos[kUnitsPerLane];
    Locate(seg, units_per_row, total, pos);
    uint32_t x[kUnitsPerLane][4];
#pragma unroll
    for (int k = 0; k < kUnitsPerLane; ++k) {
      x[k][0] = x[k][1] = x[k][2] = x[k][3] = 0;
      if (pos[k].active) LoadBf16<kVec>(p.x + pos[k].row * p.x_stride + pos[k].unit * kUnit, x[k]);
    }
#pragma unroll
    for (int k = 0; k < kUnitsPerLane; ++k) {
      bool has_nan = false;
      const uint32_t scale_byte = T::ScaleByte(BlockAmax<T::kLanes>(x[k], &has_nan));
      if (!pos[k].active) continue;
      uint32_t codes[T::kCodeWords];
      T::Encode(x[k], scale_byte, has_nan, codes);
      StoreCodes<kAccess>(p.codes + pos[k].row * p.codes_stride + pos[k].unit * (4 * T::kCodeWords),
                          codes);
      if (pos[k].unit % T::kLanes == 0) {
        p.scales[pos[k].row * p.scales_stride + pos[k].unit / T::kLanes] =
            static_cast<uint8_t>(scale_byte);
      }
      if (p.qdq_out != nullptr) {  // QdqKernel's decode of the same codes
        uint32_t out[4];
        T::Decode(codes, scale_byte, out);
        StoreBf16<kVec>(p.qdq_out + pos[k].row * p.qdq_stride + pos[k].unit * kUnit, out);
      }
    }
  }
}

template <BlockFormat F, bool kVec, CodeAccess kAccess>
__global__ void __launch_bounds__(kThreads)
    DequantizeKernel(const DequantizeParams p, uint32_t units_per_row, uint32_t total) {
  using T = Fmt<F>;
  for (uint32_t seg = FirstSegment(); seg < total; seg += SegmentStride()) {
    UnitPos pos[kUnitsPerLane];
    Locate(seg, units_per_row, total, pos);
    uint32_t codes[kUnitsPerLane][T::kCodeWords];
    uint32_t scale_byte[kUnitsPerLane];
#pragma unroll
    for (int k = 0; k < kUnitsPerLane; ++k) {
      if (pos[k].active) {
        LoadCodes<kAccess>(
            p.codes + pos[k].row * p.codes_stride + pos[k].unit * (4 * T::kCodeWords), codes[k]);
        scale_byte[k] = p.scales[pos[k].row * p.scales_stride + pos[k].unit / T::kLanes];
      }
    }
#pragma unroll
    for (int k = 0; k < kUnitsPerLane; ++k) {
      if (!pos[k].active) continue;
      uint32_t out[4];
      T::Decode(codes[k], scale_byte[k], out);
      StoreBf16<kVec>(p.out + pos[k].row * p.out_stride + pos[k].unit * kUnit, out);
    }
  }
}

// In place (out == x) is safe: each lane reads its units before writing the same units, and
// the only values it takes from other lanes are amaxes, exchanged before any write.
template <BlockFormat F, bool kVec>
__global__ void __launch_bounds__(kThreads)
    QdqKernel(const QdqParams p, uint32_t units_per_row, uint32_t total) {
  using T = Fmt<F>;
  for (uint32_t seg = FirstSegment(); seg < total; seg += SegmentStride()) {
    UnitPos pos[kUnitsPerLane];
    Locate(seg, units_per_row, total, pos);
    uint32_t x[kUnitsPerLane][4];
#pragma unroll
    for (int k = 0; k < kUnitsPerLane; ++k) {
      x[k][0] = x[k][1] = x[k][2] = x[k][3] = 0;
      if (pos[k].active) LoadBf16<kVec>(p.x + pos[k].row * p.x_stride + pos[k].unit * kUnit, x[k]);
    }
#pragma unroll
    for (int k = 0; k < kUnitsPerLane; ++k) {
      bool has_nan = false;
      const uint32_t scale_byte = T::ScaleByte(BlockAmax<T::kLanes>(x[k], &has_nan));
      if (!pos[k].active) continue;
      uint32_t codes[T::kCodeWords];
      T::Encode(x[k], scale_byte, has_nan, codes);
      uint32_t out[4];
      T::Decode(codes, scale_byte, out);
      StoreBf16<kVec>(p.out + pos[k].row * p.out_stride + pos[k].unit * kUnit, out);
    }
  }
}

}  // namespace flashserve::kernels::quant::device
