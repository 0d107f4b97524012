// Device-side helpers of the MoE CUDA tests and bench: host <-> device copies and the routed
// experts on the device (generated from moe_test_weights.h's hash, or uploaded checkpoint bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels::moe_test {

// A device buffer of n elements of T filled with the byte `poison` (outputs start poisoned so a
// value a kernel fails to write shows up as a mismatch).
template <typename T>
DeviceBuffer Poisoned(size_t n, int poison = 0xA5) {
  DeviceBuffer buf(std::max<size_t>(n, 1) * sizeof(T));
  CUDA_CHECK(cudaMemset(buf.get(), poison, buf.bytes()));
  return buf;
}

struct DeviceExperts {
  DeviceBuffer codes[3], scales[3];  // kW1, kW3, kW2: [E, N, K/2], [E, N, K/32]
  DeviceBuffer bias, bias_vl;
  MoeCudaWeights view;
};

// All experts of the spec filled on the device; bias / bias_vl uploaded when non-empty.
std::unique_ptr<DeviceExperts> GenerateDeviceExperts(const LayerSpec& s,
                                                     const std::vector<float>& bias,
                                                     const std::vector<float>& bias_vl);

// Experts from host bytes: proj[p][e] in checkpoint layout (e.g. a safetensors fixture).
std::unique_ptr<DeviceExperts> UploadDeviceExperts(int64_t n_experts, int64_t dim, int64_t inter,
                                                   const std::vector<HostFp4> (&proj)[3],
                                                   const std::vector<float>& bias,
                                                   const std::vector<float>& bias_vl);

// The shared expert's Linears on the device, uploaded (DeviceFp8Linear::Upload) from the same
// PreparedLinears MoeCpu uses; fused: w1 and w3 stacked into one [2·Is, D] w13
// (ConcatLinearRows).
struct DeviceSharedExpert {
  DeviceFp8Linear w1, w3, w2, w13;
  MoeSharedExpertWeights view;
};
// keep_expanded: each Linear keeps its bf16 expansion (DeviceFp8Linear::Upload).
std::unique_ptr<DeviceSharedExpert> UploadSharedExpert(const SharedExpert& s, bool fused,
                                                       bool keep_expanded = false);

}  // namespace flashserve::kernels::moe_test
