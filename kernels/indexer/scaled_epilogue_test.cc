// The int8 scorer's scaled epilogue (README.md "Session 45", item 2), as arithmetic: for a key
// whose min_k lies within the row's [kLo, kHi], the scaled recipe — relu(bf16(S)), then
// bf16(w·2^min_q · that) rounded once, summed over the heads in fp32 from +0, times 2^min_k, then
// rounded to bf16 — gives the CPU recipe's bits (bf16(S·2^(min_q + min_k)), relu, bf16(fp32(w·qk)),
// the fp32 head sum, bf16). The bounds are computed here by the README's formulas (the kernel's
// PrepareQHeadQuad computes the same); rows, weights and keys are drawn so that min_k lands within
// a few binades of kLo and kHi, with weights from subnormal to 2^70, ±0 and negative, and S up to
// 2^24. The GPU test ScoresScaledEpilogueBounds checks the kernel itself.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

constexpr int kHeads = 32;
constexpr int kGridExp = -133, kTopExp = 97, kNever = 1 << 20;

// Exponents of the lowest and highest set bits of a nonzero finite bf16 magnitude.
void LsbTop(uint16_t bits, int& lsb, int& top) {
  const int field = (bits >> 7) & 0xFF;
  const int sig = field != 0 ? (0x80 | (bits & 0x7F)) : (bits & 0x7F);
  const int x = field != 0 ? field - 134 : -133;  // value = sig · 2^x
  lsb = x + __builtin_ctz(static_cast<unsigned>(sig));
  top = x + 31 - __builtin_clz(static_cast<unsigned>(sig));
}

// An exact double rounded once to bf16 (nearest even; subnormals; overflow to inf) — what
// fma.rn.bf16x2 does with the exact product.
float RoundDoubleToBf16(double x) {
  if (x == 0.0) return static_cast<float>(x);
  const double a = std::fabs(x);
  const int e = std::ilogb(a);                // 2^e <= a < 2^(e + 1)
  const int quantum = std::max(e, -126) - 7;  // 8 significant bits, bf16's subnormal step
  const double kept = std::nearbyint(std::ldexp(a, -quantum));  // to nearest, ties to even
  const double v = std::ldexp(kept, quantum);
  if (v >= std::ldexp(1.0, 128)) return std::copysign(INFINITY, static_cast<float>(x));
  return std::copysign(static_cast<float>(v), static_cast<float>(x));
}

struct Row {
  int min_q[kHeads];
  uint16_t w[kHeads];
  int klo = -kNever, khi = kNever;  // the row's bounds (max / min over the heads)
};

// README: klo = −133 − min(min_q, lsb(w) + min_q), khi = 97 − (top(w) + min_q); w = ±0 counts only
// q's side; a head whose own bounds fail is never scaled.
void Bounds(Row& r) {
  for (int h = 0; h < kHeads; ++h) {
    int low = r.min_q[h], top = -kNever;
    if ((r.w[h] & 0x7FFF) != 0) {
      int wl = 0, wt = 0;
      LsbTop(r.w[h] & 0x7FFF, wl, wt);
      low = std::min(low, wl + r.min_q[h]);
      top = wt + r.min_q[h];
    }
    int klo = kNever, khi = -kNever;
    if (low >= kGridExp && top <= kTopExp) {
      klo = kGridExp - low;
      khi = top == -kNever ? kNever : kTopExp - top;
    }
    r.klo = std::max(r.klo, klo);
    r.khi = std::min(r.khi, khi);
  }
}

// IndexerScoreCpu's operations on one key whose per-head dot products are S[h]·2^(min_q + min_k)
// (exact fp32 values on the int8 path).
uint16_t CpuScore(const Row& r, const int32_t (&s)[kHeads], int min_k) {
  float sum = 0.0f;
  for (int h = 0; h < kHeads; ++h) {
    const float dot = std::ldexp(static_cast<float>(s[h]), r.min_q[h] + min_k);
    const float qk = Bf16BitsToFloat(FloatToBf16Bits(dot));
    const float relu = qk > 0.0f ? qk : 0.0f;
    sum += Bf16BitsToFloat(FloatToBf16Bits(Bf16BitsToFloat(r.w[h]) * relu));
  }
  return FloatToBf16Bits(sum);
}

// The scaled epilogue's operations.
uint16_t ScaledScore(const Row& r, const int32_t (&s)[kHeads], int min_k) {
  float sum = 0.0f;
  for (int h = 0; h < kHeads; ++h) {
    const float q = Bf16BitsToFloat(FloatToBf16Bits(static_cast<float>(s[h])));
    const float relu = q > 0.0f ? q : 0.0f;
    const float wp =
        Bf16BitsToFloat(FloatToBf16Bits(std::ldexp(Bf16BitsToFloat(r.w[h]), r.min_q[h])));
    sum += RoundDoubleToBf16(static_cast<double>(wp) * static_cast<double>(relu));
  }
  return FloatToBf16Bits(sum * std::ldexp(1.0f, min_k));
}

TEST(IndexerScaledEpilogueTest, BoundsKeepEveryRounding) {
  std::mt19937 rng(45);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int64_t scaled = 0, keys = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Row r;
    const int cq = uniform(-49, 40), sq = std::array<int, 3>{0, 2, 10}[uniform(0, 2)];
    const int cw = uniform(-140, 70), sw = std::array<int, 3>{0, 3, 20}[uniform(0, 2)];
    for (int h = 0; h < kHeads; ++h) {
      r.min_q[h] = std::clamp(cq + uniform(-sq, sq), -49, 40);
      const int field = std::clamp(cw + 127 + uniform(-sw, sw), 0, 254);
      r.w[h] = static_cast<uint16_t>(field << 7 | uniform(0, 127) | (uniform(0, 1) << 15));
      if (uniform(0, 19) == 0) r.w[h] &= 0x8000;  // ±0
    }
    Bounds(r);
    for (int k = 0; k < 8; ++k, ++keys) {
      const bool near = r.klo <= r.khi && r.klo - 3 <= 60 && r.khi + 3 >= -100;
      const int min_k =
          near ? uniform(std::max(-100, r.klo - 3), std::min(60, r.khi + 3)) : uniform(-100, 60);
      int32_t s[kHeads];
      for (int32_t& v : s) {
        const int kind = uniform(0, 9);
        v = kind == 0 ? 0 : kind < 5 ? uniform(-300, 300) : uniform(-(1 << 24) + 1, (1 << 24) - 1);
      }
      if (min_k < r.klo || min_k > r.khi) continue;  // the kernel keeps the previous epilogue
      ++scaled;
      ASSERT_EQ(ScaledScore(r, s, min_k), CpuScore(r, s, min_k))
          << "trial " << trial << " key " << k << " min_k " << min_k << " bounds [" << r.klo << ", "
          << r.khi << "]";
    }
  }
  std::printf("  %lld of %lld keys within the bounds, all equal\n", static_cast<long long>(scaled),
              static_cast<long long>(keys));
  EXPECT_GT(scaled, keys / 4) << "the draw must land within the bounds often";
}

}  // namespace
}  // namespace flashserve::kernels
