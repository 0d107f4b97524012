// RgbImage: an 8-bit RGB raster, the only pixel type the vision preprocessing handles.
//
// PIL's `Image.convert("RGB")` result is what the reference preprocesses; every decoder here
// produces exactly that (see image_decode.h), and the resampler and letterbox work on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashserve::model::vision {

// Row-major, 3 interleaved bytes per pixel (R, G, B), no row padding:
// pixel (x, y) channel c is at rgb[(y * width + x) * 3 + c].
// A plain value type (copyable, movable); const access from several threads is safe.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3 bytes

  // An image of the given size filled with one colour. Sizes must be >= 0 (not checked here:
  // callers validate sizes before allocating).
  static RgbImage Filled(int width, int height, uint8_t r, uint8_t g, uint8_t b);

  size_t num_pixels() const { return static_cast<size_t>(width) * static_cast<size_t>(height); }
  const uint8_t* pixel(int x, int y) const {
    return rgb.data() + (static_cast<size_t>(y) * static_cast<size_t>(width) + x) * 3;
  }
  uint8_t* pixel(int x, int y) {
    return rgb.data() + (static_cast<size_t>(y) * static_cast<size_t>(width) + x) * 3;
  }

  friend bool operator==(const RgbImage&, const RgbImage&) = default;
};

}  // namespace flashserve::model::vision
