// CUDA error handling and RAII device memory for kernels, their tests and benches.
// Sticky CUDA errors are broken invariants (STYLE.md): CUDA_CHECK aborts the process.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "common/base/check.h"

#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    cudaError_t fs_cuda_err_ = (expr);                                                       \
    CHECK(fs_cuda_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(fs_cuda_err_); \
  } while (false)

namespace flashserve::kernels {

// True when at least one CUDA device is usable (false without a driver or a GPU; never aborts).
inline bool CudaDeviceAvailable() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the non-sticky error
    return false;
  }
  return n > 0;
}

// Owning device allocation of `bytes` bytes; freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes_));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  void CopyFromHost(const void* src, size_t n) {
    CHECK_LE(n, bytes_);
    CUDA_CHECK(cudaMemcpy(ptr_, src, n, cudaMemcpyHostToDevice));
  }
  void CopyToHost(void* dst, size_t n) const {
    CHECK_LE(n, bytes_);
    CUDA_CHECK(cudaMemcpy(dst, ptr_, n, cudaMemcpyDeviceToHost));
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A device copy of `host` (at least one byte, so an empty vector still gives a valid pointer).
template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  DeviceBuffer buf(std::max<size_t>(host.size(), 1) * sizeof(T));
  if (!host.empty()) buf.CopyFromHost(host.data(), host.size() * sizeof(T));
  return buf;
}

// The first n elements of `buf` on the host, after cudaDeviceSynchronize() (tests and benches).
template <typename T>
std::vector<T> ToHost(const DeviceBuffer& buf, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(n);
  if (n > 0) buf.CopyToHost(host.data(), n * sizeof(T));
  return host;
}

}  // namespace flashserve::kernels
