// Test helpers for kernels_gemm_test: seeded random weights / activations in checkpoint byte
// layout, a straightforward scalar implementation of the reference's Linear rule, a double
// reference, and a runner that calls LinearCpu with a correctly sized workspace.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm/gemm.h"

namespace flashserve::kernels::gemm_test {

// splitmix64: deterministic across platforms.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next();
  double Uniform();                     // [0, 1)
  int64_t Int(int64_t lo, int64_t hi);  // [lo, hi]
  double Normal();

 private:
  uint64_t s_;
};

// A Linear in checkpoint layout: weight / scale / bias bytes as LinearWeightView expects.
struct HostLinear {
  WeightFormat format = WeightFormat::kBf16;
  int64_t n = 0;
  int64_t k = 0;
  std::vector<uint8_t> weight;
  std::vector<uint8_t> scale;
  std::vector<uint8_t> bias;  // bf16 [n] or empty
  LinearWeightView View() const { return {format, n, k, weight, scale, bias}; }
};

// Random weight of `format`: FP8 codes over all finite E4M3 bytes (subnormals included), FP4
// nibbles over all 16 codes, UE8M0 scales in 2^[-12, 2]; bf16 / fp32 values ~ N(0, 1/K).
HostLinear RandomLinear(WeightFormat format, int64_t n, int64_t k, bool with_bias, Rng& rng);

// Random bf16 activations [m, stride] (only the first k columns matter): N(0, 1) times a per-row
// 2^[-6, 6] and, per 32-block, an extra 2^[-4, 4] so block scales differ; some blocks are zero.
std::vector<uint16_t> RandomActivations(int64_t m, int64_t k, int64_t stride, Rng& rng);

// The reference rule written as plainly as possible, one output at a time (model spec §10 item
// 3): FP8 activation codes/scales from formats::QuantizeFp8Ue8m0B32 on the zero-padded row;
// per block `partial += qa * qw` from 0 in ascending k, `acc += (partial * sa) * sw`; bf16 / fp32
// weights: `acc += x * w` in ascending k. Returns the fp32 value before the epilogue, + bias.
// x rows are bf16 (x_bf16) or fp32 (x_f32, when non-empty).
std::vector<float> ScalarLinear(const HostLinear& w, const std::vector<uint16_t>& x_bf16,
                                const std::vector<float>& x_f32, int64_t m, int64_t x_stride);

// Σ_k x_k·w_k in double with QDQ'd activations (for quantised formats) and the dequantised
// weight, + bias; and Σ_k |x_k·w_k| for the tolerance. Both [m, n]. Only rows r with
// r % row_step == 0 and the last row are computed; the others have abs_sum = -1.
struct DoubleResult {
  std::vector<double> y;
  std::vector<double> abs_sum;
};
DoubleResult DoubleLinear(const HostLinear& w, const std::vector<uint16_t>& x_bf16,
                          const std::vector<float>& x_f32, int64_t m, int64_t x_stride,
                          int64_t row_step = 1);

// Runs LinearCpu with y_bf16 (or y_f32 when f32_out) [m, y_stride] and returns y widened to
// float; ASSERT-style failures are reported through the returned status.
struct RunOptions {
  LinearMode mode = LinearMode::kFast;
  bool f32_out = false;
  int64_t y_stride = 0;  // 0: n
  ThreadPool* pool = nullptr;
};
absl::Status RunLinear(const PreparedLinear& w, const std::vector<uint16_t>& x_bf16,
                       const std::vector<float>& x_f32, int64_t m, int64_t x_stride,
                       const RunOptions& o, std::vector<float>* y);

// The bf16 spacing at |v| (2^-7 relative at the bottom of a binade, 2^-8 at the top).
double Bf16Ulp(double v);

}  // namespace flashserve::kernels::gemm_test
