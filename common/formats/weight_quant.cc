#include "common/formats/weight_quant.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_format.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"

namespace flashserve::formats {
namespace {

absl::Status CheckWeightSizes(const char* what, int64_t out_features, int64_t in_features,
                              size_t values, size_t codes, size_t expected_codes, size_t scales,
                              size_t expected_scales) {
  const auto n = static_cast<size_t>(out_features * in_features);
  if (out_features < 0 || in_features < 0 || values != n || codes != expected_codes ||
      scales != expected_scales) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s [%d, %d]: expected %d values, %d code bytes, %d scale bytes; got %d, %d, %d", what,
        out_features, in_features, n, expected_codes, expected_scales, values, codes, scales));
  }
  return absl::OkStatus();
}

absl::Status CheckFp8(int64_t out, int64_t in, size_t values, size_t codes, size_t scales) {
  return CheckWeightSizes("FP8 weight", out, in, values, codes, static_cast<size_t>(out * in),
                          scales,
                          static_cast<size_t>(Fp8WeightScaleRows(out) * Fp8WeightScaleCols(in)));
}

absl::Status CheckFp4(int64_t out, int64_t in, size_t values, size_t packed, size_t scales) {
  if (in % kFp4WeightBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("FP4 weight: in_features %d is not a multiple of 32", in));
  }
  return CheckWeightSizes("FP4 weight", out, in, values, packed, static_cast<size_t>(out * in / 2),
                          scales, static_cast<size_t>(out * Fp4WeightScaleCols(in)));
}

// store(index, exact fp32 value) writes one output element.
template <typename Store>
void DequantizeFp8Loop(const uint8_t* codes, const uint8_t* scales, int64_t out, int64_t in,
                       Store store) {
  const int64_t scale_cols = Fp8WeightScaleCols(in);
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t* scale_row = scales + (r / kFp8WeightBlock) * scale_cols;
    for (int64_t c = 0; c < in; ++c) {
      const int64_t i = r * in + c;
      store(i, E4m3ToFloat(codes[i]) * Ue8m0ToFloat(scale_row[c / kFp8WeightBlock]));
    }
  }
}

template <typename Store>
void DequantizeFp4Loop(const uint8_t* packed, const uint8_t* scales, int64_t out, int64_t in,
                       Store store) {
  const int64_t scale_cols = Fp4WeightScaleCols(in);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const int64_t i = r * in + c;
      const uint8_t byte = packed[i / 2];
      const uint8_t code = (c % 2 == 0) ? UnpackE2m1Even(byte) : UnpackE2m1Odd(byte);
      store(i, E2m1ToFloat(code) * Ue8m0ToFloat(scales[r * scale_cols + c / kFp4WeightBlock]));
    }
  }
}

}  // namespace

absl::Status DequantizeFp8Weight(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                                 int64_t out_features, int64_t in_features, std::span<float> dst) {
  if (auto s = CheckFp8(out_features, in_features, dst.size(), codes.size(), scales.size());
      !s.ok()) {
    return s;
  }
  DequantizeFp8Loop(codes.data(), scales.data(), out_features, in_features,
                    [&](int64_t i, float v) { dst[i] = v; });
  return absl::OkStatus();
}

absl::Status DequantizeFp8WeightBf16(std::span<const uint8_t> codes,
                                     std::span<const uint8_t> scales, int64_t out_features,
                                     int64_t in_features, std::span<uint16_t> dst) {
  if (auto s = CheckFp8(out_features, in_features, dst.size(), codes.size(), scales.size());
      !s.ok()) {
    return s;
  }
  DequantizeFp8Loop(codes.data(), scales.data(), out_features, in_features,
                    [&](int64_t i, float v) { dst[i] = FloatToBf16Bits(v); });
  return absl::OkStatus();
}

absl::Status QuantizeFp8Weight(std::span<const uint16_t> w, int64_t out_features,
                               int64_t in_features, std::span<uint8_t> codes,
                               std::span<uint8_t> scales) {
  if (auto s = CheckFp8(out_features, in_features, w.size(), codes.size(), scales.size());
      !s.ok()) {
    return s;
  }
  const int64_t scale_cols = Fp8WeightScaleCols(in_features);
  for (int64_t br = 0; br < Fp8WeightScaleRows(out_features); ++br) {
    const int64_t r0 = br * kFp8WeightBlock;
    const int64_t r1 = std::min(r0 + kFp8WeightBlock, out_features);
    for (int64_t bc = 0; bc < scale_cols; ++bc) {
      const int64_t c0 = bc * kFp8WeightBlock;
      const int64_t c1 = std::min(c0 + kFp8WeightBlock, in_features);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float a = Bf16BitsToFloat(static_cast<uint16_t>(w[r * in_features + c] & 0x7FFF));
          amax = a > amax ? a : amax;
        }
      }
      const uint8_t scale_byte = Fp8Ue8m0ScaleByte(amax);
      scales[br * scale_cols + bc] = scale_byte;
      const float scale = Ue8m0ToFloat(scale_byte);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float v = Bf16BitsToFloat(w[r * in_features + c]) / scale;
          codes[r * in_features + c] = FloatToE4m3(std::clamp(v, -kE4m3Max, kE4m3Max));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeFp4Weight(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                 int64_t out_features, int64_t in_features, std::span<float> dst) {
  if (auto s = CheckFp4(out_features, in_features, dst.size(), packed.size(), scales.size());
      !s.ok()) {
    return s;
  }
  DequantizeFp4Loop(packed.data(), scales.data(), out_features, in_features,
                    [&](int64_t i, float v) { dst[i] = v; });
  return absl::OkStatus();
}

absl::Status DequantizeFp4WeightBf16(std::span<const uint8_t> packed,
                                     std::span<const uint8_t> scales, int64_t out_features,
                                     int64_t in_features, std::span<uint16_t> dst) {
  if (auto s = CheckFp4(out_features, in_features, dst.size(), packed.size(), scales.size());
      !s.ok()) {
    return s;
  }
  DequantizeFp4Loop(packed.data(), scales.data(), out_features, in_features,
                    [&](int64_t i, float v) { dst[i] = FloatToBf16Bits(v); });
  return absl::OkStatus();
}

absl::Status QuantizeFp4Weight(std::span<const uint16_t> w, int64_t out_features,
                               int64_t in_features, std::span<uint8_t> packed,
                               std::span<uint8_t> scales) {
  if (auto s = CheckFp4(out_features, in_features, w.size(), packed.size(), scales.size());
      !s.ok()) {
    return s;
  }
  // Rows are whole blocks, so the row-major matrix is just a run of 32-value blocks.
  return QuantizeFp4Ue8m0B32(w, packed, scales);
}

}  // namespace flashserve::formats
