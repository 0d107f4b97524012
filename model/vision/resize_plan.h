// The reference's resize plan (image_processor.plan_image_grid / safe_resize /
// solve_resize_ratio; spec §4.10), computed on sizes only. Floating-point steps use the same
// double operations in the same order as the Python, so plans agree exactly:
//
//  1. max_wh_ratio (optional): if W > H * ratio, W = H * ratio.
//  2. If 0 < W*H < min_pixels: f = (min_pixels / (W*H)) ** 0.5 (C pow, as CPython),
//     W = int(W * f), H = int(H * f) (truncation).
//  3. best_w = ceil(W / p) * p, best_h = ceil(H / p) * p; n_llm = ceil((best / p) / r) per side.
//  4. If n_llm_h * (n_llm_w + 1) + 2 > N (max tokens), SolveResizeRatio(H, W) replaces
//     (best_h, best_w) and n_llm is recomputed; the result must then fit N.
//
// The image itself is then fitted with PadImage (or, on the max_wh_ratio path, stretched with
// ResizeBicubic) to best_w x best_h: see preprocess.h.
//
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/config/model_config.h"

namespace flashserve::model::vision {

// The grey the reference letterboxes with: ImageOps.pad(..., color=(127, 127, 127)).
inline constexpr uint8_t kPadGrey = 127;

// The config fields the preprocessing reads (ModelConfig vision_* and image_token_id).
struct VisionPreprocessConfig {
  int patch_size = 14;              // vision_patch_size
  int downsample_ratio = 3;         // vision_downsample_ratio (aligner unfold per side)
  int max_n_token = 1024;           // vision_max_n_token (whole span incl. START/END/NEWLINE)
  int64_t min_pixels = 295936;      // vision_min_pixels (smaller images are upscaled)
  std::optional<int> max_wh_ratio;  // vision_max_wh_ratio; nullopt = off (JSON null)
  int32_t image_token_id = 129264;  // id carried by every image-span position

  // The values of a model config. Errors: FailedPrecondition if vision is off
  // (vision_n_layers == 0); Validate's errors.
  static absl::StatusOr<VisionPreprocessConfig> FromModelConfig(const ModelConfig& config);

  // InvalidArgument unless patch_size, downsample_ratio > 0, max_n_token >= 4 (the smallest
  // budget solve_resize_ratio can meet), min_pixels >= 0, max_wh_ratio > 0 when set.
  absl::Status Validate() const;
};

// Tokens of an image span: START + n_llm_h * (n_llm_w IMAGE + NEWLINE) + END.
int64_t NumImageTokens(int64_t n_llm_h, int64_t n_llm_w);

// Which solve_resize_ratio branch produced a size.
enum class BudgetBranch {
  kNone,          // the token budget was not exceeded
  kSingleColumn,  // max_w < 1: ((N-2)//2 * cell, cell)
  kSingleRow,     // max_h < 1: (cell, (N-3) * cell)
  kScaled,        // beta = min(floor(max_w)*cell/W, floor(max_h)*cell/H)
};

struct SolvedSize {
  int64_t height = 0;
  int64_t width = 0;
  BudgetBranch branch = BudgetBranch::kNone;
};

// solve_resize_ratio(height, width, patch, ratio, N) of the reference: the largest
// aspect-preserving pixel size (multiples of patch) whose token grid fits N. Precondition:
// Validate()d arguments and height, width > 0 (CHECKed).
SolvedSize SolveResizeRatio(int64_t height, int64_t width, int patch_size, int downsample_ratio,
                            int max_n_token);

struct ImageGridPlan {
  int best_width = 0;   // padded pixel width fed to the ViT (multiple of patch_size)
  int best_height = 0;  // padded pixel height
  int n_vit_w = 0;      // best_width / patch_size
  int n_vit_h = 0;
  int n_llm_w = 0;  // aligner tokens per row: ceil(n_vit_w / downsample_ratio)
  int n_llm_h = 0;
  BudgetBranch budget = BudgetBranch::kNone;
  // True on the max_wh_ratio path (image.width >= ratio * image.height): the image is stretched
  // to best_width x best_height instead of letterboxed.
  bool stretch = false;

  int64_t num_tokens() const { return NumImageTokens(n_llm_h, n_llm_w); }
  friend bool operator==(const ImageGridPlan&, const ImageGridPlan&) = default;
};

// plan_image_grid(width, height) of the reference, for an image of the given original size.
// Errors: InvalidArgument if a side is not in (0, 2^24) or the config is invalid; Internal if the
// solved size still exceeds the budget (the reference asserts; cannot happen with N >= 4).
absl::StatusOr<ImageGridPlan> PlanImageGrid(int width, int height,
                                            const VisionPreprocessConfig& config);

}  // namespace flashserve::model::vision
