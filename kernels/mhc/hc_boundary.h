// The mHC site boundary of a decode step in one launch: the hc_post that ends a sublayer
// (optional), the next site's collapse (hc_pre by the incoming pre) and that sublayer's input
// RMSNorm. Run one after another these are three launches of element-wise work on a few KB per
// token, each paying a launch and a memory round trip on the step's critical path; fused, one
// block per token keeps the new streams, the collapsed row and its sum of squares in registers.
// The outputs are the bits of LaunchHcPost, LaunchHcPre and LaunchRmsNorm run in that order (the
// same fp32 operations per element; the sum of squares in double with the norm kernel's own
// thread split and reduction), and so of HcPostCpu, HcPreCpu and RmsNormCpu (README.md
// "The site boundary"). This header includes no CUDA header (CUstream_st* is cudaStream_t).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/mhc/mhc.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {

struct HcBoundaryParams {
  // hc_post of the sublayer that just ran, when `has_post`; its `out` streams are then the
  // collapse's input: pre.x == post.out and pre.x_stride == post.out_stride.
  bool has_post = false;
  HcPostParams post;
  // The collapse of the streams by the incoming pre; pre.out (the collapsed row) is written.
  HcPreParams pre;
  // The RMSNorm of the collapsed row: norm.x == pre.out, norm.x_stride == pre.out_stride,
  // norm.rows == pre.tokens, norm.cols == pre.dim. norm.out may equal pre.out (same stride) but
  // must not overlap the streams.
  RmsNormParams norm;
  // CTAs per token of the fused kernel: 1 = one block of 256 threads per token; 2, 4 or 8 = a
  // thread-block cluster of that many 128-thread CTAs per token, each with its share of the
  // row, the norm's sum of squares exchanged through distributed shared memory (spreads a small
  // batch's loads over more SMs; the same bits); 0 (default) = automatic:
  // kHcBoundaryClusterAutoCtas per token up to kHcBoundaryClusterAutoTokens tokens, else 1.
  int64_t cluster_ctas = 0;
};

// Validate(post) when has_post, Validate(pre), ValidateRmsNorm(norm), and the links above.
// InvalidArgumentError naming the field; nothing is read or written.
absl::Status ValidateHcBoundary(const HcBoundaryParams& p);

// HcPostCpu (when has_post), HcPreCpu and RmsNormCpu in order: the reference.
absl::Status HcBoundaryCpu(const HcBoundaryParams& p, ThreadPool* pool);

// The widest row the fused kernel keeps in registers (four 8-value chunks per thread of 256) and
// the most tokens it takes (one block per token; a larger batch runs the three launches, whose
// grids use the GPU better).
inline constexpr int64_t kHcBoundaryMaxDim = 8192;
inline constexpr int64_t kHcBoundaryMaxTokens = 256;
// The automatic cluster_ctas (0): 8 CTAs per token up to 64 tokens. Session 78 (H100, the decode
// step's two boundaries, graph µs): 1 token 207.9–208.5 -> 206.8–207.1 (4 CTAs: level), 8 tokens
// 509.5–510.2 -> 506.9–507.6, 64 tokens 1,817.7–1,819.5 -> 1,813.8–1,815.5; the FFN boundary
// 6.2 -> 4.4–5.3 µs in the step's trace. Above 64 tokens the one-block grid is wide enough
// (not measured).
inline constexpr int64_t kHcBoundaryClusterAutoCtas = 8;
inline constexpr int64_t kHcBoundaryClusterAutoTokens = 64;
// The CTAs per token LaunchHcBoundary's fused kernel runs for these params (cluster_ctas, or the
// automatic rule's). Pure.
int64_t HcBoundaryClusterCtas(const HcBoundaryParams& p);

// True when LaunchHcBoundary runs the fused kernel for these params (host-only, pointer
// alignment included): 1024 < D <= kHcBoundaryMaxDim with D % 8 == 0 (the rows RmsNorm gives a
// whole block), tokens <= kHcBoundaryMaxTokens, a bf16 norm weight, every row and the weight
// 16-byte aligned. Otherwise the launcher runs LaunchHcPost / LaunchHcPre / LaunchRmsNorm.
bool HcBoundaryFuses(const HcBoundaryParams& p);

// CUDA (target fs_kernels_mhc_cuda): device pointers; validates first, then enqueues one kernel
// (HcBoundaryFuses) or the three launches on `stream`. The fused kernel signals programmatic
// dependents at its start, as the RMSNorm kernel does (a LaunchPdl Linear after it may start
// streaming its weights). Cost: one read of f, the residual streams and the weight, one write of
// the new streams, the collapsed row and the normed row.
absl::Status LaunchHcBoundary(const HcBoundaryParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
