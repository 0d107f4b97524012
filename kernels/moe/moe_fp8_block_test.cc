// MoeQuantizeBlock32Fast's plumbing (element order, signs, operand order of the QDQ values) with
// quant_math's software encoders standing in for the hardware conversions, against formats'
// quantiser and dequantiser; kernels/quant's exhaustive GPU tests hold the hardware conversions
// equal to those encoders.
#include "kernels/moe/moe_fp8_block.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "common/formats/block_quant.h"
#include "gtest/gtest.h"

namespace flashserve::kernels {
namespace {

namespace qm = quant::math;

struct SoftwareOps {
  static uint32_t E4m3x2(float hi, float lo) {
    return qm::F32ToE4m3(lo) | (qm::F32ToE4m3(hi) << 8);
  }
  static uint32_t Bf16x2(float hi, float lo) {
    return qm::F32ToBf16(lo) | (qm::F32ToBf16(hi) << 16);
  }
};

// One block through MoeQuantizeBlock32Fast and through formats; true when it took the fast path.
bool CheckBlock(const std::vector<uint16_t>& v) {
  uint32_t x[16];
  for (int i = 0; i < 16; ++i) x[i] = v[2 * i] | (static_cast<uint32_t>(v[2 * i + 1]) << 16);
  uint32_t sb = 0, codes[8], qdq[16];
  if (!MoeQuantizeBlock32Fast<SoftwareOps>(x, &sb, codes, qdq)) return false;
  std::vector<uint8_t> want_codes(32), want_sb(1);
  EXPECT_TRUE(formats::QuantizeFp8Ue8m0B32(v, want_codes, want_sb).ok());
  std::vector<uint16_t> want_qdq(32);
  EXPECT_TRUE(formats::DequantizeFp8Ue8m0B32(want_codes, want_sb, want_qdq).ok());
  EXPECT_EQ(sb, want_sb[0]);
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ((codes[e / 4] >> (8 * (e % 4))) & 0xFFu, want_codes[e]) << "element " << e;
    // Operand order: logical element 8t + j in the low half of qdq[4t + j], 8t + j + 4 high.
    const int t = e / 8, j = e % 4, half = (e % 8) / 4;
    EXPECT_EQ((qdq[4 * t + j] >> (16 * half)) & 0xFFFFu, want_qdq[e]) << "element " << e;
  }
  return true;
}

TEST(MoeFp8BlockTest, FastQuantiserIsFormatsQuantiser) {
  std::mt19937 rng(5);
  int fast = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::vector<uint16_t> v(32);
    const int kind = trial % 5;
    const int exp_center = static_cast<int>(rng() % 200) + 20;  // bf16 exponent field
    for (auto& b : v) {
      uint32_t e = static_cast<uint32_t>(std::max(0, exp_center + static_cast<int>(rng() % 9) - 4));
      if (kind == 1) e = rng() % 3;            // zeros and subnormals
      if (kind == 2) e = 254 - rng() % 2;      // up to the largest finite bf16
      if (kind == 3 && rng() % 4 == 0) e = 0;  // sparse
      b = static_cast<uint16_t>(((rng() & 1u) << 15) | (std::min(e, 254u) << 7) | (rng() & 0x7Fu));
      if (kind == 4 && rng() % 8 == 0) b = static_cast<uint16_t>(b & 0x8000u);  // ±0
    }
    fast += CheckBlock(v) ? 1 : 0;
  }
  EXPECT_EQ(fast, 4000);
}

TEST(MoeFp8BlockTest, ZeroAndTinyBlocksTakeTheScaleFloor) {
  // amax below 1e-4: the scale comes from the floor (formats' Fp8Ue8m0ScaleByte).
  EXPECT_TRUE(CheckBlock(std::vector<uint16_t>(32, 0u)));
  EXPECT_TRUE(CheckBlock(std::vector<uint16_t>(32, 0x8000u)));
  std::vector<uint16_t> tiny(32);
  for (int i = 0; i < 32; ++i) tiny[i] = static_cast<uint16_t>((i % 2 ? 0x8000u : 0u) | (i + 1));
  EXPECT_TRUE(CheckBlock(tiny));
}

// PTX prmt.b32 (default mode), what __byte_perm does on the device: byte k of the result is byte
// (selector nibble k & 7) of the 8-byte value b:a.
uint32_t BytePerm(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t ab = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) {
    r |= static_cast<uint32_t>((ab >> (8 * ((sel >> (4 * k)) & 7u))) & 0xFFu) << (8 * k);
  }
  return r;
}

TEST(MoeFp8BlockTest, DeviceFormsOfTheByteHelpersAgreeWithTheHostForms) {
  // The device branches of MoeBytePair / MoeSignBytes / MoeMaxU16x2 (__byte_perm with the same
  // selectors, __vmaxu2) against their host forms, on the bits the callers read.
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100000; ++trial) {
    const uint32_t a = rng(), b = rng();
    for (int j = 0; j < 4; ++j) {
      ASSERT_EQ(BytePerm(a, b, static_cast<uint32_t>(j | ((j + 4) << 4))) & 0xFFFFu,
                MoeBytePair(a, b, j, j + 4) & 0xFFFFu);
    }
    ASSERT_EQ(BytePerm(a, b, 0x7531u) & 0x80808080u, MoeSignBytes(a, b));
    const uint32_t lo = std::max(a & 0xFFFFu, b & 0xFFFFu), hi = std::max(a >> 16, b >> 16);
    ASSERT_EQ(MoeMaxU16x2(a, b), lo | (hi << 16));
  }
}

TEST(MoeFp8BlockTest, AnyNan8FindsEveryNanAndNoInf) {
  for (int pos = 0; pos < 8; ++pos) {
    for (uint32_t special : {0x7FC0u, 0xFF81u, 0x7F80u, 0xFF80u, 0x7F7Fu}) {
      uint32_t x[4] = {0x3F803F80u, 0xBF80BF80u, 0x00010001u, 0x40004000u};
      x[pos / 2] = (x[pos / 2] & ~(0xFFFFu << (16 * (pos % 2)))) | (special << (16 * (pos % 2)));
      const bool nan = (special & 0x7FFFu) > 0x7F80u;
      EXPECT_EQ(MoeAnyNan8(x), nan) << "position " << pos << " value " << std::hex << special;
    }
  }
}

TEST(MoeFp8BlockTest, InfOrNanTakesTheExactPath) {
  for (uint16_t special :
       {uint16_t{0x7F80u}, uint16_t{0xFF80u}, uint16_t{0x7FC0u}, uint16_t{0xFFC1u}}) {
    std::vector<uint16_t> v(32, 0x3F80u);
    v[17] = special;
    EXPECT_FALSE(CheckBlock(v)) << std::hex << special;
  }
}

}  // namespace
}  // namespace flashserve::kernels
