// The MoE layer's shared expert on the GPU (sm_90a): y = w2(SwiGLU(w1 x, w3 x)), the FP8
// 32×32-block-scaled dense SwiGLU expert that every token runs, with MoeCpu's numerics (moe.h
// "Expert", no routing weight). README.md "CUDA: the shared expert" documents it.
//
// Three (fused w1/w3) or four launches of kernels/gemm's LaunchLinearFp8 and one SwiGLU kernel:
//   g, u = w1(x), w3(x)       bf16 (one RNE rounding of the fp32 sums), LinearCpu's activation
//                             quantiser; one GEMM with N = 2·Is when the weights are fused (w13)
//   a    = bf16(silu(g')·u')  MoeSwiGluRow's operations in its order (clamps with swiglu_limit:
//                             u' to [-l, l], g' above at l), exp correctly rounded (as the routed
//                             experts' SwiGLU, moe_cuda.h): bit for bit on every non-NaN input
//                             except where glibc's expf is not correctly rounded
//   y    = w2(a)              bf16
// Against MoeCpu (exact mode) only the GEMMs' fp32 summation order differs (gemm_cuda.h).
//
// Common contract (as moe_cuda.h): device pointers, bf16 as uint16 bit patterns, strides in
// elements; launchers validate first (InvalidArgumentError naming the field; nothing is enqueued
// then), then enqueue on `stream` and return. Nothing is allocated. CUDA launch failures abort.
// This header includes no CUDA header and no C++20 header (.cu files include it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm/gemm_cuda.h"

struct CUstream_st;

namespace flashserve::kernels {

// The shared expert's FP8 Linears on the device (borrowed; must outlive the calls). Either w13
// (w1's Is rows then w3's Is rows, one [2·Is, D] weight: one GEMM for both; Is a multiple of 32
// so no scale block straddles the two) or w1 and w3 separately; w2 always.
struct MoeSharedExpertWeights {
  const DeviceFp8Linear* w13 = nullptr;  // [2·Is, D], or null
  const DeviceFp8Linear* w1 = nullptr;   // [Is, D] (when w13 is null)
  const DeviceFp8Linear* w3 = nullptr;   // [Is, D] (when w13 is null)
  const DeviceFp8Linear* w2 = nullptr;   // [D, Is]
};

// Dims read off the weights. InvalidArgumentError naming the field when the pointers are not
// one of the two forms above, a view is invalid (Validate(Fp8LinearDevice)), a Linear has a
// bias, or the shapes disagree.
struct MoeSharedExpertDims {
  int64_t dim = 0;    // D
  int64_t inter = 0;  // Is
  bool fused = false;
};
absl::StatusOr<MoeSharedExpertDims> MoeSharedExpertDimsOf(const MoeSharedExpertWeights& w);

// ---- Stage: the SwiGLU kernel (public for tests) ---------------------------------------------
// a[r, i] = MoeSwiGluRow(g[r, i], u[r, i]) with weight null (see the file comment); one thread
// per element. Any alignment; a must not overlap g or u. With `qdq`, a holds instead the FP8
// E4M3 × UE8M0/32 activation QDQ of those values (quant::LaunchQdq's bits): the input of a w2
// Linear that skips its own pass (LinearCudaParams::x_qdq); a thread per 8 values, so then
// inter % 32 == 0 and g, u, a 16-byte aligned with strides multiples of 8.
struct MoeSharedSwiGluParams {
  int64_t m = 0;              // rows; 0 is a no-op
  int64_t inter = 0;          // columns (Is), >= 1
  float swiglu_limit = 10.f;  // <= 0 disables the clamps
  const uint16_t* g = nullptr;
  int64_t g_stride = 0;  // >= inter
  const uint16_t* u = nullptr;
  int64_t u_stride = 0;  // >= inter
  uint16_t* a = nullptr;
  int64_t a_stride = 0;  // >= inter
  bool qdq = false;
};
absl::Status Validate(const MoeSharedSwiGluParams& p);
absl::Status LaunchMoeSharedSwiGlu(const MoeSharedSwiGluParams& p, CUstream_st* stream);

// ---- The whole shared expert -----------------------------------------------------------------
struct MoeSharedExpertParams {
  const MoeSharedExpertWeights* weights = nullptr;  // host struct
  float swiglu_limit = 10.f;                        // MoeOptions::swiglu_limit
  int64_t m = 0;                                    // tokens; 0 is a no-op
  const uint16_t* x = nullptr;                      // bf16 [m, D], any alignment
  int64_t x_stride = 0;                             // >= D
  uint16_t* y = nullptr;      // out bf16 [m, D]; must not overlap x or the workspace
  int64_t y_stride = 0;       // >= D
  void* workspace = nullptr;  // device, >= MoeSharedExpertWorkspaceBytes(weights, m)
  size_t workspace_bytes = 0;
  // x already FP8-QDQ'd (e.g. RmsNormParams::out_qdq): the up GEMMs take it with
  // LinearCudaParams::x_qdq and skip their activation pass where they read x in place.
  bool x_qdq = false;
  // LinearCudaParams::split_k of its Linears: 0 (default) each plan's; 1 .. kLinearCudaMaxSplits
  // forces that many K splits (A/B; the bits follow the split count, fp32 order). At decode sizes
  // the weight-streaming plan keeps ~264 CTAs whatever the splits (fewer splits: fewer weight rows
  // per CTA), so this does not free SM slots for work beside a forked shared expert (session 78:
  // the decode step 50 µs slower at 1 split). The workspace must be sized with the same split_k.
  int64_t split_k = 0;
  // LinearCudaParams::stream_ctas of its Linears: 0 (default) the weight-streaming plan's 264
  // CTAs at decode sizes; N plans toward N CTAs (fewer splits and CTAs along N), so that a shared
  // expert forked beside the routed MoE holds fewer SM slots (bench --shared-ctas). The bits
  // follow the resulting split count. The workspace must be sized with the same value.
  int64_t stream_ctas = 0;
};

// Device workspace for up to max_tokens tokens: g/u bf16 [m, 2·Is] + a bf16 [m, Is] + the
// largest LinearCudaWorkspaceBytes of the Linears (QDQ x and split-K partials; with split_k
// and stream_ctas as MoeSharedExpertParams's), 256-byte aligned regions, plus 256 bytes of
// alignment slack. Monotone in max_tokens. Errors: MoeSharedExpertDimsOf's; max_tokens out of
// [0, 2^31); split_k out of [0, kLinearCudaMaxSplits]; stream_ctas out of [0,
// kLinearCudaMaxStreamCtas]. Cost: a few LinearCudaPlans per Linear.
absl::StatusOr<size_t> MoeSharedExpertWorkspaceBytes(const MoeSharedExpertWeights& weights,
                                                     int64_t max_tokens, int64_t split_k = 0,
                                                     int64_t stream_ctas = 0);

// Host-only checks of every field (and of the GEMM launches it will make); InvalidArgumentError
// naming the field, else OK.
absl::Status Validate(const MoeSharedExpertParams& p);

// y = SharedExpert(x) as above: 4 or 5 launches of the gemm QDQ / GEMM / split-K kernels plus
// the SwiGLU kernel (about 7-10 kernels at decode sizes). Capturable in a CUDA graph.
absl::Status LaunchMoeSharedExpert(const MoeSharedExpertParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
