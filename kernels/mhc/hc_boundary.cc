// The site boundary's validation, CPU reference and fused-kernel predicate (hc_boundary.h).
#include "kernels/mhc/hc_boundary.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace flashserve::kernels {
namespace {

constexpr const char* kOp = "HcBoundary";

absl::Status Invalid(const char* field, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", kOp, field, what));
}

// Byte range [begin, end) of `rows` rows of `elems` elements `stride` apart (sizes validated).
struct Extent {
  uintptr_t begin = 0, end = 0;
  bool Overlaps(const Extent& o) const { return begin < o.end && o.begin < end; }
};
Extent Of(const void* p, int64_t rows, int64_t elems, int64_t stride, int64_t elem_bytes) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  if (rows == 0) return {b, b};
  return {b, b + static_cast<uintptr_t>(((rows - 1) * stride + elems) * elem_bytes)};
}

bool Aligned16(const void* p, int64_t stride_elems) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (2 * stride_elems) % 16 == 0;
}

}  // namespace

absl::Status ValidateHcBoundary(const HcBoundaryParams& p) {
  const HcPreParams& pre = p.pre;
  const RmsNormParams& n = p.norm;
  RETURN_IF_ERROR(Validate(pre));
  RETURN_IF_ERROR(ValidateRmsNorm(n));
  if (n.x != pre.out || n.x_stride != pre.out_stride) {
    return Invalid("norm.x", "must be pre.out with pre.out_stride (the collapsed row)");
  }
  if (n.rows != pre.tokens || n.cols != pre.dim) {
    return Invalid("norm.rows/cols", "must be pre.tokens and pre.dim");
  }
  if (pre.tokens == 0) return absl::OkStatus();
  const int64_t t = pre.tokens, d = pre.dim;
  const Extent streams = Of(pre.x, t, kMhcStreams * d, pre.x_stride, 2);
  const Extent normed = Of(n.out, t, d, n.out_stride, 2);
  if (normed.Overlaps(streams)) return Invalid("norm.out", "overlaps the streams");
  if (normed.Overlaps(Of(pre.pre, t, kMhcStreams, kMhcStreams, 4))) {
    return Invalid("norm.out", "overlaps pre.pre");
  }
  if (!p.has_post) return absl::OkStatus();
  const HcPostParams& post = p.post;
  RETURN_IF_ERROR(Validate(post));
  if (post.tokens != t || post.dim != d) return Invalid("post.tokens/dim", "differ from pre's");
  if (pre.x != post.out || pre.x_stride != post.out_stride) {
    return Invalid("pre.x", "must be post.out with post.out_stride (the new streams)");
  }
  // The fused kernel reads every input of a token before it writes that token's outputs, but
  // tokens run in any order: no output may overlap another token's inputs.
  const Extent inputs[] = {
      Of(post.f, t, d, post.f_stride, 2),
      Of(post.residual, t, kMhcStreams * d, post.residual_stride, 2),
      Of(post.post, t, kMhcStreams, kMhcStreams, 4),
      Of(post.comb, t, kMhcStreams * kMhcStreams, kMhcStreams * kMhcStreams, 4)};
  const Extent collapsed = Of(pre.out, t, d, pre.out_stride, 2);
  for (const Extent& in : inputs) {
    if (collapsed.Overlaps(in)) return Invalid("pre.out", "overlaps an input of post");
    if (normed.Overlaps(in)) return Invalid("norm.out", "overlaps an input of post");
  }
  if (streams.Overlaps(Of(pre.pre, t, kMhcStreams, kMhcStreams, 4))) {
    return Invalid("post.out", "overlaps pre.pre");
  }
  return absl::OkStatus();
}

absl::Status HcBoundaryCpu(const HcBoundaryParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateHcBoundary(p));
  if (p.has_post) {
    RETURN_IF_ERROR(HcPostCpu(p.post, pool));
  }
  RETURN_IF_ERROR(HcPreCpu(p.pre, pool));
  return RmsNormCpu(p.norm, pool);
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
