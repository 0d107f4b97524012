// Params validation and workspace sizing for the Linear launchers (no arithmetic here).
#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "kernels/gemm/linear_internal.h"

namespace flashserve::kernels {
namespace gemm_internal {
namespace {

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
size_t Floats(int64_t n) { return AlignUp(static_cast<size_t>(std::max<int64_t>(n, 0)) * 4); }

absl::Status Invalid(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("LinearCpu: %s %s", field, why));
}

}  // namespace

size_t NumSlots(const ThreadPool* pool) { return pool == nullptr ? 1 : pool->size() + 1; }

WorkspaceLayout ComputeLayout(const PreparedLinear& w, int64_t m, LinearMode mode, size_t slots) {
  const int64_t n_k = w.in_features();
  WorkspaceLayout l;
  l.x = 0;
  l.x_scale = Floats(m * n_k);
  if (mode == LinearMode::kExact) {
    l.slots = l.x_scale + Floats(m * CeilDiv(n_k, kKBlock));
    l.slot_b = Floats(kKBlock * kExactTileN);
    l.slot_c = l.slot_b + Floats(kExactTileN);
    l.slot_bytes = l.slot_c + Floats(m * kExactTileN);
  } else {
    l.slots = l.x_scale;
    l.slot_b = Floats(m * kFastTileN);
    l.slot_bytes = l.slot_b + (w.expanded() ? 0 : Floats(kFastTileN * n_k));
  }
  l.total = l.slots + slots * l.slot_bytes + kAlign;
  return l;
}

absl::Status ValidateLinearParams(const LinearParams& p, const ThreadPool* pool) {
  if (p.weight == nullptr) return Invalid("weight", "is null");
  if (p.m < 0) return Invalid("m", absl::StrFormat("is %d, must be >= 0", p.m));
  if (p.mode != LinearMode::kFast && p.mode != LinearMode::kExact) {
    return Invalid("mode", absl::StrFormat("%d is not a LinearMode", static_cast<int>(p.mode)));
  }
  if (p.m == 0) return absl::OkStatus();
  const PreparedLinear& w = *p.weight;
  if (w.out_features() <= 0 || w.in_features() <= 0) {
    return Invalid("weight", "is empty (default-constructed, not from PreparedLinear::Create)");
  }
  if ((p.x_bf16 == nullptr) == (p.x_f32 == nullptr)) {
    return Invalid("x_bf16/x_f32", "must have exactly one non-null pointer");
  }
  if (p.x_f32 != nullptr && w.quantizes_activations()) {
    return Invalid("x_f32", absl::StrFormat("is not accepted for a %s weight (its activations "
                                            "are quantised from bf16); pass x_bf16",
                                            WeightFormatName(w.format())));
  }
  if (p.x_stride < w.in_features()) {
    return Invalid("x_stride", absl::StrFormat("%d < K = %d", p.x_stride, w.in_features()));
  }
  if ((p.y_bf16 == nullptr) == (p.y_f32 == nullptr)) {
    return Invalid("y_bf16/y_f32", "must have exactly one non-null pointer");
  }
  if (p.y_stride < w.out_features()) {
    return Invalid("y_stride", absl::StrFormat("%d < N = %d", p.y_stride, w.out_features()));
  }
  const size_t need = LinearWorkspaceBytes(w, p.m, p.mode, pool);
  if (p.workspace == nullptr || p.workspace_bytes < need) {
    return Invalid("workspace", absl::StrFormat("has %d bytes at %p; needs %d", p.workspace_bytes,
                                                p.workspace, need));
  }
  return absl::OkStatus();
}

}  // namespace gemm_internal

size_t LinearWorkspaceBytes(const PreparedLinear& weight, int64_t max_m, LinearMode mode,
                            const ThreadPool* pool) {
  return gemm_internal::ComputeLayout(weight, max_m, mode, gemm_internal::NumSlots(pool)).total;
}

}  // namespace flashserve::kernels
