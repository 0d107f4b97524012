// The prompt-side layout of an image (spec §4.10; the reference's image_token_types and
// prepare_vl_inputs). An image with an n_llm_h x n_llm_w aligner grid occupies
//   START, then per aligner row (IMAGE x n_llm_w, NEWLINE), then END
// positions, every one of which carries image_token_id; only the slot kind tells them apart.
// START / NEWLINE / END take the learned image_start / image_newline / image_end vectors; IMAGE
// slots take the aligner's output rows in reading order.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::model::vision {

// Numeric values are the reference's token types (golden.json "types"); text is -1.
enum class ImageSlot : int8_t { kStart = 0, kImage = 1, kNewline = 2, kEnd = 3 };
inline constexpr int8_t kTextTokenType = -1;

struct ImageSpanEntry {
  ImageSlot slot = ImageSlot::kStart;
  int aligner_row = -1;  // kImage: index of the aligner output row (reading order); else -1
  friend bool operator==(const ImageSpanEntry&, const ImageSpanEntry&) = default;
};

// The span of one image, position by position (n_llm_h * (n_llm_w + 1) + 2 entries).
// Precondition: n_llm_h, n_llm_w >= 1 (CHECKed).
std::vector<ImageSpanEntry> ImageSpanLayout(int n_llm_h, int n_llm_w);

// The aligner grid of one image (from its ImageGridPlan).
struct LlmGrid {
  int n_llm_h = 0;
  int n_llm_w = 0;
};

struct ImageSpan {
  int64_t start = 0;  // position of START in the expanded prompt
  int n_llm_h = 0;
  int n_llm_w = 0;
  std::vector<ImageSpanEntry> entries;  // ImageSpanLayout(n_llm_h, n_llm_w)
};

struct ExpandedPrompt {
  std::vector<int32_t> token_ids;   // every span position holds image_token_id
  std::vector<int8_t> token_types;  // kTextTokenType or the ImageSlot value, per position
  std::vector<ImageSpan> images;    // in prompt order
};

// Replaces each occurrence of image_token_id in `prompt_ids` (the i-th one standing for image i)
// by that image's span. Errors: InvalidArgument if the number of placeholders differs from
// grids.size() (the reference's "Found N image tokens but got M images") or a grid has a side
// < 1.
absl::StatusOr<ExpandedPrompt> ExpandImagePlaceholders(std::span<const int32_t> prompt_ids,
                                                       std::span<const LlmGrid> grids,
                                                       int32_t image_token_id);

}  // namespace flashserve::model::vision
