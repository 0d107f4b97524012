// The consumer-side decode probe's launcher (ws_probe.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/prototype_checks.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/attention/cuda/sparse_attn_wgmma_ws.cuh"
#include "kernels/attention/cuda/ws_probe.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"

namespace flashserve::kernels::attention_internal {

absl::Status LaunchSparseAttnWsProbe(const SparseAttnParams& p, CUstream_st* stream,
                                     int placement) {
  using W = attn_device::WgmmaShape;
  using PS = attn_device::WsProbeShape;
  if (placement < 1 || placement > 3) return absl::InvalidArgumentError("placement: 1, 2 or 3");
  if (p.tokens == 0) return absl::OkStatus();
  if (p.heads <= 0 || p.heads % W::kHeads != 0) {
    return absl::InvalidArgumentError("heads: the probe takes multiples of 64");
  }
  if (absl::Status st = CheckBf16PoolPrototype(p, "the probe"); !st.ok()) return st;
  const SparseAttnCudaCut cut = SparseAttnCudaCutFor(p.tokens, p.heads, p.width, W::kHeads);
  if (cut.splits != 1) {
    return absl::InvalidArgumentError(
        "tokens: the probe needs tokens * heads / 64 >= 128 (no split combine)");
  }
  attn_device::Geometry geo;
  geo.groups = cut.groups;
  geo.splits = 1;
  geo.blocks_per_split = cut.blocks_per_split;
  geo.units = p.tokens * geo.groups;
  using attn_device::WgmmaWsKernel;
  auto* kernel = placement == 1   ? WgmmaWsKernel<W::kD, false, false, 1>
                 : placement == 2 ? WgmmaWsKernel<W::kD, false, false, 2>
                                  : WgmmaWsKernel<W::kD, false, false, 3>;
  // Once per process (the attribute is per device; the probe's callers use device 0).
  static const bool raised = [] {
    for (auto* k : {WgmmaWsKernel<W::kD, false, false, 1>, WgmmaWsKernel<W::kD, false, false, 2>,
                    WgmmaWsKernel<W::kD, false, false, 3>}) {
      CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(PS::kSmemBytes)));
    }
    return true;
  }();
  (void)raised;
  const auto ctas = static_cast<unsigned>(std::min<int64_t>(geo.units, SmCount(CurrentDevice())));
  kernel<<<ctas, attn_device::WgmmaWsShape::kThreads, PS::kSmemBytes, stream>>>(p, geo);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels::attention_internal
