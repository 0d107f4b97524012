// The SwiGLU gate-factor table (moe_swiglu_table.h) against first principles, for every bf16 g:
// table entries, closed forms outside it, the index, and the CPU body's SwiGLU.
#include "kernels/moe/moe_swiglu_table.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/base/casts.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_swiglu_table_ref.h"

namespace flashserve::kernels {
namespace {

uint32_t Bits(float f) { return absl::bit_cast<uint32_t>(f); }

float Bf16(uint32_t g) {
  const uint32_t b = g << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(MoeSwiGluTableTest, EveryEntryIsTheCorrectlyRoundedFactor) {
  // exp(-g) is more than 2^-52 (relative) from every fp32 rounding midpoint for every table g,
  // so a double exp within 1 ulp (2^-52 relative at most) of the true value — CUDA's, which the
  // kernels computed per value before the table — rounds to the same fp32: the table is what the
  // kernels computed. The closest are g = 2^-25 ... (exp(-g) = 1 - g + g^2/2 ...: the midpoint
  // below 1 plus 2^-51), 4 double ulps away.
  double min_margin = 1.0;
  int entries = 0;
  for (uint32_t g = 0; g < 0x10000u; ++g) {
    if (MoeSigCaseOf(g) != MoeSigCase::kTable) continue;
    const MoeSigReference ref = MoeSigFactorReference(g);
    ASSERT_EQ(kMoeSigTable[MoeSigTableIndex(g)], Bits(ref.s)) << "g bits " << std::hex << g;
    min_margin = std::fmin(min_margin, ref.exp_margin);
    ++entries;
  }
  EXPECT_EQ(entries, kMoeSigTableSize);
  EXPECT_GT(min_margin, std::ldexp(1.0, -52)) << "min margin " << min_margin;
}

TEST(MoeSwiGluTableTest, ClosedFormsHoldOutsideTheTable) {
  int half = 0, identity = 0, neg_zero = 0;
  for (uint32_t g = 0; g < 0x10000u; ++g) {
    const MoeSigCase c = MoeSigCaseOf(g);
    if (c == MoeSigCase::kTable || c == MoeSigCase::kFormula) continue;
    const float s = MoeSigFactorReference(g).s;
    const float gv = Bf16(g);
    if (c == MoeSigCase::kHalf) {
      ASSERT_EQ(Bits(s), Bits(gv * 0.5f)) << "g bits " << std::hex << g;
      ++half;
    } else if (c == MoeSigCase::kIdentity) {
      ASSERT_EQ(Bits(s), Bits(gv)) << "g bits " << std::hex << g;
      ++identity;
    } else {
      ASSERT_EQ(Bits(s), 0x80000000u) << "g bits " << std::hex << g;
      ++neg_zero;
    }
  }
  // Every bf16 below 2^-26 (zeros and subnormals included), every finite one from 2^7 on.
  EXPECT_EQ(half, 2 * 101 * 128);
  EXPECT_EQ(identity, (254 - 133) * 128);
  EXPECT_EQ(neg_zero, (254 - 133) * 128);
}

TEST(MoeSwiGluTableTest, IndexCoversTheTableOnce) {
  std::vector<int> hits(kMoeSigTableSize, 0);
  int formula = 0;
  for (uint32_t g = 0; g < 0x10000u; ++g) {
    const MoeSigCase c = MoeSigCaseOf(g);
    if (c == MoeSigCase::kFormula) ++formula;
    if (c != MoeSigCase::kTable) continue;
    const int i = MoeSigTableIndex(g);
    ASSERT_GE(i, 0);
    ASSERT_LT(i, kMoeSigTableSize);
    ++hits[i];
  }
  for (int i = 0; i < kMoeSigTableSize; ++i) ASSERT_EQ(hits[i], 1) << "entry " << i;
  EXPECT_EQ(formula, 2 * 128);  // ±inf and the NaNs keep the formula
}

TEST(MoeSwiGluTableTest, TheKernelsFactorIsTheFormulaForEveryFiniteBf16) {
  // MoeSigFactorOf is what SwiGluGateFactor runs for a finite bf16 g (cuda/moe_device.cuh).
  int checked = 0;
  for (uint32_t g = 0; g < 0x10000u; ++g) {
    if (((g >> 7) & 0xFFu) == 0xFFu) continue;  // inf / NaN: the kernels run the formula
    ASSERT_EQ(Bits(MoeSigFactorOf(g, Bf16(g), kMoeSigTable)), Bits(MoeSigFactorReference(g).s))
        << "g bits " << std::hex << g;
    ++checked;
  }
  EXPECT_EQ(checked, 0x10000 - 2 * 128);
}

TEST(MoeSwiGluTableTest, CpuSwiGluAgreesExceptWhereGlibcExpfIsNotCorrectlyRounded) {
  // MoeSwiGluRow (u = 1, no limit, no weight) computes bf16(s(g)) with glibc's expf; the CUDA
  // kernels' exp is correctly rounded (moe_cuda.h). The two may differ only where expf is not.
  std::vector<uint32_t> differ;
  for (uint32_t g = 0; g < 0x10000u; ++g) {
    if (MoeSigCaseOf(g) == MoeSigCase::kFormula) continue;
    const uint16_t gb = static_cast<uint16_t>(g), one = 0x3F80u;
    uint16_t cpu;
    MoeSwiGluRow(&gb, &one, 1, 0.f, nullptr, &cpu);
    const float s = MoeSigFactorReference(g).s;
    if (cpu != formats::FloatToBf16Bits(s)) {
      differ.push_back(g);
      const float gv = Bf16(g);
      EXPECT_NE(std::exp(-gv), static_cast<float>(std::exp(-static_cast<long double>(gv))))
          << "g bits " << std::hex << g << ": differs though expf is correctly rounded there";
    }
  }
  EXPECT_LE(differ.size(), 2u);
}

}  // namespace
}  // namespace flashserve::kernels
