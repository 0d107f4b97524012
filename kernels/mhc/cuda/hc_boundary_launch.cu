// LaunchHcBoundary (hc_boundary.h): the fused kernel where HcBoundaryFuses, else the three
// launches whose bits it reproduces.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/mhc/cuda/hc_boundary_kernel.cuh"
#include "kernels/mhc/hc_boundary.h"

namespace flashserve::kernels {
namespace {

template <bool kPost>
void LaunchFused(const HcBoundaryParams& p, cudaStream_t stream) {
  const int64_t slots = (p.pre.dim / 8 + mhc_device::kNormThreads - 1) / mhc_device::kNormThreads;
  const dim3 grid(static_cast<unsigned>(p.pre.tokens));
  const dim3 block(mhc_device::kNormThreads);
  switch (slots) {
    case 1:
      mhc_device::HcBoundaryKernel<kPost, 1><<<grid, block, 0, stream>>>(p);
      break;
    case 2:
      mhc_device::HcBoundaryKernel<kPost, 2><<<grid, block, 0, stream>>>(p);
      break;
    case 3:
      mhc_device::HcBoundaryKernel<kPost, 3><<<grid, block, 0, stream>>>(p);
      break;
    default:
      mhc_device::HcBoundaryKernel<kPost, 4><<<grid, block, 0, stream>>>(p);
      break;
  }
  CUDA_CHECK(cudaGetLastError());
}

// A cluster of `n` CTAs per token (HcBoundaryClusterKernel).
template <bool kPost>
void LaunchCluster(const HcBoundaryParams& p, int64_t n, cudaStream_t stream) {
  const int64_t per = (p.pre.dim / 8 + n - 1) / n;
  const int64_t slots = (per + mhc_device::kHcClusterThreads - 1) / mhc_device::kHcClusterThreads;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(p.pre.tokens * n));
  config.blockDim = dim3(mhc_device::kHcClusterThreads);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(n);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  switch (slots) {
    case 1:
      CUDA_CHECK(cudaLaunchKernelEx(&config, mhc_device::HcBoundaryClusterKernel<kPost, 1>, p));
      break;
    case 2:
      CUDA_CHECK(cudaLaunchKernelEx(&config, mhc_device::HcBoundaryClusterKernel<kPost, 2>, p));
      break;
    case 3:
      CUDA_CHECK(cudaLaunchKernelEx(&config, mhc_device::HcBoundaryClusterKernel<kPost, 3>, p));
      break;
    default:
      CUDA_CHECK(cudaLaunchKernelEx(&config, mhc_device::HcBoundaryClusterKernel<kPost, 4>, p));
      break;
  }
}

}  // namespace

absl::Status LaunchHcBoundary(const HcBoundaryParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateHcBoundary(p));
  if (p.pre.tokens == 0) return absl::OkStatus();
  if (HcBoundaryFuses(p)) {
    if (const int64_t n = HcBoundaryClusterCtas(p); n > 1) {
      if (p.has_post) {
        LaunchCluster<true>(p, n, stream);
      } else {
        LaunchCluster<false>(p, n, stream);
      }
      return absl::OkStatus();
    }
    if (p.has_post) {
      LaunchFused<true>(p, stream);
    } else {
      LaunchFused<false>(p, stream);
    }
    return absl::OkStatus();
  }
  if (p.has_post) {
    RETURN_IF_ERROR(LaunchHcPost(p.post, stream));
  }
  RETURN_IF_ERROR(LaunchHcPre(p.pre, stream));
  return LaunchRmsNorm(p.norm, stream);
}

}  // namespace flashserve::kernels
