#include "model/vision/aligner_unfold.h"

#include "absl/strings/str_cat.h"
#include "common/base/check.h"

namespace flashserve::model::vision {

absl::StatusOr<AlignerUnfold> MakeAlignerUnfold(int n_vit_h, int n_vit_w, int ratio) {
  if (n_vit_h < 1 || n_vit_w < 1 || ratio < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("aligner unfold: patch grid ", n_vit_h, "x", n_vit_w, ", ratio ", ratio));
  }
  AlignerUnfold u;
  u.n_vit_h = n_vit_h;
  u.n_vit_w = n_vit_w;
  u.ratio = ratio;
  u.n_llm_h = (n_vit_h + ratio - 1) / ratio;
  u.n_llm_w = (n_vit_w + ratio - 1) / ratio;
  return u;
}

int AlignerSourcePatch(const AlignerUnfold& u, int token, int kh, int kw) {
  CHECK(token >= 0 && token < u.num_tokens() && kh >= 0 && kh < u.ratio && kw >= 0 && kw < u.ratio)
      << "token " << token << " kh " << kh << " kw " << kw;
  const int row = (token / u.n_llm_w) * u.ratio + kh;
  const int col = (token % u.n_llm_w) * u.ratio + kw;
  if (row >= u.n_vit_h || col >= u.n_vit_w) return -1;
  return row * u.n_vit_w + col;
}

int64_t AlignerVectorIndex(const AlignerUnfold& u, int channel, int kh, int kw) {
  return static_cast<int64_t>(channel) * u.taps() + kh * u.ratio + kw;
}

absl::StatusOr<std::vector<uint16_t>> UnfoldAlignerInput(const AlignerUnfold& u,
                                                         std::span<const uint16_t> features,
                                                         int channels) {
  const size_t patches = static_cast<size_t>(u.n_vit_h) * u.n_vit_w;
  if (channels < 1 || features.size() != patches * channels) {
    return absl::InvalidArgumentError(absl::StrCat("aligner unfold: ", features.size(),
                                                   " feature values for ", patches, " patches x ",
                                                   channels, " channels"));
  }
  const size_t row_len = static_cast<size_t>(channels) * u.taps();
  std::vector<uint16_t> out(static_cast<size_t>(u.num_tokens()) * row_len, 0);
  for (int token = 0; token < u.num_tokens(); ++token) {
    uint16_t* row = &out[static_cast<size_t>(token) * row_len];
    for (int kh = 0; kh < u.ratio; ++kh) {
      for (int kw = 0; kw < u.ratio; ++kw) {
        const int patch = AlignerSourcePatch(u, token, kh, kw);
        if (patch < 0) continue;
        const uint16_t* src = &features[static_cast<size_t>(patch) * channels];
        for (int c = 0; c < channels; ++c) row[AlignerVectorIndex(u, c, kh, kw)] = src[c];
      }
    }
  }
  return out;
}

}  // namespace flashserve::model::vision
