#include "model/vit/vl_inputs.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "model/vision/image_span.h"
#include "model/vision/preprocess.h"

namespace flashserve::model::vit {

absl::StatusOr<VlInputs> BuildVlInputs(const ModelConfig& config, const VisionWeights& weights,
                                       VisionEncoder& encoder,
                                       std::span<const int32_t> prompt_ids,
                                       std::span<const std::vector<uint8_t>> images) {
  ASSIGN_OR_RETURN(const vision::VisionPreprocessConfig pc,
                   vision::VisionPreprocessConfig::FromModelConfig(config));
  std::vector<vision::PreprocessedImage> pre;
  std::vector<vision::LlmGrid> grids;
  for (size_t i = 0; i < images.size(); ++i) {
    ASSIGN_OR_RETURN(vision::PreprocessedImage p, vision::PreprocessImageBytes(images[i], pc),
                     absl::StrCat("image ", i));
    grids.push_back({p.plan.n_llm_h, p.plan.n_llm_w});
    pre.push_back(std::move(p));
  }
  ASSIGN_OR_RETURN(vision::ExpandedPrompt expanded,
                   vision::ExpandImagePlaceholders(prompt_ids, grids, config.image_token_id));
  const int64_t n = static_cast<int64_t>(expanded.token_ids.size()), D = config.dim;
  VlInputs out{.token_ids = std::move(expanded.token_ids), .images = int(images.size())};
  out.image.assign(static_cast<size_t>(n), 0);
  out.embeddings.assign(static_cast<size_t>(n * D), 0);
  std::vector<uint16_t> vit, rows;
  for (size_t i = 0; i < pre.size(); ++i) {
    const vision::ImagePatches& patches = pre[i].patches;
    const int64_t n_rows = encoder.AlignerRows(patches.n_vit_h, patches.n_vit_w);
    vit.resize(patches.num_patches() * static_cast<size_t>(encoder.vision_dim()));
    rows.resize(static_cast<size_t>(n_rows * D));
    RETURN_IF_ERROR(encoder.Encode(patches.bf16, patches.n_vit_h, patches.n_vit_w, vit, rows))
        << "image " << i;
    const vision::ImageSpan& span = expanded.images[i];
    for (size_t e = 0; e < span.entries.size(); ++e) {
      const int64_t pos = span.start + static_cast<int64_t>(e);
      uint16_t* dst = out.embeddings.data() + pos * D;
      out.image[pos] = 1;
      const vision::ImageSpanEntry& entry = span.entries[e];
      const uint8_t* src = nullptr;
      switch (entry.slot) {
        case vision::ImageSlot::kStart: src = weights.image_start.data; break;
        case vision::ImageSlot::kNewline: src = weights.image_newline.data; break;
        case vision::ImageSlot::kEnd: src = weights.image_end.data; break;
        case vision::ImageSlot::kImage:
          src = reinterpret_cast<const uint8_t*>(rows.data() + entry.aligner_row * D);
          break;
      }
      std::memcpy(dst, src, static_cast<size_t>(D) * 2);
    }
  }
  return out;
}

}  // namespace flashserve::model::vit
