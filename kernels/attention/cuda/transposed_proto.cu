// The transposed-products prototype's launcher (transposed_proto.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/prototype_checks.h"
#include "kernels/attention/cuda/sparse_attn_transposed.cuh"
#include "kernels/attention/cuda/transposed_proto.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels::attention_internal {

absl::Status LaunchSparseAttnTransposedProto(const SparseAttnParams& p, CUstream_st* stream,
                                             bool ss) {
  if (p.tokens == 0) return absl::OkStatus();
  if (p.heads != 64) return absl::InvalidArgumentError("heads: the prototype takes 64");
  if (absl::Status st = CheckBf16PoolPrototype(p, "the prototype"); !st.ok()) return st;
  using TS = attn_device::TransposedShape;
  auto* kernel = ss ? attn_device::TransposedProtoKernel<512, true>
                    : attn_device::TransposedProtoKernel<512, false>;
  // Once per process (the attribute is per device; the prototype's callers use device 0).
  static const bool raised = [] {
    for (auto* k : {attn_device::TransposedProtoKernel<512, true>,
                    attn_device::TransposedProtoKernel<512, false>}) {
      CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(TS::kSmemBytes)));
    }
    return true;
  }();
  (void)raised;
  kernel<<<dim3(static_cast<unsigned>(p.tokens)), dim3(TS::kThreads), TS::kSmemBytes, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels::attention_internal
