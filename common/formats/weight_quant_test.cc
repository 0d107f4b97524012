// Unit tests of the checkpoint weight formats: block layout, nibble order, and exact round trips
// through dequantise -> quantise for weights that already sit on the quantisation grid.
#include "common/formats/weight_quant.h"

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/formats/bf16.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "gtest/gtest.h"

namespace flashserve::formats {
namespace {

uint32_t NextRandom(uint32_t& s) {
  s = s * 1664525u + 1013904223u;
  return s >> 8;
}

TEST(Fp8WeightTest, ScaleShapeAndBlockLayout) {
  EXPECT_EQ(Fp8WeightScaleRows(40), 2);
  EXPECT_EQ(Fp8WeightScaleCols(64), 2);
  EXPECT_EQ(Fp8WeightScaleCols(65), 3);
  const int64_t out = 40, in = 70;
  std::vector<uint8_t> codes(out * in, 0x38);                    // every code is 1.0
  std::vector<uint8_t> scales = {100, 101, 102, 103, 104, 105};  // [2, 3]
  std::vector<float> dst(out * in);
  ASSERT_TRUE(DequantizeFp8Weight(codes, scales, out, in, dst).ok());
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      ASSERT_EQ(dst[r * in + c], std::ldexp(1.0f, 100 + (r / 32) * 3 + (c / 32) - 127)) << r << c;
    }
  }
}

TEST(Fp8WeightTest, RoundTripsOnGridWeights) {
  const int64_t out = 40, in = 70;
  std::vector<uint8_t> codes(out * in), scales(2 * 3);
  uint32_t s = 5;
  for (auto& c : codes) {
    c = static_cast<uint8_t>(NextRandom(s) % 0x7F);  // finite, positive codes below 448
    if (NextRandom(s) % 2) c |= 0x80;
  }
  for (auto& b : scales) b = static_cast<uint8_t>(110 + NextRandom(s) % 20);
  // One ±448 per block makes the block amax exactly 448·scale, so the scale rule gives it back.
  for (int64_t br = 0; br < 2; ++br) {
    for (int64_t bc = 0; bc < 3; ++bc)
      codes[(br * 32) * in + bc * 32] = (br + bc) % 2 ? 0xFE : 0x7E;
  }
  std::vector<uint16_t> w(out * in);
  ASSERT_TRUE(DequantizeFp8WeightBf16(codes, scales, out, in, w).ok());
  std::vector<uint8_t> codes2(out * in), scales2(6);
  ASSERT_TRUE(QuantizeFp8Weight(w, out, in, codes2, scales2).ok());
  EXPECT_EQ(scales2, scales);
  EXPECT_EQ(codes2, codes);
}

TEST(Fp8WeightTest, RejectsWrongSizes) {
  std::vector<uint8_t> codes(40 * 70), scales(6);
  std::vector<float> dst(40 * 70);
  std::vector<uint16_t> w(40 * 70);
  EXPECT_TRUE(
      absl::IsInvalidArgument(DequantizeFp8Weight(codes, std::span(scales).first(4), 40, 70, dst)));
  EXPECT_TRUE(absl::IsInvalidArgument(DequantizeFp8Weight(codes, scales, 40, 71, dst)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(QuantizeFp8Weight(w, 40, 70, codes, std::span(scales).first(5))));
  EXPECT_TRUE(QuantizeFp8Weight(w, 40, 70, codes, scales).ok());
}

TEST(Fp4WeightTest, NibbleOrderAndScaleLayout) {
  const int64_t out = 2, in = 64;
  std::vector<uint8_t> packed(out * in / 2, PackE2m1(0x2, 0xB));  // even 1.0, odd -1.5
  const std::vector<uint8_t> scales = {127, 128, 126, 125};       // [2, 2]
  std::vector<float> dst(out * in);
  ASSERT_TRUE(DequantizeFp4Weight(packed, scales, out, in, dst).ok());
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const float scale = Ue8m0ToFloat(scales[r * 2 + c / 32]);
      ASSERT_EQ(dst[r * in + c], (c % 2 == 0 ? 1.0f : -1.5f) * scale) << r << " " << c;
    }
  }
}

TEST(Fp4WeightTest, RoundTripsOnGridWeights) {
  const int64_t out = 3, in = 96;
  std::vector<uint8_t> codes(out * in), scales(out * 3);
  uint32_t s = 9;
  for (auto& c : codes) c = static_cast<uint8_t>(NextRandom(s) % 16);
  for (auto& b : scales) b = static_cast<uint8_t>(100 + NextRandom(s) % 40);
  for (int64_t i = 0; i < out * in; i += 32) codes[i] = (i / 32) % 2 ? 0xF : 0x7;  // ±6 per block
  std::vector<uint8_t> packed(out * in / 2);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = PackE2m1(codes[2 * i], codes[2 * i + 1]);

  std::vector<uint16_t> w(out * in);
  ASSERT_TRUE(DequantizeFp4WeightBf16(packed, scales, out, in, w).ok());
  EXPECT_EQ(Bf16BitsToFloat(w[0]), 6.0f * Ue8m0ToFloat(scales[0]));
  std::vector<uint8_t> packed2(packed.size()), scales2(scales.size());
  ASSERT_TRUE(QuantizeFp4Weight(w, out, in, packed2, scales2).ok());
  EXPECT_EQ(scales2, scales);
  EXPECT_EQ(packed2, packed);
}

TEST(Fp4WeightTest, RejectsWrongSizes) {
  std::vector<uint8_t> packed(48), scales(3);
  std::vector<float> dst(96);
  std::vector<uint16_t> w(96);
  EXPECT_TRUE(absl::IsInvalidArgument(DequantizeFp4Weight(packed, scales, 2, 48, dst)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      DequantizeFp4Weight(packed, scales, 1, 96, std::span(dst).first(95))));
  EXPECT_TRUE(DequantizeFp4Weight(packed, scales, 1, 96, dst).ok());
  EXPECT_TRUE(
      absl::IsInvalidArgument(QuantizeFp4Weight(w, 1, 96, std::span(packed).first(47), scales)));
  EXPECT_TRUE(QuantizeFp4Weight(w, 1, 96, packed, scales).ok());
}

}  // namespace
}  // namespace flashserve::formats
