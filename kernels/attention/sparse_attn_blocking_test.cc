// The list order and its 64-entry blocking decide the bits (spec §10 item 7): moving entries
// across a block boundary changes the exact output while the order-free double reference — and
// the kernel's distance to it — stays put.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention_test_util.h"

namespace flashserve::kernels {
namespace {

using testing::AttnCase;

void RunBoth(const AttnCase& c, std::vector<uint16_t>* out, std::vector<double>* ref) {
  ASSERT_TRUE(testing::RunKernel(c, nullptr, out).ok());
  EXPECT_EQ(testing::CountBitDiffs(*out, testing::ScalarReference(c)), 0);
  std::vector<double> mass;
  testing::DoubleReference(c, ref, &mass);
  double worst = 0.0;
  EXPECT_EQ(testing::CountOutsideTolerance(*out, *ref, mass, &worst), 0) << worst;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(SparseAttnBlocking, PermutingAcrossThe64BoundaryChangesBitsNotValues) {
  // 2 tokens × 4 heads × 128, 128 valid entries (two blocks). The logits have spread 3 so that the
  // block maxima differ clearly.
  AttnCase a = testing::RandomCase(2, 4, 128, 256, 128, 0.0, 51);
  for (auto& v : a.q) v = formats::FloatToBf16Bits(3.0f * formats::Bf16BitsToFloat(v));
  AttnCase b = a;
  // Swap list positions 0..31 with 64..95 in every row: the same set of entries, but half of
  // each block now sits in the other block.
  for (int64_t t = 0; t < b.tokens; ++t) {
    int32_t* row = b.indices.data() + t * b.width;
    for (int64_t e = 0; e < 32; ++e) std::swap(row[e], row[64 + e]);
  }
  std::vector<uint16_t> out_a, out_b;
  std::vector<double> ref_a, ref_b;
  RunBoth(a, &out_a, &ref_a);
  RunBoth(b, &out_b, &ref_b);
  EXPECT_LT(MaxAbsDiff(ref_a, ref_b), 1e-12) << "the double reference is order-free";
  const int64_t diffs = testing::CountBitDiffs(out_a, out_b);
  EXPECT_GT(diffs, 0) << "the exact recipe ignored the blocking";
  // Most elements keep their bits: the change is rounding-level.
  EXPECT_LT(diffs, static_cast<int64_t>(out_a.size()));
}

TEST(SparseAttnBlocking, LeadingMinusOnesShiftTheBlocking) {
  // A decode row while the ring fills has leading -1s; the same valid entries without them fall
  // into different blocks (70 valid entries: [64 | 6] vs [40 | 30] after 24 leading -1s).
  AttnCase a = testing::RandomCase(1, 8, 64, 100, 94, 0.0, 61);
  AttnCase b = a;
  for (int64_t e = 0; e < 94; ++e) {
    a.indices[e] = e < 70 ? static_cast<int32_t>(e) : -1;
    b.indices[e] = e < 24 ? -1 : static_cast<int32_t>(e - 24);
  }
  std::vector<uint16_t> out_a, out_b;
  std::vector<double> ref_a, ref_b;
  RunBoth(a, &out_a, &ref_a);
  RunBoth(b, &out_b, &ref_b);
  EXPECT_LT(MaxAbsDiff(ref_a, ref_b), 1e-12);
  EXPECT_GT(testing::CountBitDiffs(out_a, out_b), 0);
}

}  // namespace
}  // namespace flashserve::kernels
