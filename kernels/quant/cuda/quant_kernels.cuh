// Device bodies of the block quantisers (launchers in quant_launch.cu; per-value arithmetic in
// quant_math.h and quant_fast.cuh).
//
// Work split: the matrix is cut into units of 8 consecutive values of a row (16 bf16 bytes). A
// warp takes 32 * kU consecutive units per step (kU units per lane), lane l the units l + 32k,
// so every load and store instruction of the warp covers one contiguous stretch of memory (whole
// 32-byte sectors; half-written sectors cost a DRAM read). A block of 32 values is 4 adjacent
// lanes, a block of 16 is 2; they combine their amax with whole-warp shuffles, which every lane
// runs (past the end of the matrix with zeros; rows hold whole blocks and steps start at multiples
// of 32 units, so a block never straddles the end). The warps stride over the flattened unit index
// (grid-stride, persistent grid). Memory-bound: one read of the input, one write of the output,
// loads with the streaming hint; no shared memory but the E4M3-scaled FP4 encoder's 512-byte
// reciprocal table per block (Fmt::FillTables).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/cuda/quant_fast.cuh"
#include "kernels/quant/cuda/quant_math.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::quant::device {

inline constexpr int kThreads = 256;
inline constexpr int kUnit = 8;  // values per unit (one 16-byte bf16 access)
// Independent units per lane and warp step (kU): 2, except 4 for the FP4 quantisers (fewer
// instructions per value than the rest since session 38: [16384, 5120] E4M3-scaled 72.4 -> 70.5
// us, UE8M0 76.6 -> 74.7 on an H200). 4 is no faster for FP8 (74.4 -> 76) or QDQ, and costs
// registers.
template <BlockFormat F>
inline constexpr int kQuantizeUnits = F == BlockFormat::kFp8E4m3Ue8m0B32 ? 2 : 4;
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
  static constexpr int kTableFloats = 0;
  __device__ static void FillTables(float* /*tables*/) {}
  __device__ static uint32_t ScaleByte(uint32_t amax) { return math::Fp8ScaleByte(amax); }

  __device__ static void Encode(const uint32_t (&x)[4], uint32_t byte, bool has_nan,
                                const float* /*tables*/, uint32_t (&codes)[2]) {
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

template <>
struct Fmt<BlockFormat::kFp4E2m1E4m3B16> {
  static constexpr uint32_t kLanes = 2;  // lanes per 16-value block
  static constexpr int kCodeWords = 1;   // 4 code bytes per unit
  // Per-block table in shared memory: the encoder's reciprocal of every scale byte (below).
  static constexpr int kTableFloats = 128;
  // E4M3 rounding of max(amax, 6 * 2^-9) / 6 in hardware (a positive finite value; see
  // quant_fast.cuh for why it equals math::Fp4E4m3ScaleByte).
  __device__ static uint32_t ScaleByte(uint32_t amax) {
    return E4m3x2(0.0f, math::Fp4E4m3ScaleValue(amax)) & 0xFFu;
  }

  // tables[b] = Fp4E4m3Reciprocal14 of scale byte b, one true division per byte and block instead
  // of one per unit ([16384, 5120]: 75.2 -> 72.4 us). Entries 0 and 0x7F are never read.
  __device__ static void FillTables(float* tables) {
    for (uint32_t b = threadIdx.x; b < kTableFloats; b += blockDim.x) {
      tables[b] = math::Fp4E4m3Reciprocal14(math::E4m3ToF32ByShift(b));
    }
  }

  // The scale rule only yields positive finite scales (0x01..0x7E), and NaN inputs encode as ±6
  // in Fp4NibblePair, so there is no slow path.
  __device__ static void Encode(const uint32_t (&x)[4], uint32_t byte, bool /*has_nan*/,
                                const float* tables, uint32_t (&codes)[1]) {
    codes[0] = EncodeFp4Unit(x, tables[byte]);
  }

  __device__ static void Decode(const uint32_t (&codes)[1], uint32_t byte, uint32_t (&out)[4]) {
    UnpackFp4(codes[0], math::E4m3ToF32(byte), out);
  }
};

template <>
struct Fmt<BlockFormat::kFp4E2m1Ue8m0B32> {
  static constexpr uint32_t kLanes = 4;
  static constexpr int kCodeWords = 1;
  static constexpr int kTableFloats = 0;
  __device__ static void FillTables(float* /*tables*/) {}
  __device__ static uint32_t ScaleByte(uint32_t amax) { return math::Fp4Ue8m0ScaleByte(amax); }

  __device__ static void Encode(const uint32_t (&x)[4], uint32_t byte, bool /*has_nan*/,
                                const float* /*tables*/, uint32_t (&codes)[1]) {
    if (byte != 255u) {
      codes[0] = EncodeFp4Unit(x, math::Fp4Ue8m0Reciprocal14(byte));
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

// The FP8 E4M3 × UE8M0/32 QDQ of one unit (x[j]: values 2j and 2j + 1) whose 32-value block is
// held by the 4 aligned lanes (lane & ~3 .. + 3 of a 1-D block) that call this together, each
// with its unit: the block amax by two shuffles among those 4 lanes only (the warp's other lanes
// need not call it), then the unit's encode and decode — LaunchQdq's bits. For kernels that write
// a Linear's x already QDQ'd (RmsNormParams::out_qdq, the shared expert's SwiGLU).
__device__ __forceinline__ void QdqFp8UnitOfQuad(const uint32_t (&x)[4], uint32_t (&out)[4]) {
  using F = Fmt<BlockFormat::kFp8E4m3Ue8m0B32>;
  bool nan = false;
  uint32_t amax = UnitAmax(x, &nan);
  const unsigned quad = 0xFu << (threadIdx.x & 28u);
#pragma unroll
  for (int offset = 1; offset < 4; offset *= 2) {
    const uint32_t other = __shfl_xor_sync(quad, amax, offset);
    amax = other > amax ? other : amax;
  }
  const uint32_t byte = F::ScaleByte(amax);
  uint32_t codes[F::kCodeWords];
  F::Encode(x, byte, nan, nullptr, codes);
  F::Decode(codes, byte, out);
}

// ---- kernels ---------------------------------------------------------------------------------
// Each warp step covers units seg .. seg + 32 * kU - 1: lane l takes units seg + l + 32k, all
// loaded before any is processed. `units_per_row` = cols / 8 and `total` = rows * units_per_row <
// 2^31 (checked by the launcher, so nothing wraps).

struct UnitPos {
  uint32_t row;
  uint32_t unit;  // unit index within the row
  bool active;
};

template <int kU>
__device__ __forceinline__ uint32_t FirstSegment() {
  return (blockIdx.x * (kThreads / 32) + threadIdx.x / 32) * (32u * kU);
}
template <int kU>
__device__ __forceinline__ uint32_t SegmentStride() {
  return gridDim.x * (kThreads / 32) * (32u * kU);
}

// Positions of this lane's units seg + lane + 32k: one division for the first, then steps of 32
// units (at most one row carry each once rows hold >= 32 units, a short loop for narrower rows).
template <int kU>
__device__ __forceinline__ void Locate(uint32_t seg, uint32_t units_per_row, uint32_t total,
                                       UnitPos (&pos)[kU]) {
  const uint32_t u = seg + (threadIdx.x & 31u);
  const uint32_t row = u / units_per_row;
  pos[0] = {row, u - row * units_per_row, u < total};
#pragma unroll
  for (int k = 1; k < kU; ++k) {
    pos[k] = {pos[k - 1].row, pos[k - 1].unit + 32u, u + 32u * k < total};
    while (pos[k].unit >= units_per_row) {
      pos[k].unit -= units_per_row;
      ++pos[k].row;
    }
  }
}

// The format's per-block tables (Fmt<F>::kTableFloats floats of shared memory, at least one so
// the array is well formed), filled before the first unit.
template <BlockFormat F>
struct BlockTables {
  float t[Fmt<F>::kTableFloats > 0 ? Fmt<F>::kTableFloats : 1];
};

template <BlockFormat F>
__device__ __forceinline__ const float* FillBlockTables(BlockTables<F>& tables) {
  if constexpr (Fmt<F>::kTableFloats > 0) {
    Fmt<F>::FillTables(tables.t);
    __syncthreads();
  }
  return tables.t;
}

// kU units per lane and step (kQuantizeUnits); the launcher sizes the grid with the same kU.
template <BlockFormat F, bool kVec, CodeAccess kAccess>
__global__ void __launch_bounds__(kThreads)
    QuantizeKernel(const QuantizeParams p, uint32_t units_per_row, uint32_t total) {
  using T = Fmt<F>;
  constexpr int kU = kQuantizeUnits<F>;
  __shared__ BlockTables<F> shared_tables;
  const float* tables = FillBlockTables<F>(shared_tables);
  for (uint32_t seg = FirstSegment<kU>(); seg < total; seg += SegmentStride<kU>()) {
    UnitPos pos[kU];
    Locate(seg, units_per_row, total, pos);
    uint32_t x[kU][4];
#pragma unroll
    for (int k = 0; k < kU; ++k) {
      x[k][0] = x[k][1] = x[k][2] = x[k][3] = 0;
      if (pos[k].active) LoadBf16<kVec>(p.x + pos[k].row * p.x_stride + pos[k].unit * kUnit, x[k]);
    }
#pragma unroll
    for (int k = 0; k < kU; ++k) {
      bool has_nan = false;
      const uint32_t scale_byte = T::ScaleByte(BlockAmax<T::kLanes>(x[k], &has_nan));
      if (!pos[k].active) continue;
      uint32_t codes[T::kCodeWords];
      T::Encode(x[k], scale_byte, has_nan, tables, codes);
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
  constexpr int kU = kUnitsPerLane;
  for (uint32_t seg = FirstSegment<kU>(); seg < total; seg += SegmentStride<kU>()) {
    UnitPos pos[kU];
    Locate(seg, units_per_row, total, pos);
    uint32_t codes[kU][T::kCodeWords];
    uint32_t scale_byte[kU];
#pragma unroll
    for (int k = 0; k < kU; ++k) {
      if (pos[k].active) {
        LoadCodes<kAccess>(
            p.codes + pos[k].row * p.codes_stride + pos[k].unit * (4 * T::kCodeWords), codes[k]);
        scale_byte[k] = p.scales[pos[k].row * p.scales_stride + pos[k].unit / T::kLanes];
      }
    }
#pragma unroll
    for (int k = 0; k < kU; ++k) {
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
  constexpr int kU = kUnitsPerLane;
  __shared__ BlockTables<F> shared_tables;
  const float* tables = FillBlockTables<F>(shared_tables);
  for (uint32_t seg = FirstSegment<kU>(); seg < total; seg += SegmentStride<kU>()) {
    UnitPos pos[kU];
    Locate(seg, units_per_row, total, pos);
    uint32_t x[kU][4];
#pragma unroll
    for (int k = 0; k < kU; ++k) {
      x[k][0] = x[k][1] = x[k][2] = x[k][3] = 0;
      if (pos[k].active) LoadBf16<kVec>(p.x + pos[k].row * p.x_stride + pos[k].unit * kUnit, x[k]);
    }
#pragma unroll
    for (int k = 0; k < kU; ++k) {
      bool has_nan = false;
      const uint32_t scale_byte = T::ScaleByte(BlockAmax<T::kLanes>(x[k], &has_nan));
      if (!pos[k].active) continue;
      uint32_t codes[T::kCodeWords];
      T::Encode(x[k], scale_byte, has_nan, tables, codes);
      uint32_t out[4];
      T::Decode(codes, scale_byte, out);
      StoreBf16<kVec>(p.out + pos[k].row * p.out_stride + pos[k].unit * kUnit, out);
    }
  }
}

}  // namespace flashserve::kernels::quant::device
