// Validation shared by the CPU bodies and (later) the CUDA launchers, so both reject exactly the
// same params with the same messages.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/mhc/hc_boundary.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels {
namespace {

// Byte range [begin, end) touched by a strided tensor of `rows` rows of `row_elems` elements.
struct Extent {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool Overlaps(const Extent& o) const { return begin < o.end && o.begin < end; }
};

Extent MakeExtent(const void* base, int64_t rows, int64_t row_elems, int64_t stride,
                  int64_t elem_bytes) {
  // Sizes were checked against overflow by CheckStride before this is called.
  const auto b = reinterpret_cast<uintptr_t>(base);
  return {b, b + static_cast<uintptr_t>(((rows - 1) * stride + row_elems) * elem_bytes)};
}

absl::Status Invalid(const char* op, const char* field, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", op, field, what));
}

absl::Status CheckShape(const char* op, int64_t tokens, int64_t dim) {
  if (tokens < 0) return Invalid(op, "tokens", "is negative");
  if (dim < 1) return Invalid(op, "dim", "must be >= 1");
  // Keeps every extent computation below far from int64 overflow.
  if (dim > (int64_t{1} << 30) || tokens > (int64_t{1} << 40)) {
    return Invalid(op, "tokens/dim", "are implausibly large");
  }
  return absl::OkStatus();
}

absl::Status CheckStride(const char* op, const char* field, int64_t tokens, int64_t stride,
                         int64_t min_stride) {
  if (stride < min_stride) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s %d is below the row extent %d", op, field, stride, min_stride));
  }
  if (stride > (int64_t{1} << 40) || (tokens > 1 && (tokens - 1) > (int64_t{1} << 60) / stride)) {
    return Invalid(op, field, "makes the tensor extent overflow");
  }
  return absl::OkStatus();
}

absl::Status CheckNonNull(const char* op,
                          std::initializer_list<std::pair<const char*, const void*>> fields) {
  for (const auto& [name, ptr] : fields) {
    if (ptr == nullptr) return Invalid(op, name, "is null");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const MhcMixesParams& p) {
  constexpr const char* kOp = "MhcMixes";
  RETURN_IF_ERROR(CheckShape(kOp, p.tokens, p.dim));
  if (p.sinkhorn_iters < 1) return Invalid(kOp, "sinkhorn_iters", "must be >= 1");
  if (p.small_batch_ctas < 0) return Invalid(kOp, "small_batch_ctas", "must be >= 0");
  if (!std::isfinite(p.hc_eps) || p.hc_eps < 0) return Invalid(kOp, "hc_eps", "must be >= 0");
  if (!std::isfinite(p.norm_eps) || p.norm_eps <= 0) return Invalid(kOp, "norm_eps", "must be > 0");
  if ((p.pre_in == nullptr) != (p.collapsed == nullptr)) {
    return Invalid(kOp, "pre_in/collapsed", "must be both set or both null");
  }
  RETURN_IF_ERROR((CheckNonNull(kOp, {{"fn", p.fn}, {"base", p.base}, {"scale", p.scale}})));
  if (p.tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(
      (CheckNonNull(kOp, {{"x", p.x}, {"pre", p.pre}, {"post", p.post}, {"comb", p.comb}})));
  const int64_t width = kMhcStreams * p.dim;
  RETURN_IF_ERROR(CheckStride(kOp, "x_stride", p.tokens, p.x_stride, width));
  const Extent x = MakeExtent(p.x, p.tokens, width, p.x_stride, 2);
  const Extent fn = MakeExtent(p.fn, 1, kMhcMixes * width, 0, 4);
  const Extent pre = MakeExtent(p.pre, p.tokens, 4, 4, 4);
  const Extent post = MakeExtent(p.post, p.tokens, 4, 4, 4);
  const Extent comb = MakeExtent(p.comb, p.tokens, 16, 16, 4);
  const Extent pre_in = p.pre_in != nullptr ? MakeExtent(p.pre_in, p.tokens, 4, 4, 4) : Extent{};
  Extent mixes;
  if (p.mixes != nullptr) mixes = MakeExtent(p.mixes, p.tokens, kMhcMixes, kMhcMixes, 4);
  Extent collapsed;
  if (p.collapsed != nullptr) {
    RETURN_IF_ERROR(CheckStride(kOp, "collapsed_stride", p.tokens, p.collapsed_stride, p.dim));
    collapsed = MakeExtent(p.collapsed, p.tokens, p.dim, p.collapsed_stride, 2);
  }
  const std::pair<const char*, Extent> outs[] = {
      {"pre", pre}, {"post", post}, {"comb", comb}, {"mixes", mixes}, {"collapsed", collapsed}};
  for (size_t i = 0; i < std::size(outs); ++i) {
    const Extent& o = outs[i].second;
    if (o.begin == o.end) continue;
    if (o.Overlaps(x) || o.Overlaps(fn) || o.Overlaps(pre_in)) {
      return Invalid(kOp, outs[i].first, "overlaps an input");
    }
    for (size_t k = i + 1; k < std::size(outs); ++k) {
      if (o.Overlaps(outs[k].second)) return Invalid(kOp, outs[i].first, "overlaps an output");
    }
  }
  return absl::OkStatus();
}

absl::Status Validate(const HcPreParams& p) {
  constexpr const char* kOp = "HcPre";
  RETURN_IF_ERROR(CheckShape(kOp, p.tokens, p.dim));
  if (p.tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR((CheckNonNull(kOp, {{"x", p.x}, {"pre", p.pre}, {"out", p.out}})));
  const int64_t width = kMhcStreams * p.dim;
  RETURN_IF_ERROR(CheckStride(kOp, "x_stride", p.tokens, p.x_stride, width));
  RETURN_IF_ERROR(CheckStride(kOp, "out_stride", p.tokens, p.out_stride, p.dim));
  const Extent out = MakeExtent(p.out, p.tokens, p.dim, p.out_stride, 2);
  if (out.Overlaps(MakeExtent(p.x, p.tokens, width, p.x_stride, 2)) ||
      out.Overlaps(MakeExtent(p.pre, p.tokens, 4, 4, 4))) {
    return Invalid(kOp, "out", "overlaps an input");
  }
  return absl::OkStatus();
}

absl::Status Validate(const HcPostParams& p) {
  constexpr const char* kOp = "HcPost";
  RETURN_IF_ERROR(CheckShape(kOp, p.tokens, p.dim));
  if (p.tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR((CheckNonNull(
      kOp,
      {{"f", p.f}, {"residual", p.residual}, {"post", p.post}, {"comb", p.comb}, {"out", p.out}})));
  const int64_t width = kMhcStreams * p.dim;
  RETURN_IF_ERROR(CheckStride(kOp, "f_stride", p.tokens, p.f_stride, p.dim));
  RETURN_IF_ERROR(CheckStride(kOp, "residual_stride", p.tokens, p.residual_stride, width));
  RETURN_IF_ERROR(CheckStride(kOp, "out_stride", p.tokens, p.out_stride, width));
  const Extent out = MakeExtent(p.out, p.tokens, width, p.out_stride, 2);
  const Extent residual = MakeExtent(p.residual, p.tokens, width, p.residual_stride, 2);
  // In place is safe: each element reads its 4 sources before writing its 4 destinations.
  const bool in_place = p.out == p.residual && p.out_stride == p.residual_stride;
  if (!in_place && out.Overlaps(residual)) {
    return Invalid(kOp, "out", "overlaps residual (only out == residual, same stride, is allowed)");
  }
  if (out.Overlaps(MakeExtent(p.f, p.tokens, p.dim, p.f_stride, 2)) ||
      out.Overlaps(MakeExtent(p.post, p.tokens, 4, 4, 4)) ||
      out.Overlaps(MakeExtent(p.comb, p.tokens, 16, 16, 4))) {
    return Invalid(kOp, "out", "overlaps an input");
  }
  return absl::OkStatus();
}

absl::Status ValidateHcBoundary(const HcBoundaryParams& p) {
  constexpr const char* kOp = "HcBoundary";
  const HcPreParams& pre = p.pre;
  const RmsNormParams& n = p.norm;
  RETURN_IF_ERROR(Validate(pre));
  RETURN_IF_ERROR(ValidateRmsNorm(n));
  if (p.cluster_ctas != 0 && p.cluster_ctas != 1 && p.cluster_ctas != 2 && p.cluster_ctas != 4 &&
      p.cluster_ctas != 8) {
    return Invalid(kOp, "cluster_ctas", "must be 0 (automatic), 1, 2, 4 or 8");
  }
  if (n.x != pre.out || n.x_stride != pre.out_stride) {
    return Invalid(kOp, "norm.x", "must be pre.out with pre.out_stride (the collapsed row)");
  }
  if (n.rows != pre.tokens || n.cols != pre.dim) {
    return Invalid(kOp, "norm.rows/cols", "must be pre.tokens and pre.dim");
  }
  if (pre.tokens == 0) return absl::OkStatus();
  const int64_t t = pre.tokens, d = pre.dim;
  const Extent streams = MakeExtent(pre.x, t, kMhcStreams * d, pre.x_stride, 2);
  const Extent normed = MakeExtent(n.out, t, d, n.out_stride, 2);
  if (normed.Overlaps(streams)) return Invalid(kOp, "norm.out", "overlaps the streams");
  if (normed.Overlaps(MakeExtent(pre.pre, t, kMhcStreams, kMhcStreams, 4))) {
    return Invalid(kOp, "norm.out", "overlaps pre.pre");
  }
  if (!p.has_post) return absl::OkStatus();
  const HcPostParams& post = p.post;
  RETURN_IF_ERROR(Validate(post));
  if (post.tokens != t || post.dim != d)
    return Invalid(kOp, "post.tokens/dim", "differ from pre's");
  if (pre.x != post.out || pre.x_stride != post.out_stride) {
    return Invalid(kOp, "pre.x", "must be post.out with post.out_stride (the new streams)");
  }
  // The fused kernel reads every input of a token before it writes that token's outputs, but
  // tokens run in any order: no output may overlap another token's inputs.
  const Extent inputs[] = {
      MakeExtent(post.f, t, d, post.f_stride, 2),
      MakeExtent(post.residual, t, kMhcStreams * d, post.residual_stride, 2),
      MakeExtent(post.post, t, kMhcStreams, kMhcStreams, 4),
      MakeExtent(post.comb, t, kMhcStreams * kMhcStreams, kMhcStreams * kMhcStreams, 4)};
  const Extent collapsed = MakeExtent(pre.out, t, d, pre.out_stride, 2);
  for (const Extent& in : inputs) {
    if (collapsed.Overlaps(in)) return Invalid(kOp, "pre.out", "overlaps an input of post");
    if (normed.Overlaps(in)) return Invalid(kOp, "norm.out", "overlaps an input of post");
  }
  if (streams.Overlaps(MakeExtent(pre.pre, t, kMhcStreams, kMhcStreams, 4))) {
    return Invalid(kOp, "post.out", "overlaps pre.pre");
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
