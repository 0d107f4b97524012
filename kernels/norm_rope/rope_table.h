// Rotary position embedding (RoPE) frequencies and cos/sin of DeepSeek-V4.1-Flash, model spec §4.3
// ("RoPE table per layer", YaRN) and §4.10 (the ViT's 2-D RoPE). Kernels know nothing of the model
// config: the model layer maps each layer's RopeKind to a RopeSpec (kPlain: theta = rope_theta,
// original_seq_len = 0; kYarn: theta = compress_rope_theta with the YaRN fields; kCompressedPlain:
// theta = compress_rope_theta, original_seq_len = 0).
//
// Numerics (README.md "RoPE numerics" has the derivation and what was checked against torch):
//   e_k      = fp32(2k) * fp32(1 / rd)                         k = 0 .. rd/2 - 1
//   inv_k    = 1 / fp32(theta ^ e_k)                           pow correctly rounded, fp32 division
//   YaRN (original_seq_len > 0), in double as the reference's Python does:
//     cd(b)  = rd * ln(original_seq_len / (b * 2 * pi)) / (2 * ln theta)
//     low    = max(floor(cd(beta_fast)), 0),  high = min(ceil(cd(beta_slow)), rd - 1)
//   then in fp32: ramp_k = clamp((k - low) * fp32(1 / max(high - low, 1e-3)), 0, 1);
//     smooth = 1 - ramp;  freq_k = (inv_k * fp32(1/factor)) * (1 - smooth) + inv_k * smooth
//   angle    = fp32(fp32(pos) * freq_k);  cos, sin = correctly rounded fp32 of the exact cos/sin.
// Division by a scalar is a multiply by its fp32 reciprocal, as in torch's CUDA kernels (the golden
// run's device); it equals true division for every power of two (rd, factor 4 and 16).
//
// Memory: a full table for the released context (1M positions x 32 pairs x 8 B = 256 MiB per
// theta) is too big to keep, so a RopeTable holds the frequencies and, optionally, cos/sin for a
// prefix [0, cached_positions) of positions; other positions are computed on demand (32 sin/cos
// per token, shared by all heads). Both paths give identical bits.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace flashserve::kernels {

// Largest rope_dims any function here accepts (keeps per-token scratch on the stack).
inline constexpr int64_t kMaxRopeDims = 1024;

// RoPE of one table kind. Plain values so that kernels do not depend on model/.
struct RopeSpec {
  int64_t rope_dims = 0;         // rd: rotated dims per head, even, 2 .. kMaxRopeDims
  double theta = 10000.0;        // base, > 1 (rope_theta or compress_rope_theta)
  int64_t original_seq_len = 0;  // YaRN's training context; 0 turns YaRN off (fields below unused)
  double factor = 1.0;           // rope_factor, > 0
  double beta_fast = 32.0;       // > 0
  double beta_slow = 1.0;        // > 0
};

// The YaRN blend band: pairs k <= low keep inv_k, pairs k >= high use inv_k / factor.
struct YarnRange {
  int64_t low = 0;
  int64_t high = 0;
};

// Checks a spec (InvalidArgumentError naming the field). Cost O(1).
absl::Status ValidateRopeSpec(const RopeSpec& spec);

// The clamped YaRN correction range of a spec with original_seq_len > 0 (tiny fixture: {0, 4};
// released model: {15, 25}). Errors: InvalidArgumentError for an invalid spec or YaRN off.
absl::StatusOr<YarnRange> ComputeYarnRange(const RopeSpec& spec);

// Writes the rd/2 per-pair frequencies (rad per position) of `spec` to `freqs` (size rd/2).
// Errors: InvalidArgumentError for an invalid spec or a wrong span size. Cost O(rd).
absl::Status ComputeRopeFrequencies(const RopeSpec& spec, absl::Span<float> freqs);

// The ViT's 2-D RoPE frequencies (§4.10): inv_k = 1 / fp32(theta ^ (fp32(2k) * fp32(1/(hd/2))))
// for k = 0 .. head_dim/4 - 1 (16 at head_dim 64). head_dim must be a positive multiple of 4 and at
// most kMaxRopeDims, theta > 1; `freqs` has head_dim/4 entries. Cost O(head_dim).
absl::Status ComputeVisionRopeFrequencies(int64_t head_dim, double theta, absl::Span<float> freqs);

// cos/sin of angle_k = fp32(fp32(pos) * freqs[k]) for every k (n = freqs.size()), written to
// cos[0..n) and sin[0..n). pos >= 0 (not checked). Pure function, thread-safe. Cost O(n) sin/cos.
void RopeCosSin(absl::Span<const float> freqs, int64_t pos, float* cos, float* sin);

// Frequencies of one spec plus cos/sin of the positions [0, cached_positions). Immutable after
// creation: all methods are const and thread-safe. Movable, not copyable (it may be large).
class RopeTable {
 public:
  // Memory: cached_positions * rd * 4 bytes (rd 64: 256 B per position, 16 MiB for 64K).
  // Errors: InvalidArgumentError for an invalid spec or cached_positions < 0. Cost: O(cached *
  // rd) sin/cos at creation.
  static absl::StatusOr<RopeTable> Create(const RopeSpec& spec, int64_t cached_positions);

  // Same, from frequencies computed elsewhere (e.g. by a device's own pow, to mirror it bit for
  // bit). freqs.size() = rd/2 >= 1, every value finite.
  static absl::StatusOr<RopeTable> FromFrequencies(std::vector<float> freqs,
                                                   int64_t cached_positions);

  RopeTable(RopeTable&&) = default;
  RopeTable& operator=(RopeTable&&) = default;
  RopeTable(const RopeTable&) = delete;
  RopeTable& operator=(const RopeTable&) = delete;

  int64_t rope_dims() const { return static_cast<int64_t>(freqs_.size()) * 2; }
  int64_t cached_positions() const { return cached_positions_; }
  absl::Span<const float> frequencies() const { return freqs_; }

  // cos/sin of all rd/2 pairs at `pos` (>= 0): from the cache when pos < cached_positions(),
  // computed (RopeCosSin) otherwise. cos and sin must hold rd/2 floats.
  void CosSin(int64_t pos, float* cos, float* sin) const;

 private:
  RopeTable(std::vector<float> freqs, int64_t cached_positions);

  std::vector<float> freqs_;
  int64_t cached_positions_ = 0;
  std::vector<float> cos_;  // [cached_positions, rd/2]
  std::vector<float> sin_;  // [cached_positions, rd/2]
};

}  // namespace flashserve::kernels
