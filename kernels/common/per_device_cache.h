// Host-side per-device caches of launch-shape queries for the CUDA launchers (host code only). A
// device's SM count, a kernel's resident CTAs per SM at a given shared-memory size and a kernel's
// dynamic shared-memory attribute never change while the process runs, so each is asked once per
// device instead of on every launch (each query is a driver call on the hot path).
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "kernels/common/cuda_check.h"

namespace flashserve::kernels {

// Device ordinals cached; larger ordinals are queried on every use (still correct).
inline constexpr int kPerDeviceCacheSize = 64;

// One int per device ordinal, computed by `query` on its first use. Thread-safe and lock-free:
// threads racing on a first use each query and store the same value. Meant as a function-local
// static (constant-initialised, so no guard).
class PerDeviceInt {
 public:
  template <typename Query>
  int Get(int device, Query&& query) {
    if (device < 0 || device >= kPerDeviceCacheSize) return query();
    const int cached = values_[device].load(std::memory_order_acquire);
    if (cached != 0) return cached - 1;
    const int value = query();
    values_[device].store(value + 1, std::memory_order_release);
    return value;
  }

 private:
  std::atomic<int> values_[kPerDeviceCacheSize] = {};  // value + 1; 0 = not yet queried
};

inline int CurrentDevice() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

inline int SmCount(int device) {
  static PerDeviceInt cache;
  return cache.Get(device, [device] {
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  });
}

}  // namespace flashserve::kernels
