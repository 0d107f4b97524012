// Decoder tests: Pillow goldens for every PNG colour type / depth and several JPEG kinds
// (testdata/make_goldens.py), files written here with libpng / libjpeg, and damaged files
// (truncated, bit-flipped, oversized headers) that must give a clear error and never crash.
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/vision/image_decode.h"
#include "model/vision/vision_test_util.h"
#include "nlohmann/json.hpp"

namespace flashserve::model::vision {
namespace {

using ::testing::AnyOf;
using testing::EncodeJpeg;
using testing::EncodePng;
using ::testing::HasSubstr;
using testing::ReadFileBytes;
using testing::RepoPath;

constexpr char kTestdata[] = "model/vision/testdata/";

nlohmann::json LoadGoldens() {
  std::ifstream in(RepoPath(std::string(kTestdata) + "goldens.json"));
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

std::vector<uint16_t> Ramp(size_t n, uint32_t mul, uint32_t mask) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>((i * mul + (i >> 3) * 7) & mask);
  return v;
}

std::vector<uint8_t> Bytes8(const std::vector<uint16_t>& v) {
  return std::vector<uint8_t>(v.begin(), v.end());
}

// Rewrites the IHDR width/height of a PNG and fixes its CRC, leaving everything else.
std::vector<uint8_t> WithIhdrSize(std::vector<uint8_t> png, uint32_t width, uint32_t height) {
  // signature (8) + length (4) + "IHDR" (4) + width (4) + height (4) ... + CRC after 13 bytes.
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = static_cast<uint8_t>(width >> (24 - 8 * i));
    png[20 + i] = static_cast<uint8_t>(height >> (24 - 8 * i));
  }
  const uint32_t crc = static_cast<uint32_t>(crc32(0, &png[12], 17));
  for (int i = 0; i < 4; ++i) png[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  return png;
}

TEST(ImageFormatTest, DetectsFromMagicBytesOnly) {
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0};
  const std::vector<uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xE0};
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a'};
  EXPECT_EQ(DetectImageFormat(png), ImageFormat::kPng);
  EXPECT_EQ(DetectImageFormat(jpeg), ImageFormat::kJpeg);
  EXPECT_EQ(DetectImageFormat(gif), ImageFormat::kUnknown);
  EXPECT_EQ(DetectImageFormat(std::vector<uint8_t>(png.begin(), png.begin() + 7)),
            ImageFormat::kUnknown);
  EXPECT_EQ(DetectImageFormat({}), ImageFormat::kUnknown);
  absl::StatusOr<RgbImage> r = DecodeImage(gif);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("47 49 46 38"));
  EXPECT_EQ(DecodeImage({}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Every file was decoded by Pillow 9.4 with Image.open(f).convert("RGB"); we must agree byte
// for byte (JPEGs decode through the same system libjpeg-turbo).
TEST(DecodeGoldenTest, MatchesPillowConvertRgb) {
  const nlohmann::json goldens = LoadGoldens();
  int png_cases = 0;
  int jpeg_cases = 0;
  for (const auto& c : goldens["decode"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file + " (PIL mode " + std::string(c["pil_mode"]) + ")");
    const std::vector<uint8_t> bytes = ReadFileBytes(RepoPath(kTestdata + file));
    absl::StatusOr<RgbImage> image = DecodeImage(bytes);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->width, c["width"].get<int>());
    EXPECT_EQ(image->height, c["height"].get<int>());
    EXPECT_EQ(image->rgb, ReadFileBytes(RepoPath(kTestdata + std::string(c["expected"]))));
    (DetectImageFormat(bytes) == ImageFormat::kPng ? png_cases : jpeg_cases)++;
  }
  EXPECT_GE(png_cases, 22);
  EXPECT_GE(jpeg_cases, 7);
}

TEST(DecodePngTest, LibpngWrittenImagesFollowPilRules) {
  constexpr int kW = 9, kH = 5;
  // 16-bit gray: PIL clamps (I;16 -> RGB), it does not take the high byte.
  const std::vector<uint16_t> gray16 = Ramp(kW * kH, 2311, 0xFFFF);
  absl::StatusOr<RgbImage> g = DecodeImage(EncodePng(kW, kH, PNG_COLOR_TYPE_GRAY, 16, gray16));
  ASSERT_TRUE(g.ok()) << g.status();
  for (int i = 0; i < kW * kH; ++i) {
    const uint8_t want = gray16[i] > 255 ? 255 : static_cast<uint8_t>(gray16[i]);
    EXPECT_EQ(g->rgb[3 * i], want);
    EXPECT_EQ(g->rgb[3 * i + 2], want);
  }
  // 16-bit RGBA: high bytes, alpha dropped (not composited).
  const std::vector<uint16_t> rgba16 = Ramp(kW * kH * 4, 4099, 0xFFFF);
  absl::StatusOr<RgbImage> c = DecodeImage(EncodePng(kW, kH, PNG_COLOR_TYPE_RGB_ALPHA, 16, rgba16));
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < kW * kH; ++i) {
    for (int ch = 0; ch < 3; ++ch) EXPECT_EQ(c->rgb[3 * i + ch], rgba16[4 * i + ch] >> 8);
  }
  // Interlacing changes nothing in the result.
  absl::StatusOr<RgbImage> ci =
      DecodeImage(EncodePng(kW, kH, PNG_COLOR_TYPE_RGB_ALPHA, 16, rgba16, /*interlaced=*/true));
  ASSERT_TRUE(ci.ok()) << ci.status();
  EXPECT_EQ(ci->rgb, c->rgb);
  // 2-bit palette: PLTE colours.
  const std::vector<uint8_t> palette = {10, 20, 30, 40, 50, 60, 70, 80, 90, 200, 210, 220};
  const std::vector<uint16_t> idx = Ramp(kW * kH, 3, 3);
  absl::StatusOr<RgbImage> p =
      DecodeImage(EncodePng(kW, kH, PNG_COLOR_TYPE_PALETTE, 2, idx, false, palette));
  ASSERT_TRUE(p.ok()) << p.status();
  for (int i = 0; i < kW * kH; ++i) {
    for (int ch = 0; ch < 3; ++ch) EXPECT_EQ(p->rgb[3 * i + ch], palette[3 * idx[i] + ch]);
  }
  // 4-bit gray: bit replication (v * 17).
  const std::vector<uint16_t> g4 = Ramp(kW * kH, 5, 15);
  absl::StatusOr<RgbImage> q = DecodeImage(EncodePng(kW, kH, PNG_COLOR_TYPE_GRAY, 4, g4));
  ASSERT_TRUE(q.ok()) << q.status();
  for (int i = 0; i < kW * kH; ++i) EXPECT_EQ(q->rgb[3 * i + 1], g4[i] * 17);
}

TEST(DecodeJpegTest, LibjpegWrittenImagesDecode) {
  constexpr int kW = 40, kH = 24;
  // Smooth content: libjpeg's default 4:2:0 chroma subsampling keeps it close.
  RgbImage src = RgbImage::Filled(kW, kH, 0, 0, 0);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      uint8_t* p = src.pixel(x, y);
      p[0] = static_cast<uint8_t>(x * 6);
      p[1] = static_cast<uint8_t>(y * 10);
      p[2] = static_cast<uint8_t>(100 + x + y);
    }
  }
  for (bool progressive : {false, true}) {
    absl::StatusOr<RgbImage> rgb = DecodeImage(EncodeJpeg(kW, kH, 3, src.rgb, 100, progressive));
    ASSERT_TRUE(rgb.ok()) << rgb.status();
    ASSERT_EQ(rgb->width, kW);
    ASSERT_EQ(rgb->height, kH);
    // Lossy, but at quality 100 every sample stays close to the source.
    int worst = 0;
    for (size_t i = 0; i < rgb->rgb.size(); ++i) {
      worst = std::max(worst, std::abs(int{rgb->rgb[i]} - int{src.rgb[i]}));
    }
    EXPECT_LE(worst, 12) << "progressive=" << progressive;
  }
  const std::vector<uint8_t> gray(kW * kH, 77);
  absl::StatusOr<RgbImage> g = DecodeImage(EncodeJpeg(kW, kH, 1, gray, 100, false));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->rgb, RgbImage::Filled(kW, kH, 77, 77, 77).rgb);
  // A flat CMYK image: libjpeg's samples (c, m, y, k) = (255, 255, 255, 200) are, to PIL,
  // inverted ink (0, 0, 0, 55): out = 200 - MulDiv255(0, 200) = 200 on every channel.
  std::vector<uint8_t> cmyk;
  for (int i = 0; i < kW * kH; ++i) cmyk.insert(cmyk.end(), {255, 255, 255, 200});
  absl::StatusOr<RgbImage> k = DecodeImage(EncodeJpeg(kW, kH, 4, cmyk, 100, false));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->rgb, RgbImage::Filled(kW, kH, 200, 200, 200).rgb);
}

TEST(DecodeLimitsTest, PixelAndByteLimits) {
  const std::vector<uint8_t> png = EncodePng(100, 50, PNG_COLOR_TYPE_GRAY, 8, Ramp(5000, 1, 255));
  const std::vector<uint8_t> jpeg = EncodeJpeg(100, 50, 1, Bytes8(Ramp(5000, 1, 255)), 90, true);
  for (const auto* bytes : {&png, &jpeg}) {
    DecodeOptions options;
    options.max_pixels = 4999;
    absl::StatusOr<RgbImage> r = DecodeImage(*bytes, options);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("100x50"));
    options.max_pixels = 5000;
    EXPECT_TRUE(DecodeImage(*bytes, options).ok());
    options.max_input_bytes = bytes->size() - 1;
    EXPECT_EQ(DecodeImage(*bytes, options).status().code(), absl::StatusCode::kResourceExhausted);
  }
  // A header claiming 100000 x 100000 is refused before any pixel memory is allocated.
  absl::StatusOr<RgbImage> huge = DecodeImage(WithIhdrSize(png, 100000, 100000));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  absl::StatusOr<RgbImage> zero = DecodeImage(WithIhdrSize(png, 0, 50));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument) << zero.status();
  EXPECT_THAT(zero.status().message(), HasSubstr("png:"));

  DecodeOptions scans;
  scans.max_jpeg_scans = 2;  // jpeg_simple_progression writes 6 scans for grayscale
  EXPECT_EQ(DecodeImage(jpeg, scans).status().code(), absl::StatusCode::kResourceExhausted);
  DecodeOptions memory;
  memory.max_jpeg_memory_bytes = 1000;  // progressive coefficients need ~10 KB here
  absl::StatusOr<RgbImage> m = DecodeImage(jpeg, memory);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  DecodeOptions bad;
  bad.max_pixels = 0;
  EXPECT_EQ(DecodeImage(png, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// Cutting a PNG anywhere before its IEND chunk must give InvalidArgument (our decoder reads no
// further than the image data, as PIL; so only the last 12 bytes may go missing unnoticed).
TEST(DecodeCorruptTest, TruncatedPngFailsCleanly) {
  const std::vector<uint8_t> png =
      EncodePng(31, 17, PNG_COLOR_TYPE_RGB, 8, Ramp(31 * 17 * 3, 37, 255), /*interlaced=*/false);
  const std::vector<uint8_t> interlaced =
      EncodePng(31, 17, PNG_COLOR_TYPE_RGB, 8, Ramp(31 * 17 * 3, 37, 255), true);
  for (const auto* file : {&png, &interlaced}) {
    for (size_t cut = 0; cut + 12 < file->size(); ++cut) {
      const std::vector<uint8_t> part(file->begin(), file->begin() + cut);
      absl::StatusOr<RgbImage> r = DecodeImage(part);
      ASSERT_FALSE(r.ok()) << "cut at " << cut << " of " << file->size();
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    }
  }
  absl::StatusOr<RgbImage> r =
      DecodeImage(std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2));
  EXPECT_THAT(r.status().message(), HasSubstr("truncated"));
}

// Flipping any byte of the signature, IHDR or IDAT (data or CRC) must fail: the CRCs catch it.
TEST(DecodeCorruptTest, FlippedPngBytesFailCleanly) {
  const std::vector<uint8_t> png =
      EncodePng(23, 11, PNG_COLOR_TYPE_RGB_ALPHA, 16, Ramp(23 * 11 * 4, 977, 0xFFFF));
  for (size_t pos = 0; pos + 12 < png.size(); ++pos) {
    std::vector<uint8_t> bad = png;
    bad[pos] ^= 0x5A;
    absl::StatusOr<RgbImage> r = DecodeImage(bad);
    ASSERT_FALSE(r.ok()) << "flip at " << pos;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
}

TEST(DecodeCorruptTest, TruncatedJpegFailsCleanly) {
  const RgbImage src = testing::SyntheticImage(37, 29);
  for (bool progressive : {false, true}) {
    const std::vector<uint8_t> jpeg = EncodeJpeg(37, 29, 3, src.rgb, 90, progressive);
    ASSERT_TRUE(DecodeImage(jpeg).ok());
    // The last two bytes are the EOI marker; cuts inside the entropy data or the headers fail.
    for (size_t cut = 0; cut + 2 < jpeg.size(); ++cut) {
      const std::vector<uint8_t> part(jpeg.begin(), jpeg.begin() + cut);
      absl::StatusOr<RgbImage> r = DecodeImage(part);
      ASSERT_FALSE(r.ok()) << "cut at " << cut << " of " << jpeg.size()
                           << " progressive=" << progressive;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    }
  }
}

// Corrupt JPEG bytes: never a crash; the result is an error, or (when the damage happens to form
// valid entropy codes, or hits a table or an ignored APP segment) an image of the right size.
// A damaged signature or frame marker is always an error.
TEST(DecodeCorruptTest, FlippedJpegBytesNeverCrash) {
  const RgbImage src = testing::SyntheticImage(37, 29);
  for (bool progressive : {false, true}) {
    const std::vector<uint8_t> jpeg = EncodeJpeg(37, 29, 3, src.rgb, 90, progressive);
    int errors = 0;
    for (size_t pos = 0; pos < jpeg.size(); ++pos) {
      std::vector<uint8_t> bad = jpeg;
      bad[pos] ^= 0xA5;
      absl::StatusOr<RgbImage> r = DecodeImage(bad);
      if (r.ok()) {
        EXPECT_EQ(r->width, 37);
        EXPECT_EQ(r->height, 29);
      } else {
        ++errors;
        // A flipped component count or sample precision reads as an unsupported kind of JPEG.
        EXPECT_THAT(r.status().code(),
                    AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnimplemented))
            << r.status();
        const bool signature = pos < 3;  // no longer FF D8 FF: not recognised as a JPEG
        EXPECT_THAT(r.status().message(), HasSubstr(signature ? "unrecognised format" : "jpeg: "))
            << pos;
      }
    }
    EXPECT_GE(errors, 3) << "progressive=" << progressive;
    std::vector<uint8_t> bad_sof = jpeg;
    for (size_t i = 0; i + 1 < bad_sof.size(); ++i) {
      if (bad_sof[i] == 0xFF && (bad_sof[i + 1] == 0xC0 || bad_sof[i + 1] == 0xC2)) {
        bad_sof[i + 1] = 0xCF;  // SOF15: lossless arithmetic, which libjpeg refuses
        break;
      }
    }
    EXPECT_FALSE(DecodeImage(bad_sof).ok());
  }
  DecodeOptions lenient;
  lenient.reject_corrupt_jpeg = false;
  const std::vector<uint8_t> jpeg = EncodeJpeg(37, 29, 3, src.rgb, 90, false);
  std::vector<uint8_t> bad = jpeg;
  bad[bad.size() - 40] ^= 0xFF;  // inside the entropy-coded data
  absl::StatusOr<RgbImage> strict = DecodeImage(bad);
  absl::StatusOr<RgbImage> loose = DecodeImage(bad, lenient);
  // Either the damage is detected (strict fails, lenient decodes what libjpeg recovers) or it is
  // not detectable at all (both decode).
  if (!strict.ok()) {
    EXPECT_THAT(strict.status().message(), HasSubstr("Corrupt JPEG data"));
    EXPECT_TRUE(loose.ok()) << loose.status();
  }
}

}  // namespace
}  // namespace flashserve::model::vision
