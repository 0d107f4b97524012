// Test support: the SwiGLU gate factor on the device, as the kernels compute it (SwiGluGateFactor:
// kMoeSigTable, closed forms, or the formula) and by the formula alone (RN(g / RN(1 + RN(exp(-g))))
// with the double-precision exp), for a list of fp32 inputs. No CUDA header; host pointers.
// Synchronises the device; aborts on CUDA errors.
#pragma once

#include <cstdint>

namespace flashserve::kernels::moe_test {

void SwiGluGateFactorsOnDevice(const float* g, int64_t n, float* kernel_factor,
                               float* formula_factor);

}  // namespace flashserve::kernels::moe_test
