// Shape grid: the tiny fixture's Linears and some released-size ones, each run in exact mode
// (compared bit for bit with the scalar rule of gemm_test_util) and fast mode (compared with
// exact within the documented tolerance; codes-only storage bit-identical to expanded), with
// M = 1, 7, 201.
//
// Tolerance fast vs exact, per element: |fast - exact| <= ulp_bf16(max(|fast|, |exact|))
// (bf16 outputs only) + 2^-16 · Σ_k |x_k·w_k|. The first term allows the one bf16 rounding to
// fall on the other side; the second covers the fp32 summation-order difference (observed errors
// are ~2^-24 · sqrt(K) of that sum). In addition at least 90 % of bf16 outputs must be
// bit-identical, which a wrong activation quantisation or scale would break.
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/gemm/gemm_test_util.h"

namespace flashserve::kernels::gemm_test {
namespace {

struct Case {
  const char* name;
  WeightFormat format;
  int64_t n;
  int64_t k;
  bool bias = false;
  bool f32_in = false;   // x given as fp32 (fp32-weight Linears)
  bool f32_out = false;  // y as fp32
};

std::string Describe(const Case& c, int64_t m) {
  return absl::StrFormat("%s %s [%d x %d] m=%d%s%s%s", c.name, WeightFormatName(c.format), c.n, c.k,
                         m, c.bias ? " bias" : "", c.f32_in ? " x_f32" : "",
                         c.f32_out ? " y_f32" : "");
}

// Runs one case; compare_scalar: exact vs the scalar rule; compare_double: exact vs double.
void CheckCase(const Case& c, int64_t m, bool compare_scalar, bool compare_double,
               ThreadPool* pool) {
  SCOPED_TRACE(Describe(c, m));
  Rng rng(static_cast<uint64_t>(c.n * 1000003 + c.k * 101 + m));
  const HostLinear host = RandomLinear(c.format, c.n, c.k, c.bias, rng);
  const int64_t x_stride = c.k + (m % 2 == 1 ? 3 : 0);  // odd m: padded rows
  const std::vector<uint16_t> xb = RandomActivations(m, c.k, x_stride, rng);
  std::vector<float> xf;
  if (c.f32_in) {
    for (uint16_t b : xb) xf.push_back(formats::Bf16BitsToFloat(b));
  }
  auto prepared = PreparedLinear::Create(host.View());
  ASSERT_TRUE(prepared.ok()) << prepared.status();

  std::vector<float> exact, fast, fast_codes;
  RunOptions o{LinearMode::kExact, c.f32_out, c.n + (m == 7 ? 5 : 0), pool};
  ASSERT_TRUE(RunLinear(*prepared, xb, xf, m, x_stride, o, &exact).ok());
  o.mode = LinearMode::kFast;
  ASSERT_TRUE(RunLinear(*prepared, xb, xf, m, x_stride, o, &fast).ok());
  // Codes-only storage dequantises per tile into the workspace: the same sgemm on the same
  // values, so the same bits as the expanded weight.
  if (c.format != WeightFormat::kF32) {
    auto lean = PreparedLinear::Create(host.View(), {.expand_to_f32 = false});
    ASSERT_TRUE(lean.ok()) << lean.status();
    ASSERT_TRUE(RunLinear(*lean, xb, xf, m, x_stride, o, &fast_codes).ok());
    EXPECT_EQ(0, std::memcmp(fast.data(), fast_codes.data(), fast.size() * sizeof(float)));
  }

  if (compare_scalar) {
    const std::vector<float> scalar = ScalarLinear(host, xb, xf, m, x_stride);
    int64_t bad = 0;
    for (size_t i = 0; i < scalar.size(); ++i) {
      const float want = c.f32_out ? scalar[i] : formats::RoundToBf16(scalar[i]);
      if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(exact[i]) && ++bad <= 5) {
        ADD_FAILURE() << "exact != scalar at " << i << ": " << exact[i] << " vs " << want;
      }
    }
    EXPECT_EQ(bad, 0);
  }
  // The double reference costs as much as the GEMM: on big cases only every 8th row (+ the last).
  const int64_t row_step = m * c.n * c.k > 20'000'000 ? 8 : 1;
  const DoubleResult ref = DoubleLinear(host, xb, xf, m, x_stride, row_step);
  int64_t identical = 0, bad_fast = 0, bad_double = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    identical += std::bit_cast<uint32_t>(exact[i]) == std::bit_cast<uint32_t>(fast[i]);
    if (ref.abs_sum[i] < 0) continue;  // row not computed
    const double ulp = c.f32_out ? 0.0 : Bf16Ulp(std::max(std::fabs(exact[i]), std::fabs(fast[i])));
    const double tol = ulp + 0x1.0p-16 * ref.abs_sum[i];
    if (std::fabs(double{fast[i]} - exact[i]) > tol && ++bad_fast <= 5) {
      ADD_FAILURE() << "fast vs exact at " << i << ": " << fast[i] << " vs " << exact[i];
    }
    if (compare_double) {
      const double dtol = (c.f32_out ? 0.0 : Bf16Ulp(ref.y[i])) + 0x1.0p-16 * ref.abs_sum[i];
      if (std::fabs(exact[i] - ref.y[i]) > dtol && ++bad_double <= 5) {
        ADD_FAILURE() << "exact vs double at " << i << ": " << exact[i] << " vs " << ref.y[i];
      }
    }
  }
  EXPECT_EQ(bad_fast, 0);
  EXPECT_EQ(bad_double, 0);
  if (!c.f32_out) {
    EXPECT_GE(identical * 10, static_cast<int64_t>(exact.size()) * 9)
        << identical << " of " << exact.size() << " fast outputs equal exact";
  }
}

// Every Linear of the tiny fixture model (dim 256, q_lora 64, heads 4×128, o_lora 2×64, experts
// inter 128, index 4×64, engram 12 cols × 32, vision 64 wide): its format and shape.
const Case kTinyCases[] = {
    {"attn.wq_a", WeightFormat::kFp8Block32, 64, 256},
    {"attn.wq_b", WeightFormat::kFp8Block32, 512, 64},
    {"attn.wkv", WeightFormat::kFp8Block32, 128, 256},
    {"attn.wo_a group", WeightFormat::kBf16, 64, 256},
    {"attn.wo_b", WeightFormat::kFp8Block32, 256, 128},
    {"shared w1", WeightFormat::kFp8Block32, 128, 256},
    {"shared w2", WeightFormat::kFp8Block32, 256, 128},
    {"expert w1", WeightFormat::kFp4Block32, 128, 256},
    {"expert w2", WeightFormat::kFp4Block32, 256, 128},
    {"indexer.wq_b", WeightFormat::kFp8Block32, 256, 64},
    {"indexer.weights_proj", WeightFormat::kBf16, 4, 256},
    {"indexer.wk", WeightFormat::kBf16, 64, 128},
    {"compressor.wkv r2", WeightFormat::kF32, 128, 256, false, true, true},
    {"gate", WeightFormat::kF32, 8, 256, false, true, true},
    {"head", WeightFormat::kF32, 2048, 256, false, true, true},
    {"hc_attn_fn", WeightFormat::kF32, 24, 1024, false, true, true},
    {"engram.wkv", WeightFormat::kFp8Block32, 1280, 384},
    {"mtp.main_proj", WeightFormat::kFp8Block32, 256, 768},
    {"markov head", WeightFormat::kF32, 2048, 32, false, true, true},
    {"confidence", WeightFormat::kF32, 1, 288, false, true, true},
    {"patch_embed", WeightFormat::kBf16, 64, 588, true},
    {"vit wqkv", WeightFormat::kBf16, 192, 64, true},
    {"vit mlp.w1", WeightFormat::kBf16, 352, 64},
    {"aligner.w1", WeightFormat::kBf16, 256, 576, true},
    {"head as bf16 storage", WeightFormat::kBf16, 2048, 256, false, false, true},
};

TEST(LinearShapesTest, TinyModelLinearsExactMatchesScalarAndFastMatchesExact) {
  ThreadPool pool(1);
  for (const Case& c : kTinyCases) {
    for (int64_t m : {1, 7, 201}) CheckCase(c, m, true, m <= 7, &pool);
  }
}

// Partial 32-blocks at the edges: FP8 scale shape [ceil(N/32), ceil(K/32)].
TEST(LinearShapesTest, PartialEdgeBlocks) {
  const Case cases[] = {
      {"fp8 n33 k70", WeightFormat::kFp8Block32, 33, 70, true},
      {"fp8 n70 k33", WeightFormat::kFp8Block32, 70, 33},
      {"fp8 n1 k5", WeightFormat::kFp8Block32, 1, 5},
      {"fp8 n129 k31", WeightFormat::kFp8Block32, 129, 31},
      {"fp4 n45 k96", WeightFormat::kFp4Block32, 45, 96, true},
      {"bf16 n67 k45", WeightFormat::kBf16, 67, 45, true},
      {"f32 n3 k7", WeightFormat::kF32, 3, 7, false, true, true},
  };
  for (const Case& c : cases) {
    for (int64_t m : {1, 7, 201}) CheckCase(c, m, true, true, nullptr);
  }
}

// Released-model shapes, with the output rows limited where the full matrix is too large for a
// unit test: scalar comparison at M = 1 and 7, fast vs exact at M = 201 for wq_a.
TEST(LinearShapesTest, ReleasedSizes) {
  ThreadPool pool(1);
  const Case cases[] = {
      {"wq_a 5120->1280", WeightFormat::kFp8Block32, 1280, 5120},
      {"wq_b 1280->(2048 of 32768)", WeightFormat::kFp8Block32, 2048, 1280},
      {"wo_b 8192->(128 of 5120)", WeightFormat::kFp8Block32, 128, 8192},
      {"expert w1 5120->(256 of 2304)", WeightFormat::kFp4Block32, 256, 5120},
      {"head 5120->(512 of 129280)", WeightFormat::kF32, 512, 5120, false, true, true},
      {"hc_fn 20480->24", WeightFormat::kF32, 24, 20480, false, true, true},
  };
  for (const Case& c : cases) {
    for (int64_t m : {1, 7}) CheckCase(c, m, true, m == 1, &pool);
  }
  CheckCase(cases[0], 201, false, false, &pool);
}

}  // namespace
}  // namespace flashserve::kernels::gemm_test
