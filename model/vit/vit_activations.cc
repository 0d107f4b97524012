#include "model/vit/vit_activations.h"

#include <cmath>

#include "common/formats/bf16.h"

namespace flashserve::model::vit {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using formats::RoundToBf16;

void SiluMulBf16(int64_t rows, int64_t cols, const uint16_t* gate, const uint16_t* up,
                 int64_t stride, uint16_t* out, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float g = Bf16BitsToFloat(gate[r * stride + c]);
      const float silu = RoundToBf16(g / (1.0f + std::exp(-g)));
      out[r * out_stride + c] = FloatToBf16Bits(silu * Bf16BitsToFloat(up[r * stride + c]));
    }
  }
}

void GeluBf16InPlace(uint16_t* x, int64_t count) {
  // fp32(1/√2), as torch's kernels use M_SQRT1_2 converted to the op's math type.
  constexpr float kRsqrt2 = static_cast<float>(0.70710678118654752440);
  for (int64_t i = 0; i < count; ++i) {
    const float v = Bf16BitsToFloat(x[i]);
    x[i] = FloatToBf16Bits(v * 0.5f * (1.0f + std::erf(v * kRsqrt2)));
  }
}

}  // namespace flashserve::model::vit
