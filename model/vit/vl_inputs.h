// Turns a prompt with image placeholders and the images' encoded bytes into what
// CpuModel::Forward takes (spec §4.10 "Token span", the reference's prepare_vl_inputs and
// merge_image_embeddings): the expanded token ids (every span position carries image_token_id),
// one image flag per position, and the embedding rows of the spans — the learned START / NEWLINE
// / END vectors and the aligner rows in reading order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config/model_config.h"
#include "model/vit/vision_encoder.h"
#include "model/weights/model_weights.h"

namespace flashserve::model::vit {

struct VlInputs {
  std::vector<int32_t> token_ids;    // [n]
  std::vector<uint8_t> image;        // [n]: 1 inside an image span
  std::vector<uint16_t> embeddings;  // bf16 [n, dim]; zero outside the spans
  int images = 0;
};

// Errors: InvalidArgument when the number of placeholders differs from images.size(); the
// decoder's, the preprocessor's and the encoder's errors for a bad image (named by its index).
// Cost: one ViT + aligner pass per image.
absl::StatusOr<VlInputs> BuildVlInputs(const ModelConfig& config, const VisionWeights& weights,
                                       VisionEncoder& encoder,
                                       std::span<const int32_t> prompt_ids,
                                       std::span<const std::vector<uint8_t>> images);

}  // namespace flashserve::model::vit
