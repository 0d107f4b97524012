// The CUDA kernels' per-value arithmetic (cuda/quant_math.h), compiled for the host, against the
// common/formats reference: every bf16 input under every scale byte, every code, every amax.
// The GPU tests then check that the device build of the same source gives the same bytes.
#include "kernels/quant/cuda/quant_math.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "gtest/gtest.h"

namespace flashserve::kernels::quant::math {
namespace {

namespace f = ::flashserve::formats;

bool IsNanBf16(uint32_t b) { return (b & 0x7FFFu) > 0x7F80u; }

// Counts mismatches and keeps the first few descriptions.
class Mismatches {
 public:
  void Add(const std::string& what) {
    if (++count_ <= 5) first_ += what + "; ";
  }
  std::string Report() const {
    return count_ == 0 ? std::string() : absl::StrFormat("%d mismatches: %s", count_, first_);
  }

 private:
  int64_t count_ = 0;
  std::string first_;
};

// Floats with every sign/exponent/top-11-mantissa-bit pattern and the low 12 bits at the
// interesting rounding points (zero, one, just below/at/above half, all ones).
template <typename Fn>
void ForFloatSample(Fn fn) {
  constexpr uint32_t kLow[] = {0x000u, 0x001u, 0x7FFu, 0x800u, 0x801u, 0xFFFu};
  for (uint32_t high = 0; high < (1u << 20); ++high) {
    for (uint32_t low : kLow) fn(std::bit_cast<float>((high << 12) | low));
  }
}

TEST(QuantMathTest, ScalarEncodersMatchFormats) {
  Mismatches e4m3, e2m1, bf16;
  ForFloatSample([&](float x) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    if (F32ToE4m3(x) != f::FloatToE4m3(x)) e4m3.Add(absl::StrFormat("%08x", bits));
    const uint32_t e2 = ((bits >> 28) & 0x8u) | E2m1Magnitude(bits & 0x7FFFFFFFu);
    if (e2 != f::FloatToE2m1(x)) e2m1.Add(absl::StrFormat("%08x", bits));
    if (F32ToBf16(x) != f::FloatToBf16Bits(x)) bf16.Add(absl::StrFormat("%08x", bits));
  });
  EXPECT_EQ(e4m3.Report(), "");
  EXPECT_EQ(e2m1.Report(), "");
  EXPECT_EQ(bf16.Report(), "");
}

TEST(QuantMathTest, DecodersMatchFormats) {
  for (uint32_t c = 0; c < 256; ++c) {
    EXPECT_EQ(Bits(E4m3ToF32(c)), std::bit_cast<uint32_t>(f::E4m3ToFloat(static_cast<uint8_t>(c))))
        << c;
    EXPECT_EQ(Bits(Ue8m0ToF32(c)),
              std::bit_cast<uint32_t>(f::Ue8m0ToFloat(static_cast<uint8_t>(c))))
        << c;
    if (c < 255) {
      EXPECT_EQ(Bits(Ue8m0Reciprocal(c)),
                std::bit_cast<uint32_t>(1.0f / f::Ue8m0ToFloat(static_cast<uint8_t>(c))))
          << c;
    }
  }
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7Fu) == 0x7Fu) continue;  // NaN codes are not for the shift decoder
    EXPECT_EQ(Bits(E4m3ToF32ByShift(c)), Bits(E4m3ToF32(c))) << c;
  }
  for (uint32_t c = 0; c < 16; ++c) {
    EXPECT_EQ(Bits(E2m1ToF32(c)), std::bit_cast<uint32_t>(f::E2m1ToFloat(static_cast<uint8_t>(c))))
        << c;
    EXPECT_EQ(Bits(E2m1ToF32ByShift(c)), Bits(E2m1ToF32(c))) << c;
  }
}

TEST(QuantMathTest, ScaleRulesMatchFormatsForEveryAmax) {
  for (uint32_t a = 0; a <= 0x7F80u; ++a) {  // every non-NaN bf16 magnitude, Inf included
    const float amax = f::Bf16BitsToFloat(static_cast<uint16_t>(a));
    ASSERT_EQ(Fp8ScaleByte(a), f::Fp8Ue8m0ScaleByte(amax)) << a;
    ASSERT_EQ(Fp4E4m3ScaleByte(a), f::Fp4E4m3ScaleByte(amax)) << a;
    ASSERT_EQ(Fp4Ue8m0ScaleByte(a), f::Fp4Ue8m0ScaleByte(amax)) << a;
  }
}

TEST(QuantMathTest, Fp8CodeMatchesFormatsForEveryBf16AndScaleByte) {
  Mismatches bad;
  for (uint32_t b = 0; b < 256; ++b) {
    const float scale = f::Ue8m0ToFloat(static_cast<uint8_t>(b));
    for (uint32_t x = 0; x < 0x10000u; ++x) {
      const float v = f::Bf16BitsToFloat(static_cast<uint16_t>(x)) / scale;
      const uint8_t want = f::FloatToE4m3(std::clamp(v, -f::kE4m3Max, f::kE4m3Max));
      const uint32_t got =
          b == 255 ? EncodeNanScale(x, 0x7Fu, 0x80u) : EncodeFp8(x, Ue8m0Reciprocal(b));
      if (got != want) bad.Add(absl::StrFormat("x %04x byte %d: %02x vs %02x", x, b, got, want));
    }
  }
  EXPECT_EQ(bad.Report(), "");
}

TEST(QuantMathTest, F16RoundingMatchesTheCompiler) {
  Mismatches bad;
  ForFloatSample([&](float x) {
    const auto h = static_cast<_Float16>(x);
    uint16_t want = 0;
    std::memcpy(&want, &h, sizeof(want));
    const uint32_t got = F32ToF16Bits(x);
    const bool both_nan = (got & 0x7FFFu) > 0x7C00u && (want & 0x7FFFu) > 0x7C00u;
    if (got != want && !both_nan) bad.Add(absl::StrFormat("%08x", std::bit_cast<uint32_t>(x)));
  });
  EXPECT_EQ(bad.Report(), "");
}

// The kernels' FP4 encoder (E2M1 from the f16 bits of the quotient * 2^-14, no correction step)
// against a true division, for every bf16 x under every finite scale of both FP4 formats.
TEST(QuantMathTest, Fp4ViaF16MatchesFormatsForEveryBf16AndScaleByte) {
  Mismatches bad;
  for (uint32_t x = 0; x < 0x10000u; ++x) {  // the NaN UE8M0 scale (an Inf in the block)
    const uint8_t want = f::FloatToE2m1(f::Bf16BitsToFloat(static_cast<uint16_t>(x)) /
                                        f::Ue8m0ToFloat(f::kUe8m0NanByte));
    if (EncodeNanScale(x, 0x7u, 0x8u) != want) bad.Add(absl::StrFormat("x %04x nan scale", x));
  }
  for (uint32_t b = 0; b < 255; ++b) {
    const bool e4m3 = b >= 1 && b < 0x7F;  // positive finite E4M3 scales
    for (int kind = 0; kind < (e4m3 ? 2 : 1); ++kind) {
      const float s = kind == 0 ? f::Ue8m0ToFloat(static_cast<uint8_t>(b))
                                : f::E4m3ToFloat(static_cast<uint8_t>(b));
      const float r = kind == 0 ? Fp4Ue8m0Reciprocal14(b) : Fp4E4m3Reciprocal14(s);
      // r14 is RN(1 / s) scaled by 2^-14, exactly.
      const float r_plain = kind == 0 ? Ue8m0Reciprocal(b) : DivRn(1.0f, s);
      ASSERT_EQ(Bits(r), Bits(r_plain * 0x1p-14f)) << b << " kind " << kind;
      for (uint32_t x = 0; x < 0x10000u; ++x) {
        const uint8_t want = f::FloatToE2m1(f::Bf16BitsToFloat(static_cast<uint16_t>(x)) / s);
        const uint32_t got = EncodeFp4ViaF16(x, r);
        if (got != want) {
          bad.Add(absl::StrFormat("x %04x %s byte %d: %x vs %x", x, kind == 0 ? "ue8m0" : "e4m3", b,
                                  got, want));
        }
      }
    }
  }
  EXPECT_EQ(bad.Report(), "");
}

TEST(QuantMathTest, DequantMatchesFormatsForEveryCodeAndScaleByte) {
  Mismatches bad;
  for (uint32_t b = 0; b < 256; ++b) {
    const float ue8m0 = f::Ue8m0ToFloat(static_cast<uint8_t>(b));
    const float e4m3 = f::E4m3ToFloat(static_cast<uint8_t>(b));
    for (uint32_t c = 0; c < 256; ++c) {
      const float v = f::E4m3ToFloat(static_cast<uint8_t>(c));
      // NaN code times NaN scale: formats' result depends on the compiler's operand order.
      if (!(IsNanBf16(f::FloatToBf16Bits(v)) && b == 255)) {
        const uint32_t want = f::FloatToBf16Bits(v * ue8m0);
        const uint32_t got = DequantValue(E4m3ToF32(c), Ue8m0ToF32(b));
        if (got != want) bad.Add(absl::StrFormat("fp8 code %02x byte %d", c, b));
      }
      if (c < 16) {
        const float e = f::E2m1ToFloat(static_cast<uint8_t>(c));
        if (DequantValue(E2m1ToF32(c), E4m3ToF32(b)) != f::FloatToBf16Bits(e * e4m3)) {
          bad.Add(absl::StrFormat("fp4/e4m3 code %x byte %d", c, b));
        }
        if (DequantValue(E2m1ToF32(c), Ue8m0ToF32(b)) != f::FloatToBf16Bits(e * ue8m0)) {
          bad.Add(absl::StrFormat("fp4/ue8m0 code %x byte %d", c, b));
        }
      }
    }
  }
  EXPECT_EQ(bad.Report(), "");
}

TEST(QuantMathTest, AmaxSkipsNanAndIgnoresSign) {
  EXPECT_EQ(AmaxOfPair(0xBF80'3F00u, 0), 0x3F80u);    // -1.0 (high) beats 0.5
  EXPECT_EQ(AmaxOfPair(0x7FC0'FF81u, 0x10u), 0x10u);  // both NaN: unchanged
  EXPECT_EQ(AmaxOfPair(0xFF80'0001u, 0), 0x7F80u);    // -Inf counts
  EXPECT_EQ(AmaxOfPair(0x8000'0000u, 0), 0u);         // ±0
}

}  // namespace
}  // namespace flashserve::kernels::quant::math
