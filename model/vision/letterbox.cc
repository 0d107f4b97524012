#include "model/vision/letterbox.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"
#include "model/vision/bicubic_resample.h"

namespace flashserve::model::vision {

int64_t RoundHalfEven(double x) {
  // nearbyint rounds in the current mode, which is round-to-nearest-even unless changed; do the
  // tie test explicitly so that no global state matters.
  const double floor = std::floor(x);
  const double diff = x - floor;
  if (diff < 0.5) return static_cast<int64_t>(floor);
  if (diff > 0.5) return static_cast<int64_t>(floor) + 1;
  const int64_t f = static_cast<int64_t>(floor);
  return (f % 2 == 0) ? f : f + 1;
}

PixelSize ContainSize(int in_width, int in_height, int width, int height) {
  CHECK(in_width > 0 && in_height > 0 && width > 0 && height > 0)
      << in_width << "x" << in_height << " into " << width << "x" << height;
  const double im_ratio = static_cast<double>(in_width) / in_height;
  const double dest_ratio = static_cast<double>(width) / height;
  if (im_ratio == dest_ratio) return {width, height};
  if (im_ratio > dest_ratio) {
    const int64_t new_height = RoundHalfEven(static_cast<double>(in_height) / in_width * width);
    return {width, static_cast<int>(new_height)};
  }
  const int64_t new_width = RoundHalfEven(static_cast<double>(in_width) / in_height * height);
  return {static_cast<int>(new_width), height};
}

absl::StatusOr<RgbImage> PadImage(const RgbImage& image, int width, int height, uint8_t fill) {
  if (image.width <= 0 || image.height <= 0 || width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pad: cannot fit a ", image.width, "x", image.height, " image into ", width, "x", height));
  }
  const PixelSize fit = ContainSize(image.width, image.height, width, height);
  if (fit.width <= 0 || fit.height <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pad: a ", image.width, "x", image.height, " image shrinks to ", fit.width, "x", fit.height,
        " inside ", width, "x", height, " (aspect ratio too extreme)"));
  }
  absl::StatusOr<RgbImage> resized = ResizeBicubic(image, fit.width, fit.height);
  if (!resized.ok()) return resized.status();
  if (fit.width == width && fit.height == height) return resized;

  RgbImage out = RgbImage::Filled(width, height, fill, fill, fill);
  int x0 = 0;
  int y0 = 0;
  if (fit.width != width) {
    x0 = static_cast<int>(RoundHalfEven((width - fit.width) * 0.5));
  } else {
    y0 = static_cast<int>(RoundHalfEven((height - fit.height) * 0.5));
  }
  CHECK(x0 >= 0 && y0 >= 0 && x0 + fit.width <= width && y0 + fit.height <= height);
  const size_t row_bytes = static_cast<size_t>(fit.width) * 3;
  for (int y = 0; y < fit.height; ++y) {
    std::memcpy(out.pixel(x0, y0 + y), resized->pixel(0, y), row_bytes);
  }
  return out;
}

}  // namespace flashserve::model::vision
