// Index mapping of the aligner's 3x3 unfold (spec §4.10; the reference's Aligner.forward):
// the ViT output [n_vit_h * n_vit_w, C] is viewed as a C x n_vit_h x n_vit_w grid, zero-padded
// at the bottom and right to multiples of r (= downsample_ratio), and cut into r x r blocks.
// Block (i, j) becomes aligner input row L = i * n_llm_w + j (reading order), a vector of C*r*r
// values where channel c at kernel offset (kh, kw) sits at c*r*r + kh*r + kw (F.unfold order),
// taken from patch (i*r + kh) * n_vit_w + (j*r + kw) or zero where that lies in the padding.
// The ViT / aligner arithmetic itself lives in the runtime; this is the pure index function.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::model::vision {

struct AlignerUnfold {
  int n_vit_h = 0;
  int n_vit_w = 0;
  int ratio = 0;    // r
  int n_llm_h = 0;  // ceil(n_vit_h / r)
  int n_llm_w = 0;

  int padded_h() const { return n_llm_h * ratio; }
  int padded_w() const { return n_llm_w * ratio; }
  int num_tokens() const { return n_llm_h * n_llm_w; }  // L
  int taps() const { return ratio * ratio; }
};

// Errors: InvalidArgument unless all arguments are >= 1.
absl::StatusOr<AlignerUnfold> MakeAlignerUnfold(int n_vit_h, int n_vit_w, int ratio);

// The patch feeding token `token` at kernel offset (kh, kw), or -1 for zero padding.
// Preconditions (CHECKed): 0 <= token < L, 0 <= kh, kw < r.
int AlignerSourcePatch(const AlignerUnfold& unfold, int token, int kh, int kw);

// Position of channel c at (kh, kw) inside an unfolded row: c*r*r + kh*r + kw.
int64_t AlignerVectorIndex(const AlignerUnfold& unfold, int channel, int kh, int kw);

// The unfold applied to bf16 bit patterns: features [n_vit_h*n_vit_w, channels] ->
// [L, channels*r*r]; padding is +0.0 (bits 0). Errors: InvalidArgument if the sizes disagree.
absl::StatusOr<std::vector<uint16_t>> UnfoldAlignerInput(const AlignerUnfold& unfold,
                                                         std::span<const uint16_t> features,
                                                         int channels);

}  // namespace flashserve::model::vision
