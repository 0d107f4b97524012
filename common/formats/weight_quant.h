// Checkpoint weight formats of DeepSeek-V4.1-Flash (model spec §5, "FP8 weights" / "FP4 expert
// weights"): dequantisers for loaders and CPU references, and quantisers for tests and tools.
//
// FP8 weight [out, in]:    codes E4M3, row-major [out, in] (1 byte each);
//                          scales UE8M0 [ceil(out/32), ceil(in/32)], one per 32×32 block (edge
//                          blocks are partial).
// FP4 expert weight [out, in] (in a multiple of 32):
//                          packed E2M1 [out, in/2] (element 2j in the low nibble of byte j);
//                          scales UE8M0 [out, in/32], one per 32 consecutive inputs of a row.
//
// Weight values come in and go out as bf16 bit patterns (uint16) or floats; matrices are row-major
// and dense. Callers own every buffer; nothing is allocated. A size mismatch returns
// InvalidArgumentError and writes nothing. Thread-safe, O(out·in).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace flashserve::formats {

inline constexpr int64_t kFp8WeightBlock = 32;
inline constexpr int64_t kFp4WeightBlock = 32;

// Scale tensor shapes: FP8 [Fp8WeightScaleRows(out), Fp8WeightScaleCols(in)], FP4 [out, in/32].
constexpr int64_t Fp8WeightScaleRows(int64_t out_features) {
  return (out_features + kFp8WeightBlock - 1) / kFp8WeightBlock;
}
constexpr int64_t Fp8WeightScaleCols(int64_t in_features) {
  return (in_features + kFp8WeightBlock - 1) / kFp8WeightBlock;
}
constexpr int64_t Fp4WeightScaleCols(int64_t in_features) { return in_features / kFp4WeightBlock; }

// dst[r, c] = E4M3(codes[r, c]) · UE8M0(scales[r/32, c/32]); exact in fp32 for normal results.
absl::Status DequantizeFp8Weight(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                                 int64_t out_features, int64_t in_features, std::span<float> dst);
// As above, each value rounded once to bf16 (bit patterns).
absl::Status DequantizeFp8WeightBf16(std::span<const uint8_t> codes,
                                     std::span<const uint8_t> scales, int64_t out_features,
                                     int64_t in_features, std::span<uint16_t> dst);
// Tool/test quantiser (not part of the reference inference path): per 32×32 block the scale is
// the activation rule, Fp8Ue8m0ScaleByte(block amax), and codes = E4M3(clamp(w / scale, ±448)).
absl::Status QuantizeFp8Weight(std::span<const uint16_t> w, int64_t out_features,
                               int64_t in_features, std::span<uint8_t> codes,
                               std::span<uint8_t> scales);

// dst[r, c] = E2M1(code of element (r, c)) · UE8M0(scales[r, c/32]).
absl::Status DequantizeFp4Weight(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                 int64_t out_features, int64_t in_features, std::span<float> dst);
// As above, each value rounded once to bf16 (bit patterns).
absl::Status DequantizeFp4WeightBf16(std::span<const uint8_t> packed,
                                     std::span<const uint8_t> scales, int64_t out_features,
                                     int64_t in_features, std::span<uint16_t> dst);
// Tool/test quantiser: each row is quantised like the index K/Q (QuantizeFp4Ue8m0B32 rule).
absl::Status QuantizeFp4Weight(std::span<const uint16_t> w, int64_t out_features,
                               int64_t in_features, std::span<uint8_t> packed,
                               std::span<uint8_t> scales);

}  // namespace flashserve::formats
