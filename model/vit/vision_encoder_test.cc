// The aligner (zero padding, unfold, w1 -> GELU -> w2) against a double-precision reference that
// builds the padded grid explicitly, over grids with and without padding; Create / Encode
// validation.
#include "model/vit/vision_encoder.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "model/vit/vit_test_util.h"

namespace flashserve::model::vit {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

std::unique_ptr<VisionEncoder> MakeEncoder(const ModelConfig& config,
                                           const VisionEncoderOptions& options,
                                           absl::Status* status = nullptr) {
  auto e = VisionEncoder::Create(config, *testing::TinyCheckpoint().weights().vision,
                                 *testing::TinyPrepared().vision, options, nullptr);
  if (status != nullptr) *status = e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// y = bf16(W x + b) with a double sum.
std::vector<double> LinearDouble(const kernels::PreparedLinear& w, const std::vector<double>& x) {
  std::vector<double> y(w.out_features());
  for (int64_t o = 0; o < w.out_features(); ++o) {
    double acc = w.bias()[o];
    for (int64_t i = 0; i < w.in_features(); ++i) acc += w.f32()[o * w.in_features() + i] * x[i];
    y[o] = formats::RoundToBf16(static_cast<float>(acc));
  }
  return y;
}

// The reference Aligner.forward written out: view as [C, n_h, n_w], F.pad with zeros to
// multiples of r, F.unfold (kernel r, stride r) -> [L, C·r·r], w1, exact GELU, w2.
std::vector<double> ReferenceAligner(const std::vector<uint16_t>& vit, int n_h, int n_w, int c,
                                     int r) {
  const PreparedVision& pv = *testing::TinyPrepared().vision;
  const int ph = (n_h + r - 1) / r * r, pw = (n_w + r - 1) / r * r;
  std::vector<double> padded(static_cast<size_t>(c) * ph * pw, 0.0);
  for (int y = 0; y < n_h; ++y) {
    for (int x = 0; x < n_w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        padded[(ch * ph + y) * pw + x] = Bf16BitsToFloat(vit[(y * n_w + x) * c + ch]);
      }
    }
  }
  std::vector<double> out;
  for (int by = 0; by < ph / r; ++by) {
    for (int bx = 0; bx < pw / r; ++bx) {
      std::vector<double> col;
      for (int ch = 0; ch < c; ++ch) {
        for (int kh = 0; kh < r; ++kh) {
          for (int kw = 0; kw < r; ++kw)
            col.push_back(padded[(ch * ph + by * r + kh) * pw + bx * r + kw]);
        }
      }
      std::vector<double> h = LinearDouble(pv.aligner_w1, col);
      for (double& v : h) {
        v = formats::RoundToBf16(
            static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))));
      }
      const std::vector<double> y = LinearDouble(pv.aligner_w2, h);
      out.insert(out.end(), y.begin(), y.end());
    }
  }
  return out;
}

TEST(VisionAlignerTest, PaddingAndUnfoldMatchDoubleReference) {
  const ModelConfig& config = testing::TinyCheckpoint().config();
  std::unique_ptr<VisionEncoder> e = MakeEncoder(config, {});
  ASSERT_NE(e, nullptr);
  const int c = config.vision_dim, dim = config.dim;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // 3x3 and 6x9 need no padding; the others pad the bottom, the right or both.
  for (auto [n_h, n_w] : std::vector<std::pair<int, int>>{
           {1, 1}, {3, 3}, {2, 4}, {4, 5}, {5, 7}, {7, 2}, {6, 9}, {1, 10}}) {
    std::vector<uint16_t> vit(static_cast<size_t>(n_h) * n_w * c);
    for (auto& x : vit) x = FloatToBf16Bits(dist(rng));
    const int64_t rows = e->AlignerRows(n_h, n_w);
    ASSERT_EQ(rows, int64_t{(n_h + 2) / 3} * ((n_w + 2) / 3));
    std::vector<uint16_t> got(rows * dim);
    ASSERT_TRUE(e->RunAligner(vit, n_h, n_w, got).ok());
    const std::vector<double> ref = ReferenceAligner(vit, n_h, n_w, c, 3);
    ASSERT_EQ(ref.size(), got.size());
    double err2 = 0, ref2 = 0;
    int64_t exact = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err2 += std::pow(Bf16BitsToFloat(got[i]) - ref[i], 2);
      ref2 += ref[i] * ref[i];
      exact += got[i] == FloatToBf16Bits(static_cast<float>(ref[i]));
    }
    // fp32 vs double sums only flip an occasional bf16 rounding (which then propagates a little).
    EXPECT_LT(std::sqrt(err2 / ref2), 2e-3) << n_h << "x" << n_w;
    EXPECT_GT(exact, static_cast<int64_t>(got.size() * 8 / 10)) << n_h << "x" << n_w;
  }
}

TEST(VisionEncoderTest, RejectsBadSizes) {
  const ModelConfig& config = testing::TinyCheckpoint().config();
  VisionEncoderOptions options;
  options.max_patches = 35;
  std::unique_ptr<VisionEncoder> e = MakeEncoder(config, options);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->max_patches(), 35);
  EXPECT_EQ(e->patch_dim(), 588);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  std::vector<uint16_t> patches(35 * 588), vit(35 * 64), rows(6 * 256);
  EXPECT_TRUE(e->Encode(patches, 5, 7, vit, rows).ok());
  std::vector<uint16_t> short_patches(35 * 588 - 1), short_vit(34 * 64), short_rows(5 * 256);
  EXPECT_EQ(e->Encode(short_patches, 5, 7, vit, rows).code(), kInvalid);
  EXPECT_EQ(e->Encode(patches, 5, 7, short_vit, rows).code(), kInvalid);
  EXPECT_EQ(e->Encode(patches, 5, 7, vit, short_rows).code(), kInvalid);
  EXPECT_EQ(e->Encode(patches, 7, 5, vit, short_rows).code(), kInvalid);  // 7 x 5 -> 3 x 2 rows
  EXPECT_EQ(e->Encode(patches, 0, 7, vit, rows).code(), kInvalid);
  EXPECT_EQ(e->Encode(patches, 5, -7, vit, rows).code(), kInvalid);
  std::vector<uint16_t> big_patches(36 * 588), big_vit(36 * 64);
  EXPECT_EQ(e->RunVit(big_patches, 6, 6, big_vit).code(), kInvalid);  // over max_patches
  EXPECT_EQ(e->RunAligner(short_vit, 5, 7, rows).code(), kInvalid);

  ModelConfig no_vision = config;
  no_vision.vision_n_layers = 0;
  absl::Status s;
  EXPECT_EQ(MakeEncoder(no_vision, {}, &s), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  ModelConfig wider = config;
  wider.vision_dim = 128;
  EXPECT_EQ(MakeEncoder(wider, {}, &s), nullptr);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("patch_embed"), std::string::npos) << s;
  ModelConfig deeper = config;
  deeper.vision_n_layers = 3;
  EXPECT_EQ(MakeEncoder(deeper, {}, &s), nullptr);
  EXPECT_EQ(s.code(), kInvalid);
  ModelConfig odd_heads = config;
  odd_heads.vision_n_heads = 3;
  EXPECT_EQ(MakeEncoder(odd_heads, {}, &s), nullptr);
  EXPECT_EQ(s.code(), kInvalid);
  VisionEncoderOptions negative;
  negative.max_patches = -1;
  EXPECT_EQ(MakeEncoder(config, negative, &s), nullptr);
  EXPECT_EQ(s.code(), kInvalid);
}

TEST(VisionEncoderTest, DefaultCapacityFollowsTheTokenBudget) {
  const ModelConfig& config = testing::TinyCheckpoint().config();
  std::unique_ptr<VisionEncoder> e = MakeEncoder(config, {});
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->max_patches(), config.vision_max_n_token * 9);  // 64 tokens x 3 x 3 patches
}

}  // namespace
}  // namespace flashserve::model::vit
