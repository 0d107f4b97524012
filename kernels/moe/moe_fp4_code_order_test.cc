// The device order of the FP4 expert codes (moe_fp4_code_order.h): a bit permutation of every
// 32-bit word whose pairs the decoder's short forms bring exactly to the bf16 bits the checkpoint
// order's codes stand for. Host-only; the GPU side (the conversion kernel, every GEMM's decode of
// every code × scale byte) is in kernels_moe_gpu_test.
#include "kernels/moe/moe_fp4_code_order.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "common/formats/fp4_e2m1.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels {
namespace {

// What pair p must decode to, from a checkpoint word: element n's magnitude bits at bf16 bits
// 6..8, its sign at 15; element p in the low half, p + 4 in the high half.
uint32_t WantPairBits(uint32_t checkpoint_word, int p) {
  auto bits = [&](int n) {
    const uint32_t c = (checkpoint_word >> (4 * n)) & 0xFu;
    return ((c & 7u) << 6) | ((c >> 3) << 15);
  };
  return bits(p) | (bits(p + 4) << 16);
}

// The checkpoint-order decoder the GEMMs used before the device order (for cross-checking the
// reference above against the formula that ran on the GPU).
uint32_t CheckpointFormula(uint32_t w, int p) {
  const uint32_t v = p >= 2 ? w >> 8 : w;
  return p % 2 == 0 ? ((v & 0x000F000Fu) * 0x1040u) & 0x81C081C0u
                    : ((v & 0x00F000F0u) * 0x0104u) & 0x81C081C0u;
}

uint32_t PairBits(uint32_t device_word, int p) {
  switch (p) {
    case 0:
      return MoeFp4PairBits<0>(device_word);
    case 1:
      return MoeFp4PairBits<1>(device_word);
    case 2:
      return MoeFp4PairBits<2>(device_word);
    default:
      return MoeFp4PairBits<3>(device_word);
  }
}

// Checks every decoder form on one checkpoint word.
void ExpectDecodes(uint32_t w, int64_t* bad) {
  const uint32_t d = MoeFp4ToDeviceOrder(w);
  for (int p = 0; p < 4; ++p) {
    const uint32_t want = WantPairBits(w, p);
    const uint32_t got = PairBits(d, p);
    if ((got != want || CheckpointFormula(w, p) != want) && (*bad)++ < 5) {
      ADD_FAILURE() << std::hex << "word 0x" << w << " pair " << p << ": got 0x" << got
                    << " checkpoint formula 0x" << CheckpointFormula(w, p) << ", want 0x" << want;
    }
  }
}

TEST(MoeFp4CodeOrderTest, DeviceBitIsAPermutation) {
  uint32_t seen = 0;
  for (int b = 0; b < 32; ++b) {
    const int d = MoeFp4DeviceBit(b);
    ASSERT_GE(d, 0);
    ASSERT_LT(d, 32);
    seen |= 1u << d;
    EXPECT_EQ(MoeFp4ToDeviceOrder(1u << b), 1u << d) << "bit " << b;
    EXPECT_EQ(MoeFp4ToCheckpointOrder(1u << d), 1u << b) << "bit " << b;
  }
  EXPECT_EQ(seen, 0xFFFFFFFFu);
}

TEST(MoeFp4CodeOrderTest, EveryPairValueDecodesOnEveryBackground) {
  // Each pair's 8 checkpoint bits take all 256 values, over 256 random settings of the other 24
  // bits: a form that picked up a neighbour's bit or a carry would show.
  std::mt19937 rng(14);
  int64_t bad = 0;
  for (int p = 0; p < 4; ++p) {
    const uint32_t pair_mask = (0xFu << (4 * p)) | (0xFu << (4 * (p + 4)));
    for (int bg = 0; bg < 256; ++bg) {
      const uint32_t background = (bg == 0 ? 0u : bg == 1 ? ~0u : rng()) & ~pair_mask;
      for (uint32_t v = 0; v < 256; ++v) {
        const uint32_t w = background | ((v & 0xFu) << (4 * p)) | ((v >> 4) << (4 * (p + 4)));
        ExpectDecodes(w, &bad);
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(MoeFp4CodeOrderTest, RandomWordsDecodeAndRoundTrip) {
  std::mt19937 rng(7);
  int64_t bad = 0;
  for (int i = 0; i < (1 << 20); ++i) {
    const uint32_t w = rng();
    ExpectDecodes(w, &bad);
    ASSERT_EQ(MoeFp4ToCheckpointOrder(MoeFp4ToDeviceOrder(w)), w);
    ASSERT_EQ(MoeFp4ToDeviceOrder(MoeFp4ToCheckpointOrder(w)), w);
  }
  EXPECT_EQ(bad, 0);
}

TEST(MoeFp4CodeOrderTest, PairBitsTimesTwoTo126AreTheE2m1Values) {
  // The decoder's contract with the scale multiply: bf16 bits × 2^126 = the code's value.
  for (uint32_t c = 0; c < 16; ++c) {
    for (int p = 0; p < 4; ++p) {
      for (int half = 0; half < 2; ++half) {
        const uint32_t w = c << (4 * (p + 4 * half));
        const uint32_t bits = PairBits(MoeFp4ToDeviceOrder(w), p) >> (16 * half);
        float f;
        const uint32_t f32 = (bits & 0xFFFFu) << 16;
        std::memcpy(&f, &f32, 4);
        EXPECT_EQ(std::ldexp(f, 126), formats::E2m1ToFloat(static_cast<uint8_t>(c)))
            << "code " << c << " pair " << p << " half " << half;
        EXPECT_EQ(std::signbit(std::ldexp(f, 126)), c >= 8) << "code " << c;
      }
    }
  }
}

TEST(MoeFp4CodeOrderTest, ScaleMultiplierPairsHoldEachBlocksPowerOfTwo) {
  // Every byte the narrow decode takes (0..128) in every block position, the other blocks'
  // bytes random: block b's half is the bf16 2^(s_b - 1) (bits (s_b + 126) << 7) whatever its
  // neighbours hold, so PairBits (value · 2^-126) times it is the value · 2^(s_b - 127).
  std::mt19937 rng(11);
  for (uint32_t sb = 0; sb <= 128; ++sb) {
    for (int b = 0; b < 4; ++b) {
      for (int trial = 0; trial < 64; ++trial) {
        uint32_t s = 0;
        for (int o = 0; o < 4; ++o) s |= (o == b ? sb : rng() % 129u) << (8 * o);
        const uint32_t half = MoeFp4ScaleMultiplierOf(MoeFp4ScaleMultiplierPairs(s), b);
        ASSERT_EQ(half, (sb + 126u) << 7) << "byte " << sb << " block " << b;
        float f;
        const uint32_t f32 = half << 16;
        std::memcpy(&f, &f32, 4);
        ASSERT_EQ(f, std::ldexp(1.0f, static_cast<int>(sb) - 1)) << "byte " << sb;
      }
    }
  }
}

TEST(MoeFp4CodeOrderTest, BulkHostConversionIsTheWordFunction) {
  std::mt19937 rng(3);
  std::vector<uint8_t> bytes(4 * 4099);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> conv = bytes;
  MoeFp4CodesToDeviceOrder(conv.data(), conv.size());
  for (size_t i = 0; i < bytes.size(); i += 4) {
    uint32_t w, d;
    std::memcpy(&w, &bytes[i], 4);
    std::memcpy(&d, &conv[i], 4);
    ASSERT_EQ(d, MoeFp4ToDeviceOrder(w)) << "word " << i / 4;
  }
  MoeFp4CodesToCheckpointOrder(conv.data(), conv.size());
  EXPECT_EQ(conv, bytes);
  // A partial word would stay in checkpoint order among converted ones: refused.
  EXPECT_DEATH(MoeFp4CodesToDeviceOrder(conv.data(), 6), "whole 32-bit words");
}

TEST(MoeFp4CodeOrderTest, DeviceConversionValidation) {
  alignas(16) static uint8_t buf[64];
  EXPECT_TRUE(moe_cuda_internal::ValidateMoeFp4Conversion(buf, 64).ok());
  EXPECT_TRUE(moe_cuda_internal::ValidateMoeFp4Conversion(nullptr, 0).ok());  // nothing to do
  for (const auto& [codes, bytes, field] :
       {std::tuple<const uint8_t*, int64_t, const char*>{buf, 6, "bytes"},
        {buf, -4, "bytes"},
        {nullptr, 8, "codes is null"},
        {buf + 2, 8, "codes must be 4-byte aligned"}}) {
    const absl::Status s = moe_cuda_internal::ValidateMoeFp4Conversion(codes, bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace flashserve::kernels
