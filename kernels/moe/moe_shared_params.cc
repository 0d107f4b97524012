// Host-side validation, workspace layout and launch plan of the GPU shared expert
// (moe_shared_cuda.h). No CUDA here, so the checks are tested on machines without a GPU.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_shared_cuda.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kMaxRows = (int64_t{1} << 31) - 1;

absl::Status Invalid(const char* op, const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", op, field, why));
}

size_t Align256(size_t v) { return (v + 255) & ~size_t{255}; }

absl::Status CheckLinear(const char* field, const DeviceFp8Linear* l) {
  constexpr const char* kOp = "MoeSharedExpertWeights";
  if (l == nullptr) return Invalid(kOp, field, "is null");
  RETURN_IF_ERROR(Validate(l->view())) << kOp << " " << field;
  if (l->view().bias != nullptr) return Invalid(kOp, field, "has a bias (the experts have none)");
  return absl::OkStatus();
}

absl::Status CheckShape(const char* field, const DeviceFp8Linear* l, int64_t n, int64_t k) {
  if (l->view().n != n || l->view().k != k) {
    return Invalid(
        "MoeSharedExpertWeights", field,
        absl::StrFormat("is [%d, %d], must be [%d, %d]", l->view().n, l->view().k, n, k));
  }
  return absl::OkStatus();
}

// Byte offsets of the shared expert's workspace regions from a 256-byte-aligned base.
struct SharedLayout {
  size_t gu = 0;      // bf16 [m, 2·Is]
  size_t a = 0;       // bf16 [m, Is]
  size_t linear = 0;  // LaunchLinearFp8's workspace
  size_t linear_bytes = 0;
  size_t total = 0;  // including 256 bytes of alignment slack
};

SharedLayout ComputeLayout(const MoeSharedExpertWeights& w, const MoeSharedExpertDims& d, int64_t m,
                           int64_t split_k, int64_t stream_ctas) {
  SharedLayout l;
  const size_t rows = static_cast<size_t>(std::max<int64_t>(m, 0));
  l.gu = 0;
  l.a = Align256(2 * rows * 2 * static_cast<size_t>(d.inter));
  l.linear = l.a + Align256(2 * rows * static_cast<size_t>(d.inter));
  // The split count's workspace (split_k 0: each plan's own).
  auto bytes = [&](const DeviceFp8Linear* lin) {
    return LinearCudaWorkspaceBytes(lin->view(), m, 0, std::max<int64_t>(split_k, 0), true, true,
                                    true, false, std::max<int64_t>(stream_ctas, 0));
  };
  size_t lin = bytes(w.w2);
  if (d.fused) {
    lin = std::max(lin, bytes(w.w13));
  } else {
    lin = std::max({lin, bytes(w.w1), bytes(w.w3)});
  }
  l.linear_bytes = Align256(lin);
  l.total = l.linear + l.linear_bytes + 256;
  return l;
}

// FS_MOE_SHARED_SWIGLU_QDQ=0 (a kit variant's A/B build) keeps the plain SwiGLU and w2's pass.
#ifndef FS_MOE_SHARED_SWIGLU_QDQ
#define FS_MOE_SHARED_SWIGLU_QDQ 1
#endif
constexpr bool kSharedSwiGluQdq = FS_MOE_SHARED_SWIGLU_QDQ != 0;

LinearCudaParams GemmParams(const DeviceFp8Linear* w, int64_t m, const uint16_t* x,
                            int64_t x_stride, uint16_t* y, int64_t y_stride, void* ws,
                            size_t ws_bytes) {
  LinearCudaParams lp;
  lp.weight = &w->view();
  lp.m = m;
  lp.x_bf16 = x;
  lp.x_stride = x_stride;
  lp.y_bf16 = y;
  lp.y_stride = y_stride;
  lp.workspace = ws;
  lp.workspace_bytes = ws_bytes;
  return lp;
}

}  // namespace

absl::StatusOr<MoeSharedExpertDims> MoeSharedExpertDimsOf(const MoeSharedExpertWeights& w) {
  constexpr const char* kOp = "MoeSharedExpertWeights";
  RETURN_IF_ERROR(CheckLinear("w2", w.w2));
  MoeSharedExpertDims d;
  d.dim = w.w2->view().n;
  d.inter = w.w2->view().k;
  if (w.w13 != nullptr) {
    if (w.w1 != nullptr || w.w3 != nullptr) {
      return Invalid(kOp, "w13", "is given together with w1 / w3 (give one form)");
    }
    RETURN_IF_ERROR(CheckLinear("w13", w.w13));
    if (d.inter % 32 != 0) {
      return Invalid(kOp, "w13", absl::StrFormat("needs Is a multiple of 32, Is is %d", d.inter));
    }
    RETURN_IF_ERROR(CheckShape("w13", w.w13, 2 * d.inter, d.dim));
    d.fused = true;
    return d;
  }
  RETURN_IF_ERROR(CheckLinear("w1", w.w1));
  RETURN_IF_ERROR(CheckLinear("w3", w.w3));
  RETURN_IF_ERROR(CheckShape("w1", w.w1, d.inter, d.dim));
  RETURN_IF_ERROR(CheckShape("w3", w.w3, d.inter, d.dim));
  return d;
}

absl::Status Validate(const MoeSharedSwiGluParams& p) {
  constexpr const char* kOp = "LaunchMoeSharedSwiGlu";
  if (p.m < 0 || p.m > kMaxRows) return Invalid(kOp, "m", "must be in [0, 2^31)");
  if (p.inter < 1 || p.inter > kMaxRows) return Invalid(kOp, "inter", "must be in [1, 2^31)");
  if (p.m == 0) return absl::OkStatus();
  if (p.g == nullptr) return Invalid(kOp, "g", "is null");
  if (p.u == nullptr) return Invalid(kOp, "u", "is null");
  if (p.a == nullptr) return Invalid(kOp, "a", "is null");
  if (p.g_stride < p.inter) return Invalid(kOp, "g_stride", "is < inter");
  if (p.u_stride < p.inter) return Invalid(kOp, "u_stride", "is < inter");
  if (p.a_stride < p.inter) return Invalid(kOp, "a_stride", "is < inter");
  if (p.qdq) {
    if (p.inter % 32 != 0) return Invalid(kOp, "inter", "must be a multiple of 32 with qdq");
    const auto aligned = [](const void* v, int64_t stride) {
      return reinterpret_cast<uintptr_t>(v) % 16 == 0 && stride % 8 == 0;
    };
    if (!aligned(p.g, p.g_stride))
      return Invalid(kOp, "g", "must be 16-byte aligned rows with qdq");
    if (!aligned(p.u, p.u_stride))
      return Invalid(kOp, "u", "must be 16-byte aligned rows with qdq");
    if (!aligned(p.a, p.a_stride))
      return Invalid(kOp, "a", "must be 16-byte aligned rows with qdq");
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> MoeSharedExpertWorkspaceBytes(const MoeSharedExpertWeights& weights,
                                                     int64_t max_tokens, int64_t split_k,
                                                     int64_t stream_ctas) {
  ASSIGN_OR_RETURN(const MoeSharedExpertDims d, MoeSharedExpertDimsOf(weights));
  if (max_tokens < 0 || max_tokens > kMaxRows) {
    return Invalid("MoeSharedExpertWorkspaceBytes", "max_tokens", "must be in [0, 2^31)");
  }
  if (split_k < 0 || split_k > kLinearCudaMaxSplits) {
    return Invalid("MoeSharedExpertWorkspaceBytes", "split_k",
                   absl::StrFormat("must be in [0, %d]", kLinearCudaMaxSplits));
  }
  if (stream_ctas < 0 || stream_ctas > kLinearCudaMaxStreamCtas) {
    return Invalid("MoeSharedExpertWorkspaceBytes", "stream_ctas",
                   absl::StrFormat("must be in [0, %d]", kLinearCudaMaxStreamCtas));
  }
  return ComputeLayout(weights, d, max_tokens, split_k, stream_ctas).total;
}

namespace moe_cuda_internal {

absl::Status PlanMoeSharedExpert(const MoeSharedExpertParams& p, MoeSharedExpertPlan* plan) {
  constexpr const char* kOp = "LaunchMoeSharedExpert";
  if (p.weights == nullptr) return Invalid(kOp, "weights", "is null");
  ASSIGN_OR_RETURN(const MoeSharedExpertDims d, MoeSharedExpertDimsOf(*p.weights));
  if (p.m < 0 || p.m > kMaxRows) return Invalid(kOp, "m", "must be in [0, 2^31)");
  if (p.split_k < 0 || p.split_k > kLinearCudaMaxSplits) {
    return Invalid(kOp, "split_k", absl::StrFormat("must be in [0, %d]", kLinearCudaMaxSplits));
  }
  if (p.stream_ctas < 0 || p.stream_ctas > kLinearCudaMaxStreamCtas) {
    return Invalid(kOp, "stream_ctas",
                   absl::StrFormat("must be in [0, %d]", kLinearCudaMaxStreamCtas));
  }
  *plan = MoeSharedExpertPlan{};
  if (p.m == 0) return absl::OkStatus();
  if (p.x == nullptr) return Invalid(kOp, "x", "is null");
  if (p.y == nullptr) return Invalid(kOp, "y", "is null");
  if (p.x_stride < d.dim) return Invalid(kOp, "x_stride", absl::StrFormat("is < D = %d", d.dim));
  if (p.y_stride < d.dim) return Invalid(kOp, "y_stride", absl::StrFormat("is < D = %d", d.dim));
  const SharedLayout l = ComputeLayout(*p.weights, d, p.m, p.split_k, p.stream_ctas);
  if (p.workspace == nullptr || p.workspace_bytes < l.total) {
    return Invalid(kOp, "workspace",
                   absl::StrFormat("has %d bytes, needs %d", p.workspace_bytes, l.total));
  }
  auto* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p.workspace) + 255) &
                                                ~uintptr_t{255});
  auto* gu = reinterpret_cast<uint16_t*>(base + l.gu);
  auto* a = reinterpret_cast<uint16_t*>(base + l.a);
  void* lin = base + l.linear;
  const int64_t is = d.inter, gu_stride = 2 * is;
  const MoeSharedExpertWeights& w = *p.weights;
  if (d.fused) {
    plan->up[0] = GemmParams(w.w13, p.m, p.x, p.x_stride, gu, gu_stride, lin, l.linear_bytes);
    plan->n_up = 1;
  } else {
    plan->up[0] = GemmParams(w.w1, p.m, p.x, p.x_stride, gu, gu_stride, lin, l.linear_bytes);
    plan->up[1] = GemmParams(w.w3, p.m, p.x, p.x_stride, gu + is, gu_stride, lin, l.linear_bytes);
    plan->n_up = 2;
  }
  for (int i = 0; i < plan->n_up; ++i) {
    plan->up[i].x_qdq = p.x_qdq;
    plan->up[i].split_k = p.split_k;
    plan->up[i].stream_ctas = p.stream_ctas;
  }
  MoeSharedSwiGluParams& s = plan->swiglu;
  s.m = p.m;
  s.inter = is;
  s.swiglu_limit = p.swiglu_limit;
  s.g = gu;
  s.g_stride = gu_stride;
  s.u = gu + is;
  s.u_stride = gu_stride;
  s.a = a;
  s.a_stride = is;
  plan->down = GemmParams(w.w2, p.m, a, is, p.y, p.y_stride, lin, l.linear_bytes);
  // Where w2's plan reads a pre-QDQ'd x in place (the bf16 wgmma kernels, M >= 128), the SwiGLU
  // writes a already QDQ'd and w2 skips its activation pass: the same values, one pass fewer.
  const LinearCudaPlan down = PlanLinearCuda(p.m, w.w2->view().n, w.w2->view().k, 0, p.split_k,
                                             true, true, true, false, p.stream_ctas);
  s.qdq = kSharedSwiGluQdq && down.kernel == LinearCudaKernel::kWgmmaBf16 && is % 32 == 0;
  plan->down.x_qdq = s.qdq;
  plan->down.split_k = p.split_k;
  plan->down.stream_ctas = p.stream_ctas;
  for (int i = 0; i < plan->n_up; ++i) {
    RETURN_IF_ERROR(ValidateLinearCudaParams(plan->up[i])) << kOp << " up GEMM";
  }
  RETURN_IF_ERROR(Validate(plan->swiglu)) << kOp;
  RETURN_IF_ERROR(ValidateLinearCudaParams(plan->down)) << kOp << " down GEMM";
  return absl::OkStatus();
}

}  // namespace moe_cuda_internal

absl::Status Validate(const MoeSharedExpertParams& p) {
  moe_cuda_internal::MoeSharedExpertPlan plan;
  return moe_cuda_internal::PlanMoeSharedExpert(p, &plan);
}

}  // namespace flashserve::kernels
