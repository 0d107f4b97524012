// Serving-row layouts of the quantised caches (model spec §5 and §9; the cross-process layout is
// described once in docs/kv_layout.md). A row is one token's vector for one layer: the codes
// first, then the block scales, with no padding:
//
//   cache             format (block_quant.h)  bytes for C channels       C = 512 / 128
//   SWA window KV     Fp8Ue8m0B32             C + C/32    (E4M3 + E8M0)  528
//   main (global) KV  Fp4E4m3B16              C/2 + C/16  (E2M1 + E4M3)  288
//   index K           Fp4Ue8m0B32             C/2 + C/32  (E2M1 + E8M0)  68 (C = 128)
//
// The Engram table rows (E4M3 [256] + E8M0 [8] = 264 B) have the SWA row layout.
// Use these functions for every row size and offset; never hard-code 528/288/68.
// All functions are thread-safe, allocation-free and O(C); size mismatches (C not a multiple of
// the format's block, row span of the wrong size) return InvalidArgumentError.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "common/formats/block_quant.h"

namespace flashserve::formats {

// Byte size of a row and offset of its scale bytes, for `channels` channels (a multiple of the
// format's block size).
constexpr int64_t SwaKvRowBytes(int64_t channels) { return channels + channels / kFp8Ue8m0Block; }
constexpr int64_t SwaKvScaleOffset(int64_t channels) { return channels; }
constexpr int64_t MainKvRowBytes(int64_t channels) {
  return channels / 2 + channels / kFp4E4m3Block;
}
constexpr int64_t MainKvScaleOffset(int64_t channels) { return channels / 2; }
constexpr int64_t IndexKRowBytes(int64_t channels) {
  return channels / 2 + channels / kFp4Ue8m0Block;
}
constexpr int64_t IndexKScaleOffset(int64_t channels) { return channels / 2; }

static_assert(SwaKvRowBytes(512) == 528);
static_assert(MainKvRowBytes(512) == 288);
static_assert(IndexKRowBytes(128) == 68);
static_assert(SwaKvRowBytes(256) == 264);  // Engram table row

// Quantises one token's bf16 vector x (C = x.size() values) into `row`
// (row.size() == <Cache>RowBytes(C)).
absl::Status EncodeSwaKvRow(std::span<const uint16_t> x, std::span<uint8_t> row);
absl::Status EncodeMainKvRow(std::span<const uint16_t> x, std::span<uint8_t> row);
absl::Status EncodeIndexKRow(std::span<const uint16_t> x, std::span<uint8_t> row);

// Dequantises `row` into out (C = out.size() bf16 values; row.size() == <Cache>RowBytes(C)).
absl::Status DecodeSwaKvRow(std::span<const uint8_t> row, std::span<uint16_t> out);
absl::Status DecodeMainKvRow(std::span<const uint8_t> row, std::span<uint16_t> out);
absl::Status DecodeIndexKRow(std::span<const uint8_t> row, std::span<uint16_t> out);

}  // namespace flashserve::formats
