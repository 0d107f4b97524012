// Dense Linear layers of DeepSeek-V4.1-Flash: y[M, N] = x[M, K] · W[N, K]^T (+ bias), with the
// numerics of model spec §10 items 1–3. The weight is a PreparedLinear (prepared_linear.h).
//
// Numerics by weight format:
// - kFp8Block32 / kFp4Block32: x (bf16) is quantised per 32 along K to FP8 E4M3 with a UE8M0
//   scale at every call (common/formats QuantizeFp8Ue8m0B32 rule). The reference then computes,
//   per 32-wide K block, an fp32 partial Σ q_x·q_w over the codes' values, scales it as
//   (partial · a_scale) · w_scale and adds it to an fp32 accumulator in ascending K order; one
//   rounding to bf16 at the end.
// - kBf16: bf16 GEMM, fp32 accumulate, no activation quant, one rounding.
// - kF32: true fp32 GEMM on the (upcast) input; fp32 output in the model's uses.
// - bias (if the weight has one, bf16 in the checkpoint): added to the fp32 sum before the single
//   rounding, as a bf16 GEMM with bias does (vision / aligner Linears).
//
// Modes:
// - kExact: the reference's blockwise order exactly. Per 32-wide K block the partial sums the
//   products sequentially in ascending k (each FP8×FP8 / FP8×FP4 product is exact in fp32), then
//   acc += (partial · a_scale) · w_scale, blocks in ascending order. For kBf16 / kF32 weights:
//   acc += x_k · w_k sequentially in ascending k (the reference's cuBLAS order is unspecified).
//   Bit-for-bit reproducible; a few GFLOP/s per core.
// - kFast: activations are quantise-dequantised in fp32 (exact: E4M3 × power of two), the weight
//   is the fp32 dequantised one, and OpenBLAS sgemm computes the product. Mathematically the same
//   sum as the blockwise rule (the power-of-two scales factor out of each block); only the fp32
//   summation order differs, so results differ from kExact by fp32 rounding only — in practice at
//   most about one bf16 ulp of the output (tests: ≤ 2^-8 relative plus a small absolute term for
//   cancellation; see README.md).
// K need not be a multiple of 32: a partial last K block is quantised as if zero-padded to 32
// (same amax, same codes); the reference itself asserts K % 32 == 0 for quantised Linears.
//
// Threading: rows of the activations, then column tiles of the output, are split over `pool`
// (null = the calling thread only). OpenBLAS is switched to one thread per call
// (openblas_set_num_threads(1), once per process) so it never oversubscribes our pool; every
// Linear in the process therefore runs sgemm single-threaded inside our tiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/gemm/prepared_linear.h"

namespace flashserve {
class ThreadPool;
}

namespace flashserve::kernels {

enum class LinearMode : uint8_t {
  kFast = 0,
  kExact = 1,
};

struct LinearParams {
  const PreparedLinear* weight = nullptr;  // N = out_features, K = in_features
  int64_t m = 0;                           // rows of x and y; 0 is a no-op
  // Input, row r at x + r * x_stride: exactly one of the two. x_f32 is for fp32-weight Linears
  // (values are usually bf16 upcast); FP8/FP4 weights require x_bf16, as in the reference.
  const uint16_t* x_bf16 = nullptr;
  const float* x_f32 = nullptr;
  int64_t x_stride = 0;  // elements, >= K
  // Output, row r at y + r * y_stride: exactly one of the two. y_bf16 gets one RNE rounding of
  // the fp32 result; y_f32 gets the fp32 result (fp32-weight Linears: gate, r=2 compressor, head,
  // Markov head, confidence, hc_*_fn). Must not overlap x or the workspace.
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;  // elements, >= N
  LinearMode mode = LinearMode::kFast;
  // Scratch of at least LinearWorkspaceBytes(*weight, m, mode, pool) bytes, any alignment,
  // owned by the caller, not used concurrently by another call.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Workspace bytes LinearCpu needs for up to `max_m` rows with `pool` (the same pool, or one of
// the same size, must be passed to LinearCpu). Monotone in max_m, so size once for the largest M.
// Roughly: 4·M·K (activations in fp32) + per thread 4·M·64 (exact) or 4·M·128 (fast output tile;
// unexpanded weights add 4·128·K for the dequantised tile) + 64 bytes of alignment slack.
// Exact mode adds 4·M·ceil(K/32) for the activation scales and 4·(32·64 + 64) per thread.
size_t LinearWorkspaceBytes(const PreparedLinear& weight, int64_t max_m, LinearMode mode,
                            const ThreadPool* pool);

// y = x · W^T (+ bias) as documented above. Allocates nothing (the pool's task queue aside);
// per call it only validates, carves the workspace and runs — cheap to call once per expert.
// Errors: InvalidArgumentError (message names the param) for a null weight, m < 0, not exactly
// one x / y pointer, x_f32 with an FP8/FP4 weight, strides smaller than K / N, an invalid mode,
// or a missing / too small workspace; nothing is written then.
// Thread safety: concurrent calls are safe with distinct workspaces and outputs. Must not be
// called from inside a task of `pool`.
absl::Status LinearCpu(const LinearParams& p, ThreadPool* pool);

}  // namespace flashserve::kernels
