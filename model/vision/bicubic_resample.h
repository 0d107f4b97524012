// PIL's bicubic resize (Image.resize(..., Resampling.BICUBIC) on an 8-bit RGB image), re-derived
// from Pillow's documented algorithm (libImaging/Resample.c, ImagingResample) so that our output
// matches the reference's byte for byte:
//
//  * Separable: a horizontal pass (only if the width changes) into an 8-bit intermediate, then a
//    vertical pass (only if the height changes). Same size on both axes: a plain copy.
//  * Per axis, output index i samples around center = (i + 0.5) * scale, scale = in / out.
//    When downscaling the kernel is stretched by filterscale = max(scale, 1) (antialiasing):
//    support = 2 * filterscale, taps x in [int(center - support + 0.5), int(center + support +
//    0.5)) clipped to the image, weight = K((x - center + 0.5) / filterscale) with the a = -0.5
//    cubic K. Weights are divided by their sum (in double).
//  * Fixed point: each weight becomes int(w * 2^22 +- 0.5) (half away from zero); a pixel is
//    (2^21 + sum(v * w_fixed)) >> 22, clamped to [0, 255]. The intermediate is rounded and
//    clamped the same way.
// All arithmetic follows Pillow's operation order (compile with -ffp-contract=off; see
// CMakeLists.txt), so double rounding matches too.
//
// Thread safety: pure functions. Cost: O(out_w * in_h_used * taps + out_w * out_h * taps).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/vision/image.h"

namespace flashserve::model::vision {

inline constexpr int kResamplePrecisionBits = 22;  // PIL: 32 - 8 bits of result - 2 spare

// PIL's bicubic kernel (a = -0.5), evaluated in PIL's operation order.
double BicubicKernel(double x);

// The resampling coefficients of one axis.
struct ResampleAxis {
  int in_size = 0;
  int out_size = 0;
  int ksize = 0;                // taps reserved per output: ceil(support) * 2 + 1
  std::vector<int> first;       // [out_size] first input index used
  std::vector<int> count;       // [out_size] number of inputs used (>= 0)
  std::vector<double> weights;  // [out_size * ksize] normalised weights, 0 past count
  std::vector<int32_t> fixed;   // [out_size * ksize] weights in 2^-22 units
};

// Computes one axis exactly as PIL's precompute_coeffs + normalize_coeffs_8bpc.
// Errors: InvalidArgument unless 0 < in_size, out_size < 2^24.
absl::StatusOr<ResampleAxis> ComputeBicubicAxis(int in_size, int out_size);

// Resizes `image` to out_width x out_height with PIL's bicubic filter. Returns a copy when the size
// is unchanged. Errors: InvalidArgument for an empty input or a size outside (0, 2^24), or when
// the input's buffer does not hold width*height*3 bytes.
absl::StatusOr<RgbImage> ResizeBicubic(const RgbImage& image, int out_width, int out_height);

}  // namespace flashserve::model::vision
