// Helpers for the GPU tests of kernels/quant: device copies of host vectors, poisoned outputs.
// Test-only, header-only. Every CUDA error aborts (CUDA_CHECK).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/cuda_check.h"

namespace flashserve::kernels::quant::testing {

inline constexpr uint8_t kPoison = 0xA5;

// A device buffer holding a copy of `host`.
template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  DeviceBuffer buf(host.size() * sizeof(T));
  buf.CopyFromHost(host.data(), host.size() * sizeof(T));
  return buf;
}

// A device buffer of `bytes` bytes, every byte kPoison (so unwritten bytes are visible).
inline DeviceBuffer Poisoned(size_t bytes) {
  DeviceBuffer buf(bytes);
  CUDA_CHECK(cudaMemset(buf.get(), kPoison, bytes));
  return buf;
}

// A host vector of `n` values of T with every byte kPoison (what the CPU reference starts from).
template <typename T>
std::vector<T> PoisonedHost(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), kPoison, n * sizeof(T));
  return v;
}

}  // namespace flashserve::kernels::quant::testing
