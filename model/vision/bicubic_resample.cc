#include "model/vision/bicubic_resample.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"

namespace flashserve::model::vision {
namespace {

constexpr int kMaxSide = 1 << 24;  // PIL passes the source box as floats: exact below 2^24
constexpr double kBicubicSupport = 2.0;

absl::Status CheckSide(int size, const char* what) {
  if (size <= 0 || size >= kMaxSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("bicubic resize: ", what, " ", size, " is outside (0, 2^24)"));
  }
  return absl::OkStatus();
}

inline uint8_t ClipFixed(int64_t acc) {
  const int64_t v = acc >> kResamplePrecisionBits;  // arithmetic shift: floor
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One output pixel (3 channels) from `n` source pixels `stride` bytes apart.
inline void Convolve(const uint8_t* src, size_t stride, const int32_t* k, int n, uint8_t* out) {
  int64_t acc[3] = {1 << (kResamplePrecisionBits - 1), 1 << (kResamplePrecisionBits - 1),
                    1 << (kResamplePrecisionBits - 1)};
  for (int i = 0; i < n; ++i, src += stride) {
    acc[0] += static_cast<int64_t>(src[0]) * k[i];
    acc[1] += static_cast<int64_t>(src[1]) * k[i];
    acc[2] += static_cast<int64_t>(src[2]) * k[i];
  }
  out[0] = ClipFixed(acc[0]);
  out[1] = ClipFixed(acc[1]);
  out[2] = ClipFixed(acc[2]);
}

}  // namespace

double BicubicKernel(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

absl::StatusOr<ResampleAxis> ComputeBicubicAxis(int in_size, int out_size) {
  if (absl::Status s = CheckSide(in_size, "input size"); !s.ok()) return s;
  if (absl::Status s = CheckSide(out_size, "output size"); !s.ok()) return s;
  ResampleAxis axis;
  axis.in_size = in_size;
  axis.out_size = out_size;
  // PIL's box is float[4]: in1 - in0 is a float difference, then widened.
  const float in0 = 0.0f;
  const float in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kBicubicSupport * filterscale;
  axis.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  axis.first.resize(out_size);
  axis.count.resize(out_size);
  axis.weights.assign(static_cast<size_t>(out_size) * axis.ksize, 0.0);
  axis.fixed.assign(axis.weights.size(), 0);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    double* k = &axis.weights[static_cast<size_t>(xx) * axis.ksize];
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = BicubicKernel((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
    }
    axis.first[xx] = xmin;
    axis.count[xx] = xmax;
  }
  for (size_t i = 0; i < axis.weights.size(); ++i) {
    const double scaled = axis.weights[i] * (1 << kResamplePrecisionBits);
    axis.fixed[i] = static_cast<int32_t>(axis.weights[i] < 0 ? -0.5 + scaled : 0.5 + scaled);
  }
  return axis;
}

absl::StatusOr<RgbImage> ResizeBicubic(const RgbImage& image, int out_width, int out_height) {
  if (absl::Status s = CheckSide(image.width, "input width"); !s.ok()) return s;
  if (absl::Status s = CheckSide(image.height, "input height"); !s.ok()) return s;
  if (image.rgb.size() != image.num_pixels() * 3) {
    return absl::InvalidArgumentError(absl::StrCat("bicubic resize: ", image.width, "x",
                                                   image.height, " image holds ", image.rgb.size(),
                                                   " bytes"));
  }
  if (absl::Status s = CheckSide(out_width, "output width"); !s.ok()) return s;
  if (absl::Status s = CheckSide(out_height, "output height"); !s.ok()) return s;
  if (out_width == image.width && out_height == image.height) return image;

  absl::StatusOr<ResampleAxis> vert = ComputeBicubicAxis(image.height, out_height);
  if (!vert.ok()) return vert.status();
  const bool need_horizontal = out_width != image.width;
  const bool need_vertical = out_height != image.height;

  // Horizontal pass over the rows the vertical pass will read (all rows when the height stays).
  RgbImage temp;
  const RgbImage* src = &image;
  if (need_horizontal) {
    absl::StatusOr<ResampleAxis> horiz = ComputeBicubicAxis(image.width, out_width);
    if (!horiz.ok()) return horiz.status();
    const int row_first = vert->first[0];
    const int row_last = vert->first[out_height - 1] + vert->count[out_height - 1];
    for (int& f : vert->first) f -= row_first;
    temp.width = out_width;
    temp.height = row_last - row_first;
    temp.rgb.resize(temp.num_pixels() * 3);
    for (int y = 0; y < temp.height; ++y) {
      for (int xx = 0; xx < out_width; ++xx) {
        Convolve(image.pixel(horiz->first[xx], y + row_first), 3,
                 &horiz->fixed[static_cast<size_t>(xx) * horiz->ksize], horiz->count[xx],
                 temp.pixel(xx, y));
      }
    }
    src = &temp;
  }
  if (!need_vertical) {
    CHECK(need_horizontal);
    return temp;
  }
  RgbImage out;
  out.width = src->width;
  out.height = out_height;
  out.rgb.resize(out.num_pixels() * 3);
  const size_t row_stride = static_cast<size_t>(src->width) * 3;
  for (int yy = 0; yy < out_height; ++yy) {
    const int32_t* k = &vert->fixed[static_cast<size_t>(yy) * vert->ksize];
    for (int xx = 0; xx < src->width; ++xx) {
      Convolve(src->pixel(xx, vert->first[yy]), row_stride, k, vert->count[yy], out.pixel(xx, yy));
    }
  }
  return out;
}

}  // namespace flashserve::model::vision
