// The whole per-image preprocessing of the reference's image_processor.load_image:
// decode -> RGB -> plan -> letterbox (ImageOps.pad, grey 127) or, on the max_wh_ratio path,
// stretch -> normalised bf16 patches.
//
//   ASSIGN_OR_RETURN(auto config, VisionPreprocessConfig::FromModelConfig(model_config));
//   ASSIGN_OR_RETURN(PreprocessedImage image, PreprocessImageBytes(bytes, config));
//   // image.patches.bf16: [n_vit_h * n_vit_w, 588] bf16 bits for the ViT
//   // image.plan.n_llm_h x n_llm_w: the aligner grid, which sizes the prompt's image span
//
// Thread safety: pure functions; concurrent calls are safe.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "model/vision/image.h"
#include "model/vision/image_decode.h"
#include "model/vision/patches.h"
#include "model/vision/resize_plan.h"

namespace flashserve::model::vision {

struct PreprocessedImage {
  int original_width = 0;
  int original_height = 0;
  ImageGridPlan plan;
  ImagePatches patches;
};

// The image the ViT sees: `image` letterboxed (or stretched, plan.stretch) to
// plan.best_width x plan.best_height. Errors: PadImage / ResizeBicubic errors.
absl::StatusOr<RgbImage> FitImageToPlan(const RgbImage& image, const ImageGridPlan& plan);

// Plan + fit + patches for a decoded image. Errors: those of PlanImageGrid, FitImageToPlan and
// ExtractPatches.
absl::StatusOr<PreprocessedImage> PreprocessRgbImage(const RgbImage& image,
                                                     const VisionPreprocessConfig& config);

// DecodeImage + PreprocessRgbImage. `bytes` is not retained.
absl::StatusOr<PreprocessedImage> PreprocessImageBytes(std::span<const uint8_t> bytes,
                                                       const VisionPreprocessConfig& config,
                                                       const DecodeOptions& options = {});

}  // namespace flashserve::model::vision
