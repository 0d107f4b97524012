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

absl::StatusOr<PreparedLinear> ConcatLinearRows(std::span<const PreparedLinear* const> parts,
                                                const PrepareLinearOptions& options) {
  if (parts.empty()) return absl::InvalidArgumentError("ConcatLinearRows: no parts");
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("ConcatLinearRows: part %d is null", i));
    }
  }
  const PreparedLinear& first = *parts.front();
  if (!first.quantizes_activations()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ConcatLinearRows: format %s; only Fp8Block32 and Fp4Block32 parts can be stacked",
        WeightFormatName(first.format())));
  }
  int64_t n = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PreparedLinear& p = *parts[i];
    if (p.format() != first.format() || p.in_features() != first.in_features()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ConcatLinearRows: part %d is %s [%d, %d], part 0 is %s [%d, %d]: the formats and "
          "in_features must match",
          i, WeightFormatName(p.format()), p.out_features(), p.in_features(),
          WeightFormatName(first.format()), first.out_features(), first.in_features()));
    }
    if (p.format() == WeightFormat::kFp8Block32 && i + 1 < parts.size() &&
        p.out_features() % 32 != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ConcatLinearRows: FP8 part %d has out_features %d, not a multiple of 32: its last "
          "32-row scale block would straddle the next part",
          i, p.out_features()));
    }
    if (p.has_bias() != first.has_bias()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ConcatLinearRows: part %d has %s bias and part 0 has %s: all parts or none", i,
          p.has_bias() ? "a" : "no", first.has_bias() ? "one" : "none"));
    }
    n += p.out_features();
  }
  if (n > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ConcatLinearRows: out_features total %d is above 2^31", n));
  }
  std::vector<uint8_t> codes, scales, bias;
  for (const PreparedLinear* p : parts) {
    codes.insert(codes.end(), p->codes(), p->codes() + p->codes_size());
    scales.insert(scales.end(), p->scales(), p->scales() + p->scales_size());
    for (int64_t r = 0; p->has_bias() && r < p->out_features(); ++r) {
      // The bias came from bf16, so its fp32 value converts back exactly.
      const uint16_t bits = formats::FloatToBf16Bits(p->bias()[r]);
      bias.push_back(static_cast<uint8_t>(bits & 0xFF));
      bias.push_back(static_cast<uint8_t>(bits >> 8));
    }
  }
  return PreparedLinear::Create({first.format(), n, first.in_features(), codes, scales, bias},
                                options);
}

size_t PreparedLinear::resident_bytes() const {
  return f32_.size() * sizeof(float) + codes_.size() + bf16_.size() * sizeof(uint16_t) +
         scales_.size() + bias_.size() * sizeof(float);
}

}  // namespace flashserve::kernels
