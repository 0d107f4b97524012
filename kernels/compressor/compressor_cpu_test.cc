// CompressCpu against the fp32 recipe (bit-exact) and a double reference; the cast-before-norm
// order; a hand-checkable softmax over the pair per channel; FinalizeCompressedKvCpu.
#include <cmath>
#include <random>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/kv_row.h"
#include "gtest/gtest.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/compressor_test_util.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

using compressor_test::DoubleCompress;
using compressor_test::Layer;
using compressor_test::RandomBf16;
using compressor_test::RandomLayer;
using compressor_test::RecipeCompress;
using compressor_test::RunChunks;
using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

// |out − ref| ≤ 2 bf16 ulps of ref (the pooled / GEMM value may round to the neighbouring bf16
// before the norm, then the output rounds once) + 1e-6 absolute.
void ExpectNearDouble(const std::vector<uint16_t>& got, const std::vector<double>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = Bf16BitsToFloat(got[i]);
    ASSERT_LE(std::fabs(g - ref[i]), 2 * compressor_test::UlpBf16(ref[i]) + 1e-6)
        << "element " << i << " got " << g << " ref " << ref[i];
  }
}

struct Shape {
  int64_t ratio, c, d, n;
};

TEST(CompressorCpu, MatchesRecipeBitExactAndDoubleReference) {
  // Tiny model (C 128, D 256, 201 tokens), released (C 512, D 5120, few tokens), odd shapes.
  const Shape shapes[] = {{2, 128, 256, 201}, {1, 128, 256, 201}, {2, 512, 5120, 6},
                          {1, 512, 5120, 3},  {2, 48, 40, 9},     {4, 32, 64, 17}};
  ThreadPool pool(3);
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "ratio " << s.ratio << " C " << s.c << " D " << s.d);
    std::unique_ptr<Layer> l = RandomLayer(s.ratio, s.c, s.d, 7 + s.c);
    std::mt19937 rng(11);
    const std::vector<uint16_t> x = RandomBf16(s.n * s.d, -2.0f, 2.0f, rng);
    const auto rows = RunChunks(*l, x.data(), s.d, s.n, {s.n});
    EXPECT_EQ(rows.latent, RecipeCompress(*l, x.data(), s.d, s.n));
    ExpectNearDouble(rows.latent, DoubleCompress(*l, x.data(), s.d, s.n));
    ASSERT_EQ(static_cast<int64_t>(rows.index.size()), s.n / s.ratio);
    for (size_t j = 0; j < rows.index.size(); ++j) EXPECT_EQ(rows.index[j], int64_t(j));
    // The pool and the kBf16 storage of the fp32 weights change nothing.
    EXPECT_EQ(RunChunks(*l, x.data(), s.d, s.n, {s.n}, 0, nullptr, &pool).latent, rows.latent);
    if (s.ratio > 1) {
      std::unique_ptr<Layer> b = RandomLayer(s.ratio, s.c, s.d, 7 + s.c, /*f32=*/false);
      EXPECT_EQ(RunChunks(*b, x.data(), s.d, s.n, {s.n}).latent, rows.latent);
    }
  }
}

TEST(CompressorCpu, CastsToBf16BeforeTheNorm) {
  std::unique_ptr<Layer> l = RandomLayer(2, 128, 256, 3);
  std::mt19937 rng(5);
  const int64_t n = 200;
  const std::vector<uint16_t> x = RandomBf16(n * 256, -2.0f, 2.0f, rng);
  const auto rows = RunChunks(*l, x.data(), 256, n, {n});
  const auto cast_first = RecipeCompress(*l, x.data(), 256, n, true);
  const auto norm_first = RecipeCompress(*l, x.data(), 256, n, false);
  EXPECT_EQ(rows.latent, cast_first);
  int64_t differ = 0;
  for (size_t i = 0; i < norm_first.size(); ++i) differ += norm_first[i] != rows.latent[i];
  // Normalising the fp32 pool changes a sizeable share of the bf16 outputs: the order is visible.
  EXPECT_GT(differ, static_cast<int64_t>(norm_first.size() / 50)) << differ;
}

// C = D = 2, wkv = identity, wgate = swap: channel 0 is gated by x[1], channel 1 by x[0].
// Tokens (1, 0) and (3, 1):
//   channel 0: kv (1, 3), z (0, 1) -> w = (1, e) / (1 + e), pooled = (1 + 3e) / (1 + e)
//   channel 1: kv (0, 1), z (1, 3) -> w = (1, e^2) / (1 + e^2), pooled = e^2 / (1 + e^2)
// then bf16, then RMSNorm with weight (1, 2).
TEST(CompressorCpu, HandSoftmaxOverThePairPerChannel) {
  const uint16_t one = FloatToBf16Bits(1.0f), zero = 0;
  auto l = compressor_test::MakeLayer(2, 2, 2, {one, zero, zero, one}, {zero, one, one, zero},
                                      {one, FloatToBf16Bits(2.0f)});
  const std::vector<uint16_t> x = {one, zero, FloatToBf16Bits(3.0f), one};
  const auto rows = RunChunks(*l, x.data(), 2, 2, {2});
  ASSERT_EQ(rows.latent.size(), 2u);
  const double e = std::exp(1.0);
  const double p0 = formats::RoundToBf16(static_cast<float>((1 + 3 * e) / (1 + e)));  // 2.46
  const double p1 = formats::RoundToBf16(static_cast<float>(e * e / (1 + e * e)));     // 0.88
  EXPECT_EQ(p0, 2.46875);
  EXPECT_EQ(p1, 0.87890625);
  const double inv = 1.0 / std::sqrt((p0 * p0 + p1 * p1) / 2);
  EXPECT_EQ(Bf16BitsToFloat(rows.latent[0]), formats::RoundToBf16(float(p0 * inv)));  // 1.33
  EXPECT_EQ(Bf16BitsToFloat(rows.latent[1]), formats::RoundToBf16(float(2 * p1 * inv)));
  EXPECT_EQ(Bf16BitsToFloat(rows.latent[0]), 1.3359375f);
  EXPECT_EQ(Bf16BitsToFloat(rows.latent[1]), 0.94921875f);
}

TEST(CompressorCpu, Ratio1IsOneNormalisedRowPerToken) {
  const uint16_t one = FloatToBf16Bits(1.0f), zero = 0;
  // wkv = [[1, 1], [0, 1]]: token (3, 1) -> (4, 1) -> RMS sqrt(8.5).
  auto l = compressor_test::MakeLayer(1, 2, 2, {one, one, zero, one}, {}, {one, one});
  const std::vector<uint16_t> x = {FloatToBf16Bits(3.0f), one};
  const auto rows = RunChunks(*l, x.data(), 2, 1, {1}, /*start_pos=*/5);
  ASSERT_EQ(rows.index, std::vector<int64_t>({5}));
  EXPECT_EQ(Bf16BitsToFloat(rows.latent[0]), formats::RoundToBf16(float(4 / std::sqrt(8.5))));
  EXPECT_EQ(Bf16BitsToFloat(rows.latent[1]), formats::RoundToBf16(float(1 / std::sqrt(8.5))));
}

RopeTable TinyTable() {
  RopeSpec spec{32, 160000.0, 64, 4.0, 32.0, 1.0};  // the tiny model's compressed layers
  return RopeTable::Create(spec, 64).value();
}

TEST(CompressorCpu, FinalizeRotatesAtTheGroupsFirstPositionThenQdq) {
  const RopeTable table = TinyTable();
  const int64_t c = 128, rows = 40;
  std::mt19937 rng(9);
  const std::vector<uint16_t> lat = RandomBf16(rows * c, -3.0f, 3.0f, rng);
  std::vector<int64_t> j(rows);
  for (int64_t g = 0; g < rows; ++g) j[g] = 3 * g + 1;  // any group indices
  for (int64_t ratio : {1, 2}) {
    std::vector<uint16_t> kv(rows * c);
    std::vector<uint8_t> cache(rows * formats::MainKvRowBytes(c));
    ThreadPool pool(2);
    FinalizeCompressedKvParams p{&table, ratio, rows, c, j.data(), lat.data(), c, kv.data(), c,
                                 cache.data(), formats::MainKvRowBytes(c)};
    ASSERT_TRUE(FinalizeCompressedKvCpu(p, &pool).ok());
    for (int64_t g = 0; g < rows; ++g) {
      SCOPED_TRACE(::testing::Message() << "ratio " << ratio << " row " << g);
      auto expect_at = [&](int64_t pos) {
        std::vector<uint16_t> r(c);
        RopeParams rp{&table, 1, 1, c, &pos, lat.data() + g * c, c, c, r.data(), c, c, false};
        EXPECT_TRUE(RopeCpu(rp, nullptr).ok());
        EXPECT_TRUE(formats::QdqFp4E4m3B16(r, r).ok());
        return r;
      };
      const std::vector<uint16_t> got(kv.begin() + g * c, kv.begin() + (g + 1) * c);
      EXPECT_EQ(got, expect_at(j[g] * ratio));
      if (ratio == 2) {
        EXPECT_NE(got, expect_at(j[g]));  // the token position would be wrong
      }
      std::vector<uint16_t> dec(c);
      ASSERT_TRUE(formats::DecodeMainKvRow(
                      {cache.data() + g * formats::MainKvRowBytes(c),
                       static_cast<size_t>(formats::MainKvRowBytes(c))},
                      dec)
                      .ok());
      EXPECT_EQ(dec, got);
    }
  }
  // Group 0 sits at position 0 (no rotation): kv = QDQ(latent); in place, without cache rows.
  std::vector<uint16_t> row(lat.begin(), lat.begin() + c), want = row;
  ASSERT_TRUE(formats::QdqFp4E4m3B16(want, want).ok());
  const int64_t j0 = 0;
  FinalizeCompressedKvParams p{&table, 2, 1, c, &j0, row.data(), c, row.data(), c};
  ASSERT_TRUE(FinalizeCompressedKvCpu(p, nullptr).ok());
  EXPECT_EQ(row, want);
}

TEST(CompressorCpu, ValidationNamesTheField) {
  std::unique_ptr<Layer> l = RandomLayer(2, 16, 32, 1);
  CompressorState st = MakeCompressorState(2, 16).value();
  std::vector<uint16_t> x(4 * 32), lat(2 * 16);
  std::vector<int64_t> idx(2);
  std::vector<uint8_t> ws(CompressorWorkspaceBytes(l->weights, 4, nullptr));
  int64_t emitted = 0;
  CompressParams p{&l->weights, &st, 0, 4, x.data(), 32, lat.data(), 16, 2, idx.data(),
                   &emitted, ws.data(), ws.size()};
  EXPECT_TRUE(CompressCpu(p, nullptr).ok());
  EXPECT_EQ(emitted, 2);
  CompressParams q = p;
  q.start_pos = 4;  // state is now empty at 4: fine; odd start without a pending token is not
  EXPECT_TRUE(ValidateCompress(q, nullptr).ok());
  q.start_pos = 5;
  EXPECT_EQ(ValidateCompress(q, nullptr).code(), absl::StatusCode::kFailedPrecondition);
  q = p;
  q.start_pos = 4;
  q.latent_capacity = 1;
  EXPECT_NE(ValidateCompress(q, nullptr).message().find("latent_capacity"), std::string::npos);
  q.latent_capacity = 2;
  q.workspace_bytes = 8;
  EXPECT_NE(ValidateCompress(q, nullptr).message().find("workspace"), std::string::npos);
  CompressorState wrong = MakeCompressorState(1, 16).value();
  q = p;
  q.state = &wrong;
  EXPECT_NE(ValidateCompress(q, nullptr).message().find("state"), std::string::npos);
  CompressorWeights w = l->weights;
  w.wgate = nullptr;
  q = p;
  q.weights = &w;
  EXPECT_NE(ValidateCompress(q, nullptr).message().find("wgate"), std::string::npos);
  EXPECT_FALSE(MakeCompressorState(0, 16).ok());
  EXPECT_FALSE(MakeCompressorState(2, 0).ok());
}

}  // namespace
}  // namespace flashserve::kernels
