// NarrowFloatLinearWeightToFp8 (gemm_float_cuda.h): the FP8 form of a bf16 weight whose 32 × 32
// blocks are E4M3 values times one power of two each (attn.wo_a). Host only.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "kernels/gemm/gemm_float_cuda.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kB = kFloatLinearFp8Block;
constexpr int kMinScale = -119;  // scale byte 8: the kernels' decode keeps 2^s a normal float
constexpr int kMaxScale = 127;   // scale byte 254 (255 is UE8M0's NaN)

// The least s in [kMinScale, kMaxScale] with amax / 2^s <= 448, or kMaxScale + 1 if none.
int BlockScale(float amax) {
  if (amax == 0.0f) return 0;
  int s = kMinScale;
  while (s <= kMaxScale && amax > std::ldexp(formats::kE4m3Max, s)) ++s;
  return s;
}

}  // namespace

float Fp8WeightValue(uint8_t code, uint8_t scale_byte) {
  return formats::E4m3ToFloat(code) * std::ldexp(1.0f, static_cast<int>(scale_byte) - 127);
}

bool NarrowFloatLinearWeightToFp8(const uint16_t* w, int64_t rows, int64_t cols, uint8_t* codes_out,
                                  uint8_t* scales_out) {
  if (rows < 0 || cols < 0 || rows % kB != 0 || cols % kB != 0) return false;
  const int64_t col_blocks = cols / kB;
  for (int64_t rb = 0; rb < rows / kB; ++rb) {
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      float amax = 0.0f;
      for (int64_t r = rb * kB; r < (rb + 1) * kB; ++r) {
        for (int64_t c = cb * kB; c < (cb + 1) * kB; ++c) {
          const float v = formats::Bf16BitsToFloat(w[r * cols + c]);
          if (!std::isfinite(v)) return false;
          amax = std::fmax(amax, std::fabs(v));
        }
      }
      const int s = BlockScale(amax);
      if (s > kMaxScale) return false;
      const uint8_t byte = static_cast<uint8_t>(s + 127);
      scales_out[rb * col_blocks + cb] = byte;
      for (int64_t r = rb * kB; r < (rb + 1) * kB; ++r) {
        for (int64_t c = cb * kB; c < (cb + 1) * kB; ++c) {
          const uint16_t bits = w[r * cols + c];
          const float v = formats::Bf16BitsToFloat(bits);
          // v / 2^s is exact (a power of two) unless it falls below fp32's subnormals, which
          // the comparison below then refuses.
          const uint8_t code = formats::FloatToE4m3(std::ldexp(v, -s));
          const float back = Fp8WeightValue(code, byte);
          uint32_t a, b;
          std::memcpy(&a, &v, 4);
          std::memcpy(&b, &back, 4);
          if (a != b) return false;  // also ±0 with the wrong sign
          codes_out[r * cols + c] = code;
        }
      }
    }
  }
  return true;
}

}  // namespace flashserve::kernels
