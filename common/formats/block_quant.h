// Block quantisers of DeepSeek-V4.1-Flash activations and KV caches, bit-exact with the reference
// (model spec §5 and §10 item 9; checked byte for byte against
// tests/conformance/data/v41-tiny/quant_vectors.safetensors).
//
//   format            block  codes               scales                  used for
//   Fp8Ue8m0B32        32    E4M3, 1 B/value     UE8M0, 1 B/32 values    GEMM activations, SWA KV,
//                                                                         DSpark KV, Engram table
//   Fp4E4m3B16         16    E2M1, 2 values/B    E4M3,  1 B/16 values    compressed (main) KV
//   Fp4Ue8m0B32        32    E2M1, 2 values/B    UE8M0, 1 B/32 values    index K and index Q
//
// Common API contract:
// - Inputs are bf16 values given as their uint16 bit patterns (see bf16.h); outputs of the
//   dequantisers are bf16 bit patterns too. Sizes are in elements of the span's type.
// - n = x.size() must be a multiple of the block size; the span is processed as n / block
//   consecutive blocks, so several rows can be passed at once when the row length is a multiple of
//   the block (all model dims are). Packed FP4 bytes hold element 2i in the low nibble of byte i.
// - Callers own every buffer; nothing is allocated. Size mismatches return InvalidArgumentError
//   and write nothing. All functions are thread-safe (no shared state) and cost O(n).
// - NaN inputs (never produced by the model) are ignored by the block amax; each NaN element
//   encodes as E4M3 NaN (FP8) or ±6 (FP4). Inf inputs make the block scale saturate.
#pragma once

#include <cstdint>
#include <limits>
#include <span>

#include "absl/status/status.h"

namespace flashserve::formats {

inline constexpr int64_t kFp8Ue8m0Block = 32;
inline constexpr int64_t kFp4E4m3Block = 16;
inline constexpr int64_t kFp4Ue8m0Block = 32;

// Block amax floors (applied as max(amax, floor) before the scale is derived).
inline constexpr float kFp8AmaxFloor = 1e-4f;
inline constexpr float kFp4E4m3AmaxFloor = 6.0f / 512.0f;                              // 6·2^-9
inline constexpr float kFp4Ue8m0AmaxFloor = 6.0f * std::numeric_limits<float>::min();  // 6·2^-126

// Per-block scale rules, from the block's amax (max |x| as a float):
// FP8: UE8M0 byte of the power of two >= max(amax, 1e-4) · fp32(1/448) (see Ue8m0CeilFromFloat).
uint8_t Fp8Ue8m0ScaleByte(float amax);
// FP4 main KV: E4M3 byte of max(amax, 6·2^-9) / 6 (true fp32 division, RNE, saturating at 448).
uint8_t Fp4E4m3ScaleByte(float amax);
// FP4 index: UE8M0 byte of the power of two >= max(amax, 6·2^-126) · fp32(1/6).
uint8_t Fp4Ue8m0ScaleByte(float amax);

// FP8 E4M3 with a UE8M0 scale per 32 values. codes: n bytes; scale_bytes: n/32 bytes.
// q = E4M3(clamp(x / scale, ±448)) with an fp32 division (exact, the scale is a power of two).
absl::Status QuantizeFp8Ue8m0B32(std::span<const uint16_t> x, std::span<uint8_t> codes,
                                 std::span<uint8_t> scale_bytes);
// Inverse: out[i] = bf16(E4M3(codes[i]) · scale) (n = out.size(); codes n, scale_bytes n/32).
absl::Status DequantizeFp8Ue8m0B32(std::span<const uint8_t> codes,
                                   std::span<const uint8_t> scale_bytes, std::span<uint16_t> out);

// FP4 E2M1 with an E4M3 scale per 16 values. packed: n/2 bytes; scale_bytes: n/16 bytes.
// q = E2M1(x / E4M3ToFloat(scale byte)) with an fp32 division, clamp ±6, RNE.
absl::Status QuantizeFp4E4m3B16(std::span<const uint16_t> x, std::span<uint8_t> packed,
                                std::span<uint8_t> scale_bytes);
// Inverse: out[i] = bf16(E2M1(code i) · scale) (n = out.size(); packed n/2, scale_bytes n/16).
absl::Status DequantizeFp4E4m3B16(std::span<const uint8_t> packed,
                                  std::span<const uint8_t> scale_bytes, std::span<uint16_t> out);

// FP4 E2M1 with a UE8M0 scale per 32 values. packed: n/2 bytes; scale_bytes: n/32 bytes.
// q = E2M1(x / scale) with an fp32 division, clamp ±6, RNE.
absl::Status QuantizeFp4Ue8m0B32(std::span<const uint16_t> x, std::span<uint8_t> packed,
                                 std::span<uint8_t> scale_bytes);
// Inverse: out[i] = bf16(E2M1(code i) · scale) (n = out.size(); packed n/2, scale_bytes n/32).
absl::Status DequantizeFp4Ue8m0B32(std::span<const uint8_t> packed,
                                   std::span<const uint8_t> scale_bytes, std::span<uint16_t> out);

// Quantise-dequantise ("QDQ", what the reference stores in its bf16 caches): out = Dequantize(
// Quantize(x)), block by block through stack buffers. out.size() must equal x.size(); out may be
// the very same memory as x (in place), but must not partially overlap it.
absl::Status QdqFp8Ue8m0B32(std::span<const uint16_t> x, std::span<uint16_t> out);
absl::Status QdqFp4E4m3B16(std::span<const uint16_t> x, std::span<uint16_t> out);
absl::Status QdqFp4Ue8m0B32(std::span<const uint16_t> x, std::span<uint16_t> out);

}  // namespace flashserve::formats
