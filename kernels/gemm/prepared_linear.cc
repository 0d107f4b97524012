#include "kernels/gemm/prepared_linear.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/formats/bf16.h"
#include "common/formats/weight_quant.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;

absl::Status CheckBytes(const char* tensor, std::span<const uint8_t> got, int64_t want,
                        const LinearWeightView& v) {
  if (static_cast<int64_t>(got.size()) == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "PreparedLinear: %s of a %s [%d, %d] weight must have %d bytes, got %d", tensor,
      WeightFormatName(v.format), v.out_features, v.in_features, want, got.size()));
}

absl::Status Validate(const LinearWeightView& v) {
  if (v.format != WeightFormat::kBf16 && v.format != WeightFormat::kFp8Block32 &&
      v.format != WeightFormat::kFp4Block32 && v.format != WeightFormat::kF32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PreparedLinear: invalid format %d", static_cast<int>(v.format)));
  }
  if (v.out_features <= 0 || v.in_features <= 0 || v.out_features > kMaxDim ||
      v.in_features > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PreparedLinear: out_features %d / in_features %d must be in [1, 2^31]",
                        v.out_features, v.in_features));
  }
  if (v.format == WeightFormat::kFp4Block32 && v.in_features % formats::kFp4WeightBlock != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PreparedLinear: FP4 in_features %d must be a multiple of 32", v.in_features));
  }
  RETURN_IF_ERROR(CheckBytes("weight", v.weight,
                             LinearWeightBytes(v.format, v.out_features, v.in_features), v));
  RETURN_IF_ERROR(
      CheckBytes("scale", v.scale, LinearScaleBytes(v.format, v.out_features, v.in_features), v));
  if (!v.bias.empty()) {
    RETURN_IF_ERROR(CheckBytes("bias", v.bias, 2 * v.out_features, v));
  }
  return absl::OkStatus();
}

std::vector<uint16_t> CopyBf16(std::span<const uint8_t> bytes) {
  std::vector<uint16_t> out(bytes.size() / 2);
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(uint16_t));  // little-endian host
  return out;
}

}  // namespace

const char* WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kBf16:
      return "Bf16";
    case WeightFormat::kFp8Block32:
      return "Fp8Block32";
    case WeightFormat::kFp4Block32:
      return "Fp4Block32";
    case WeightFormat::kF32:
      return "F32";
  }
  return "invalid";
}

int64_t LinearWeightBytes(WeightFormat format, int64_t out_features, int64_t in_features) {
  const int64_t n = out_features * in_features;
  switch (format) {
    case WeightFormat::kBf16:
      return 2 * n;
    case WeightFormat::kFp8Block32:
      return n;
    case WeightFormat::kFp4Block32:
      return n / 2;
    case WeightFormat::kF32:
      return 4 * n;
  }
  return 0;
}

int64_t LinearScaleBytes(WeightFormat format, int64_t out_features, int64_t in_features) {
  switch (format) {
    case WeightFormat::kFp8Block32:
      return formats::Fp8WeightScaleRows(out_features) * formats::Fp8WeightScaleCols(in_features);
    case WeightFormat::kFp4Block32:
      return out_features * formats::Fp4WeightScaleCols(in_features);
    default:
      return 0;
  }
}

absl::StatusOr<PreparedLinear> PreparedLinear::Create(const LinearWeightView& view,
                                                      const PrepareLinearOptions& options) {
  RETURN_IF_ERROR(Validate(view));
  PreparedLinear w;
  w.format_ = view.format;
  w.out_ = view.out_features;
  w.in_ = view.in_features;
  const auto numel = static_cast<size_t>(w.out_ * w.in_);
  const bool expand = options.expand_to_f32 || view.format == WeightFormat::kF32;
  switch (view.format) {
    case WeightFormat::kBf16:
      if (expand) {
        w.f32_.resize(numel);
        const std::vector<uint16_t> bits = CopyBf16(view.weight);
        for (size_t i = 0; i < numel; ++i) w.f32_[i] = formats::Bf16BitsToFloat(bits[i]);
      } else {
        w.bf16_ = CopyBf16(view.weight);
      }
      break;
    case WeightFormat::kF32:
      w.f32_.resize(numel);
      std::memcpy(w.f32_.data(), view.weight.data(), numel * sizeof(float));
      break;
    case WeightFormat::kFp8Block32:
    case WeightFormat::kFp4Block32:
      w.codes_.assign(view.weight.begin(), view.weight.end());
      w.scales_.assign(view.scale.begin(), view.scale.end());
      if (expand) {
        w.f32_.resize(numel);
        if (view.format == WeightFormat::kFp8Block32) {
          RETURN_IF_ERROR(formats::DequantizeFp8Weight(w.codes_, w.scales_, w.out_, w.in_, w.f32_));
        } else {
          RETURN_IF_ERROR(formats::DequantizeFp4Weight(w.codes_, w.scales_, w.out_, w.in_, w.f32_));
        }
      }
      break;
  }
  if (!view.bias.empty()) {
    const std::vector<uint16_t> bits = CopyBf16(view.bias);
    w.bias_.resize(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) w.bias_[i] = formats::Bf16BitsToFloat(bits[i]);
  }
  return w;
}

size_t PreparedLinear::resident_bytes() const {
  return f32_.size() * sizeof(float) + codes_.size() + bf16_.size() * sizeof(uint16_t) +
         scales_.size() + bias_.size() * sizeof(float);
}

}  // namespace flashserve::kernels
