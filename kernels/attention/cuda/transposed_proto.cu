// The transposed-products prototype's launcher (transposed_proto.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_transposed.cuh"
#include "kernels/attention/cuda/transposed_proto.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels::attention_internal {

absl::Status LaunchSparseAttnTransposedProto(const SparseAttnParams& p, CUstream_st* stream,
                                             bool ss) {
  if (p.tokens == 0) return absl::OkStatus();
  if (p.heads != 64) return absl::InvalidArgumentError("heads: the prototype takes 64");
  if (p.head_dim != 512) return absl::InvalidArgumentError("head_dim: the prototype takes 512");
  if (p.kv == nullptr || p.kv_rows.window != nullptr || p.kv_rows.compressed != nullptr) {
    return absl::InvalidArgumentError("kv: the prototype takes the bf16 pool only");
  }
  if (p.rope != nullptr) return absl::InvalidArgumentError("rope: not in the prototype");
  const auto aligned = [](const void* ptr) {
    return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
  };
  if (!aligned(p.q) || !aligned(p.kv) || !aligned(p.out) || p.q_stride % 8 != 0 ||
      p.q_head_stride % 8 != 0 || p.kv_stride % 8 != 0 || p.out_stride % 8 != 0 ||
      p.out_head_stride % 8 != 0) {
    return absl::InvalidArgumentError("q / kv / out: 16-byte alignment and strides of 8 needed");
  }
  if (p.indices == nullptr || p.attn_sink == nullptr || p.out == nullptr || p.width < 0) {
    return absl::InvalidArgumentError("indices / attn_sink / out / width");
  }
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
