// The site boundary's CPU reference and fused-kernel predicate (hc_boundary.h); its validation is
// in mhc_params.cc with the other mHC params.
#include "kernels/mhc/hc_boundary.h"

#include <cstdint>

#include "absl/status/status.h"
#include "common/base/status_macros.h"

namespace flashserve::kernels {
namespace {

bool Aligned16(const void* p, int64_t stride_elems) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (2 * stride_elems) % 16 == 0;
}

}  // namespace

absl::Status HcBoundaryCpu(const HcBoundaryParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateHcBoundary(p));
  if (p.has_post) {
    RETURN_IF_ERROR(HcPostCpu(p.post, pool));
  }
  RETURN_IF_ERROR(HcPreCpu(p.pre, pool));
  return RmsNormCpu(p.norm, pool);
}

int64_t HcBoundaryClusterCtas(const HcBoundaryParams& p) {
  if (p.cluster_ctas > 0) return p.cluster_ctas;
  return p.pre.tokens <= kHcBoundaryClusterAutoTokens ? kHcBoundaryClusterAutoCtas : 1;
}

bool HcBoundaryFuses(const HcBoundaryParams& p) {
  const HcPreParams& pre = p.pre;
  const RmsNormParams& n = p.norm;
  if (pre.dim <= 1024 || pre.dim > kHcBoundaryMaxDim || pre.dim % 8 != 0) return false;
  if (pre.tokens > kHcBoundaryMaxTokens || n.weight_bf16 == nullptr) return false;
  if (reinterpret_cast<uintptr_t>(n.weight_bf16) % 16 != 0) return false;
  if (!Aligned16(pre.x, pre.x_stride) || !Aligned16(pre.out, pre.out_stride) ||
      !Aligned16(n.out, n.out_stride)) {
    return false;
  }
  if (p.has_post && (!Aligned16(p.post.f, p.post.f_stride) ||
                     !Aligned16(p.post.residual, p.post.residual_stride))) {
    return false;
  }
  return true;
}

}  // namespace flashserve::kernels
