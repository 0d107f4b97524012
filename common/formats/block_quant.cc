#include "common/formats/block_quant.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/formats/bf16.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"

namespace flashserve::formats {
namespace {

// Rounded reciprocals, as the reference computes them (fp32(1/448), fp32(1/6)): the power-of-two
// scale rules multiply by these rather than divide. For bf16 amax values the two agree everywhere
// (block_quant_test checks every bf16 amax); we follow the reference for other callers' sake.
constexpr float kInvE4m3Max = 1.0f / kE4m3Max;
constexpr float kInvE2m1Max = 1.0f / kE2m1Max;

// Packed FP4 bytes per value and how many values share a scale byte, per format.
struct Layout {
  const char* name;
  int64_t block;
  int64_t values_per_code_byte;
};
constexpr Layout kFp8Layout{"Fp8Ue8m0B32", kFp8Ue8m0Block, 1};
constexpr Layout kFp4E4m3Layout{"Fp4E4m3B16", kFp4E4m3Block, 2};
constexpr Layout kFp4Ue8m0Layout{"Fp4Ue8m0B32", kFp4Ue8m0Block, 2};

absl::Status CheckSizes(const Layout& layout, size_t n, size_t code_bytes, size_t scale_bytes) {
  const auto block = static_cast<size_t>(layout.block);
  const auto per_byte = static_cast<size_t>(layout.values_per_code_byte);
  if (n % block != 0 || code_bytes != n / per_byte || scale_bytes != n / block) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d values need a multiple of %d values, %d code bytes and %d scale bytes; got %d code "
        "bytes and %d scale bytes",
        layout.name, n, block, n / per_byte, n / block, code_bytes, scale_bytes));
  }
  return absl::OkStatus();
}

float BlockAmax(const uint16_t* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = Bf16BitsToFloat(static_cast<uint16_t>(x[i] & 0x7FFFu));
    amax = a > amax ? a : amax;  // NaN compares false and is skipped
  }
  return amax;
}

void QuantizeFp8Block(const uint16_t* x, uint8_t* codes, uint8_t* scale_byte) {
  *scale_byte = Fp8Ue8m0ScaleByte(BlockAmax(x, kFp8Ue8m0Block));
  const float scale = Ue8m0ToFloat(*scale_byte);
  for (int64_t i = 0; i < kFp8Ue8m0Block; ++i) {
    const float v = Bf16BitsToFloat(x[i]) / scale;
    codes[i] = FloatToE4m3(std::clamp(v, -kE4m3Max, kE4m3Max));
  }
}

void DequantizeFp8Block(const uint8_t* codes, uint8_t scale_byte, uint16_t* out) {
  const float scale = Ue8m0ToFloat(scale_byte);
  for (int64_t i = 0; i < kFp8Ue8m0Block; ++i) {
    out[i] = FloatToBf16Bits(E4m3ToFloat(codes[i]) * scale);
  }
}

// Shared by both FP4 formats once the block's scale is known. FloatToE2m1 does the ±6 clamp.
void QuantizeFp4Block(const uint16_t* x, int64_t n, float scale, uint8_t* packed) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint8_t even = FloatToE2m1(Bf16BitsToFloat(x[i]) / scale);
    const uint8_t odd = FloatToE2m1(Bf16BitsToFloat(x[i + 1]) / scale);
    packed[i / 2] = PackE2m1(even, odd);
  }
}

void DequantizeFp4Block(const uint8_t* packed, int64_t n, float scale, uint16_t* out) {
  for (int64_t i = 0; i < n; i += 2) {
    out[i] = FloatToBf16Bits(E2m1ToFloat(UnpackE2m1Even(packed[i / 2])) * scale);
    out[i + 1] = FloatToBf16Bits(E2m1ToFloat(UnpackE2m1Odd(packed[i / 2])) * scale);
  }
}

}  // namespace

uint8_t Fp8Ue8m0ScaleByte(float amax) {
  return Ue8m0CeilFromFloat(std::max(amax, kFp8AmaxFloor) * kInvE4m3Max);
}

uint8_t Fp4E4m3ScaleByte(float amax) {
  return FloatToE4m3(std::max(amax, kFp4E4m3AmaxFloor) / kE2m1Max);
}

uint8_t Fp4Ue8m0ScaleByte(float amax) {
  return Ue8m0CeilFromFloat(std::max(amax, kFp4Ue8m0AmaxFloor) * kInvE2m1Max);
}

absl::Status QuantizeFp8Ue8m0B32(std::span<const uint16_t> x, std::span<uint8_t> codes,
                                 std::span<uint8_t> scale_bytes) {
  if (auto s = CheckSizes(kFp8Layout, x.size(), codes.size(), scale_bytes.size()); !s.ok()) {
    return s;
  }
  for (size_t b = 0; b < scale_bytes.size(); ++b) {
    const size_t first = b * kFp8Ue8m0Block;
    QuantizeFp8Block(x.data() + first, codes.data() + first, &scale_bytes[b]);
  }
  return absl::OkStatus();
}

absl::Status DequantizeFp8Ue8m0B32(std::span<const uint8_t> codes,
                                   std::span<const uint8_t> scale_bytes, std::span<uint16_t> out) {
  if (auto s = CheckSizes(kFp8Layout, out.size(), codes.size(), scale_bytes.size()); !s.ok()) {
    return s;
  }
  for (size_t b = 0; b < scale_bytes.size(); ++b) {
    const size_t first = b * kFp8Ue8m0Block;
    DequantizeFp8Block(codes.data() + first, scale_bytes[b], out.data() + first);
  }
  return absl::OkStatus();
}

absl::Status QuantizeFp4E4m3B16(std::span<const uint16_t> x, std::span<uint8_t> packed,
                                std::span<uint8_t> scale_bytes) {
  if (auto s = CheckSizes(kFp4E4m3Layout, x.size(), packed.size(), scale_bytes.size()); !s.ok()) {
    return s;
  }
  for (size_t b = 0; b < scale_bytes.size(); ++b) {
    const size_t first = b * kFp4E4m3Block;
    scale_bytes[b] = Fp4E4m3ScaleByte(BlockAmax(x.data() + first, kFp4E4m3Block));
    QuantizeFp4Block(x.data() + first, kFp4E4m3Block, E4m3ToFloat(scale_bytes[b]),
                     packed.data() + first / 2);
  }
  return absl::OkStatus();
}

absl::Status DequantizeFp4E4m3B16(std::span<const uint8_t> packed,
                                  std::span<const uint8_t> scale_bytes, std::span<uint16_t> out) {
  if (auto s = CheckSizes(kFp4E4m3Layout, out.size(), packed.size(), scale_bytes.size()); !s.ok()) {
    return s;
  }
  for (size_t b = 0; b < scale_bytes.size(); ++b) {
    const size_t first = b * kFp4E4m3Block;
    DequantizeFp4Block(packed.data() + first / 2, kFp4E4m3Block, E4m3ToFloat(scale_bytes[b]),
                       out.data() + first);
  }
  return absl::OkStatus();
}

absl::Status QuantizeFp4Ue8m0B32(std::span<const uint16_t> x, std::span<uint8_t> packed,
                                 std::span<uint8_t> scale_bytes) {
  if (auto s = CheckSizes(kFp4Ue8m0Layout, x.size(), packed.size(), scale_bytes.size()); !s.ok()) {
    return s;
  }
  for (size_t b = 0; b < scale_bytes.size(); ++b) {
    const size_t first = b * kFp4Ue8m0Block;
    scale_bytes[b] = Fp4Ue8m0ScaleByte(BlockAmax(x.data() + first, kFp4Ue8m0Block));
    QuantizeFp4Block(x.data() + first, kFp4Ue8m0Block, Ue8m0ToFloat(scale_bytes[b]),
                     packed.data() + first / 2);
  }
  return absl::OkStatus();
}

absl::Status DequantizeFp4Ue8m0B32(std::span<const uint8_t> packed,
                                   std::span<const uint8_t> scale_bytes, std::span<uint16_t> out) {
  if (auto s = CheckSizes(kFp4Ue8m0Layout, out.size(), packed.size(), scale_bytes.size());
      !s.ok()) {
    return s;
  }
  for (size_t b = 0; b < scale_bytes.size(); ++b) {
    const size_t first = b * kFp4Ue8m0Block;
    DequantizeFp4Block(packed.data() + first / 2, kFp4Ue8m0Block, Ue8m0ToFloat(scale_bytes[b]),
                       out.data() + first);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::formats
