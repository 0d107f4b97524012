// PIL's ImageOps.contain / ImageOps.pad (Pillow >= 8.3 formulas, checked against Pillow 9.4),
// which the reference uses to fit an image into its planned (best_width, best_height):
//
//   contain: keep the size if the aspect ratios are equal (compared as doubles); otherwise, when
//     the image is relatively wider, new_h = round(in_h / in_w * w) and the size is (w, new_h),
//     else new_w = round(in_w / in_h * h) and the size is (new_w, h). round() is Python's:
//     half to even. The image is then resized bicubically (bicubic_resample.h), a no-op when the
//     size is unchanged.
//   pad: contain, then paste onto a (w, h) canvas of `fill` at offset
//     round((w - new_w) * 0.5) or round((h - new_h) * 0.5) (half to even: a 3-pixel gap puts 2
//     pixels before the image, a 5-pixel gap 2, a 7-pixel gap 4).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/vision/image.h"

namespace flashserve::model::vision {

struct PixelSize {
  int width = 0;
  int height = 0;
  friend bool operator==(const PixelSize&, const PixelSize&) = default;
};

// Python's round(x) for a double: nearest integer, ties to even.
int64_t RoundHalfEven(double x);

// ImageOps.contain's target size for an in_width x in_height image inside width x height.
// A side may come out as 0 for extreme aspect ratios (PIL then fails in resize; PadImage
// reports it). Precondition: all sizes > 0 (CHECKed).
PixelSize ContainSize(int in_width, int in_height, int width, int height);

// ImageOps.pad(image, (width, height), BICUBIC, color=(fill, fill, fill)).
// Errors: InvalidArgument if a size is not positive, or if the contained size has a zero side
// (the reference's PIL raises ValueError there too); ResizeBicubic's errors.
absl::StatusOr<RgbImage> PadImage(const RgbImage& image, int width, int height, uint8_t fill);

}  // namespace flashserve::model::vision
