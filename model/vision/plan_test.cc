// Resize-plan tests: a grid of sizes worked out by hand from the reference's formulas (spec
// §4.10), for the tiny fixture config (min_pixels 4096, 64 tokens) and the released model
// (min_pixels 295936, 1024 tokens), covering every solve_resize_ratio branch; then the
// reference plans and Pillow's fitted images (ImageOps.pad / resize) from testdata/goldens.json.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/vision/preprocess.h"
#include "model/vision/resize_plan.h"
#include "model/vision/vision_test_util.h"
#include "nlohmann/json.hpp"

namespace flashserve::model::vision {
namespace {

using testing::RepoPath;
using testing::Sha256Hex;
using testing::SyntheticImage;

VisionPreprocessConfig Tiny() {
  VisionPreprocessConfig c;
  c.max_n_token = 64;
  c.min_pixels = 4096;
  c.image_token_id = 2047;
  return c;
}
VisionPreprocessConfig Full() { return VisionPreprocessConfig{}; }  // defaults = released model

struct Expect {
  int w, h;            // original size
  int best_w, best_h;  // planned pixel size
  int n_llm_w, n_llm_h;
  BudgetBranch budget;
  int tokens;
};

void CheckPlan(const VisionPreprocessConfig& config, const Expect& e) {
  SCOPED_TRACE(::testing::Message() << e.w << "x" << e.h);
  absl::StatusOr<ImageGridPlan> plan = PlanImageGrid(e.w, e.h, config);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->best_width, e.best_w);
  EXPECT_EQ(plan->best_height, e.best_h);
  EXPECT_EQ(plan->n_vit_w, e.best_w / 14);
  EXPECT_EQ(plan->n_vit_h, e.best_h / 14);
  EXPECT_EQ(plan->n_llm_w, e.n_llm_w);
  EXPECT_EQ(plan->n_llm_h, e.n_llm_h);
  EXPECT_EQ(plan->budget, e.budget);
  EXPECT_EQ(plan->num_tokens(), e.tokens);
  EXPECT_LE(plan->num_tokens(), config.max_n_token);
  EXPECT_FALSE(plan->stretch);
}

TEST(PlanImageGridTest, TinyConfigByHand) {
  const VisionPreprocessConfig c = Tiny();
  // Fixture prompt c: 6272 px >= 4096, no upscale. 98 -> 98 (7 patches), 64 -> ceil(64/14)=5
  // patches -> 70. n_llm = ceil(7/3)=3, ceil(5/3)=2. Tokens 2*(3+1)+2 = 10.
  CheckPlan(c, {98, 64, 98, 70, 3, 2, BudgetBranch::kNone, 10});
  // 1024 px < 4096: f = (4096/1024)^0.5 = 2 -> 64x64 -> 70x70 (5x5 patches) -> 2x2, 8 tokens.
  CheckPlan(c, {32, 32, 70, 70, 2, 2, BudgetBranch::kNone, 8});
  // 1 px: f = 64 -> 64x64, as above.
  CheckPlan(c, {1, 1, 70, 70, 2, 2, BudgetBranch::kNone, 8});
  // 400 px: f = 10.24^0.5 = 3.2; int(10*3.2) = 32, int(40*3.2) = 128 -> 42x140 (3x10 patches)
  // -> n_llm 1 x ceil(10/3)=4 -> 4*2+2 = 10 tokens.
  CheckPlan(c, {10, 40, 42, 140, 1, 4, BudgetBranch::kNone, 10});
  // 30000 px: 200 -> 210 (15), 150 -> 154 (11) -> n_llm 5x4 -> 4*6+2 = 26.
  CheckPlan(c, {200, 150, 210, 154, 5, 4, BudgetBranch::kNone, 26});
  // Budget, scaled branch: 1000x500 -> 1008x504 (72x36 patches) -> 24x12 -> 12*25+2 = 302 > 64.
  // r = 0.5, max_w = sqrt(62/0.5 + 0.25) - 0.5 = 10.65, max_h = 5.32;
  // beta = min(10*42/1000, 5*42/500) = 0.42; h = floor(500*0.42/14)*14 = 15*14 = 210,
  // w = floor(1000*0.42/14)*14 = 30*14 = 420 -> n_llm 10x5 -> 5*11+2 = 57.
  CheckPlan(c, {1000, 500, 420, 210, 10, 5, BudgetBranch::kScaled, 57});
  // Budget, single row: 3000x20 -> 3010x28 (215x2) -> 72x1 -> 75 > 64. r = 1/150,
  // max_w = sqrt(62*150 + 0.25) - 0.5 = 95.94, max_h = 0.64 < 1 -> (42, (64-3)*42 = 2562)
  // -> n_llm 61x1 -> 1*62+2 = 64, exactly the budget.
  CheckPlan(c, {3000, 20, 2562, 42, 61, 1, BudgetBranch::kSingleRow, 64});
  // Budget, single column: 20x3000 -> 28x3010 -> 1x72 -> 146 > 64. r = 150,
  // max_w = sqrt(62/150 + 0.25) - 0.5 = 0.31 < 1 -> ((64-2)//2*42 = 1302, 42) -> 1x31 -> 64.
  CheckPlan(c, {20, 3000, 42, 1302, 1, 31, BudgetBranch::kSingleColumn, 64});
  // Upscale, then budget: 1000 px: f = 4.096^0.5 = 2.024 -> int(2.02) = 2, int(2023.9) = 2023
  // -> 14x2030 -> 1x49 -> 100 > 64; solved on the upscaled (2023, 2): r = 1011.5, max_w =
  // sqrt(62/1011.5 + 0.25) - 0.5 = 0.06 < 1 -> single column 1302x42.
  CheckPlan(c, {1, 1000, 42, 1302, 1, 31, BudgetBranch::kSingleColumn, 64});
}

TEST(PlanImageGridTest, FullModelConfigByHand) {
  const VisionPreprocessConfig c = Full();
  // 6272 px < 295936: f = (295936/6272)^0.5 = 6.86904; int(98f) = int(673.17) = 673,
  // int(64f) = int(439.62) = 439 -> ceil to 686 (49 patches) x 448 (32) -> n_llm 17 x 11
  // -> 11*18+2 = 200 tokens. (The image is later upscaled to 686x448 by ImageOps.pad:
  // contain gives round(64/98*686) = 448 = the height, so the whole 686x448 is resampled.)
  CheckPlan(c, {98, 64, 686, 448, 17, 11, BudgetBranch::kNone, 200});
  // 544^2 = min_pixels exactly: not upscaled; 544 -> 546 (39 patches) -> 13x13 -> 184.
  CheckPlan(c, {544, 544, 546, 546, 13, 13, BudgetBranch::kNone, 184});
  // 543*545 = 295935: f = 1.0000017 -> int(543.0009) = 543, int(545.0009) = 545 -> 546x546.
  CheckPlan(c, {543, 545, 546, 546, 13, 13, BudgetBranch::kNone, 184});
  // 960x540 -> 966 (69) x 546 (39) -> 23 x 13 -> 13*24+2 = 314.
  CheckPlan(c, {960, 540, 966, 546, 23, 13, BudgetBranch::kNone, 314});
  // 1920x1080 -> 1932 (138) x 1092 (78) -> 46x26 -> 26*47+2 = 1224 > 1024. r = 0.5625,
  // max_w = sqrt(1022/0.5625 + 0.25) - 0.5 = 42.13, max_h = 23.70;
  // beta = min(42*42/1920 = 0.91875, 23*42/1080 = 0.89444) = 0.89444;
  // h = floor(1080*beta/14) = floor(69.0) = 69 -> 966; w = floor(1920*beta/14) = floor(122.67)
  // = 122 -> 1708 -> n_llm ceil(122/3) = 41 x ceil(69/3) = 23 -> 23*42+2 = 968.
  CheckPlan(c, {1920, 1080, 1708, 966, 41, 23, BudgetBranch::kScaled, 968});
  // 4000x3000 -> 4004x3010 -> 96x72 -> 6986 > 1024. r = 0.75, max_w = 36.42, max_h = 27.31;
  // beta = min(36*42/4000, 27*42/3000) = 0.378 -> h = 81*14 = 1134, w = 108*14 = 1512
  // -> 36 x 27 -> 27*37+2 = 1001.
  CheckPlan(c, {4000, 3000, 1512, 1134, 36, 27, BudgetBranch::kScaled, 1001});
  // 2000x1000 -> 2002x1008 -> 48x24 -> 1178 > 1024. r = 0.5, max_w = sqrt(2044.25) - 0.5 = 44.71,
  // max_h = 22.36; beta = min(44*42/2000, 22*42/1000) = 0.924 -> 924 x 1848 -> 44x22 -> 992.
  CheckPlan(c, {2000, 1000, 1848, 924, 44, 22, BudgetBranch::kScaled, 992});
  // 20000x100 -> 1429x8 patches -> 477x3 -> 1436 > 1024. r = 0.005, max_w = 451.6, max_h = 2.26;
  // beta = min(451*42/20000 = 0.947, 2*42/100 = 0.84) = 0.84 -> h = 6*14 = 84,
  // w = 1200*14 = 16800 -> 400x2 -> 2*401+2 = 804.
  CheckPlan(c, {20000, 100, 16800, 84, 400, 2, BudgetBranch::kScaled, 804});
  // 60000x20: 1,200,000 px -> 4286x2 patches -> 1429x1 -> 1432 > 1024. r = 1/3000, max_w =
  // 1750.5, max_h = 0.58 < 1 -> (42, 1021*42 = 42882) -> 1021x1 -> 1024 tokens.
  CheckPlan(c, {60000, 20, 42882, 42, 1021, 1, BudgetBranch::kSingleRow, 1024});
  // 20x60000: max_w = sqrt(1022/3000 + 0.25) - 0.5 = 0.27 < 1 -> (511*42 = 21462, 42) -> 1024.
  CheckPlan(c, {20, 60000, 42, 21462, 1, 511, BudgetBranch::kSingleColumn, 1024});
}

TEST(PlanImageGridTest, SolveResizeRatioBranches) {
  EXPECT_EQ(SolveResizeRatio(500, 1000, 14, 3, 64).branch, BudgetBranch::kScaled);
  const SolvedSize row = SolveResizeRatio(20, 3000, 14, 3, 64);
  EXPECT_EQ(row.branch, BudgetBranch::kSingleRow);
  EXPECT_EQ(row.height, 42);
  EXPECT_EQ(row.width, 61 * 42);
  const SolvedSize col = SolveResizeRatio(3000, 20, 14, 3, 64);
  EXPECT_EQ(col.branch, BudgetBranch::kSingleColumn);
  EXPECT_EQ(col.height, 31 * 42);
  EXPECT_EQ(col.width, 42);
}

TEST(PlanImageGridTest, InvalidInputs) {
  EXPECT_EQ(PlanImageGrid(0, 5, Tiny()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanImageGrid(5, -1, Tiny()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanImageGrid(1 << 24, 5, Tiny()).status().code(), absl::StatusCode::kInvalidArgument);
  VisionPreprocessConfig bad = Tiny();
  bad.max_n_token = 3;
  EXPECT_EQ(PlanImageGrid(5, 5, bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Tiny();
  bad.max_wh_ratio = 0;
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(VisionPreprocessConfigTest, FromModelConfigs) {
  absl::StatusOr<ModelConfig> tiny =
      LoadModelConfig(RepoPath("tests/conformance/data/v41-tiny/config.json"));
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  absl::StatusOr<VisionPreprocessConfig> t = VisionPreprocessConfig::FromModelConfig(*tiny);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->patch_size, 14);
  EXPECT_EQ(t->downsample_ratio, 3);
  EXPECT_EQ(t->max_n_token, 64);
  EXPECT_EQ(t->min_pixels, 4096);
  EXPECT_FALSE(t->max_wh_ratio.has_value());
  EXPECT_EQ(t->image_token_id, 2047);
  absl::StatusOr<ModelConfig> full =
      LoadModelConfig(RepoPath("configs/deepseek-v41-flash/inference_config.json"));
  ASSERT_TRUE(full.ok()) << full.status();
  absl::StatusOr<VisionPreprocessConfig> f = VisionPreprocessConfig::FromModelConfig(*full);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->max_n_token, 1024);
  EXPECT_EQ(f->min_pixels, 295936);
  EXPECT_EQ(f->image_token_id, 129264);
  ModelConfig no_vision = *tiny;
  no_vision.vision_n_layers = 0;
  EXPECT_EQ(VisionPreprocessConfig::FromModelConfig(no_vision).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The reference's plans (make_goldens.py transcribes image_processor.py) and Pillow's fitted
// images for synthetic inputs, including the max_wh_ratio stretch path and a size PIL refuses.
TEST(PreprocessGoldenTest, PlansAndFittedImagesMatchReference) {
  std::ifstream in(RepoPath("model/vision/testdata/goldens.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json g = nlohmann::json::parse(in);
  VisionPreprocessConfig ratio = Tiny();
  ratio.max_wh_ratio = g["ratio_config"]["max_wh_ratio"].get<int>();
  auto config_of = [&](const std::string& name) {
    return name == "tiny" ? Tiny() : (name == "full" ? Full() : ratio);
  };
  for (const auto& p : g["plans"]) {
    const int w = p["size"][0], h = p["size"][1];
    SCOPED_TRACE(::testing::Message() << p["config"] << " " << w << "x" << h);
    absl::StatusOr<ImageGridPlan> plan = PlanImageGrid(w, h, config_of(p["config"]));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->best_width, p["best_width"].get<int>());
    EXPECT_EQ(plan->best_height, p["best_height"].get<int>());
    EXPECT_EQ(plan->n_llm_w, p["n_llm_w"].get<int>());
    EXPECT_EQ(plan->n_llm_h, p["n_llm_h"].get<int>());
    EXPECT_EQ(plan->stretch, p.value("stretch", false));
  }
  int fitted = 0;
  for (const auto& f : g["fit"]) {
    const int w = f["size"][0], h = f["size"][1];
    SCOPED_TRACE(::testing::Message() << f["config"] << " " << w << "x" << h);
    const VisionPreprocessConfig config = config_of(f["config"]);
    absl::StatusOr<ImageGridPlan> plan = PlanImageGrid(w, h, config);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<RgbImage> out = FitImageToPlan(SyntheticImage(w, h), *plan);
    if (f.contains("error")) {
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
      continue;
    }
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->width, plan->best_width);
    EXPECT_EQ(out->height, plan->best_height);
    EXPECT_EQ(Sha256Hex(out->rgb), f["sha256"].get<std::string>());
    ++fitted;
  }
  EXPECT_GE(fitted, 28);
}

}  // namespace
}  // namespace flashserve::model::vision
