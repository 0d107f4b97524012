// ConcatLinearRows: the stacked Linear's output is its parts' outputs side by side, bit for bit
// (exact mode), with biases, FP8 edge blocks in the last part, and FP4; and every bad stack is an
// InvalidArgumentError that names what is wrong.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm/gemm_test_util.h"

namespace flashserve::kernels::gemm_test {
namespace {

struct Stack {
  std::vector<HostLinear> host;
  std::vector<PreparedLinear> parts;
  std::vector<const PreparedLinear*> ptrs;
};

Stack MakeStack(WeightFormat f, std::initializer_list<int64_t> rows, int64_t k, bool bias,
                Rng& rng) {
  Stack s;
  for (int64_t n : rows) s.host.push_back(RandomLinear(f, n, k, bias, rng));
  for (const HostLinear& h : s.host) {
    auto p = PreparedLinear::Create(h.View());
    EXPECT_TRUE(p.ok()) << p.status();
    s.parts.push_back(std::move(p).value());
  }
  for (const PreparedLinear& p : s.parts) s.ptrs.push_back(&p);
  return s;
}

// Exact mode: each output column's bits depend only on its weight row and x, so the stacked
// Linear reproduces every part's columns at its offset.
TEST(ConcatLinearTest, OutputIsThePartsSideBySide) {
  Rng rng(41);
  struct Case {
    WeightFormat format;
    std::initializer_list<int64_t> rows;
    int64_t k;
    bool bias;
  };
  // FP8: parts but the last a multiple of 32 (the last may end in a partial scale block; K 70
  // has a partial K block too). FP4: any rows (per-row scales).
  const Case cases[] = {{WeightFormat::kFp8Block32, {64, 32, 17}, 70, false},
                        {WeightFormat::kFp8Block32, {96, 40}, 256, true},
                        {WeightFormat::kFp4Block32, {5, 33, 64}, 128, true},
                        {WeightFormat::kFp4Block32, {7}, 64, false}};
  for (const Case& c : cases) {
    Stack s = MakeStack(c.format, c.rows, c.k, c.bias, rng);
    for (bool expand : {true, false}) {
      auto cat = ConcatLinearRows(s.ptrs, {.expand_to_f32 = expand});
      ASSERT_TRUE(cat.ok()) << cat.status();
      int64_t n = 0;
      for (const PreparedLinear& p : s.parts) n += p.out_features();
      ASSERT_EQ(cat->out_features(), n);
      ASSERT_EQ(cat->in_features(), c.k);
      EXPECT_EQ(cat->has_bias(), c.bias);
      EXPECT_EQ(cat->expanded(), expand);
      const int64_t m = 9;
      const std::vector<uint16_t> x = RandomActivations(m, c.k, c.k, rng);
      std::vector<float> y;
      ASSERT_TRUE(RunLinear(*cat, x, {}, m, c.k, RunOptions{LinearMode::kExact}, &y).ok());
      int64_t col = 0;
      for (const PreparedLinear& p : s.parts) {
        std::vector<float> part;
        ASSERT_TRUE(RunLinear(p, x, {}, m, c.k, RunOptions{LinearMode::kExact}, &part).ok());
        const int64_t pn = p.out_features();
        for (int64_t r = 0; r < m; ++r) {
          EXPECT_EQ(0, std::memcmp(&y[r * n + col], &part[r * pn], pn * sizeof(float)))
              << WeightFormatName(c.format) << " row " << r << " part at column " << col;
        }
        col += pn;
      }
    }
  }
}

TEST(ConcatLinearTest, RejectsBadStacks) {
  Rng rng(42);
  auto bad = [](std::vector<const PreparedLinear*> parts, const char* what) {
    auto s = ConcatLinearRows(parts);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.status().message().find(what), absl::string_view::npos) << s.status();
  };
  bad({}, "no parts");
  Stack fp8 = MakeStack(WeightFormat::kFp8Block32, {48, 32}, 64, false, rng);
  bad({fp8.ptrs[0], nullptr}, "part 1 is null");
  bad(fp8.ptrs, "multiple of 32");  // 48 rows on top
  Stack fp8b = MakeStack(WeightFormat::kFp8Block32, {32, 32}, 96, true, rng);
  bad({fp8b.ptrs[0], fp8.ptrs[1]}, "in_features must match");
  Stack fp4 = MakeStack(WeightFormat::kFp4Block32, {32}, 64, false, rng);
  bad({fp8.ptrs[1], fp4.ptrs[0]}, "formats and in_features must match");
  Stack fp8c = MakeStack(WeightFormat::kFp8Block32, {32}, 96, false, rng);
  bad({fp8b.ptrs[0], fp8c.ptrs[0]}, "all parts or none");
  Stack bf16 = MakeStack(WeightFormat::kBf16, {8}, 64, false, rng);
  bad(bf16.ptrs, "only Fp8Block32 and Fp4Block32");
  // The valid stack still builds after the rejections.
  EXPECT_TRUE(ConcatLinearRows(fp8b.ptrs).ok());
}

}  // namespace
}  // namespace flashserve::kernels::gemm_test
