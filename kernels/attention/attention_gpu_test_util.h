// Helpers shared by the attention GPU tests (header only; the tests link the CUDA launcher).
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels::testing {

// A device copy of `host` (at least 16 bytes, so that an empty vector still gives a pointer).
template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  DeviceBuffer buf(std::max<size_t>(host.size() * sizeof(T), 16));
  if (!host.empty()) buf.CopyFromHost(host.data(), host.size() * sizeof(T));
  return buf;
}

// Sets the launcher's path override for its scope (kAuto afterwards).
class PathOverride {
 public:
  explicit PathOverride(attention_internal::SparseAttnCudaPath path) {
    attention_internal::SetSparseAttnCudaPathOverride(path);
  }
  ~PathOverride() {
    attention_internal::SetSparseAttnCudaPathOverride(
        attention_internal::SparseAttnCudaPath::kAuto);
  }
  PathOverride(const PathOverride&) = delete;
  PathOverride& operator=(const PathOverride&) = delete;
};

// Sets the launcher's decode-once override for its scope (kAuto afterwards).
class DecodeOnceOverride {
 public:
  explicit DecodeOnceOverride(attention_internal::SparseAttnDecodeOnce mode) {
    attention_internal::SetSparseAttnDecodeOnceOverride(mode);
  }
  ~DecodeOnceOverride() {
    attention_internal::SetSparseAttnDecodeOnceOverride(
        attention_internal::SparseAttnDecodeOnce::kAuto);
  }
  DecodeOnceOverride(const DecodeOnceOverride&) = delete;
  DecodeOnceOverride& operator=(const DecodeOnceOverride&) = delete;
};

// Sets the launcher's combine-form override for its scope (kAuto afterwards).
class CombineFormOverride {
 public:
  explicit CombineFormOverride(attention_internal::SparseAttnCombineForm form) {
    attention_internal::SetSparseAttnCombineFormOverride(form);
  }
  ~CombineFormOverride() {
    attention_internal::SetSparseAttnCombineFormOverride(
        attention_internal::SparseAttnCombineForm::kAuto);
  }
  CombineFormOverride(const CombineFormOverride&) = delete;
  CombineFormOverride& operator=(const CombineFormOverride&) = delete;
};

}  // namespace flashserve::kernels::testing
