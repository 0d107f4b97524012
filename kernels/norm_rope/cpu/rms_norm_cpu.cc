// CPU body of RMSNorm (model spec §10 item 2). Compiled with -ffp-contract=off: every fp32 product
// below is rounded on its own, as in the reference's separate torch ops:
//   var = fp32(sum x^2) * fp32(1/n)   x^2 in fp32, summed in double (torch's CUDA mean multiplies
//                                     by the reciprocal; the double sum is its exact value rounded)
//   r   = 1 / sqrt(var + eps)         fp32 sqrt and division (torch's CPU rsqrt)
//   out = bf16(w * (x * r))           one rounding to bf16
// and, where asked, out_qdq = the FP8 activation QDQ of out (QdqCpu).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

float RmsFromSum(double sum_sq, int64_t n, float eps) {
  const float mean = static_cast<float>(sum_sq) * (1.0f / static_cast<float>(n));
  return 1.0f / std::sqrt(mean + eps);
}

template <typename Weight>
void NormRow(const uint16_t* x, const Weight* w, int64_t n, float eps, uint16_t* out) {
  const float r = RmsInverse(x, n, eps);
  for (int64_t c = 0; c < n; ++c) {
    const float normed = Bf16BitsToFloat(x[c]) * r;
    float weight;
    if constexpr (std::is_same_v<Weight, uint16_t>) {
      weight = Bf16BitsToFloat(w[c]);
    } else {
      weight = w[c];
    }
    out[c] = FloatToBf16Bits(weight * normed);
  }
}

}  // namespace

float RmsInverse(const uint16_t* x_bf16, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) {
    const float v = Bf16BitsToFloat(x_bf16[c]);
    sum += static_cast<double>(v * v);  // exact in fp32 unless it over/underflows, as in torch
  }
  return RmsFromSum(sum, n, eps);
}

float RmsInverse(const float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) sum += static_cast<double>(x[c] * x[c]);
  return RmsFromSum(sum, n, eps);
}

absl::Status RmsNormCpu(const RmsNormParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateRmsNorm(p));
  if (p.rows == 0) return absl::OkStatus();
  auto body = [&p](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const uint16_t* x = p.x + static_cast<int64_t>(r) * p.x_stride;
      uint16_t* out = p.out + static_cast<int64_t>(r) * p.out_stride;
      if (p.weight_bf16 != nullptr) {
        NormRow(x, p.weight_bf16, p.cols, p.eps, out);
      } else {
        NormRow(x, p.weight_f32, p.cols, p.eps, out);
      }
    }
  };
  if (pool == nullptr) {
    body(0, static_cast<size_t>(p.rows));
  } else {
    // About 16K elements per chunk keeps the scheduling overhead small.
    const size_t min_rows = static_cast<size_t>(1 + (int64_t{1} << 14) / p.cols);
    pool->ParallelFor(static_cast<size_t>(p.rows), min_rows, body);
  }
  if (p.out_qdq == nullptr) return absl::OkStatus();
  return quant::QdqCpu({quant::BlockFormat::kFp8E4m3Ue8m0B32, p.rows, p.cols, p.out, p.out_stride,
                        p.out_qdq, p.out_qdq_stride});
}

}  // namespace flashserve::kernels
