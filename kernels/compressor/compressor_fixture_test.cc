// The v41-tiny compressor weights (layer 2: ratio 2; layer 4: ratio 1) on a realistic input: the
// golden prefill's layer-2 block input, stream 0 (201 tokens × 256). The fixture has no compressor
// outputs, so this checks the recipe, the double reference, chunking and normalisation on real
// weights and activations.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/formats/bf16.h"
#include "common/formats/kv_row.h"
#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/compressor_test_util.h"

namespace flashserve::kernels {
namespace {

using compressor_test::Layer;
using compressor_test::Rows;
using compressor_test::RunChunks;
using formats::Bf16BitsToFloat;

constexpr int64_t kTokens = 201, kStreams = 4, kDim = 256, kC = 128;

std::vector<uint16_t> LoadBf16(const safetensors::SafetensorsFile& f, const std::string& name,
                               size_t elements) {
  auto v = f.Get(name);
  EXPECT_TRUE(v.ok()) << v.status();
  if (!v.ok() || v->dtype != safetensors::DType::kBF16 || v->nbytes != 2 * elements) {
    ADD_FAILURE() << name << ": missing, wrong dtype or size";
    return std::vector<uint16_t>(elements);
  }
  std::vector<uint16_t> out(elements);
  std::memcpy(out.data(), v->data, v->nbytes);
  return out;
}

class CompressorFixtureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* root = std::getenv("FS_SOURCE_DIR");
    const std::string dir =
        absl::StrCat(root != nullptr ? root : ".", "/tests/conformance/data/v41-tiny/");
    auto model = safetensors::SafetensorsFile::Open(dir + "model.safetensors");
    auto golden = safetensors::SafetensorsFile::Open(dir + "golden.safetensors");
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(golden.ok()) << golden.status();
    x_ = LoadBf16(**golden, "a.prefill.block_in.L2", kTokens * kStreams * kDim);
    const std::string l2 = "layers.2.attn.compressor.", l4 = "layers.4.attn.compressor.";
    ratio2_ = compressor_test::MakeLayer(
        2, kC, kDim, LoadBf16(**model, l2 + "wkv.weight", kC * kDim),
        LoadBf16(**model, l2 + "wgate.weight", kC * kDim),
        LoadBf16(**model, l2 + "norm.weight", kC));
    ratio1_ = compressor_test::MakeLayer(1, kC, kDim,
                                         LoadBf16(**model, l4 + "wkv.weight", kC * kDim), {},
                                         LoadBf16(**model, l4 + "norm.weight", kC));
  }
  static void TearDownTestSuite() {
    ratio2_.reset();
    ratio1_.reset();
  }

  // Stream 0 of each token: row t at x_ + t·4·256.
  static const uint16_t* X() { return x_.data(); }
  static constexpr int64_t kStride = kStreams * kDim;

  static void CheckLayer(const Layer& l) {
    const Rows one = RunChunks(l, X(), kStride, kTokens, {kTokens});
    const int64_t groups = kTokens / l.ratio;
    ASSERT_EQ(static_cast<int64_t>(one.index.size()), groups);
    EXPECT_EQ(one.latent, compressor_test::RecipeCompress(l, X(), kStride, kTokens));
    const std::vector<double> ref = compressor_test::DoubleCompress(l, X(), kStride, kTokens);
    for (int64_t g = 0; g < groups; ++g) {
      double ms = 0.0;
      for (int64_t c = 0; c < kC; ++c) {
        const double v = Bf16BitsToFloat(one.latent[g * kC + c]);
        ASSERT_TRUE(std::isfinite(v));
        const double r = ref[g * kC + c];
        ASSERT_LE(std::fabs(v - r), 2 * compressor_test::UlpBf16(r) + 1e-6)
            << "group " << g << " channel " << c;
        const double w = Bf16BitsToFloat(l.norm[c]);
        ms += (v / w) * (v / w);
      }
      // Undoing the norm weight leaves a unit-RMS row (bf16 rounding: well under 1 %).
      EXPECT_NEAR(ms / kC, 1.0, 0.01) << "group " << g;
    }
    for (const std::vector<int64_t>& split :
         {std::vector<int64_t>(kTokens, 1), std::vector<int64_t>{1, 2, 3, 64, 63, 68},
          std::vector<int64_t>{100, 101}, std::vector<int64_t>{7, 7, 7, 180}}) {
      const Rows chunked = RunChunks(l, X(), kStride, kTokens, split);
      EXPECT_EQ(chunked.latent, one.latent) << "chunks " << split.size();
      EXPECT_EQ(chunked.index, one.index);
    }
    // The cache tail on the real latents: finite, and the serving rows decode to it.
    RopeTable table = RopeTable::Create({32, 160000.0, 64, 4.0, 32.0, 1.0}, 0).value();
    std::vector<uint16_t> kv(one.latent.size());
    std::vector<uint8_t> rows(groups * formats::MainKvRowBytes(kC));
    FinalizeCompressedKvParams p{&table, l.ratio, groups, kC, one.index.data(), one.latent.data(),
                                 kC, kv.data(), kC, rows.data(), formats::MainKvRowBytes(kC)};
    ASSERT_TRUE(FinalizeCompressedKvCpu(p, nullptr).ok());
    std::vector<uint16_t> dec(kC);
    for (int64_t g = 0; g < groups; ++g) {
      ASSERT_TRUE(formats::DecodeMainKvRow(
                      {rows.data() + g * formats::MainKvRowBytes(kC),
                       static_cast<size_t>(formats::MainKvRowBytes(kC))},
                      dec)
                      .ok());
      ASSERT_TRUE(std::equal(dec.begin(), dec.end(), kv.begin() + g * kC)) << "group " << g;
      for (int64_t c = 0; c < kC; ++c) ASSERT_TRUE(std::isfinite(Bf16BitsToFloat(kv[g * kC + c])));
    }
  }

  static inline std::vector<uint16_t> x_;
  static inline std::unique_ptr<Layer> ratio2_, ratio1_;
};

TEST_F(CompressorFixtureTest, Layer2Ratio2OnGoldenStream) { CheckLayer(*ratio2_); }

TEST_F(CompressorFixtureTest, Layer4Ratio1OnGoldenStream) { CheckLayer(*ratio1_); }

}  // namespace
}  // namespace flashserve::kernels
