// DeviceFp8Linear (gemm_cuda.h): one device allocation holding a kFp8Block32 Linear's codes,
// scales and bias in Fp8LinearDevice layout.
#include <cuda_runtime.h>

#include <utility>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/prepared_linear.h"

namespace flashserve::kernels {
namespace {

size_t AlignUp(size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

absl::StatusOr<DeviceFp8Linear> DeviceFp8Linear::Upload(const PreparedLinear& w,
                                                        bool keep_expanded) {
  if (w.format() != WeightFormat::kFp8Block32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DeviceFp8Linear: weight format is %s, must be Fp8Block32", WeightFormatName(w.format())));
  }
  const int64_t n = w.out_features(), k = w.in_features();
  if (k % 32 != 0 || k > kLinearCudaMaxK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("DeviceFp8Linear: in_features %d must be a multiple of 32, at most %d", k,
                        kLinearCudaMaxK));
  }
  const uint8_t* codes = w.codes();
  const size_t code_bytes = static_cast<size_t>(n * k);
  for (size_t i = 0; i < code_bytes; ++i) {
    if ((codes[i] & 0x7F) == 0x7F) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "DeviceFp8Linear: weight code at row %d, column %d is an E4M3 NaN (0x%02x)",
          static_cast<int64_t>(i) / k, static_cast<int64_t>(i) % k, codes[i]));
    }
  }
  const size_t scale_at = AlignUp(code_bytes);
  const size_t bias_at = AlignUp(scale_at + w.scales_size());
  const size_t expanded_at = AlignUp(bias_at + (w.has_bias() ? static_cast<size_t>(4 * n) : 0));
  const size_t total = keep_expanded ? expanded_at + 2 * code_bytes : expanded_at;
  DeviceFp8Linear d;
  CUDA_CHECK(cudaMalloc(&d.memory_, total));
  d.bytes_ = total;
  auto* base = static_cast<uint8_t*>(d.memory_);
  CUDA_CHECK(cudaMemcpy(base, codes, code_bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(base + scale_at, w.scales(), w.scales_size(), cudaMemcpyHostToDevice));
  if (w.has_bias()) {
    CUDA_CHECK(cudaMemcpy(base + bias_at, w.bias(), 4 * n, cudaMemcpyHostToDevice));
  }
  d.view_.n = n;
  d.view_.k = k;
  d.view_.codes = base;
  d.view_.scales = base + scale_at;
  d.view_.bias = w.has_bias() ? reinterpret_cast<const float*>(base + bias_at) : nullptr;
  if (absl::Status s = Validate(d.view_); !s.ok()) return s;  // d frees the memory
  if (keep_expanded) {
    auto* expanded = reinterpret_cast<uint16_t*>(base + expanded_at);
    RETURN_IF_ERROR(LaunchExpandFp8Linear(d.view_, expanded, nullptr));
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
    d.view_.expanded = expanded;
  }
  return d;
}

DeviceFp8Linear::~DeviceFp8Linear() { Release(); }

DeviceFp8Linear::DeviceFp8Linear(DeviceFp8Linear&& o) noexcept
    : memory_(std::exchange(o.memory_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      view_(std::exchange(o.view_, {})) {}

DeviceFp8Linear& DeviceFp8Linear::operator=(DeviceFp8Linear&& o) noexcept {
  if (this != &o) {
    Release();
    memory_ = std::exchange(o.memory_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    view_ = std::exchange(o.view_, {});
  }
  return *this;
}

void DeviceFp8Linear::Release() {
  if (memory_ != nullptr) cudaFree(memory_);
  memory_ = nullptr;
  bytes_ = 0;
  view_ = {};
}

}  // namespace flashserve::kernels
