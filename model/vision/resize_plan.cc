#include "model/vision/resize_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"

namespace flashserve::model::vision {
namespace {

constexpr int64_t kMaxSide = 1 << 24;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// llm_grid: ceil((best // p) / r) per side.
void LlmGrid(int64_t best_h, int64_t best_w, int p, int r, int64_t* n_h, int64_t* n_w) {
  *n_h = CeilDiv(best_h / p, r);
  *n_w = CeilDiv(best_w / p, r);
}

}  // namespace

absl::StatusOr<VisionPreprocessConfig> VisionPreprocessConfig::FromModelConfig(
    const ModelConfig& config) {
  if (!config.vision_enabled()) {
    return absl::FailedPreconditionError(
        "vision preprocessing: the model config has no vision tower (vision_n_layers == 0)");
  }
  VisionPreprocessConfig out;
  out.patch_size = config.vision_patch_size;
  out.downsample_ratio = config.vision_downsample_ratio;
  out.max_n_token = config.vision_max_n_token;
  out.min_pixels = config.vision_min_pixels;
  out.max_wh_ratio = config.vision_max_wh_ratio;
  out.image_token_id = config.image_token_id;
  if (absl::Status s = out.Validate(); !s.ok()) return s;
  return out;
}

absl::Status VisionPreprocessConfig::Validate() const {
  if (patch_size <= 0 || downsample_ratio <= 0 || max_n_token < 4 || min_pixels < 0 ||
      (max_wh_ratio.has_value() && *max_wh_ratio <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision preprocessing config: need patch_size > 0 (", patch_size,
        "), downsample_ratio > 0 (", downsample_ratio, "), max_n_token >= 4 (", max_n_token,
        "), min_pixels >= 0 (", min_pixels, "), max_wh_ratio > 0 or null (",
        max_wh_ratio.has_value() ? absl::StrCat(*max_wh_ratio) : "null", ")"));
  }
  return absl::OkStatus();
}

int64_t NumImageTokens(int64_t n_llm_h, int64_t n_llm_w) { return n_llm_h * (n_llm_w + 1) + 2; }

SolvedSize SolveResizeRatio(int64_t height, int64_t width, int patch_size, int downsample_ratio,
                            int max_n_token) {
  CHECK(height > 0 && width > 0) << height << "x" << width;
  const double r = static_cast<double>(height) / static_cast<double>(width);
  const double max_w = std::sqrt(static_cast<double>(max_n_token - 2) / r + 0.25) - 0.5;
  const double max_h = max_w * r;
  const int64_t cell = static_cast<int64_t>(patch_size) * downsample_ratio;
  if (max_w < 1.0) return {(max_n_token - 2) / 2 * cell, cell, BudgetBranch::kSingleColumn};
  if (max_h < 1.0) return {cell, (max_n_token - 3) * cell, BudgetBranch::kSingleRow};
  // Python: floor(max_w) * cell / width is int * int / int (true division, correctly rounded).
  const double beta_w = static_cast<double>(static_cast<int64_t>(std::floor(max_w)) * cell) /
                        static_cast<double>(width);
  const double beta_h = static_cast<double>(static_cast<int64_t>(std::floor(max_h)) * cell) /
                        static_cast<double>(height);
  const double beta = std::min(beta_w, beta_h);
  const int64_t h =
      static_cast<int64_t>(std::floor(static_cast<double>(height) * beta / patch_size)) *
      patch_size;
  const int64_t w =
      static_cast<int64_t>(std::floor(static_cast<double>(width) * beta / patch_size)) * patch_size;
  return {h, w, BudgetBranch::kScaled};
}

absl::StatusOr<ImageGridPlan> PlanImageGrid(int width, int height,
                                            const VisionPreprocessConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (width <= 0 || height <= 0 || width >= kMaxSide || height >= kMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat("vision plan: image size ", width, "x", height,
                                                   " is outside (0, 2^24) per side"));
  }
  const int p = config.patch_size;
  const int ratio = config.downsample_ratio;
  ImageGridPlan plan;
  int64_t w = width;
  int64_t h = height;
  if (config.max_wh_ratio.has_value()) {
    if (w > h * *config.max_wh_ratio) w = h * *config.max_wh_ratio;
    // load_image's test differs (>= on the original size): at equality the plan keeps the width
    // but the image is still stretched rather than padded.
    plan.stretch = int64_t{width} >= int64_t{*config.max_wh_ratio} * height;
  }
  if (w * h < config.min_pixels) {  // w * h > 0 always holds here
    // CPython evaluates `x ** 0.5` with the C library's pow, not sqrt.
    const double f =
        std::pow(static_cast<double>(config.min_pixels) / static_cast<double>(w * h), 0.5);
    w = static_cast<int64_t>(static_cast<double>(w) * f);
    h = static_cast<int64_t>(static_cast<double>(h) * f);
  }
  int64_t best_w = CeilDiv(w, p) * p;
  int64_t best_h = CeilDiv(h, p) * p;
  int64_t n_llm_h = 0;
  int64_t n_llm_w = 0;
  LlmGrid(best_h, best_w, p, ratio, &n_llm_h, &n_llm_w);
  if (NumImageTokens(n_llm_h, n_llm_w) > config.max_n_token) {
    const SolvedSize solved = SolveResizeRatio(h, w, p, ratio, config.max_n_token);
    best_h = solved.height;
    best_w = solved.width;
    plan.budget = solved.branch;
    LlmGrid(best_h, best_w, p, ratio, &n_llm_h, &n_llm_w);
    if (NumImageTokens(n_llm_h, n_llm_w) > config.max_n_token || best_h <= 0 || best_w <= 0) {
      return absl::InternalError(absl::StrCat(
          "vision plan: ", width, "x", height, " solved to ", best_w, "x", best_h, " = ",
          NumImageTokens(n_llm_h, n_llm_w), " tokens, above the budget ", config.max_n_token));
    }
  }
  if (best_w >= kMaxSide || best_h >= kMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat("vision plan: ", width, "x", height,
                                                   " plans to ", best_w, "x", best_h,
                                                   ", beyond 2^24 per side"));
  }
  plan.best_width = static_cast<int>(best_w);
  plan.best_height = static_cast<int>(best_h);
  plan.n_vit_w = static_cast<int>(best_w / p);
  plan.n_vit_h = static_cast<int>(best_h / p);
  plan.n_llm_w = static_cast<int>(n_llm_w);
  plan.n_llm_h = static_cast<int>(n_llm_h);
  return plan;
}

}  // namespace flashserve::model::vision
