// The MoE layer body: router, counting sort of (token, expert) slots, one LinearCpu per expert
// and projection on the gathered rows, SwiGLU, scatter-add in ascending expert id, shared
// expert, one cast. Compiled with -ffp-contract=off.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/gemm/gemm.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_internal.h"

namespace flashserve::kernels {
namespace {

using moe_internal::MoeDims;
using moe_internal::MoeLayout;

absl::Status Invalid(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("MoeCpu: %s %s", field, why));
}

// Runs fn over [0, n) rows on the pool when there is enough work (per-row work is independent,
// so the split never changes results).
void ForRows(ThreadPool* pool, int64_t n, int64_t cost_per_row,
             const std::function<void(size_t, size_t)>& fn) {
  if (pool == nullptr || n * cost_per_row < (1 << 16)) {
    fn(0, static_cast<size_t>(n));
  } else {
    pool->ParallelFor(static_cast<size_t>(n), 8, fn);
  }
}

struct Buffers {
  float* logits;
  int32_t* ids;
  float* weights;
  int32_t* offsets;
  int32_t* slot_token;
  float* slot_weight;
  float* acc;
  uint16_t* xg;
  uint16_t* g;
  uint16_t* u;
  uint16_t* ye;
  void* linear;
  size_t linear_bytes;
};

Buffers Carve(void* workspace, const MoeLayout& l) {
  auto base = reinterpret_cast<uintptr_t>(workspace);
  uint8_t* b = reinterpret_cast<uint8_t*>((base + 63) & ~uintptr_t{63});
  return Buffers{reinterpret_cast<float*>(b + l.logits),
                 reinterpret_cast<int32_t*>(b + l.ids),
                 reinterpret_cast<float*>(b + l.weights),
                 reinterpret_cast<int32_t*>(b + l.offsets),
                 reinterpret_cast<int32_t*>(b + l.slot_token),
                 reinterpret_cast<float*>(b + l.slot_weight),
                 reinterpret_cast<float*>(b + l.acc),
                 reinterpret_cast<uint16_t*>(b + l.xg),
                 reinterpret_cast<uint16_t*>(b + l.g),
                 reinterpret_cast<uint16_t*>(b + l.u),
                 reinterpret_cast<uint16_t*>(b + l.ye),
                 b + l.linear,
                 l.linear_bytes};
}

absl::Status Linear(const PreparedLinear* w, int64_t m, const uint16_t* x, int64_t x_stride,
                    uint16_t* y, int64_t y_stride, const MoeParams& p, const Buffers& b,
                    ThreadPool* pool) {
  LinearParams lp;
  lp.weight = w;
  lp.m = m;
  lp.x_bf16 = x;
  lp.x_stride = x_stride;
  lp.y_bf16 = y;
  lp.y_stride = y_stride;
  lp.mode = p.mode;
  lp.workspace = b.linear;
  lp.workspace_bytes = b.linear_bytes;
  return LinearCpu(lp, pool);
}

// One SwiGLU expert on `rows` rows of x (row stride x_stride): b.ye = w2(swiglu(w1 x, w3 x)·w),
// `row_weight` null for the shared expert.
absl::Status RunExpert(const PreparedLinear* w1, const PreparedLinear* w3, const PreparedLinear* w2,
                       int64_t rows, const uint16_t* x, int64_t x_stride, const float* row_weight,
                       const MoeParams& p, const Buffers& b, ThreadPool* pool) {
  const int64_t inter = w1->out_features();
  const int64_t dim = w2->out_features();
  if (auto s = Linear(w1, rows, x, x_stride, b.g, inter, p, b, pool); !s.ok()) return s;
  if (auto s = Linear(w3, rows, x, x_stride, b.u, inter, p, b, pool); !s.ok()) return s;
  const float limit = p.options.swiglu_limit;
  ForRows(pool, rows, inter, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      uint16_t* g = b.g + r * inter;
      MoeSwiGluRow(g, b.u + r * inter, inter, limit,
                   row_weight != nullptr ? row_weight + r : nullptr, g);
    }
  });
  return Linear(w2, rows, b.g, inter, b.ye, dim, p, b, pool);
}

// Counting sort of the (token, rank) slots by expert: offsets[e]..offsets[e+1] list expert e's
// tokens in ascending token order, with their routing weights.
void GroupByExpert(int64_t m, int64_t k, int64_t n_experts, const Buffers& b) {
  std::memset(b.offsets, 0, sizeof(int32_t) * (n_experts + 1));
  for (int64_t i = 0; i < m * k; ++i) ++b.offsets[b.ids[i] + 1];
  for (int64_t e = 0; e < n_experts; ++e) b.offsets[e + 1] += b.offsets[e];
  // Fill with a running cursor per expert; offsets[e] is restored by the second pass below.
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = b.ids[t * k + j];
      const int32_t at = b.offsets[e]++;
      b.slot_token[at] = static_cast<int32_t>(t);
      b.slot_weight[at] = b.weights[t * k + j];
    }
  }
  for (int64_t e = n_experts; e > 0; --e) b.offsets[e] = b.offsets[e - 1];
  b.offsets[0] = 0;
}

absl::Status ValidateParams(const MoeParams& p, MoeDims* d, ThreadPool* pool, MoeLayout* l) {
  if (p.weights == nullptr) return Invalid("weights", "is null");
  if (auto s = moe_internal::ValidateMoeWeights(*p.weights, d); !s.ok()) return s;
  if (auto s = moe_internal::ValidateMoeOptions(p.options, d->n_experts, "MoeCpu"); !s.ok()) {
    return s;
  }
  if (p.m < 0) return Invalid("m", absl::StrFormat("is %d, must be >= 0", p.m));
  if (p.x == nullptr) return Invalid("x", "is null");
  if (p.y == nullptr) return Invalid("y", "is null");
  if (p.x_stride < d->dim) return Invalid("x_stride", absl::StrFormat("< dim %d", d->dim));
  if (p.y_stride < d->dim) return Invalid("y_stride", absl::StrFormat("< dim %d", d->dim));
  if (p.is_image != nullptr && p.weights->gate_bias_vl == nullptr) {
    for (int64_t t = 0; t < p.m; ++t) {
      if (p.is_image[t] != 0)
        return Invalid("weights.gate_bias_vl", "is null but a token is image");
    }
  }
  *l = moe_internal::ComputeMoeLayout(*p.weights, *d, p.m, p.options.top_k, p.mode, pool);
  if (p.workspace == nullptr || p.workspace_bytes < l->total) {
    return Invalid("workspace",
                   absl::StrFormat("has %d bytes, needs %d", p.workspace_bytes, l->total));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeCpu(const MoeParams& p, ThreadPool* pool) {
  MoeDims d;
  MoeLayout l;
  if (auto s = ValidateParams(p, &d, pool, &l); !s.ok()) return s;
  if (p.m == 0) return absl::OkStatus();
  const MoeWeights& w = *p.weights;
  const int64_t m = p.m, k = p.options.top_k, dim = d.dim;
  const Buffers b = Carve(p.workspace, l);

  // Router: fp32 logits (no activation quant), then scores, selection and weights.
  LinearParams gp;
  gp.weight = w.gate;
  gp.m = m;
  gp.x_bf16 = p.x;
  gp.x_stride = p.x_stride;
  gp.y_f32 = b.logits;
  gp.y_stride = d.n_experts;
  gp.mode = p.mode;
  gp.workspace = b.linear;
  gp.workspace_bytes = b.linear_bytes;
  if (auto s = LinearCpu(gp, pool); !s.ok()) return Invalid("gate", s.ToString());
  MoeRouteParams rp{p.options,      m,          d.n_experts, b.logits, w.gate_bias,
                    w.gate_bias_vl, p.is_image, b.ids,       b.weights};
  if (auto s = MoeRouteCpu(rp, pool); !s.ok()) return s;
  if (p.expert_ids != nullptr) std::memcpy(p.expert_ids, b.ids, sizeof(int32_t) * m * k);
  if (p.expert_weights != nullptr) std::memcpy(p.expert_weights, b.weights, sizeof(float) * m * k);

  GroupByExpert(m, k, d.n_experts, b);
  std::memset(b.acc, 0, sizeof(float) * m * dim);
  // Ascending expert id: each token's fp32 sum sees its experts in id order (spec §4.7).
  for (int64_t e = 0; e < d.n_experts; ++e) {
    const int32_t begin = b.offsets[e], rows = b.offsets[e + 1] - begin;
    if (rows == 0) continue;
    for (int32_t r = 0; r < rows; ++r) {
      std::memcpy(b.xg + r * dim, p.x + b.slot_token[begin + r] * p.x_stride,
                  sizeof(uint16_t) * dim);
    }
    if (auto s = RunExpert(w.w1[e], w.w3[e], w.w2[e], rows, b.xg, dim, b.slot_weight + begin, p, b,
                           pool);
        !s.ok()) {
      return Invalid(absl::StrFormat("expert %d", e).c_str(), s.ToString());
    }
    ForRows(pool, rows, dim, [&](size_t r0, size_t r1) {
      for (size_t r = r0; r < r1; ++r) {
        float* acc = b.acc + b.slot_token[begin + r] * dim;
        const uint16_t* ye = b.ye + r * dim;
        for (int64_t c = 0; c < dim; ++c) acc[c] += formats::Bf16BitsToFloat(ye[c]);
      }
    });
  }
  if (d.has_shared) {
    if (auto s = RunExpert(w.shared_w1, w.shared_w3, w.shared_w2, m, p.x, p.x_stride, nullptr, p, b,
                           pool);
        !s.ok()) {
      return Invalid("shared expert", s.ToString());
    }
  }
  ForRows(pool, m, dim, [&](size_t r0, size_t r1) {
    for (size_t t = r0; t < r1; ++t) {
      const float* acc = b.acc + t * dim;
      uint16_t* y = p.y + t * p.y_stride;
      for (int64_t c = 0; c < dim; ++c) {
        float v = acc[c];
        if (d.has_shared) v += formats::Bf16BitsToFloat(b.ye[t * dim + c]);
        y[c] = formats::FloatToBf16Bits(v);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
