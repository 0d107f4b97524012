#include "model/vision/patches.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "common/formats/bf16.h"

namespace flashserve::model::vision {
namespace {

std::array<uint16_t, 256> MakeTable() {
  std::array<uint16_t, 256> table{};
  for (int v = 0; v < 256; ++v) {
    // Kept as three separate fp32 operations (no contraction) as torch runs them.
    volatile float x = static_cast<float>(v) / 255.0f;
    volatile float centred = x - 0.5f;
    const float normalised = centred / 0.5f;
    table[v] = formats::FloatToBf16Bits(normalised);
  }
  return table;
}

const std::array<uint16_t, 256>& Table() {
  static const std::array<uint16_t, 256> table = MakeTable();
  return table;
}

}  // namespace

uint16_t NormalizedPixelBf16(uint8_t value) { return Table()[value]; }

absl::StatusOr<ImagePatches> ExtractPatches(const RgbImage& image, int patch_size) {
  if (patch_size <= 0 || image.width <= 0 || image.height <= 0 || image.width % patch_size != 0 ||
      image.height % patch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("patches: a ", image.width, "x", image.height,
                                                   " image is not a whole number of ", patch_size,
                                                   "-pixel patches"));
  }
  if (image.rgb.size() != image.num_pixels() * 3) {
    return absl::InvalidArgumentError(absl::StrCat("patches: ", image.width, "x", image.height,
                                                   " image holds ", image.rgb.size(), " bytes"));
  }
  const std::array<uint16_t, 256>& table = Table();
  const int p = patch_size;
  ImagePatches out;
  out.n_vit_h = image.height / p;
  out.n_vit_w = image.width / p;
  out.patch_size = p;
  out.bf16.resize(out.num_patches() * out.patch_dim());
  const size_t plane = static_cast<size_t>(p) * p;
  for (int py = 0; py < out.n_vit_h; ++py) {
    for (int px = 0; px < out.n_vit_w; ++px) {
      uint16_t* patch = &out.bf16[(static_cast<size_t>(py) * out.n_vit_w + px) * out.patch_dim()];
      for (int y = 0; y < p; ++y) {
        const uint8_t* src = image.pixel(px * p, py * p + y);
        for (int x = 0; x < p; ++x) {
          for (int c = 0; c < 3; ++c) {
            patch[c * plane + static_cast<size_t>(y) * p + x] = table[src[3 * x + c]];
          }
        }
      }
    }
  }
  return out;
}

}  // namespace flashserve::model::vision
