// Conformance against the v41-tiny golden run (tests/conformance/data/v41-tiny, prompt c):
// image.png -> plan and bf16 patches byte-exact vs c.patches, the image span vs golden.json,
// the placeholder expansion that turns prompt c's 34 ids into its 43, and the aligner unfold
// order (checked by recomputing c.aligner_out from c.vit_out with the fixture's aligner weights).
#include <bit>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "common/safetensors/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/vision/aligner_unfold.h"
#include "model/vision/image_span.h"
#include "model/vision/preprocess.h"
#include "model/vision/vision_test_util.h"
#include "nlohmann/json.hpp"

namespace flashserve::model::vision {
namespace {

using ::testing::ElementsAre;
using testing::ReadFileBytes;
using testing::RepoPath;

constexpr char kFixture[] = "tests/conformance/data/v41-tiny/";

std::string Fixture(const std::string& name) { return RepoPath(std::string(kFixture) + name); }

nlohmann::json GoldenJson() {
  std::ifstream in(Fixture("golden.json"));
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

VisionPreprocessConfig TinyConfig() {
  absl::StatusOr<ModelConfig> model = LoadModelConfig(Fixture("config.json"));
  CHECK_OK(model.status());
  absl::StatusOr<VisionPreprocessConfig> config = VisionPreprocessConfig::FromModelConfig(*model);
  CHECK_OK(config.status());
  return *config;
}

// fp32 golden values that are exact bf16 -> their bf16 bit patterns.
std::vector<uint16_t> Bf16BitsOfExactFloats(std::span<const float> values) {
  std::vector<uint16_t> bits;
  for (float v : values) {
    const uint32_t u = std::bit_cast<uint32_t>(v);
    EXPECT_EQ(u & 0xFFFFu, 0u) << "golden value " << v << " is not a bf16";
    bits.push_back(static_cast<uint16_t>(u >> 16));
  }
  return bits;
}

TEST(FixtureTest, PromptCPatchesAreByteExact) {
  const std::vector<uint8_t> png = ReadFileBytes(Fixture("image.png"));
  absl::StatusOr<PreprocessedImage> image = PreprocessImageBytes(png, TinyConfig());
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->original_width, 98);
  EXPECT_EQ(image->original_height, 64);
  const ImageGridPlan& plan = image->plan;
  EXPECT_EQ(plan.best_width, 98);
  EXPECT_EQ(plan.best_height, 70);
  EXPECT_EQ(plan.n_vit_w, 7);
  EXPECT_EQ(plan.n_vit_h, 5);
  EXPECT_EQ(plan.n_llm_w, 3);
  EXPECT_EQ(plan.n_llm_h, 2);
  EXPECT_EQ(plan.num_tokens(), 10);

  absl::StatusOr<std::unique_ptr<safetensors::SafetensorsFile>> golden =
      safetensors::SafetensorsFile::Open(Fixture("golden.safetensors"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<safetensors::TensorView> patches =
      (*golden)->GetChecked("c.patches", safetensors::DType::kF32, {35, 3, 14, 14});
  ASSERT_TRUE(patches.ok()) << patches.status();
  const std::vector<uint16_t> want = Bf16BitsOfExactFloats(patches->as<float>());
  ASSERT_EQ(image->patches.num_patches(), 35u);
  ASSERT_EQ(image->patches.patch_dim(), 588u);
  ASSERT_EQ(image->patches.bf16.size(), want.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) mismatches += image->patches.bf16[i] != want[i];
  EXPECT_EQ(mismatches, 0u) << "of " << want.size() << " patch values";
  // The letterbox rows: patch 0's first 3 rows (y < 3) are grey 127 -> (127/255-0.5)/0.5.
  EXPECT_EQ(image->patches.bf16[0], NormalizedPixelBf16(127));
  EXPECT_EQ(formats::Bf16BitsToFloat(NormalizedPixelBf16(0)), -1.0f);
  EXPECT_EQ(formats::Bf16BitsToFloat(NormalizedPixelBf16(255)), 1.0f);
}

// Under the released model's config the same image is upscaled to 673x439 inside 686x448; the
// fitted image must equal Pillow's ImageOps.pad (SHA-256 from testdata/goldens.json).
TEST(FixtureTest, FixtureImageUnderFullModelConfigMatchesPillow) {
  std::ifstream in(RepoPath("model/vision/testdata/goldens.json"));
  const nlohmann::json want = nlohmann::json::parse(in)["fixture_image_full_config"];
  absl::StatusOr<RgbImage> image = DecodeImage(ReadFileBytes(Fixture("image.png")));
  ASSERT_TRUE(image.ok());
  absl::StatusOr<ImageGridPlan> plan = PlanImageGrid(98, 64, VisionPreprocessConfig{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->best_width, want["best_width"].get<int>());
  EXPECT_EQ(plan->best_height, want["best_height"].get<int>());
  absl::StatusOr<RgbImage> fitted = FitImageToPlan(*image, *plan);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_EQ(testing::Sha256Hex(fitted->rgb), want["sha256"].get<std::string>());
  absl::StatusOr<PreprocessedImage> pre = PreprocessRgbImage(*image, VisionPreprocessConfig{});
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(pre->patches.num_patches(), 49u * 32u);
}

TEST(FixtureTest, PromptCSpanLayoutMatchesGolden) {
  const nlohmann::json c = GoldenJson()["prompts"]["c"];
  const nlohmann::json img = c["image"];
  const std::vector<int> types = img["types"].get<std::vector<int>>();
  const std::vector<ImageSpanEntry> layout = ImageSpanLayout(2, 3);
  ASSERT_EQ(layout.size(), types.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    EXPECT_EQ(static_cast<int>(layout[i].slot), types[i]) << "span position " << i;
  }
  // START, IMAGE x3 (aligner rows 0-2), NEWLINE, IMAGE x3 (rows 3-5), NEWLINE, END.
  std::vector<int> rows;
  for (const ImageSpanEntry& e : layout) rows.push_back(e.aligner_row);
  EXPECT_THAT(rows, ElementsAre(-1, 0, 1, 2, -1, 3, 4, 5, -1, -1));
  EXPECT_EQ(img["n_vit_h"].get<int>(), 5);
  EXPECT_EQ(img["n_vit_w"].get<int>(), 7);
}

// Prompt c was tokenized with one <｜deepseek_image｜> (2047) at position 12; the reference's
// prepare_vl_inputs expanded it to the 10-position span at 12..21.
TEST(FixtureTest, PromptCPlaceholderExpansion) {
  const nlohmann::json c = GoldenJson()["prompts"]["c"];
  const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 43u);
  const int start = c["image"]["start"].get<int>();
  ASSERT_EQ(start, 12);
  for (int i = start; i < start + 10; ++i) EXPECT_EQ(ids[i], 2047) << i;
  std::vector<int32_t> prompt(ids.begin(), ids.begin() + start);
  prompt.push_back(2047);
  prompt.insert(prompt.end(), ids.begin() + start + 10, ids.end());
  ASSERT_EQ(prompt.size(), 34u);

  const std::vector<LlmGrid> grids = {{2, 3}};
  absl::StatusOr<ExpandedPrompt> expanded = ExpandImagePlaceholders(prompt, grids, 2047);
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  EXPECT_EQ(expanded->token_ids, ids);
  const std::vector<int> token_types = c["image"]["token_types"].get<std::vector<int>>();
  ASSERT_EQ(expanded->token_types.size(), token_types.size());
  for (size_t i = 0; i < token_types.size(); ++i) {
    EXPECT_EQ(expanded->token_types[i], token_types[i]) << "position " << i;
  }
  ASSERT_EQ(expanded->images.size(), 1u);
  EXPECT_EQ(expanded->images[0].start, 12);
  EXPECT_EQ(expanded->images[0].entries, ImageSpanLayout(2, 3));

  EXPECT_EQ(ExpandImagePlaceholders(prompt, {}, 2047).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<LlmGrid> two = {{2, 3}, {1, 1}};
  EXPECT_EQ(ExpandImagePlaceholders(prompt, two, 2047).status().message(),
            "Found 1 image tokens but got 2 images");
  const std::vector<LlmGrid> empty = {{0, 3}};
  EXPECT_FALSE(ExpandImagePlaceholders(prompt, empty, 2047).ok());
  // Two images: spans in order (1x1 -> 1*2+2 = 4 positions, 2x2 -> 2*3+2 = 8), the second
  // start shifted by the first span: 5 | S I N E | 6 | S I I N I I N E | 7.
  const std::vector<int32_t> two_images = {5, 2047, 6, 2047, 7};
  const std::vector<LlmGrid> grids2 = {{1, 1}, {2, 2}};
  absl::StatusOr<ExpandedPrompt> e2 = ExpandImagePlaceholders(two_images, grids2, 2047);
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(e2->token_ids.size(), 3u + 4u + 8u);
  EXPECT_EQ(e2->images[0].start, 1);
  EXPECT_EQ(e2->images[1].start, 6);
  EXPECT_EQ(e2->token_ids[5], 6);
  EXPECT_EQ(e2->token_ids[14], 7);
  EXPECT_THAT(e2->token_types, ElementsAre(-1, 0, 1, 2, 3, -1, 0, 1, 1, 2, 1, 1, 2, 3, -1));
  EXPECT_EQ(e2->images[1].entries[5].aligner_row, 3);  // S I0 I1 N I2 [I3] N E
}

// 5x7 patches pad to 6x9 and unfold to 2x3 tokens. Token t = (i, j) reads patch
// (3i + kh) * 7 + (3j + kw) where that lies inside 5x7, else zero.
TEST(AlignerUnfoldTest, FiveBySevenPatchGrid) {
  absl::StatusOr<AlignerUnfold> u = MakeAlignerUnfold(5, 7, 3);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->n_llm_h, 2);
  EXPECT_EQ(u->n_llm_w, 3);
  EXPECT_EQ(u->padded_h(), 6);
  EXPECT_EQ(u->padded_w(), 9);
  EXPECT_EQ(u->num_tokens(), 6);
  EXPECT_EQ(AlignerSourcePatch(*u, 0, 0, 0), 0);
  EXPECT_EQ(AlignerSourcePatch(*u, 0, 2, 1), 15);  // row 2, col 1
  EXPECT_EQ(AlignerSourcePatch(*u, 1, 0, 0), 3);   // token (0,1): col 3
  EXPECT_EQ(AlignerSourcePatch(*u, 2, 0, 0), 6);   // token (0,2): col 6 is the last real one
  EXPECT_EQ(AlignerSourcePatch(*u, 2, 1, 1), -1);  // col 7: padding
  EXPECT_EQ(AlignerSourcePatch(*u, 3, 1, 2), 30);  // token (1,0): row 4, col 2
  EXPECT_EQ(AlignerSourcePatch(*u, 3, 2, 0), -1);  // row 5: padding
  EXPECT_EQ(AlignerSourcePatch(*u, 5, 0, 0), 27);  // token (1,2): row 3, col 6
  EXPECT_EQ(AlignerSourcePatch(*u, 5, 1, 0), 34);  // row 4, col 6: the last patch
  int real = 0;
  for (int t = 0; t < 6; ++t)
    for (int kh = 0; kh < 3; ++kh)
      for (int kw = 0; kw < 3; ++kw) real += AlignerSourcePatch(*u, t, kh, kw) >= 0;
  EXPECT_EQ(real, 35);  // every patch used exactly once (54 slots, 19 of them padding)
  EXPECT_EQ(AlignerVectorIndex(*u, 0, 0, 0), 0);
  EXPECT_EQ(AlignerVectorIndex(*u, 0, 1, 2), 5);
  EXPECT_EQ(AlignerVectorIndex(*u, 2, 0, 1), 19);  // c*9 + kh*3 + kw
  EXPECT_EQ(AlignerVectorIndex(*u, 63, 2, 2), 575);
  EXPECT_FALSE(MakeAlignerUnfold(0, 7, 3).ok());
}

// The unfold order is what the aligner's w1 was trained on: recompute c.aligner_out from
// c.vit_out (w1 -> exact GELU -> w2, bf16 roundings between, fp32 accumulation) and compare
// within the README's CPU/GPU drift (0.6 % rel-RMS). A wrong order gives ~130 %.
TEST(AlignerUnfoldTest, RecomputesGoldenAlignerOutput) {
  absl::StatusOr<std::unique_ptr<safetensors::SafetensorsFile>> golden =
      safetensors::SafetensorsFile::Open(Fixture("golden.safetensors"));
  absl::StatusOr<std::unique_ptr<safetensors::SafetensorsFile>> model =
      safetensors::SafetensorsFile::Open(Fixture("model.safetensors"));
  ASSERT_TRUE(golden.ok() && model.ok());
  auto get = [](const safetensors::SafetensorsFile& f, const char* name, safetensors::DType t,
                std::initializer_list<int64_t> shape) {
    absl::StatusOr<safetensors::TensorView> v = f.GetChecked(name, t, shape);
    CHECK_OK(v.status());
    return *v;
  };
  using safetensors::DType;
  const auto vit = get(**golden, "c.vit_out", DType::kF32, {35, 64});
  const auto want = get(**golden, "c.aligner_out", DType::kF32, {6, 256});
  const auto w1 = get(**model, "aligner.w1.weight", DType::kBF16, {256, 576}).as<uint16_t>();
  const auto b1 = get(**model, "aligner.w1.bias", DType::kBF16, {256}).as<uint16_t>();
  const auto w2 = get(**model, "aligner.w2.weight", DType::kBF16, {256, 256}).as<uint16_t>();
  const auto b2 = get(**model, "aligner.w2.bias", DType::kBF16, {256}).as<uint16_t>();

  absl::StatusOr<AlignerUnfold> u = MakeAlignerUnfold(5, 7, 3);
  ASSERT_TRUE(u.ok());
  const std::vector<uint16_t> features = Bf16BitsOfExactFloats(vit.as<float>());
  absl::StatusOr<std::vector<uint16_t>> x = UnfoldAlignerInput(*u, features, 64);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_EQ(x->size(), 6u * 576u);
  auto f = [](uint16_t b) { return formats::Bf16BitsToFloat(b); };
  double err2 = 0, ref2 = 0;
  for (int t = 0; t < 6; ++t) {
    std::vector<float> h(256);
    for (int o = 0; o < 256; ++o) {
      float acc = 0;
      for (int i = 0; i < 576; ++i) acc += f((*x)[t * 576 + i]) * f(w1[o * 576 + i]);
      const float pre = formats::RoundToBf16(acc + f(b1[o]));
      h[o] = formats::RoundToBf16(0.5f * pre * (1.0f + std::erf(pre / std::sqrt(2.0f))));
    }
    for (int o = 0; o < 256; ++o) {
      float acc = 0;
      for (int i = 0; i < 256; ++i) acc += h[i] * f(w2[o * 256 + i]);
      const float out = formats::RoundToBf16(acc + f(b2[o]));
      const float ref = want.as<float>()[t * 256 + o];
      err2 += double(out - ref) * (out - ref);
      ref2 += double(ref) * ref;
    }
  }
  EXPECT_LT(std::sqrt(err2 / ref2), 0.02);
}

}  // namespace
}  // namespace flashserve::model::vision
