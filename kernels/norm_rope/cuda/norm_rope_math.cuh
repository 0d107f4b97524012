// Device fp32 arithmetic of the norm/RoPE kernels, written so that each operation is the one
// correctly rounded IEEE operation the CPU bodies (built with -ffp-contract=off) perform:
// inline PTX without .ftz (subnormals kept) and never contracted into an FMA, so no nvcc flag
// (-ftz, -use_fast_math, -fmad, -prec-div, -prec-sqrt) can change a bit. bf16 conversions follow
// common/formats/bf16.h (RNE; NaN keeps its sign and top payload bits, quiet bit forced).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_exact_math.cuh"

namespace flashserve::kernels::norm_rope_device {

// The exact fp32 / bf16 operations shared with the other families (kernels/common).
using namespace ::flashserve::kernels::exact;  // NOLINT(build/namespaces)

// cos/sin of the fp32 angle fp32(fp32(pos) * freq) as RopeCosSin computes them: the double
// cos/sin of the (exact) double angle, rounded once to fp32. CUDA's double sin/cos are within 2
// double ulps of the true value, so the fp32 rounding is the correctly rounded one unless the true
// value lies within ~2^-51 (relative) of an fp32 tie; fp32 sinf/cosf would be off by an ulp often.
__device__ __forceinline__ void RopeCosSinAt(int64_t pos, float freq, float* cos_out,
                                             float* sin_out) {
  const double angle = static_cast<double>(MulRn(Int64ToF32(pos), freq));
  double s = 0.0;
  double c = 0.0;
  sincos(angle, &s, &c);
  *cos_out = DoubleToF32(c);
  *sin_out = DoubleToF32(s);
}

// The RoPE rotation of one interleaved pair (a, b), as RotateInterleaved on the CPU:
// (a*cos - b*sin, a*sin + b*cos), each product and sum rounded on its own.
__device__ __forceinline__ void RotatePair(float a, float b, float cos, float sin, float* re,
                                           float* im) {
  *re = SubRn(MulRn(a, cos), MulRn(b, sin));
  *im = AddRn(MulRn(a, sin), MulRn(b, cos));
}

}  // namespace flashserve::kernels::norm_rope_device
