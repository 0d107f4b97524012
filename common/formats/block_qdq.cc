// Quantise-dequantise helpers declared in block_quant.h, kept apart from the quantisers themselves.
#include <array>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/formats/block_quant.h"

namespace flashserve::formats {
namespace {

using QuantizeFn = absl::Status (*)(std::span<const uint16_t>, std::span<uint8_t>,
                                    std::span<uint8_t>);
using DequantizeFn = absl::Status (*)(std::span<const uint8_t>, std::span<const uint8_t>,
                                      std::span<uint16_t>);

// Runs one block at a time through stack buffers, so in-place use (out == x) is safe: a block is
// fully read before any of it is written.
template <int64_t kBlock, int64_t kValuesPerCodeByte>
absl::Status Qdq(const char* name, QuantizeFn quantize, DequantizeFn dequantize,
                 std::span<const uint16_t> x, std::span<uint16_t> out) {
  if (x.size() != out.size() || x.size() % kBlock != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Qdq%s: input has %d values and output %d; both must be the same multiple of %d", name,
        x.size(), out.size(), kBlock));
  }
  const auto in_begin = reinterpret_cast<uintptr_t>(x.data());
  const auto out_begin = reinterpret_cast<uintptr_t>(out.data());
  const uintptr_t bytes = x.size() * sizeof(uint16_t);
  if (in_begin != out_begin && in_begin < out_begin + bytes && out_begin < in_begin + bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Qdq%s: input and output partially overlap", name));
  }
  std::array<uint8_t, kBlock / kValuesPerCodeByte> codes;
  std::array<uint8_t, 1> scale;
  for (size_t first = 0; first < x.size(); first += kBlock) {
    RETURN_IF_ERROR(quantize(x.subspan(first, kBlock), codes, scale));
    RETURN_IF_ERROR(dequantize(codes, scale, out.subspan(first, kBlock)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status QdqFp8Ue8m0B32(std::span<const uint16_t> x, std::span<uint16_t> out) {
  return Qdq<kFp8Ue8m0Block, 1>("Fp8Ue8m0B32", QuantizeFp8Ue8m0B32, DequantizeFp8Ue8m0B32, x, out);
}

absl::Status QdqFp4E4m3B16(std::span<const uint16_t> x, std::span<uint16_t> out) {
  return Qdq<kFp4E4m3Block, 2>("Fp4E4m3B16", QuantizeFp4E4m3B16, DequantizeFp4E4m3B16, x, out);
}

absl::Status QdqFp4Ue8m0B32(std::span<const uint16_t> x, std::span<uint16_t> out) {
  return Qdq<kFp4Ue8m0Block, 2>("Fp4Ue8m0B32", QuantizeFp4Ue8m0B32, DequantizeFp4Ue8m0B32, x, out);
}

}  // namespace flashserve::formats
