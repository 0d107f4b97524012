// Host-side per-device caches of launch-shape queries for the CUDA launchers (host code only). A
// device's SM count, a kernel's resident CTAs per SM at a given shared-memory size and a kernel's
// dynamic shared-memory attribute never change while the process runs, so each is asked (or set)
// once per device instead of on every launch (each is a driver call on the hot path).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

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

// Opts `kernel` into `bytes` of dynamic shared memory (a cudaFuncSetAttribute) once per device:
// bit d of `done` (a function-local static per kernel, zero-initialised) records device d, so
// later launches make no driver call (cheap to enqueue and to capture in a graph). Sizes up to
// the default 48 KiB need no opt-in. Devices from 64 on are set on every call (still correct).
template <typename Kernel>
void EnsureSmemLimit(Kernel* kernel, int bytes, std::atomic<uint64_t>& done) {
  if (bytes <= 48 * 1024) return;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if ((done.load(std::memory_order_acquire) & bit) != 0) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_acq_rel);
}

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
