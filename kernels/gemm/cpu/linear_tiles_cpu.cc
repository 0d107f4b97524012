// Per-row and per-tile pieces shared by the fast and exact Linear bodies: activation
// quantisation, weight tile decoding, the rounding epilogue.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "common/formats/weight_quant.h"
#include "kernels/gemm/linear_internal.h"

namespace flashserve::kernels::gemm_internal {
namespace {

// E2M1 code -> value, built from the formats decoder so both agree by construction.
const std::array<float, 16>& E2m1Table() {
  static const std::array<float, 16> table = [] {
    std::array<float, 16> t{};
    for (uint8_t c = 0; c < 16; ++c) t[c] = formats::E2m1ToFloat(c);
    return t;
  }();
  return table;
}

}  // namespace

void ParallelRange(ThreadPool* pool, size_t n, size_t min_chunk,
                   const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  if (pool == nullptr || n <= min_chunk) {
    fn(0, n);
    return;
  }
  pool->ParallelFor(n, min_chunk, fn);
}

void PrepareActivationRow(const uint16_t* x_bf16, const float* x_f32, int64_t k, bool quantize,
                          bool fold_scale, float* values, float* scales) {
  if (x_bf16 != nullptr) {
    for (int64_t i = 0; i < k; ++i) values[i] = formats::Bf16BitsToFloat(x_bf16[i]);
  } else {
    std::memcpy(values, x_f32, static_cast<size_t>(k) * sizeof(float));
  }
  if (!quantize) return;
  // The rule of formats::QuantizeFp8Ue8m0B32 (amax ignoring NaN, scale byte from the floored amax,
  // E4M3 of clamp(x / scale)); zero padding of a partial block would not change its amax.
  for (int64_t b0 = 0, b = 0; b0 < k; b0 += kKBlock, ++b) {
    const int64_t n = std::min(kKBlock, k - b0);
    float* v = values + b0;
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float a = std::fabs(v[i]);
      amax = a > amax ? a : amax;
    }
    const float scale = formats::Ue8m0ToFloat(formats::Fp8Ue8m0ScaleByte(amax));
    // x / scale == x * (1 / scale) exactly: the scale is a power of two in [2^-22, 2^120], so its
    // reciprocal is exact and both sides are the same real number rounded once.
    const float inv_scale = 1.0f / scale;
    const float fold = fold_scale ? scale : 1.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float q =
          RoundToE4m3(std::clamp(v[i] * inv_scale, -formats::kE4m3Max, formats::kE4m3Max));
      v[i] = q * fold;
    }
    if (!fold_scale) scales[b] = scale;
  }
}

void DequantizeRows(const PreparedLinear& w, int64_t n0, int64_t nn, float* dst) {
  // Same products as formats::DequantizeFp8Weight / DequantizeFp4Weight (code value × power-of-two
  // scale, exact), written with table lookups because this runs on every call for codes-only
  // weights; the tests check the result is bit-identical to the expanded weight.
  const int64_t k = w.in_features();
  switch (w.format()) {
    case WeightFormat::kFp8Block32: {
      const int64_t scale_cols = formats::Fp8WeightScaleCols(k);
      for (int64_t r = 0; r < nn; ++r) {
        const uint8_t* codes = w.codes() + (n0 + r) * k;
        const uint8_t* scales = w.scales() + ((n0 + r) / kKBlock) * scale_cols;
        float* out = dst + r * k;
        for (int64_t b0 = 0; b0 < k; b0 += kKBlock) {
          const float s = formats::Ue8m0ToFloat(scales[b0 / kKBlock]);
          const int64_t end = std::min(k, b0 + kKBlock);
          for (int64_t i = b0; i < end; ++i) out[i] = formats::E4m3ToFloat(codes[i]) * s;
        }
      }
      return;
    }
    case WeightFormat::kFp4Block32: {
      const std::array<float, 16>& e2m1 = E2m1Table();
      for (int64_t r = 0; r < nn; ++r) {
        const uint8_t* packed = w.codes() + (n0 + r) * (k / 2);
        const uint8_t* scales = w.scales() + (n0 + r) * (k / kKBlock);
        float* out = dst + r * k;
        for (int64_t b0 = 0; b0 < k; b0 += kKBlock) {
          const float s = formats::Ue8m0ToFloat(scales[b0 / kKBlock]);
          for (int64_t i = b0; i < b0 + kKBlock; i += 2) {
            const uint8_t byte = packed[i / 2];
            out[i] = e2m1[formats::UnpackE2m1Even(byte)] * s;
            out[i + 1] = e2m1[formats::UnpackE2m1Odd(byte)] * s;
          }
        }
      }
      return;
    }
    case WeightFormat::kBf16:
      if (w.bf16() != nullptr) {
        const uint16_t* src = w.bf16() + n0 * k;
        for (int64_t i = 0; i < nn * k; ++i) dst[i] = formats::Bf16BitsToFloat(src[i]);
        return;
      }
      break;
    case WeightFormat::kF32:
      break;
  }
  CHECK(w.f32() != nullptr) << "PreparedLinear without weights";
  std::memcpy(dst, w.f32() + n0 * k, static_cast<size_t>(nn * k) * sizeof(float));
}

void DecodeWeightBlock(const PreparedLinear& w, int64_t n0, int64_t nn, int64_t k0, int64_t kk,
                       float* tile, float* col_scale) {
  const int64_t k = w.in_features();
  constexpr int64_t kT = kExactTileN;
  switch (w.format()) {
    case WeightFormat::kFp8Block32: {
      const int64_t scale_cols = formats::Fp8WeightScaleCols(k);
      for (int64_t j = 0; j < nn; ++j) {
        const uint8_t* row = w.codes() + (n0 + j) * k + k0;
        for (int64_t i = 0; i < kk; ++i) tile[i * kT + j] = formats::E4m3ToFloat(row[i]);
        col_scale[j] =
            formats::Ue8m0ToFloat(w.scales()[((n0 + j) / kKBlock) * scale_cols + k0 / kKBlock]);
      }
      break;
    }
    case WeightFormat::kFp4Block32: {
      const std::array<float, 16>& e2m1 = E2m1Table();
      for (int64_t j = 0; j < nn; ++j) {
        const uint8_t* row = w.codes() + ((n0 + j) * k + k0) / 2;  // k0 and k are even
        for (int64_t i = 0; i < kk; ++i) {
          const uint8_t byte = row[i / 2];
          tile[i * kT + j] =
              e2m1[(i % 2 == 0) ? formats::UnpackE2m1Even(byte) : formats::UnpackE2m1Odd(byte)];
        }
        col_scale[j] = formats::Ue8m0ToFloat(w.scales()[(n0 + j) * (k / kKBlock) + k0 / kKBlock]);
      }
      break;
    }
    case WeightFormat::kBf16:
    case WeightFormat::kF32:
      for (int64_t j = 0; j < nn; ++j) {
        if (w.f32() != nullptr) {
          const float* row = w.f32() + (n0 + j) * k + k0;
          for (int64_t i = 0; i < kk; ++i) tile[i * kT + j] = row[i];
        } else {
          const uint16_t* row = w.bf16() + (n0 + j) * k + k0;
          for (int64_t i = 0; i < kk; ++i) tile[i * kT + j] = formats::Bf16BitsToFloat(row[i]);
        }
      }
      break;
  }
  for (int64_t i = 0; i < kk; ++i) {
    std::fill(tile + i * kT + nn, tile + (i + 1) * kT, 0.0f);
  }
  if (w.quantizes_activations()) std::fill(col_scale + nn, col_scale + kT, 0.0f);
}

void StoreRow(const float* acc, const float* bias, int64_t n, uint16_t* y_bf16, float* y_f32) {
  if (y_bf16 != nullptr) {
    if (bias != nullptr) {
      for (int64_t j = 0; j < n; ++j) y_bf16[j] = formats::FloatToBf16Bits(acc[j] + bias[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) y_bf16[j] = formats::FloatToBf16Bits(acc[j]);
    }
  } else if (bias != nullptr) {
    for (int64_t j = 0; j < n; ++j) y_f32[j] = acc[j] + bias[j];
  } else if (y_f32 != acc) {
    std::memcpy(y_f32, acc, static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace flashserve::kernels::gemm_internal
