// Bicubic resize and letterbox tests: coefficients and a 2x2 -> 4x4 resize worked out by hand
// from Pillow's formulas (see bicubic_resample.h), then Pillow 9.4 goldens (SHA-256 of the
// output bytes, testdata/goldens.json) for up/down/one-axis resizes and ImageOps.pad.
#include <fstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/vision/bicubic_resample.h"
#include "model/vision/letterbox.h"
#include "model/vision/vision_test_util.h"
#include "nlohmann/json.hpp"

namespace flashserve::model::vision {
namespace {

using ::testing::ElementsAre;
using testing::RepoPath;
using testing::Sha256Hex;
using testing::SyntheticImage;

nlohmann::json LoadGoldens() {
  std::ifstream in(RepoPath("model/vision/testdata/goldens.json"));
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

TEST(BicubicKernelTest, HandValues) {
  // a = -0.5: |x| < 1: 1.5|x|^3 - 2.5|x|^2 + 1; 1 <= |x| < 2: -0.5|x|^3 + 2.5|x|^2 - 4|x| + 2.
  EXPECT_EQ(BicubicKernel(0.0), 1.0);
  EXPECT_EQ(BicubicKernel(0.25), 0.8671875);   // 1.5/64 - 2.5/16 + 1
  EXPECT_EQ(BicubicKernel(-0.75), 0.2265625);  // 1.5*27/64 - 2.5*9/16 + 1
  EXPECT_EQ(BicubicKernel(1.25), -0.0703125);  // -0.5*125/64 + 2.5*25/16 - 5 + 2
  EXPECT_EQ(BicubicKernel(1.5), -0.0625);
  EXPECT_EQ(BicubicKernel(1.0), 0.0);
  EXPECT_EQ(BicubicKernel(2.0), 0.0);
  EXPECT_EQ(BicubicKernel(-3.0), 0.0);
}

// 2 -> 4 (upscale, scale 0.5, support 2, ksize 5). Output i has center (i + 0.5) / 2; both input
// pixels are in range for every i, with kernel arguments x - center + 0.5:
//   i=0: K(0.25)=0.8671875, K(1.25)=-0.0703125, sum 0.796875 -> 1.0882353, -0.0882353
//   i=1: K(-0.25), K(0.75)=0.2265625, sum 1.09375 -> 0.7928571, 0.2071429
// In 2^-22 units, rounded half away from zero: 4564389.65 -> 4564390, -370085.65 -> -370086,
// 3325483.89 -> 3325484, 868820.11 -> 868820 (i=2, 3 mirror i=1, 0).
TEST(BicubicAxisTest, UpscaleTwoToFourByHand) {
  absl::StatusOr<ResampleAxis> axis = ComputeBicubicAxis(2, 4);
  ASSERT_TRUE(axis.ok()) << axis.status();
  EXPECT_EQ(axis->ksize, 5);
  EXPECT_THAT(axis->first, ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(axis->count, ElementsAre(2, 2, 2, 2));
  auto taps = [&](int i) {
    return std::vector<int32_t>{axis->fixed[i * 5], axis->fixed[i * 5 + 1]};
  };
  EXPECT_THAT(taps(0), ElementsAre(4564390, -370086));
  EXPECT_THAT(taps(1), ElementsAre(3325484, 868820));
  EXPECT_THAT(taps(2), ElementsAre(868820, 3325484));
  EXPECT_THAT(taps(3), ElementsAre(-370086, 4564390));
  EXPECT_DOUBLE_EQ(axis->weights[0], 0.8671875 / 0.796875);
}

// 4 -> 2 (downscale by 2: filterscale 2, support 4, ksize 9). Output 0: center 1, taps x = 0..3
// at K((x - 0.5) / 2) = K(-0.25), K(0.25), K(0.75), K(1.25) = (111, 111, 29, -9) / 128, sum
// 242/128 -> weights 111/242, 111/242, 29/242, -9/242 -> fixed 1923834, 1923834, 502623,
// -155987. Output 1 mirrors it (center 3).
TEST(BicubicAxisTest, DownscaleFourToTwoByHand) {
  absl::StatusOr<ResampleAxis> axis = ComputeBicubicAxis(4, 2);
  ASSERT_TRUE(axis.ok()) << axis.status();
  EXPECT_EQ(axis->ksize, 9);
  EXPECT_THAT(axis->first, ElementsAre(0, 0));
  EXPECT_THAT(axis->count, ElementsAre(4, 4));
  EXPECT_THAT(std::vector<int32_t>(axis->fixed.begin(), axis->fixed.begin() + 4),
              ElementsAre(1923834, 1923834, 502623, -155987));
  EXPECT_THAT(std::vector<int32_t>(axis->fixed.begin() + 9, axis->fixed.begin() + 13),
              ElementsAre(-155987, 502623, 1923834, 1923834));
  EXPECT_FALSE(ComputeBicubicAxis(0, 3).ok());
  EXPECT_FALSE(ComputeBicubicAxis(3, 1 << 24).ok());
}

// The 2x2 image [[0, 255], [255, 0]] (all channels) upscaled to 4x4, by hand:
// horizontal pass, row (0, 255): (2^21 + 255 * k) >> 22 with the taps above gives
//   i=0: -92274778 >> 22 = -23 -> 0;  i=1: 223646252 >> 22 = 53;  i=2: 850095572 >> 22 = 202;
//   i=3: 1166016602 >> 22 = 278 -> 255.  Row (255, 0) is the mirror: 255, 202, 53, 0.
// Vertical pass on the 8-bit columns (0,255), (53,202), (202,53), (255,0):
//   (53, 202): i=0: (4564390*53 - 370086*202 + 2^21) >> 22 = 169252450 >> 22 = 40;
//              i=1: (3325484*53 + 868820*202 + 2^21) >> 22 = 353849444 >> 22 = 84;
//              i=2: 719892380 >> 22 = 171;  i=3: 904489374 >> 22 = 215.
// (Pillow 9.4 gives the same 4x4 for this input.)
TEST(ResizeBicubicTest, TwoByTwoToFourByFourByHand) {
  RgbImage src = RgbImage::Filled(2, 2, 0, 0, 0);
  for (int c = 0; c < 3; ++c) src.pixel(1, 0)[c] = src.pixel(0, 1)[c] = 255;
  absl::StatusOr<RgbImage> out = ResizeBicubic(src, 4, 4);
  ASSERT_TRUE(out.ok()) << out.status();
  const int want[4][4] = {
      {0, 40, 215, 255}, {53, 84, 171, 202}, {202, 171, 84, 53}, {255, 215, 40, 0}};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(out->pixel(x, y)[c], want[y][x]) << "x=" << x << " y=" << y;
      }
    }
  }
}

TEST(ResizeBicubicTest, SameSizeIsACopyAndBadSizesFail) {
  const RgbImage src = SyntheticImage(9, 7);
  absl::StatusOr<RgbImage> same = ResizeBicubic(src, 9, 7);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, src);
  EXPECT_EQ(ResizeBicubic(src, 0, 7).status().code(), absl::StatusCode::kInvalidArgument);
  RgbImage broken = src;
  broken.rgb.pop_back();
  EXPECT_EQ(ResizeBicubic(broken, 5, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResizeBicubicTest, MatchesPillowGoldens) {
  const nlohmann::json goldens = LoadGoldens();
  ASSERT_GE(goldens["resize"].size(), 10u);
  for (const auto& c : goldens["resize"]) {
    const int iw = c["in"][0], ih = c["in"][1], ow = c["out"][0], oh = c["out"][1];
    SCOPED_TRACE(::testing::Message() << iw << "x" << ih << " -> " << ow << "x" << oh);
    absl::StatusOr<RgbImage> out = ResizeBicubic(SyntheticImage(iw, ih), ow, oh);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Sha256Hex(out->rgb), c["sha256"].get<std::string>());
  }
}

TEST(LetterboxTest, RoundHalfEvenIsPythonRound) {
  EXPECT_EQ(RoundHalfEven(0.5), 0);
  EXPECT_EQ(RoundHalfEven(1.5), 2);
  EXPECT_EQ(RoundHalfEven(2.5), 2);
  EXPECT_EQ(RoundHalfEven(3.5), 4);
  EXPECT_EQ(RoundHalfEven(12.5), 12);
  EXPECT_EQ(RoundHalfEven(2.4999999), 2);
  EXPECT_EQ(RoundHalfEven(17.08), 17);
  EXPECT_EQ(RoundHalfEven(-0.5), 0);
  EXPECT_EQ(RoundHalfEven(-1.5), -2);
}

TEST(LetterboxTest, ContainSizeByHand) {
  // 10x40 into 42x140: 0.25 < 0.3 -> new_w = round(10/40*140) = round(35.0) = 35.
  EXPECT_EQ(ContainSize(10, 40, 42, 140), (PixelSize{35, 140}));
  // 3000x20 into 2562x42: wider -> new_h = round(20/3000*2562) = round(17.08) = 17.
  EXPECT_EQ(ContainSize(3000, 20, 2562, 42), (PixelSize{2562, 17}));
  // 98x64 into 98x70: new_h = round(64/98*98) = 64 (no resample, pasted at y = 3).
  EXPECT_EQ(ContainSize(98, 64, 98, 70), (PixelSize{98, 64}));
  // Equal ratios keep the target: 1000x500 into 420x210.
  EXPECT_EQ(ContainSize(1000, 500, 420, 210), (PixelSize{420, 210}));
  // 10000x1 into 2562x42: round(0.2562) = 0 -> PadImage refuses (PIL raises ValueError).
  EXPECT_EQ(ContainSize(10000, 1, 2562, 42), (PixelSize{2562, 0}));
  EXPECT_EQ(PadImage(SyntheticImage(10000, 1), 2562, 42, 127).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// 98x64 into 98x70 needs no resampling: 3 grey rows above and below, the image unchanged.
TEST(LetterboxTest, PadWithoutResampleByHand) {
  const RgbImage src = SyntheticImage(98, 64);
  absl::StatusOr<RgbImage> out = PadImage(src, 98, 70, 127);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int y = 0; y < 70; ++y) {
    for (int x = 0; x < 98; ++x) {
      for (int c = 0; c < 3; ++c) {
        const uint8_t want = (y < 3 || y >= 67) ? 127 : src.pixel(x, y - 3)[c];
        ASSERT_EQ(out->pixel(x, y)[c], want) << x << "," << y;
      }
    }
  }
  // A 7-pixel gap splits 4 + 3 (round(3.5) = 4): 10x40 into 42x140 -> columns 4..38 hold the
  // 35-pixel-wide resize, the rest is grey.
  absl::StatusOr<RgbImage> odd = PadImage(SyntheticImage(10, 40), 42, 140, 127);
  ASSERT_TRUE(odd.ok());
  for (int x : {0, 3, 39, 41}) EXPECT_EQ(odd->pixel(x, 70)[0], 127) << x;
  absl::StatusOr<RgbImage> inner = ResizeBicubic(SyntheticImage(10, 40), 35, 140);
  ASSERT_TRUE(inner.ok());
  for (int x = 0; x < 35; ++x) EXPECT_EQ(odd->pixel(x + 4, 70)[1], inner->pixel(x, 70)[1]);
}

TEST(LetterboxTest, MatchesPillowGoldens) {
  const nlohmann::json goldens = LoadGoldens();
  ASSERT_GE(goldens["pad"].size(), 10u);
  for (const auto& c : goldens["pad"]) {
    const int iw = c["in"][0], ih = c["in"][1], ow = c["out"][0], oh = c["out"][1];
    SCOPED_TRACE(::testing::Message() << iw << "x" << ih << " -> " << ow << "x" << oh);
    EXPECT_EQ(ContainSize(iw, ih, ow, oh),
              (PixelSize{c["contain"][0].get<int>(), c["contain"][1].get<int>()}));
    absl::StatusOr<RgbImage> out = PadImage(SyntheticImage(iw, ih), ow, oh, 127);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Sha256Hex(out->rgb), c["sha256"].get<std::string>());
  }
}

}  // namespace
}  // namespace flashserve::model::vision
