// Launchers of the GPU shared expert (moe_shared_cuda.h): the plan (moe_shared_params.cc, host-
// only) validates every launch first, then the GEMMs (kernels/gemm's LaunchLinearFp8) and the
// SwiGLU kernel are enqueued.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/cuda/moe_shared.cuh"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_shared_cuda.h"

namespace flashserve::kernels {
namespace {

void EnqueueSwiGlu(const MoeSharedSwiGluParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  const int64_t total = p.qdq ? p.m * (p.inter / 8) : p.m * p.inter;  // threads' items
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(
      (total + moe_device::kSharedSwiGluThreads - 1) / moe_device::kSharedSwiGluThreads,
      int64_t{1} << 20));
  if (p.qdq) {
    moe_device::MoeSharedSwiGluQdqKernel<<<blocks, moe_device::kSharedSwiGluThreads, 0, stream>>>(
        p);
  } else {
    moe_device::MoeSharedSwiGluKernel<<<blocks, moe_device::kSharedSwiGluThreads, 0, stream>>>(p);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

absl::Status LaunchMoeSharedSwiGlu(const MoeSharedSwiGluParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  EnqueueSwiGlu(p, stream);
  return absl::OkStatus();
}

absl::Status LaunchMoeSharedExpert(const MoeSharedExpertParams& p, CUstream_st* stream) {
  moe_cuda_internal::MoeSharedExpertPlan plan;
  RETURN_IF_ERROR(moe_cuda_internal::PlanMoeSharedExpert(p, &plan));
  if (p.m == 0) return absl::OkStatus();
  // Every launch was validated by the plan: an error here is a broken invariant.
  for (int i = 0; i < plan.n_up; ++i) CHECK_OK(LaunchLinearFp8(plan.up[i], stream));
  EnqueueSwiGlu(plan.swiglu, stream);
  CHECK_OK(LaunchLinearFp8(plan.down, stream));
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
