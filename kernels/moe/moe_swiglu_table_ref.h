// The SwiGLU gate factor of a bf16 g computed from first principles on the host: exp correctly
// rounded to fp32 through the long double exp (x86-64: 80 bits, a 64-bit significand), then the
// fp32 add and division (IEEE single on x86-64). Used by tools/gen_swiglu_table.cc to write the
// table and by moe_swiglu_table_test.cc to check it (moe_swiglu_table.h). Host only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace flashserve::kernels {

struct MoeSigReference {
  float s;            // RN(g / RN(1 + RN(exp(-g))))
  double exp_margin;  // |exp(-g) - nearest fp32 rounding midpoint or threshold| (relative)
};

inline MoeSigReference MoeSigFactorReference(uint32_t g_bf16) {
  const uint32_t gb = g_bf16 << 16;
  float g;
  std::memcpy(&g, &gb, 4);
  const long double e = std::exp(-static_cast<long double>(g));
  const float ef = static_cast<float>(e);  // one rounding from 64 significant bits
  double margin = 1.0;
  if (ef == 0.f && e > 0.L) {
    // Rounded to 0: the distance to the midpoint between 0 and the smallest subnormal.
    const long double t = std::ldexp(1.0L, -150);
    margin = static_cast<double>(std::fabs(e - t) / t);
  } else if (std::isinf(ef)) {
    // Overflowed: the distance to the overflow threshold FLT_MAX + half an ulp.
    const long double t = std::ldexp(1.0L, 128) - std::ldexp(1.0L, 103);
    margin = static_cast<double>(std::fabs(e - t) / t);
  } else if (std::isfinite(ef) && e > 0.L) {
    // The rounding midpoints around ef: halfway to each neighbour.
    const long double lo =
        (static_cast<long double>(ef) + static_cast<long double>(std::nextafterf(ef, 0.f))) / 2;
    const long double hi =
        (static_cast<long double>(ef) + static_cast<long double>(std::nextafterf(ef, INFINITY))) /
        2;
    margin = static_cast<double>(std::fmin(std::fabs(e - lo), std::fabs(hi - e)) / e);
  }
  volatile float d = 1.0f + ef;  // volatile: one fp32 rounding each, whatever the flags
  volatile float s = g / d;
  return {s, margin};
}

}  // namespace flashserve::kernels
