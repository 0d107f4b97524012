// Engram on the CPU backend (model spec §4.8 "Module"): table rows of the hashed n-grams, one FP8
// Linear to per-stream keys and a shared value, and a gated add into each stream.
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "kernels/norm_rope/norm_rope.h"
#include "model/runtime/cpu_model_impl.h"

namespace flashserve::model {

absl::Status CpuModel::Impl::Engram(const LayerRef& layer, int64_t s, const int64_t* hash_ids,
                                    int64_t ids_stride, std::span<const uint8_t> image) {
  const ModelConfig& c = *config;
  const int64_t D = c.dim, hc = c.hc_mult, hd = c.engram_head_dim;
  const int64_t cols = hasher->layout().num_columns(), in = cols * hd;
  constexpr int64_t kBlock = 32;
  // 1. Table rows, dequantised (E4M3 × power-of-two scale is exact in bf16).
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t row = hash_ids[t * ids_stride + col];
      if (row < 0 || row >= layer.engram_rows) {
        return absl::InternalError("Engram hash id outside the table");
      }
      const uint8_t* codes = layer.engram_codes + row * hd;
      const uint8_t* scales = layer.engram_scales + row * (hd / kBlock);
      uint16_t* out = ws.engram_e.data() + t * in + col * hd;
      for (int64_t e = 0; e < hd; ++e) {
        const float v = formats::E4m3ToFloat(codes[e]) * formats::Ue8m0ToFloat(scales[e / kBlock]);
        out[e] = formats::FloatToBf16Bits(v);
      }
    }
  }
  // 2. key [hc, D] and value [D] per token.
  const int64_t kv_width = (hc + 1) * D;
  RETURN_IF_ERROR(Linear(*layer.prepared->engram_wkv, s, ws.engram_e.data(), in,
                         ws.engram_kv.data(), kv_width))
      << "engram wkv";
  // 3. Per stream: gate = sigmoid(signed sqrt of the normalised dot), h += gate · value.
  const float eps = static_cast<float>(c.norm_eps);
  const float dim_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  auto token = [&](int64_t t) {
    const uint16_t* kv = ws.engram_kv.data() + t * kv_width;
    const uint16_t* value = kv + hc * D;
    for (int64_t ch = 0; ch < hc; ++ch) {
      uint16_t* h = ws.x.data() + (t * hc + ch) * D;
      const uint16_t* key = kv + ch * D;
      const float* w = layer.engram_weight.data() + ch * D;
      float gate = 0.0f;
      if (image.empty() || image[t] == 0) {
        double dot = 0.0;
        for (int64_t e = 0; e < D; ++e) {
          const float hw = formats::Bf16BitsToFloat(h[e]) * w[e];
          dot += static_cast<double>(hw * formats::Bf16BitsToFloat(key[e]));
        }
        const float rstd = kernels::RmsInverse(h, D, eps) * kernels::RmsInverse(key, D, eps);
        const float g = static_cast<float>(dot) * rstd * dim_scale;
        const float mag = std::sqrt(std::max(std::fabs(g), 1e-6f));
        const float signed_root = std::copysign(mag, g);
        gate = 1.0f / (1.0f + std::exp(-signed_root));
      }
      for (int64_t e = 0; e < D; ++e) {
        const float v = formats::Bf16BitsToFloat(h[e]) + gate * formats::Bf16BitsToFloat(value[e]);
        h[e] = formats::FloatToBf16Bits(v);
      }
    }
  };
  if (pool != nullptr && s > 1) {
    pool->ParallelFor(static_cast<size_t>(s), 1, [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) token(static_cast<int64_t>(t));
    });
  } else {
    for (int64_t t = 0; t < s; ++t) token(t);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::model
