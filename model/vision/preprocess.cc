#include "model/vision/preprocess.h"

#include "common/base/status_macros.h"
#include "model/vision/bicubic_resample.h"
#include "model/vision/letterbox.h"

namespace flashserve::model::vision {

absl::StatusOr<RgbImage> FitImageToPlan(const RgbImage& image, const ImageGridPlan& plan) {
  if (plan.stretch) return ResizeBicubic(image, plan.best_width, plan.best_height);
  return PadImage(image, plan.best_width, plan.best_height, kPadGrey);
}

absl::StatusOr<PreprocessedImage> PreprocessRgbImage(const RgbImage& image,
                                                     const VisionPreprocessConfig& config) {
  PreprocessedImage out;
  out.original_width = image.width;
  out.original_height = image.height;
  ASSIGN_OR_RETURN(out.plan, PlanImageGrid(image.width, image.height, config));
  ASSIGN_OR_RETURN(RgbImage fitted, FitImageToPlan(image, out.plan),
                   "while fitting the image to its plan");
  ASSIGN_OR_RETURN(out.patches, ExtractPatches(fitted, config.patch_size));
  return out;
}

absl::StatusOr<PreprocessedImage> PreprocessImageBytes(std::span<const uint8_t> bytes,
                                                       const VisionPreprocessConfig& config,
                                                       const DecodeOptions& options) {
  ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, options));
  return PreprocessRgbImage(image, config);
}

}  // namespace flashserve::model::vision
