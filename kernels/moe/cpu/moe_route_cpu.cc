// Router post-processing (sqrtsoftplus scores, biased top-k, unbiased weights) and the SwiGLU
// row. Compiled with -ffp-contract=off: the fp32 operation order is the documented one.
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_internal.h"

namespace flashserve::kernels {
namespace {

// PyTorch's softplus with beta 1, threshold 20: linear above the threshold, where exp would
// otherwise overflow for large inputs.
float Softplus(float v) { return v > 20.f ? v : std::log1p(std::exp(v)); }

void RouteRow(const MoeRouteParams& p, int64_t t) {
  const int64_t e_count = p.n_experts;
  const int64_t k = p.options.top_k;
  const float* logits = p.logits + t * e_count;
  const bool image = p.is_image != nullptr && p.is_image[t] != 0;
  const float* bias = image ? p.bias_vl : p.bias;
  int32_t* ids = p.expert_ids + t * k;
  float* weights = p.expert_weights + t * k;
  // k repeated passes of a strict-greater argmax: the lowest id wins a tie, and an expert
  // already chosen is skipped. k·E is tiny next to the GEMMs.
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float best_score = 0.f;
    for (int64_t e = 0; e < e_count; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= ids[i] == e;
      if (taken) continue;
      const float s = std::sqrt(Softplus(logits[e] / p.options.gate_temp));
      const float biased = bias != nullptr ? s + bias[e] : s;
      if (best < 0 || biased > best_score) {
        best = static_cast<int32_t>(e);
        best_score = biased;
      }
    }
    ids[j] = best;
    weights[j] = std::sqrt(Softplus(logits[best] / p.options.gate_temp));
  }
  if (p.options.norm_topk_prob && k > 1) {
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) sum += weights[j];
    const float denom = sum + 1e-20f;
    for (int64_t j = 0; j < k; ++j) weights[j] = weights[j] / denom;
  }
  for (int64_t j = 0; j < k; ++j) weights[j] = weights[j] * p.options.route_scale;
}

absl::Status Invalid(const char* field, const char* why) {
  return absl::InvalidArgumentError(std::string("MoeRouteCpu: ") + field + " " + why);
}

}  // namespace

absl::Status MoeRouteCpu(const MoeRouteParams& p, ThreadPool* pool) {
  if (p.m < 0) return Invalid("m", "must be >= 0");
  if (p.n_experts <= 0) return Invalid("n_experts", "must be > 0");
  if (auto s = moe_internal::ValidateMoeOptions(p.options, p.n_experts, "MoeRouteCpu"); !s.ok()) {
    return s;
  }
  if (p.m == 0) return absl::OkStatus();
  if (p.logits == nullptr) return Invalid("logits", "is null");
  if (p.expert_ids == nullptr) return Invalid("expert_ids", "is null");
  if (p.expert_weights == nullptr) return Invalid("expert_weights", "is null");
  if (p.is_image != nullptr && p.bias_vl == nullptr) {
    for (int64_t t = 0; t < p.m; ++t) {
      if (p.is_image[t] != 0) return Invalid("bias_vl", "is null but a token is flagged image");
    }
  }
  auto rows = [&p](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) RouteRow(p, static_cast<int64_t>(t));
  };
  if (pool == nullptr || p.m < 64) {
    rows(0, static_cast<size_t>(p.m));
  } else {
    pool->ParallelFor(static_cast<size_t>(p.m), 32, rows);
  }
  return absl::OkStatus();
}

void MoeSwiGluRow(const uint16_t* g, const uint16_t* u, int64_t n, float swiglu_limit,
                  const float* weight, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    float gv = formats::Bf16BitsToFloat(g[i]);
    float uv = formats::Bf16BitsToFloat(u[i]);
    if (swiglu_limit > 0.f) {
      // Comparisons rather than fmin/fmax so a NaN passes through, as torch.clamp does.
      uv = uv < -swiglu_limit ? -swiglu_limit : (uv > swiglu_limit ? swiglu_limit : uv);
      gv = gv > swiglu_limit ? swiglu_limit : gv;
    }
    float a = gv / (1.f + std::exp(-gv)) * uv;
    if (weight != nullptr) a = *weight * a;
    out[i] = formats::FloatToBf16Bits(a);
  }
}

}  // namespace flashserve::kernels
