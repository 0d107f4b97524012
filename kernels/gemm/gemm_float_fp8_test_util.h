// Shared by the GPU tests of the FP8 form of a bf16 weight (gemm_float_gpu_fp8_test.cc,
// gemm_float_gpu_fp8_only_test.cc): device uploads, FP8-valued bf16 weights, and the float64
// bound the outputs are held to. Header-only; test code.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_float_cuda.h"

namespace flashserve::kernels::fp8_form_test {

// A device copy of `h` (16 bytes of slack past the end); the caller cudaFree's it.
template <typename T>
T* Upload(const std::vector<T>& h) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T) + 16));
  CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// rows × k bf16 weights (rows, k multiples of 32) that are E4M3 codes (no NaN) times a power of
// two in [2^-14, 2^-7] per 32 × 32 block, as attn.wo_a's checkpoint blocks; draws from `rng`.
inline std::vector<uint16_t> Fp8ValuedWeight(int64_t rows, int64_t k, std::mt19937_64& rng) {
  constexpr int64_t kB = kFloatLinearFp8Block;
  std::vector<uint16_t> w(rows * k);
  for (int64_t rb = 0; rb < rows / kB; ++rb) {
    for (int64_t cb = 0; cb < k / kB; ++cb) {
      const int s = -14 + static_cast<int>(rng() % 8);
      for (int64_t r = rb * kB; r < (rb + 1) * kB; ++r) {
        for (int64_t col = cb * kB; col < (cb + 1) * kB; ++col) {
          uint8_t code = static_cast<uint8_t>(rng());
          if ((code & 0x7F) == 0x7F) code ^= 1;
          w[r * k + col] = formats::FloatToBf16Bits(std::ldexp(formats::E4m3ToFloat(code), s));
        }
      }
    }
  }
  return w;
}

// The float64 dot product of x[0 .. k) and the bf16 weight row w_row[0 .. k) plus `bias`, and the
// bound an output is held to: |y - ref| <= tol = rel · |ref| + k · 2^-23 · Σ|x·w| (fp32 sums of
// exact products in any order; rel 1e-7 for fp32 outputs, 8e-3 for bf16 ones).
struct Float64Ref {
  double ref = 0, tol = 0;
  bool Holds(float y) const { return std::fabs(y - ref) <= tol; }
};
inline Float64Ref Float64Dot(const float* x, const uint16_t* w_row, int64_t k, double bias,
                             bool y_f32) {
  Float64Ref r;
  double mag = std::fabs(bias);
  r.ref = bias;
  for (int64_t kk = 0; kk < k; ++kk) {
    const double prod = static_cast<double>(x[kk]) * formats::Bf16BitsToFloat(w_row[kk]);
    r.ref += prod;
    mag += std::fabs(prod);
  }
  r.tol = (y_f32 ? 1e-7 : 8e-3) * std::fabs(r.ref) + k * std::ldexp(mag, -23);
  return r;
}

}  // namespace flashserve::kernels::fp8_form_test
