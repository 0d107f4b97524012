// Unit tests of the activation/KV block quantisers and the serving-row helpers, on hand-worked
// examples (the byte-exact comparison with the reference lives in quant_vectors_test.cc).
#include "common/formats/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/kv_row.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::formats {
namespace {

using ::testing::ElementsAreArray;

// bf16 bit patterns of `values` (each must be exactly representable) padded with +0 to `n`.
std::vector<uint16_t> Bf16Block(std::initializer_list<float> values, size_t n) {
  std::vector<uint16_t> out(n, 0);
  size_t i = 0;
  for (float v : values) {
    EXPECT_EQ(RoundToBf16(v), v) << v << " is not a bf16 value";
    out[i++] = FloatToBf16Bits(v);
  }
  return out;
}

// Deterministic varied bf16 data: magnitudes over several octaves, both signs.
std::vector<uint16_t> VariedBf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> out(n);
  uint32_t s = seed;
  for (auto& v : out) {
    s = s * 1664525u + 1013904223u;
    const float mag = std::ldexp(static_cast<float>((s >> 8) & 0xFFFF) / 65536.0f, (s >> 4) % 9);
    v = FloatToBf16Bits((s & 1u) ? -mag : mag);
  }
  return out;
}

TEST(BlockScaleTest, Fp8Ue8m0Rule) {
  EXPECT_EQ(Fp8Ue8m0ScaleByte(0.0f), 127 - 22);  // floor 1e-4: 1e-4/448 -> 2^-22
  EXPECT_EQ(Fp8Ue8m0ScaleByte(1.0f), 127 - 8);   // 1/448 -> 2^-8
  EXPECT_EQ(Fp8Ue8m0ScaleByte(448.0f), 127);     // exactly 1
  EXPECT_EQ(Fp8Ue8m0ScaleByte(450.0f), 128);     // next bf16 above 448
  EXPECT_EQ(Fp8Ue8m0ScaleByte(224.0f), 126);
  EXPECT_EQ(Fp8Ue8m0ScaleByte(448.0f * 1024), 137);
}

TEST(BlockScaleTest, Fp4E4m3Rule) {
  EXPECT_EQ(Fp4E4m3ScaleByte(6.0f), 0x38);  // 1.0
  EXPECT_EQ(Fp4E4m3ScaleByte(7.0f), 0x39);  // 7/6 = 1.1667 -> 1.125
  EXPECT_EQ(Fp4E4m3ScaleByte(0.0f), 0x01);  // floor 6·2^-9 -> 2^-9, smallest subnormal
  EXPECT_EQ(Fp4E4m3ScaleByte(6.0f * 448), 0x7E);
  EXPECT_EQ(Fp4E4m3ScaleByte(1e30f), 0x7E);  // saturates
}

TEST(BlockScaleTest, Fp4Ue8m0Rule) {
  EXPECT_EQ(Fp4Ue8m0ScaleByte(6.0f), 127);
  EXPECT_EQ(Fp4Ue8m0ScaleByte(6.046875f), 128);  // next bf16 above 6
  EXPECT_EQ(Fp4Ue8m0ScaleByte(3.0f), 126);
  EXPECT_EQ(Fp4Ue8m0ScaleByte(0.0f), 1);  // floor 6·2^-126 -> 2^-126
}

// Exact oracles for the scale rules, evaluated in double for every non-negative finite bf16 amax.
// They state the rules in exact arithmetic ("smallest power of two with 448·2^k >= amax", "E4M3
// nearest to amax/6"); that the fp32 implementations (rounded reciprocals 1/448 and 1/6, bit-level
// ceiling) agree on every bf16 input also shows that reciprocal-multiply and division cannot be
// told apart here for bf16 data.
int SmallestExponent(double amax, double base) {
  int k = -160;
  while (std::ldexp(base, k) < amax) ++k;
  return k;
}

TEST(BlockScaleTest, MatchExactOraclesForEveryBf16Amax) {
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const float amax = Bf16BitsToFloat(static_cast<uint16_t>(b));
    const double fp8 = std::max(amax, kFp8AmaxFloor);
    ASSERT_EQ(Fp8Ue8m0ScaleByte(amax), 127 + SmallestExponent(fp8, 448.0)) << amax;
    const double fp4 = std::max(amax, kFp4Ue8m0AmaxFloor);
    ASSERT_EQ(Fp4Ue8m0ScaleByte(amax), 127 + SmallestExponent(fp4, 6.0)) << amax;

    const double q = std::max(amax, kFp4E4m3AmaxFloor) / 6.0;
    int best = 0x7E;  // saturation
    if (q < 448.0) {
      double best_err = 1e300;
      for (int c = 0; c <= 0x7E; ++c) {
        const double err = std::fabs(E4m3ToFloat(static_cast<uint8_t>(c)) - q);
        if (err < best_err || (err == best_err && c % 2 == 0)) {
          best = c;
          best_err = err;
        }
      }
    }
    ASSERT_EQ(Fp4E4m3ScaleByte(amax), best) << amax;
  }
}

TEST(Fp8Ue8m0B32Test, WorkedBlock) {
  const float tiny = std::ldexp(1.0f, -17);  // 2^-9 after scaling by 2^8: smallest subnormal
  const auto x = Bf16Block({1.0f, 0.30078125f, -0.0f, -1.0f, tiny, tiny / 2, -tiny / 2}, 32);
  std::vector<uint8_t> codes(32), scales(1);
  ASSERT_TRUE(QuantizeFp8Ue8m0B32(x, codes, scales).ok());
  EXPECT_EQ(scales[0], 127 - 8);
  std::vector<uint8_t> want_codes(32, 0x00);
  // 256 -> 0x78; 77 -> 80 = 0x6A; -0; -256; 2^-9 -> 0x01; 2^-10 ties to 0; -2^-10 -> -0.
  const uint8_t head[] = {0x78, 0x6A, 0x80, 0xF8, 0x01, 0x00, 0x80};
  std::copy(std::begin(head), std::end(head), want_codes.begin());
  EXPECT_THAT(codes, ElementsAreArray(want_codes));

  std::vector<uint16_t> dq(32);
  ASSERT_TRUE(DequantizeFp8Ue8m0B32(codes, scales, dq).ok());
  EXPECT_THAT(dq,
              ElementsAreArray(Bf16Block({1.0f, 0.3125f, -0.0f, -1.0f, tiny, 0.0f, -0.0f}, 32)));
}

TEST(Fp4E4m3B16Test, TiesSignsAndClamp) {
  auto x = Bf16Block({0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, -0.25f, -0.75f, -1.25f,
                      -1.75f, -2.5f, -3.5f, -5.0f, -6.0f},
                     32);
  x[16] = FloatToBf16Bits(7.0f);  // second block: scale 7/6 -> 1.125, 7/1.125 clamps to 6
  x[17] = FloatToBf16Bits(-7.0f);
  x[18] = FloatToBf16Bits(-0.0f);
  std::vector<uint8_t> packed(16), scales(2);
  ASSERT_TRUE(QuantizeFp4E4m3B16(x, packed, scales).ok());
  EXPECT_THAT(scales, ElementsAreArray({0x38, 0x39}));
  EXPECT_THAT(packed, ElementsAreArray({0x20, 0x42, 0x64, 0x76, 0xA8, 0xCA, 0xEC, 0xFE,  //
                                        0xF7, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}));
  std::vector<uint16_t> dq(32);
  ASSERT_TRUE(DequantizeFp4E4m3B16(packed, scales, dq).ok());
  EXPECT_THAT(dq, ElementsAreArray(
                      Bf16Block({0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, -0.0f, -1.0f,
                                 -1.0f, -2.0f, -2.0f, -4.0f, -4.0f, -6.0f, 6.75f, -6.75f, -0.0f},
                                32)));
}

TEST(Fp4Ue8m0B32Test, PowerOfTwoScaleAndBoundary) {
  const float s = std::ldexp(1.0f, -20);
  auto x = Bf16Block(
      {0.25f * s, 0.75f * s, 1.25f * s, -1.75f * s, 2.5f * s, 3.5f * s, -5.0f * s, 6.0f * s}, 64);
  x[32] = FloatToBf16Bits(6.046875f);  // amax just above 6: scale 2
  x[33] = FloatToBf16Bits(-5.0f);      // 2.5 ties to 2
  x[34] = FloatToBf16Bits(-0.0f);
  std::vector<uint8_t> packed(32), scales(2);
  ASSERT_TRUE(QuantizeFp4Ue8m0B32(x, packed, scales).ok());
  EXPECT_THAT(scales, ElementsAreArray({127 - 20, 128}));
  EXPECT_EQ(packed[0], 0x20);
  EXPECT_EQ(packed[1], 0xC2);
  EXPECT_EQ(packed[2], 0x64);
  EXPECT_EQ(packed[3], 0x7E);
  EXPECT_EQ(packed[16], 0xC5);  // 6.046875/2 -> 3 (code 5); -5/2 = -2.5 ties to -2 (code 12)
  EXPECT_EQ(packed[17], 0x08);  // -0 -> code 8 in the low nibble
}

TEST(BlockQuantTest, RejectsMismatchedSizes) {
  std::vector<uint16_t> x(64), out(64);
  std::vector<uint8_t> codes(64), packed(32), s2(2), s4(4);
  EXPECT_TRUE(absl::IsInvalidArgument(
      QuantizeFp8Ue8m0B32(std::span(x).first(48), std::span(codes).first(48), s2)));
  EXPECT_TRUE(absl::IsInvalidArgument(QuantizeFp8Ue8m0B32(x, std::span(codes).first(63), s2)));
  EXPECT_TRUE(absl::IsInvalidArgument(QuantizeFp8Ue8m0B32(x, codes, s4)));
  EXPECT_TRUE(absl::IsInvalidArgument(DequantizeFp8Ue8m0B32(codes, s4, out)));
  EXPECT_TRUE(absl::IsInvalidArgument(QuantizeFp4E4m3B16(x, packed, s2)));
  EXPECT_TRUE(absl::IsInvalidArgument(QuantizeFp4E4m3B16(x, codes, s4)));
  EXPECT_TRUE(absl::IsInvalidArgument(DequantizeFp4E4m3B16(packed, s2, out)));
  EXPECT_TRUE(absl::IsInvalidArgument(QuantizeFp4Ue8m0B32(x, packed, s4)));
  EXPECT_TRUE(absl::IsInvalidArgument(DequantizeFp4Ue8m0B32(packed, s4, out)));
  EXPECT_TRUE(QuantizeFp4Ue8m0B32(x, packed, s2).ok());
  EXPECT_TRUE(QuantizeFp4E4m3B16(x, packed, s4).ok());
}

TEST(BlockQuantTest, ManyBlocksEqualBlockByBlock) {
  const auto x = VariedBf16(256, 7);
  std::vector<uint8_t> codes(256), scales(8), one_codes(32), one_scale(1);
  ASSERT_TRUE(QuantizeFp8Ue8m0B32(x, codes, scales).ok());
  for (size_t b = 0; b < 8; ++b) {
    ASSERT_TRUE(QuantizeFp8Ue8m0B32(std::span(x).subspan(b * 32, 32), one_codes, one_scale).ok());
    EXPECT_EQ(one_scale[0], scales[b]);
    EXPECT_TRUE(std::equal(one_codes.begin(), one_codes.end(), codes.begin() + b * 32));
  }
}

TEST(BlockQuantTest, QdqEqualsDequantOfQuantAndWorksInPlace) {
  const auto x = VariedBf16(512, 11);
  std::vector<uint8_t> codes(512), packed(256), s16(32), s32(16);
  std::vector<uint16_t> want(512), got(512);

  ASSERT_TRUE(QuantizeFp8Ue8m0B32(x, codes, std::span(s16).first(16)).ok());
  ASSERT_TRUE(DequantizeFp8Ue8m0B32(codes, std::span(s16).first(16), want).ok());
  ASSERT_TRUE(QdqFp8Ue8m0B32(x, got).ok());
  EXPECT_EQ(got, want);
  auto in_place = x;
  ASSERT_TRUE(QdqFp8Ue8m0B32(in_place, in_place).ok());
  EXPECT_EQ(in_place, want);

  ASSERT_TRUE(QuantizeFp4E4m3B16(x, packed, s16).ok());
  ASSERT_TRUE(DequantizeFp4E4m3B16(packed, s16, want).ok());
  ASSERT_TRUE(QdqFp4E4m3B16(x, got).ok());
  EXPECT_EQ(got, want);

  ASSERT_TRUE(QuantizeFp4Ue8m0B32(x, packed, s32).ok());
  ASSERT_TRUE(DequantizeFp4Ue8m0B32(packed, s32, want).ok());
  in_place = x;
  ASSERT_TRUE(QdqFp4Ue8m0B32(in_place, in_place).ok());
  EXPECT_EQ(in_place, want);

  // Partial overlap and size mismatch are refused.
  std::vector<uint16_t> buf(96);
  EXPECT_TRUE(absl::IsInvalidArgument(
      QdqFp8Ue8m0B32(std::span(buf).first(64), std::span(buf).subspan(32, 64))));
  EXPECT_TRUE(absl::IsInvalidArgument(QdqFp4E4m3B16(std::span(x).first(32), got)));
}

TEST(KvRowTest, SizesAndOffsets) {
  EXPECT_EQ(SwaKvRowBytes(512), 528);
  EXPECT_EQ(MainKvRowBytes(512), 288);
  EXPECT_EQ(IndexKRowBytes(128), 68);
  EXPECT_EQ(MainKvScaleOffset(512), 256);
  EXPECT_EQ(IndexKScaleOffset(128), 64);
  EXPECT_EQ(SwaKvScaleOffset(512), 512);
}

TEST(KvRowTest, RowsAreCodesThenScales) {
  const auto x = VariedBf16(512, 3);
  std::vector<uint8_t> codes(512), packed(256), scales(32);
  std::vector<uint16_t> want(512), got(512);

  std::vector<uint8_t> swa(SwaKvRowBytes(512));
  ASSERT_TRUE(EncodeSwaKvRow(x, swa).ok());
  ASSERT_TRUE(QuantizeFp8Ue8m0B32(x, codes, std::span(scales).first(16)).ok());
  EXPECT_TRUE(std::equal(codes.begin(), codes.end(), swa.begin()));
  EXPECT_TRUE(std::equal(scales.begin(), scales.begin() + 16, swa.begin() + 512));
  ASSERT_TRUE(DecodeSwaKvRow(swa, got).ok());
  ASSERT_TRUE(QdqFp8Ue8m0B32(x, want).ok());
  EXPECT_EQ(got, want);

  std::vector<uint8_t> main_kv(MainKvRowBytes(512));
  ASSERT_TRUE(EncodeMainKvRow(x, main_kv).ok());
  ASSERT_TRUE(QuantizeFp4E4m3B16(x, packed, scales).ok());
  EXPECT_TRUE(std::equal(packed.begin(), packed.end(), main_kv.begin()));
  EXPECT_TRUE(std::equal(scales.begin(), scales.end(), main_kv.begin() + 256));
  ASSERT_TRUE(DecodeMainKvRow(main_kv, got).ok());
  ASSERT_TRUE(QdqFp4E4m3B16(x, want).ok());
  EXPECT_EQ(got, want);

  const auto k = std::span(x).first(128);
  std::vector<uint8_t> index_k(IndexKRowBytes(128));
  ASSERT_TRUE(EncodeIndexKRow(k, index_k).ok());
  ASSERT_TRUE(QuantizeFp4Ue8m0B32(k, std::span(packed).first(64), std::span(scales).first(4)).ok());
  EXPECT_TRUE(std::equal(packed.begin(), packed.begin() + 64, index_k.begin()));
  EXPECT_TRUE(std::equal(scales.begin(), scales.begin() + 4, index_k.begin() + 64));
  ASSERT_TRUE(DecodeIndexKRow(index_k, std::span(got).first(128)).ok());
  ASSERT_TRUE(QdqFp4Ue8m0B32(k, std::span(want).first(128)).ok());
  EXPECT_EQ(got, want);

  EXPECT_TRUE(absl::IsInvalidArgument(EncodeMainKvRow(x, std::span(main_kv).first(287))));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeIndexKRow(index_k, std::span(got).first(120))));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeSwaKvRow(std::span(x).first(500), swa)));
}

}  // namespace
}  // namespace flashserve::formats
