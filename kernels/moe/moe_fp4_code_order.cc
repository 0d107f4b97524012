// Bulk host conversion of packed E2M1 codes between checkpoint and device order
// (moe_fp4_code_order.h): per byte position a 256-entry table of where its 8 bits go.
#include "kernels/moe/moe_fp4_code_order.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/base/check.h"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::kernels {
namespace {

using ByteTables = std::array<std::array<uint32_t, 256>, 4>;

template <bool kToDevice>
ByteTables MakeTables() {
  ByteTables t{};
  for (int pos = 0; pos < 4; ++pos) {
    for (uint32_t v = 0; v < 256; ++v) {
      const uint32_t w = v << (8 * pos);
      t[pos][v] = kToDevice ? MoeFp4ToDeviceOrder(w) : MoeFp4ToCheckpointOrder(w);
    }
  }
  return t;
}

template <bool kToDevice>
void Convert(uint8_t* codes, size_t bytes) {
  CHECK_EQ(bytes % 4, size_t{0}) << "FP4 code conversion: whole 32-bit words only";
  static const ByteTables tables = MakeTables<kToDevice>();
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    const uint32_t w = tables[0][codes[i]] | tables[1][codes[i + 1]] | tables[2][codes[i + 2]] |
                       tables[3][codes[i + 3]];
    for (int j = 0; j < 4; ++j) codes[i + j] = static_cast<uint8_t>(w >> (8 * j));
  }
}

}  // namespace

void MoeFp4CodesToDeviceOrder(uint8_t* codes, size_t bytes) { Convert<true>(codes, bytes); }
void MoeFp4CodesToCheckpointOrder(uint8_t* codes, size_t bytes) { Convert<false>(codes, bytes); }

}  // namespace flashserve::kernels
