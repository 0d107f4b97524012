// Helpers of kernels_gemm_gpu_test and bench_gemm_gpu: exact-arithmetic FP8 weights and
// activations, a LaunchLinearFp8 runner on host vectors, and the comparison against LinearCpu.
//
// Exact-arithmetic inputs (ExactArithFp8 + SmallIntActivations): every weight code is an E4M3
// value that is a multiple of 2^-3 with |v| <= 8, and all scale bytes of one 32-row scale row
// lie in [b, b + 2]; activations are integers in [-3, 3] (FP8 QDQ leaves them unchanged). Every
// product of output column c is then a multiple of 2^(b_c - 130), and while Σ_k |x·w| <
// 2^(24 + b_c - 130), every partial sum in any order and grouping is exact in fp32 — also after
// a tensor core aligns its addends to the largest one. So the GPU's sums equal LinearCpu's bit
// for bit; ExactPremiseHolds checks the bound on the actual data.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_test_util.h"

namespace flashserve::kernels::gemm_test {

// FP8 weight [n, k] as above; scale row r's base byte is drawn from [base_lo, base_hi]
// (base_hi + 2 <= 254). base_of_row, if non-null, receives ceil(n/32) base bytes.
HostLinear ExactArithFp8(int64_t n, int64_t k, int base_lo, int base_hi, bool with_bias, Rng& rng,
                         std::vector<int>* base_of_row);

// bf16 [m, stride]: integers in [-3, 3], nonzero with probability 1/density_den.
std::vector<uint16_t> SmallIntActivations(int64_t m, int64_t k, int64_t stride, int density_den,
                                          Rng& rng);

// True when Σ_k |x·w| < 2^(24 + base - 130) for every computed output (DoubleLinear's abs_sum).
bool ExactPremiseHolds(const HostLinear& w, const std::vector<int>& base_of_row,
                       const std::vector<uint16_t>& x, int64_t m, int64_t x_stride);

// `h` as a codes-only PreparedLinear (expand_to_f32 = false: exact mode reads the codes) and its
// device copy; both abort on errors (test inputs are valid by construction).
std::unique_ptr<PreparedLinear> PrepareCodesOnly(const HostLinear& h);
DeviceFp8Linear UploadOrDie(const PreparedLinear& w, bool keep_expanded = false);

struct GpuRunOptions {
  bool f32_out = false;
  int64_t y_stride = 0;  // 0: n
  int64_t tile_rows = 0;
  int64_t split_k = 0;
  bool wgmma_bf16 = true;      // LinearCudaParams::wgmma_bf16
  bool wgmma_ws = true;        // LinearCudaParams::wgmma_ws
  bool expand_weights = true;  // LinearCudaParams::expand_weights
  bool stream_tma = false;     // LinearCudaParams::stream_tma
  int64_t ws_tile_cols = 0;    // LinearCudaParams::ws_tile_cols
  bool stream_k_tail = false;  // LinearCudaParams::stream_k_tail
  bool ws_multicast = false;   // LinearCudaParams::ws_multicast
  bool x_qdq = false;          // LinearCudaParams::x_qdq: x is already QDQ'd
  int repeats = 1;             // launches of the same call on the same workspace and y
};
// LaunchLinearFp8 on a device copy of x (o.repeats times, one workspace: what one call leaves
// there must not change the next); y widened to float [m, y_stride]. Aborts on errors.
std::vector<float> RunLinearGpu(const Fp8LinearDevice& w, const std::vector<uint16_t>& x, int64_t m,
                                int64_t x_stride, const GpuRunOptions& o);

// GPU vs CPU statistics over [m, n] (strides y_stride). abs_sum: DoubleLinear's (-1 = unknown).
struct Comparison {
  int64_t count = 0;
  int64_t bit_equal = 0;       // identical bits (NaN == NaN)
  int64_t within_ulp = 0;      // |g - c| <= Bf16Ulp(max(|g|, |c|))
  int64_t bound_checked = 0;   // elements with a known abs_sum
  int64_t bound_failures = 0;  // |g - c| > Bf16Ulp(max) · ulp_weight + reorder_coef · abs_sum
  double rel_rms = 0;          // sqrt(Σ (g - c)^2 / Σ c^2)
  double worst_excess = 0;     // max |g - c| / allowed over the checked elements
};
Comparison Compare(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t m,
                   int64_t n, int64_t y_stride, const std::vector<double>& abs_sum,
                   double ulp_weight, double reorder_coef);

}  // namespace flashserve::kernels::gemm_test
