// ViT input patches from a planned (padded) RGB image, as the reference's load_image makes them:
//   x = uint8 / 255 (fp32 division), x = (x - 0.5) / 0.5 (fp32), one round-to-nearest-even cast
//   to bf16; patches in row-major order over the patch grid; inside a patch channel-major:
//   element c * p*p + y * p + x  (torch: reshape(3, nh, p, nw, p).permute(1, 3, 0, 2, 4)).
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/vision/image.h"

namespace flashserve::model::vision {

// The bf16 bit pattern the reference feeds the ViT for an 8-bit channel value.
uint16_t NormalizedPixelBf16(uint8_t value);

// [n_vit_h * n_vit_w, 3 * patch_size^2] bf16 bits, row-major. Movable value type.
struct ImagePatches {
  int n_vit_h = 0;
  int n_vit_w = 0;
  int patch_size = 0;
  std::vector<uint16_t> bf16;

  size_t num_patches() const { return static_cast<size_t>(n_vit_h) * n_vit_w; }
  size_t patch_dim() const { return 3 * static_cast<size_t>(patch_size) * patch_size; }
};

// Cuts `image` (whose sides must be positive multiples of patch_size) into normalised patches.
// Errors: InvalidArgument naming the size if it is not a whole number of patches, or if the
// buffer does not hold width*height*3 bytes.
absl::StatusOr<ImagePatches> ExtractPatches(const RgbImage& image, int patch_size);

}  // namespace flashserve::model::vision
