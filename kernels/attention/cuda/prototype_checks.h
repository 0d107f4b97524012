// What the attention's A/B prototypes take (transposed_proto.h, ws_probe.h): the bf16 pool at
// head_dim 512, no RoPE, no row form, q / kv / out 16-byte aligned with strides that are
// multiples of 8 elements, and the params every launch needs. Host code; no CUDA header.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/attention/attention.h"

namespace flashserve::kernels::attention_internal {

// InvalidArgumentError naming the first field outside that set (`who`: the prototype's name, for
// the message), else OK. The heads each prototype takes are its own check.
inline absl::Status CheckBf16PoolPrototype(const SparseAttnParams& p, const char* who) {
  const auto error = [who](const char* what) {
    return absl::InvalidArgumentError(std::string(who) + ": " + what);
  };
  if (p.head_dim != 512) return error("head_dim: 512 only");
  if (p.kv == nullptr || p.kv_rows.window != nullptr || p.kv_rows.compressed != nullptr) {
    return error("kv: the bf16 pool only");
  }
  if (p.rope != nullptr) return error("rope: not taken");
  const auto aligned = [](const void* ptr) {
    return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
  };
  if (!aligned(p.q) || !aligned(p.kv) || !aligned(p.out) || p.q_stride % 8 != 0 ||
      p.q_head_stride % 8 != 0 || p.kv_stride % 8 != 0 || p.out_stride % 8 != 0 ||
      p.out_head_stride % 8 != 0) {
    return error("q / kv / out: 16-byte alignment and strides of 8 needed");
  }
  if (p.indices == nullptr || p.attn_sink == nullptr || p.out == nullptr || p.width < 0) {
    return error("indices / attn_sink / out / width");
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels::attention_internal
