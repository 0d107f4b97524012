// Hand-checkable cases, params validation, weight storage options and thread-count invariance.
#include <bit>
#include <cmath>
#include <cstring>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "gtest/gtest.h"
#include "kernels/gemm/gemm_test_util.h"
#include "kernels/gemm/linear_internal.h"

namespace flashserve::kernels::gemm_test {
namespace {

using formats::FloatToBf16Bits;
constexpr uint8_t kE4m3One = 0x38;  // 1.0
constexpr uint8_t kUe8m0One = 127;  // 2^0

std::vector<uint16_t> Bf16Row(std::initializer_list<float> values, int64_t k) {
  std::vector<uint16_t> x(k, 0);
  int64_t i = 0;
  for (float v : values) x[i++] = FloatToBf16Bits(v);
  return x;
}

std::vector<float> RunOne(const HostLinear& h, const std::vector<uint16_t>& x, int64_t m,
                          LinearMode mode) {
  auto w = PreparedLinear::Create(h.View());
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<float> y;
  EXPECT_TRUE(RunLinear(*w, x, {}, m, h.k, RunOptions{mode}, &y).ok());
  return y;
}

// FP8 identity on the first 4 inputs, weight scale 2 for output 3. x = [1, 2, 3, 4] has amax 4,
// so the activation scale is 2^ceil(log2(4/448)) = 2^-6 and the codes 64, 128, 192, 256 are
// exact: y = [1, 2, 3, 8]. Then x[1] = 1.0625: 1.0625·64 = 68 is a tie between E4M3 64 and 72,
// RNE picks 64, so y[1] = 1 — the activation quantisation is visible.
TEST(LinearHandTest, Fp8IdentityShowsActivationQuantisation) {
  HostLinear h{WeightFormat::kFp8Block32, 4, 32, std::vector<uint8_t>(4 * 32, 0), {kUe8m0One}, {}};
  for (int r = 0; r < 4; ++r) h.weight[r * 32 + r] = kE4m3One;
  h.weight[3 * 32 + 3] = 0x40;  // 2.0
  for (LinearMode mode : {LinearMode::kExact, LinearMode::kFast}) {
    EXPECT_EQ(RunOne(h, Bf16Row({1, 2, 3, 4}, 32), 1, mode), (std::vector<float>{1, 2, 3, 8}));
    EXPECT_EQ(RunOne(h, Bf16Row({1, 1.0625f, 3, 4}, 32), 1, mode),
              (std::vector<float>{1, 1, 3, 8}));
  }
}

// All-ones FP8 weight [33, 40] with a different scale per 32×32 block: byte 127 + 2·rb + cb.
// x = ones (activation scale 2^-8, codes 256): y[n] = 32·s(rb, 0) + 8·s(rb, 1), i.e. 48 for rows
// 0..31 and 4·32 + 8·8 = 192 for row 32 (the partial edge block row uses scale row 1).
TEST(LinearHandTest, Fp8BlockScaleIndexingWithEdgeBlocks) {
  HostLinear h{WeightFormat::kFp8Block32, 33, 40, std::vector<uint8_t>(33 * 40, kE4m3One),
               {127, 128, 129, 130},      {}};
  std::vector<uint16_t> x(40, FloatToBf16Bits(1.0f));
  for (LinearMode mode : {LinearMode::kExact, LinearMode::kFast}) {
    const std::vector<float> y = RunOne(h, x, 1, mode);
    for (int n = 0; n < 32; ++n) EXPECT_EQ(y[n], 48.0f) << n;
    EXPECT_EQ(y[32], 192.0f);
  }
}

// FP4 nibble order: byte 0x21 holds code 1 (0.5) for element 0 in the low nibble and code 2
// (1.0) for element 1 in the high nibble; byte 0xA7 holds 6.0 then -1.0 (code 0xA).
TEST(LinearHandTest, Fp4NibbleOrderAndSign) {
  HostLinear h{WeightFormat::kFp4Block32, 2, 32, std::vector<uint8_t>(2 * 16, 0),
               {kUe8m0One, 128},          {}};
  h.weight[0] = 0x21;
  h.weight[16] = 0xA7;
  for (LinearMode mode : {LinearMode::kExact, LinearMode::kFast}) {
    EXPECT_EQ(RunOne(h, Bf16Row({1}, 32), 1, mode), (std::vector<float>{0.5f, 12.0f}));
    EXPECT_EQ(RunOne(h, Bf16Row({0, 1}, 32), 1, mode), (std::vector<float>{1.0f, -2.0f}));
    EXPECT_EQ(RunOne(h, Bf16Row({1, 1}, 32), 1, mode), (std::vector<float>{1.5f, 10.0f}));
  }
}

// Bias is added to the fp32 sum before the one rounding. With w = [1, 1] and x = [1, 2^-8] the
// fp32 sum is 1 + 2^-8 (exact); bias 2^-8 makes it 1 + 2^-7, a bf16 value. Rounding first
// (1 + 2^-8 ties to even, i.e. to 1) and adding the bias afterwards would give 1 instead.
TEST(LinearHandTest, BiasAddedBeforeTheSingleRounding) {
  HostLinear h{WeightFormat::kBf16, 1, 2, {}, {}, {}};
  for (float v : {1.0f, 1.0f}) {
    const uint16_t b = FloatToBf16Bits(v);
    h.weight.push_back(static_cast<uint8_t>(b & 0xFF));
    h.weight.push_back(static_cast<uint8_t>(b >> 8));
  }
  const uint16_t bias = FloatToBf16Bits(0x1.0p-8f);
  h.bias = {static_cast<uint8_t>(bias & 0xFF), static_cast<uint8_t>(bias >> 8)};
  std::vector<uint16_t> x = {FloatToBf16Bits(1.0f), FloatToBf16Bits(0x1.0p-8f)};
  for (LinearMode mode : {LinearMode::kExact, LinearMode::kFast}) {
    EXPECT_EQ(RunOne(h, x, 1, mode), (std::vector<float>{1.0f + 0x1.0p-7f}));
  }
}

// The branch-free E4M3 rounding of the activation quantiser equals the formats codec for every
// bf16 value in range (all inputs it gets are bf16 values times a power of two, i.e. bf16
// significands), and for a million random fp32 values.
TEST(ActivationQuantTest, RoundToE4m3MatchesFormatsCodec) {
  auto check = [](float v) {
    const float want = formats::E4m3ToFloat(formats::FloatToE4m3(v));
    const float got = gemm_internal::RoundToE4m3(v);
    if (std::isnan(want)) return std::isnan(got);
    return std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(got);
  };
  int64_t bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = formats::Bf16BitsToFloat(static_cast<uint16_t>(b));
    if (!(std::fabs(v) <= 448.0f) && !std::isnan(v)) continue;
    if (!check(v) && ++bad <= 5) ADD_FAILURE() << "bf16 0x" << std::hex << b;
  }
  Rng rng(4);
  for (int i = 0; i < 1'000'000; ++i) {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(rng.Next()));
    if (!(std::fabs(v) <= 448.0f)) continue;
    if (!check(v) && ++bad <= 5) ADD_FAILURE() << "fp32 " << v;
  }
  EXPECT_EQ(bad, 0);
}

TEST(LinearValidationTest, RejectsBadParams) {
  Rng rng(1);
  const HostLinear h = RandomLinear(WeightFormat::kFp8Block32, 8, 64, false, rng);
  auto w = PreparedLinear::Create(h.View());
  ASSERT_TRUE(w.ok());
  std::vector<uint16_t> x(2 * 64), y(2 * 8);
  std::vector<float> xf(2 * 64);
  std::vector<uint8_t> ws(LinearWorkspaceBytes(*w, 2, LinearMode::kFast, nullptr));
  const LinearParams good{&*w,     2, x.data(),          nullptr,   64,       y.data(),
                          nullptr, 8, LinearMode::kFast, ws.data(), ws.size()};
  EXPECT_TRUE(LinearCpu(good, nullptr).ok());
  auto expect_bad = [&](LinearParams p, const char* field) {
    const absl::Status s = LinearCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), absl::string_view::npos) << s;
  };
  LinearParams p = good;
  p.weight = nullptr;
  expect_bad(p, "weight");
  p = good, p.m = -1;
  expect_bad(p, "m ");
  p = good, p.x_f32 = xf.data();
  expect_bad(p, "x_bf16/x_f32");
  p = good, p.x_bf16 = nullptr, p.x_f32 = xf.data();
  expect_bad(p, "x_f32");  // FP8 weights quantise from bf16
  p = good, p.x_stride = 63;
  expect_bad(p, "x_stride");
  p = good, p.y_bf16 = nullptr;
  expect_bad(p, "y_bf16/y_f32");
  p = good, p.y_stride = 7;
  expect_bad(p, "y_stride");
  p = good, p.workspace_bytes = ws.size() - 1;
  expect_bad(p, "workspace");
  p = good, p.mode = static_cast<LinearMode>(7);
  expect_bad(p, "mode");
  p = good, p.m = 0, p.x_bf16 = nullptr, p.y_bf16 = nullptr, p.workspace = nullptr;
  EXPECT_TRUE(LinearCpu(p, nullptr).ok());  // m = 0 is a no-op
  // Exact mode needs more workspace than fast mode with an expanded weight.
  p = good, p.mode = LinearMode::kExact;
  expect_bad(p, "workspace");
}

TEST(PreparedLinearTest, RejectsBadTensorsAndReportsStorage) {
  Rng rng(2);
  HostLinear h = RandomLinear(WeightFormat::kFp8Block32, 33, 70, true, rng);
  auto ok = PreparedLinear::Create(h.View());
  ASSERT_TRUE(ok.ok());
  // codes 33·70 + scales 2·3 + fp32 33·70·4 + bias 33·4
  EXPECT_EQ(ok->resident_bytes(), 33u * 70 + 6 + 33 * 70 * 4 + 33 * 4);
  auto lean = PreparedLinear::Create(h.View(), {.expand_to_f32 = false});
  ASSERT_TRUE(lean.ok());
  EXPECT_FALSE(lean->expanded());
  EXPECT_EQ(lean->resident_bytes(), 33u * 70 + 6 + 33 * 4);

  auto bad = [](LinearWeightView v, const char* what) {
    auto s = PreparedLinear::Create(v);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.status().message().find(what), absl::string_view::npos) << s.status();
  };
  LinearWeightView v = h.View();
  v.scale = v.scale.subspan(1);
  bad(v, "scale");
  v = h.View(), v.weight = v.weight.subspan(1);
  bad(v, "weight");
  v = h.View(), v.bias = v.bias.subspan(2);
  bad(v, "bias");
  v = h.View(), v.out_features = 0;
  bad(v, "out_features");
  v = h.View(), v.format = static_cast<WeightFormat>(9);
  bad(v, "format");
  HostLinear f4 = RandomLinear(WeightFormat::kFp4Block32, 4, 64, false, rng);
  v = f4.View(), v.in_features = 48, v.weight = v.weight.first(4 * 24);
  bad(v, "multiple of 32");
}

// Unexpanded storage dequantises per tile; exact and fast results are independent of the thread
// count and of the storage choice (same sgemm tiles, same data).
TEST(LinearThreadingTest, ResultsIndependentOfThreadsAndStorage) {
  Rng rng(3);
  for (WeightFormat f :
       {WeightFormat::kFp8Block32, WeightFormat::kFp4Block32, WeightFormat::kBf16}) {
    const HostLinear h = RandomLinear(f, 300, 256, true, rng);
    const std::vector<uint16_t> x = RandomActivations(33, 256, 256, rng);
    auto full = PreparedLinear::Create(h.View());
    auto lean = PreparedLinear::Create(h.View(), {.expand_to_f32 = false});
    ASSERT_TRUE(full.ok() && lean.ok());
    ThreadPool pool(2);
    for (LinearMode mode : {LinearMode::kExact, LinearMode::kFast}) {
      std::vector<float> a, b, c;
      ASSERT_TRUE(RunLinear(*full, x, {}, 33, 256, RunOptions{mode}, &a).ok());
      ASSERT_TRUE(RunLinear(*full, x, {}, 33, 256, RunOptions{mode, false, 0, &pool}, &b).ok());
      ASSERT_TRUE(RunLinear(*lean, x, {}, 33, 256, RunOptions{mode, false, 0, &pool}, &c).ok());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << WeightFormatName(f);
      EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * 4)) << WeightFormatName(f);
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels::gemm_test
