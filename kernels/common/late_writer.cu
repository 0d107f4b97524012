// LaunchLateCopy (late_writer.h).
#include "kernels/common/cuda_check.h"
#include "kernels/common/late_writer.h"
#include "kernels/common/pdl.cuh"

namespace flashserve::kernels {
namespace {

constexpr int kCtas = 4;
constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(kThreads)
    LateCopyKernel(uint4* dst, const uint4* src, size_t words, uint64_t delay_ns) {
  cuda_common::PdlLaunchDependents();
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < delay_ns) {
  }
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < words;
       i += size_t{kCtas} * kThreads) {
    dst[i] = src[i];
  }
}

__global__ void __launch_bounds__(kThreads)
    EarlyCopyKernel(uint4* dst, const uint4* src, size_t words) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < words;
       i += size_t{kCtas} * kThreads) {
    dst[i] = src[i];
  }
  cuda_common::PdlWaitPrerequisites();
}

}  // namespace

void LaunchPdlEarlyCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  CHECK(bytes % 16 == 0) << "LaunchPdlEarlyCopy: bytes " << bytes;
  cuda_common::LaunchPdl(EarlyCopyKernel, dim3(kCtas), dim3(kThreads), 0, stream,
                         static_cast<uint4*>(dst), static_cast<const uint4*>(src), bytes / 16);
}

void LaunchLateCopy(void* dst, const void* src, size_t bytes, uint64_t delay_ns,
                    cudaStream_t stream) {
  CHECK(bytes % 16 == 0) << "LaunchLateCopy: bytes " << bytes;
  LateCopyKernel<<<kCtas, kThreads, 0, stream>>>(
      static_cast<uint4*>(dst), static_cast<const uint4*>(src), bytes / 16, delay_ns);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace flashserve::kernels
