// Validation of the MoE weights / options and the workspace layout.
#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_internal.h"

namespace flashserve::kernels {
namespace moe_internal {
namespace {

absl::Status Invalid(const char* who, const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", who, field, why));
}

absl::Status CheckShape(const PreparedLinear* l, const std::string& name, int64_t out, int64_t in) {
  if (l == nullptr) return Invalid("MoeCpu", name, "is null");
  if (l->out_features() != out || l->in_features() != in) {
    return Invalid("MoeCpu", name,
                   absl::StrFormat("is [%d, %d], expected [%d, %d]", l->out_features(),
                                   l->in_features(), out, in));
  }
  return absl::OkStatus();
}

size_t Align64(size_t v) { return (v + 63) & ~size_t{63}; }

}  // namespace

absl::Status ValidateMoeWeights(const MoeWeights& w, MoeDims* dims) {
  if (w.n_experts <= 0) return Invalid("MoeCpu", "weights.n_experts", "must be > 0");
  if (w.gate == nullptr) return Invalid("MoeCpu", "weights.gate", "is null");
  if (w.gate->format() != WeightFormat::kF32 && w.gate->format() != WeightFormat::kBf16) {
    return Invalid("MoeCpu", "weights.gate", "must be a kF32 or kBf16 Linear");
  }
  if (w.gate->has_bias()) return Invalid("MoeCpu", "weights.gate", "must not have a bias");
  if (w.w1 == nullptr || w.w2 == nullptr || w.w3 == nullptr) {
    return Invalid("MoeCpu", "weights.w1/w2/w3", "must be non-null arrays");
  }
  const int64_t e = w.n_experts;
  const int64_t d = w.gate->in_features();
  if (w.gate->out_features() != e) {
    return Invalid(
        "MoeCpu", "weights.gate",
        absl::StrFormat("has %d outputs, expected n_experts %d", w.gate->out_features(), e));
  }
  if (w.w1[0] == nullptr) return Invalid("MoeCpu", "weights.w1[0]", "is null");
  const int64_t inter = w.w1[0]->out_features();
  for (int64_t i = 0; i < e; ++i) {
    const std::string n = absl::StrFormat("[%d]", i);
    if (auto s = CheckShape(w.w1[i], "weights.w1" + n, inter, d); !s.ok()) return s;
    if (auto s = CheckShape(w.w3[i], "weights.w3" + n, inter, d); !s.ok()) return s;
    if (auto s = CheckShape(w.w2[i], "weights.w2" + n, d, inter); !s.ok()) return s;
  }
  const int shared_set =
      (w.shared_w1 != nullptr) + (w.shared_w2 != nullptr) + (w.shared_w3 != nullptr);
  if (shared_set != 0 && shared_set != 3) {
    return Invalid("MoeCpu", "weights.shared_w1/w2/w3", "must be all set or all null");
  }
  int64_t max_inter = inter;
  if (shared_set == 3) {
    const int64_t si = w.shared_w1->out_features();
    if (auto s = CheckShape(w.shared_w1, "weights.shared_w1", si, d); !s.ok()) return s;
    if (auto s = CheckShape(w.shared_w3, "weights.shared_w3", si, d); !s.ok()) return s;
    if (auto s = CheckShape(w.shared_w2, "weights.shared_w2", d, si); !s.ok()) return s;
    max_inter = std::max(max_inter, si);
  }
  *dims = MoeDims{e, d, inter, max_inter, shared_set == 3};
  return absl::OkStatus();
}

absl::Status ValidateMoeOptions(const MoeOptions& o, int64_t n_experts, const char* who) {
  if (o.top_k < 1 || o.top_k > n_experts) {
    return Invalid(who, "options.top_k",
                   absl::StrFormat("is %d, must be in [1, %d]", o.top_k, n_experts));
  }
  if (!(o.gate_temp > 0.f)) return Invalid(who, "options.gate_temp", "must be > 0");
  return absl::OkStatus();
}

MoeLayout ComputeMoeLayout(const MoeWeights& w, const MoeDims& d, int64_t max_tokens, int64_t top_k,
                           LinearMode mode, const ThreadPool* pool) {
  const size_t m = static_cast<size_t>(std::max<int64_t>(max_tokens, 0));
  const size_t k = static_cast<size_t>(top_k);
  MoeLayout l;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = Align64(at + bytes);
    return here;
  };
  l.logits = take(4 * m * d.n_experts);
  l.ids = take(4 * m * k);
  l.weights = take(4 * m * k);
  l.offsets = take(4 * (d.n_experts + 1));
  l.slot_token = take(4 * m * k);
  l.slot_weight = take(4 * m * k);
  l.acc = take(4 * m * d.dim);
  l.xg = take(2 * m * d.dim);
  l.g = take(2 * m * d.max_inter);
  l.u = take(2 * m * d.max_inter);
  l.ye = take(2 * m * d.dim);
  size_t lin = LinearWorkspaceBytes(*w.gate, max_tokens, mode, pool);
  for (int64_t e = 0; e < d.n_experts; ++e) {
    for (const PreparedLinear* p : {w.w1[e], w.w3[e], w.w2[e]}) {
      lin = std::max(lin, LinearWorkspaceBytes(*p, max_tokens, mode, pool));
    }
  }
  if (d.has_shared) {
    for (const PreparedLinear* p : {w.shared_w1, w.shared_w3, w.shared_w2}) {
      lin = std::max(lin, LinearWorkspaceBytes(*p, max_tokens, mode, pool));
    }
  }
  l.linear = take(lin);
  l.linear_bytes = lin;
  l.total = at + 64;
  return l;
}

}  // namespace moe_internal

absl::StatusOr<size_t> MoeWorkspaceBytes(const MoeWeights& weights, int64_t max_tokens,
                                         int64_t top_k, LinearMode mode, const ThreadPool* pool) {
  moe_internal::MoeDims dims;
  if (auto s = moe_internal::ValidateMoeWeights(weights, &dims); !s.ok()) return s;
  if (max_tokens < 0) {
    return absl::InvalidArgumentError("MoeWorkspaceBytes: max_tokens must be >= 0");
  }
  MoeOptions o;
  o.top_k = top_k;
  if (auto s = moe_internal::ValidateMoeOptions(o, dims.n_experts, "MoeWorkspaceBytes"); !s.ok()) {
    return s;
  }
  return moe_internal::ComputeMoeLayout(weights, dims, max_tokens, top_k, mode, pool).total;
}

}  // namespace flashserve::kernels
