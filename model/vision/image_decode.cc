#include "model/vision/image_decode.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flashserve::model::vision {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};

// "89 50 4e 47" for the first few bytes, for error messages about unrecognised input.
std::string HexPrefix(std::span<const uint8_t> bytes) {
  std::string out;
  const size_t n = std::min<size_t>(bytes.size(), 8);
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppendFormat(&out, "%s%02x", i == 0 ? "" : " ", bytes[i]);
  }
  return out;
}

}  // namespace

RgbImage RgbImage::Filled(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(image.num_pixels() * 3);
  for (size_t i = 0; i < image.rgb.size(); i += 3) {
    image.rgb[i] = r;
    image.rgb[i + 1] = g;
    image.rgb[i + 2] = b;
  }
  return image;
}

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

ImageFormat DetectImageFormat(std::span<const uint8_t> bytes) {
  if (bytes.size() >= sizeof(kPngSignature) &&
      std::memcmp(bytes.data(), kPngSignature, sizeof(kPngSignature)) == 0) {
    return ImageFormat::kPng;
  }
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    return ImageFormat::kJpeg;
  }
  return ImageFormat::kUnknown;
}

absl::Status DecodeOptions::Validate() const {
  if (max_pixels <= 0 || max_input_bytes == 0 || max_jpeg_memory_bytes == 0 ||
      max_jpeg_scans <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image decode options: every limit must be positive (max_pixels ", max_pixels,
                     ", max_input_bytes ", max_input_bytes, ", max_jpeg_memory_bytes ",
                     max_jpeg_memory_bytes, ", max_jpeg_scans ", max_jpeg_scans, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (bytes.empty()) return absl::InvalidArgumentError("image: empty input");
  if (bytes.size() > options.max_input_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("image: input of ", bytes.size(),
                                                     " bytes exceeds the limit of ",
                                                     options.max_input_bytes, " bytes"));
  }
  switch (DetectImageFormat(bytes)) {
    case ImageFormat::kPng:
      return DecodePng(bytes, options);
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, options);
    case ImageFormat::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("image: unrecognised format (only PNG and JPEG are accepted); first bytes: ",
                   HexPrefix(bytes)));
}

}  // namespace flashserve::model::vision
