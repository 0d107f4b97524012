#include "model/vision/image_span.h"

#include "absl/strings/str_cat.h"
#include "common/base/check.h"
#include "model/vision/resize_plan.h"

namespace flashserve::model::vision {

std::vector<ImageSpanEntry> ImageSpanLayout(int n_llm_h, int n_llm_w) {
  CHECK(n_llm_h >= 1 && n_llm_w >= 1) << n_llm_h << "x" << n_llm_w;
  std::vector<ImageSpanEntry> entries;
  entries.reserve(static_cast<size_t>(NumImageTokens(n_llm_h, n_llm_w)));
  entries.push_back({ImageSlot::kStart, -1});
  int row = 0;
  for (int i = 0; i < n_llm_h; ++i) {
    for (int j = 0; j < n_llm_w; ++j) entries.push_back({ImageSlot::kImage, row++});
    entries.push_back({ImageSlot::kNewline, -1});
  }
  entries.push_back({ImageSlot::kEnd, -1});
  return entries;
}

absl::StatusOr<ExpandedPrompt> ExpandImagePlaceholders(std::span<const int32_t> prompt_ids,
                                                       std::span<const LlmGrid> grids,
                                                       int32_t image_token_id) {
  size_t placeholders = 0;
  for (int32_t id : prompt_ids) placeholders += id == image_token_id ? 1 : 0;
  if (placeholders != grids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Found ", placeholders, " image tokens but got ", grids.size(), " images"));
  }
  for (size_t i = 0; i < grids.size(); ++i) {
    if (grids[i].n_llm_h < 1 || grids[i].n_llm_w < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image ", i, ": aligner grid ", grids[i].n_llm_h, "x", grids[i].n_llm_w, " is empty"));
    }
  }
  ExpandedPrompt out;
  size_t next_image = 0;
  for (int32_t id : prompt_ids) {
    if (id != image_token_id) {
      out.token_ids.push_back(id);
      out.token_types.push_back(kTextTokenType);
      continue;
    }
    const LlmGrid& grid = grids[next_image++];
    ImageSpan span;
    span.start = static_cast<int64_t>(out.token_ids.size());
    span.n_llm_h = grid.n_llm_h;
    span.n_llm_w = grid.n_llm_w;
    span.entries = ImageSpanLayout(grid.n_llm_h, grid.n_llm_w);
    for (const ImageSpanEntry& entry : span.entries) {
      out.token_ids.push_back(image_token_id);
      out.token_types.push_back(static_cast<int8_t>(entry.slot));
    }
    out.images.push_back(std::move(span));
  }
  return out;
}

}  // namespace flashserve::model::vision
