// RoPE frequencies, the YaRN blend and cos/sin (see rope_table.h for the recipe). This file is
// compiled with -ffp-contract=off: every fp32 product and sum below is rounded on its own, as in
// the reference's one-torch-op-per-step evaluation.
#include "kernels/norm_rope/rope_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"

namespace flashserve::kernels {
namespace {

constexpr double kPi = 3.14159265358979323846;
// Cache bound: 2^28 floats (1 GiB) per cos/sin array.
constexpr int64_t kMaxCachedValues = int64_t{1} << 28;

absl::Status Invalid(const char* field, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("RopeSpec: %s %s", field, what));
}

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0.0; }

// fp32(x) * fp32(1 / fp32(d)): torch's CUDA division of a tensor by a Python scalar.
float DivideLikeTorchCuda(float x, double d) {
  const float inv = 1.0f / static_cast<float>(d);
  return x * inv;
}

// 1 / fp32(theta ^ (fp32(2k) / dim)): `1.0 / (base ** (arange(0, dim, 2) / dim))` in fp32. The
// power is the exact value rounded once to fp32 (evaluated in double, then rounded).
float InverseFrequency(double theta, int64_t k, int64_t dim) {
  const float exponent = DivideLikeTorchCuda(static_cast<float>(2 * k), static_cast<double>(dim));
  const float base = static_cast<float>(theta);
  const float power =
      static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  return 1.0f / power;
}

}  // namespace

absl::Status ValidateRopeSpec(const RopeSpec& spec) {
  if (spec.rope_dims < 2 || spec.rope_dims % 2 != 0 || spec.rope_dims > kMaxRopeDims) {
    return Invalid("rope_dims", "must be even and in [2, kMaxRopeDims]");
  }
  if (!std::isfinite(spec.theta) || spec.theta <= 1.0) return Invalid("theta", "must be > 1");
  if (spec.original_seq_len < 0) return Invalid("original_seq_len", "is negative");
  if (spec.original_seq_len > 0) {
    if (!PositiveFinite(spec.factor)) return Invalid("factor", "must be > 0");
    if (!PositiveFinite(spec.beta_fast)) return Invalid("beta_fast", "must be > 0");
    if (!PositiveFinite(spec.beta_slow)) return Invalid("beta_slow", "must be > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<YarnRange> ComputeYarnRange(const RopeSpec& spec) {
  RETURN_IF_ERROR(ValidateRopeSpec(spec));
  if (spec.original_seq_len == 0) return Invalid("original_seq_len", "is 0 (YaRN is off)");
  const double rd = static_cast<double>(spec.rope_dims);
  const double orig = static_cast<double>(spec.original_seq_len);
  // The pair whose wavelength completes `rotations` turns over the training context; same
  // operation order as the reference's Python (double precision).
  auto corrected_dim = [&](double rotations) {
    return rd * std::log(orig / (rotations * 2 * kPi)) / (2 * std::log(spec.theta));
  };
  YarnRange range;
  range.low = std::max(static_cast<int64_t>(std::floor(corrected_dim(spec.beta_fast))), int64_t{0});
  range.high =
      std::min(static_cast<int64_t>(std::ceil(corrected_dim(spec.beta_slow))), spec.rope_dims - 1);
  return range;
}

absl::Status ComputeRopeFrequencies(const RopeSpec& spec, absl::Span<float> freqs) {
  RETURN_IF_ERROR(ValidateRopeSpec(spec));
  const int64_t pairs = spec.rope_dims / 2;
  if (static_cast<int64_t>(freqs.size()) != pairs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ComputeRopeFrequencies: freqs has %d entries, rope_dims/2 is %d", freqs.size(), pairs));
  }
  for (int64_t k = 0; k < pairs; ++k) {
    freqs[k] = InverseFrequency(spec.theta, k, spec.rope_dims);
  }
  if (spec.original_seq_len == 0) return absl::OkStatus();

  ASSIGN_OR_RETURN(const YarnRange range, ComputeYarnRange(spec));
  // max(high - low, 1e-3): an int when the band is non-empty, else the float 1e-3.
  const double span =
      range.high - range.low >= 1 ? static_cast<double>(range.high - range.low) : 1e-3;
  for (int64_t k = 0; k < pairs; ++k) {
    const float shifted = static_cast<float>(k) - static_cast<float>(range.low);
    const float ramp = std::clamp(DivideLikeTorchCuda(shifted, span), 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    const float one_minus_smooth = 1.0f - smooth;  // not always == ramp in fp32
    const float scaled = DivideLikeTorchCuda(freqs[k], spec.factor) * one_minus_smooth;
    const float kept = freqs[k] * smooth;
    freqs[k] = scaled + kept;
  }
  return absl::OkStatus();
}

absl::Status ComputeVisionRopeFrequencies(int64_t head_dim, double theta, absl::Span<float> freqs) {
  if (head_dim < 4 || head_dim % 4 != 0 || head_dim > kMaxRopeDims) {
    return absl::InvalidArgumentError(
        "ComputeVisionRopeFrequencies: head_dim must be a multiple of 4 in [4, kMaxRopeDims]");
  }
  if (!std::isfinite(theta) || theta <= 1.0) {
    return absl::InvalidArgumentError("ComputeVisionRopeFrequencies: theta must be > 1");
  }
  const int64_t count = head_dim / 4;
  if (static_cast<int64_t>(freqs.size()) != count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ComputeVisionRopeFrequencies: freqs has %d entries, head_dim/4 is %d",
                        freqs.size(), count));
  }
  // vision.py: rope_dim = head_dim / 2 angles per patch, from head_dim / 4 frequencies.
  for (int64_t k = 0; k < count; ++k) freqs[k] = InverseFrequency(theta, k, head_dim / 2);
  return absl::OkStatus();
}

void RopeCosSin(absl::Span<const float> freqs, int64_t pos, float* cos, float* sin) {
  // int64 -> fp32 rounds to nearest, as torch's type promotion does (exact below 2^24).
  const float p = static_cast<float>(pos);
  for (size_t k = 0; k < freqs.size(); ++k) {
    const double angle = static_cast<double>(p * freqs[k]);
    cos[k] = static_cast<float>(std::cos(angle));
    sin[k] = static_cast<float>(std::sin(angle));
  }
}

absl::StatusOr<RopeTable> RopeTable::Create(const RopeSpec& spec, int64_t cached_positions) {
  RETURN_IF_ERROR(ValidateRopeSpec(spec));
  std::vector<float> freqs(static_cast<size_t>(spec.rope_dims / 2));
  RETURN_IF_ERROR(ComputeRopeFrequencies(spec, absl::MakeSpan(freqs)));
  return FromFrequencies(std::move(freqs), cached_positions);
}

absl::StatusOr<RopeTable> RopeTable::FromFrequencies(std::vector<float> freqs,
                                                     int64_t cached_positions) {
  const int64_t pairs = static_cast<int64_t>(freqs.size());
  if (pairs < 1 || pairs > kMaxRopeDims / 2) {
    return absl::InvalidArgumentError("RopeTable: need 1 .. kMaxRopeDims/2 frequencies");
  }
  for (float f : freqs) {
    if (!std::isfinite(f)) return absl::InvalidArgumentError("RopeTable: frequency not finite");
  }
  if (cached_positions < 0 || cached_positions > kMaxCachedValues / pairs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RopeTable: cached_positions %d outside [0, %d]", cached_positions,
                        kMaxCachedValues / pairs));
  }
  return RopeTable(std::move(freqs), cached_positions);
}

RopeTable::RopeTable(std::vector<float> freqs, int64_t cached_positions)
    : freqs_(std::move(freqs)), cached_positions_(cached_positions) {
  const size_t pairs = freqs_.size();
  cos_.resize(static_cast<size_t>(cached_positions_) * pairs);
  sin_.resize(cos_.size());
  for (int64_t pos = 0; pos < cached_positions_; ++pos) {
    RopeCosSin(freqs_, pos, cos_.data() + pos * pairs, sin_.data() + pos * pairs);
  }
}

void RopeTable::CosSin(int64_t pos, float* cos, float* sin) const {
  const size_t pairs = freqs_.size();
  if (pos < cached_positions_) {
    std::copy_n(cos_.data() + pos * pairs, pairs, cos);
    std::copy_n(sin_.data() + pos * pairs, pairs, sin);
    return;
  }
  RopeCosSin(freqs_, pos, cos, sin);
}

}  // namespace flashserve::kernels
