// The weight of one dense Linear of DeepSeek-V4.1-Flash, prepared once at load time for the CPU
// GEMM (kernels/gemm/gemm.h). Built from the checkpoint's raw bytes and shapes, so it does not
// depend on model/ code.
//
//   format        checkpoint tensors (model spec §5)                       activation quant
//   kBf16         weight BF16 [out, in]                                    none
//   kFp8Block32   weight F8_E4M3 [out, in] + scale F8_E8M0                 FP8 E4M3, UE8M0 per 32
//                 [ceil(out/32), ceil(in/32)] (32×32 blocks)
//   kFp4Block32   weight I8 [out, in/2] (packed E2M1, element 2j in the    FP8 E4M3, UE8M0 per 32
//                 low nibble of byte j) + scale F8_E8M0 [out, in/32]
//   kF32          weight F32 [out, in] (the reference's fp32 copies of     none
//                 bf16 weights: pass the bf16 weight upcast, or use kBf16
//                 storage and an fp32 output)
//
// What is kept (resident_bytes()):
// - kFp8Block32 / kFp4Block32: the codes (1 / 0.5 B per parameter) and the scales, always (the
//   exact mode reads them); plus, with expand_to_f32, the dequantised weight in fp32
//   (4 B per parameter; code × power-of-two scale is exact in fp32).
// - kBf16: the fp32 upcast (4 B/param) with expand_to_f32, else the bf16 bits (2 B/param).
// - kF32: the fp32 weight (4 B/param).
// - bias (optional, bf16 [out] in the checkpoint): fp32 [out].
// The released model would need ~4 B/param on CPU with expansion; it never runs on CPU, and the
// tiny model fits either way. Without expansion the fast path dequantises row tiles per call.
//
// Thread safety: immutable after Create; any number of threads may run Linears on it at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::kernels {

enum class WeightFormat : uint8_t {
  kBf16 = 0,
  kFp8Block32 = 1,
  kFp4Block32 = 2,
  kF32 = 3,
};

// Short name for messages ("Bf16", "Fp8Block32", "Fp4Block32", "F32", "invalid").
const char* WeightFormatName(WeightFormat format);

// True for the formats whose Linear quantises its input to FP8 per 32 along K at every call
// (model spec §10 item 3): FP8 and FP4 weights.
constexpr bool QuantizesActivations(WeightFormat format) {
  return format == WeightFormat::kFp8Block32 || format == WeightFormat::kFp4Block32;
}

// Expected byte sizes of the checkpoint tensors (0 for a format without scales, or an invalid
// enum value). FP4 requires in % 32 == 0; the value returned for other `in` is meaningless.
int64_t LinearWeightBytes(WeightFormat format, int64_t out_features, int64_t in_features);
int64_t LinearScaleBytes(WeightFormat format, int64_t out_features, int64_t in_features);

// Borrowed view of a Linear's checkpoint tensors; only read during PreparedLinear::Create.
struct LinearWeightView {
  WeightFormat format = WeightFormat::kBf16;
  int64_t out_features = 0;         // N, rows of the weight
  int64_t in_features = 0;          // K
  std::span<const uint8_t> weight;  // LinearWeightBytes(format, N, K) bytes, row-major
  std::span<const uint8_t> scale;   // LinearScaleBytes(format, N, K) bytes (empty if none)
  std::span<const uint8_t> bias;    // empty, or bf16 [N] (2·N bytes, little-endian bit patterns)
};

struct PrepareLinearOptions {
  // Keep the weight dequantised/upcast to fp32 (4 B per parameter) so the fast path is one
  // sgemm. When false the fast path dequantises 128-row tiles into the workspace at every call
  // (1 B/param for FP8, 0.5 B for FP4, 2 B for bf16 resident). Ignored for kF32.
  bool expand_to_f32 = true;
};

class PreparedLinear {
 public:
  // Copies what the CPU path needs out of `view` (the view may die afterwards).
  // Errors: InvalidArgumentError when a dim is <= 0 or > 2^31, the format is not a valid enum
  // value, FP4 `in` is not a multiple of 32, or a span has the wrong byte size (the message names
  // the tensor). Cost: O(out·in), one thread.
  static absl::StatusOr<PreparedLinear> Create(const LinearWeightView& view,
                                               const PrepareLinearOptions& options = {});

  // An empty (0 x 0) Linear, only to be assigned from Create(); LinearCpu rejects it.
  PreparedLinear() = default;
  PreparedLinear(PreparedLinear&&) = default;
  PreparedLinear& operator=(PreparedLinear&&) = default;
  PreparedLinear(const PreparedLinear&) = delete;
  PreparedLinear& operator=(const PreparedLinear&) = delete;

  WeightFormat format() const { return format_; }
  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  bool quantizes_activations() const { return QuantizesActivations(format_); }
  bool has_bias() const { return !bias_.empty(); }
  // True when the fp32 weight is resident (always for kF32).
  bool expanded() const { return !f32_.empty(); }
  // Heap bytes held by this object.
  size_t resident_bytes() const;

  // Read-only storage for the CPU bodies in kernels/gemm/cpu (other callers should not need it).
  const float* f32() const { return f32_.empty() ? nullptr : f32_.data(); }  // [N, K]
  const uint8_t* codes() const { return codes_.empty() ? nullptr : codes_.data(); }
  const uint16_t* bf16() const { return bf16_.empty() ? nullptr : bf16_.data(); }  // [N, K]
  const uint8_t* scales() const { return scales_.empty() ? nullptr : scales_.data(); }
  const float* bias() const { return bias_.empty() ? nullptr : bias_.data(); }  // [N]
  size_t codes_size() const { return codes_.size(); }
  size_t scales_size() const { return scales_.size(); }

 private:
  WeightFormat format_ = WeightFormat::kBf16;
  int64_t out_ = 0;
  int64_t in_ = 0;
  std::vector<float> f32_;       // dequantised / upcast weight, or empty
  std::vector<uint8_t> codes_;   // FP8: [N, K] E4M3; FP4: [N, K/2] packed E2M1
  std::vector<uint16_t> bf16_;   // kBf16 without expansion: [N, K] bit patterns
  std::vector<uint8_t> scales_;  // UE8M0 bytes, checkpoint layout
  std::vector<float> bias_;      // [N] or empty
};

// The Linear whose output is the parts' outputs side by side, in order: their weights stacked
// along N (row blocks of the checkpoint layout), e.g. wq_a | wkv, which read the same input, as one
// Linear: one pass over x and one tile schedule instead of two (kernels/gemm/fused_linears.md).
// Each output column depends only on its own weight row and the input, so the result's LinearCpu
// in exact mode equals the parts' outputs side by side bit for bit, and so does the GPU Linear
// wherever its plan sums each column in the same order (the bf16 wgmma kernels at prefill;
// `GemmGpuTest.ConcatenatedLinearIsThePartsSideBySide`).
// Errors: InvalidArgumentError when `parts` is empty, holds a null, or a part is not kFp8Block32
// / kFp4Block32 (the formats whose codes and scales are kept); when the parts' formats or
// in_features differ; when an FP8 part other than the last has out_features not a multiple of
// 32 (its last scale block would straddle two parts); when some but not all parts have a bias;
// or when the total out_features exceeds 2^31. Cost: O(N·K) copies, plus `options`' expansion.
absl::StatusOr<PreparedLinear> ConcatLinearRows(std::span<const PreparedLinear* const> parts,
                                                const PrepareLinearOptions& options = {});

}  // namespace flashserve::kernels
