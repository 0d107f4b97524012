// VisionEncoder::Create: shape checks against the config and the one-time workspace sizing.
#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "model/vit/vision_encoder.h"

namespace flashserve::model::vit {
namespace {

using kernels::PreparedLinear;

absl::Status CheckLinear(const std::string& name, const PreparedLinear& w, int64_t out, int64_t in,
                         bool bias) {
  if (w.out_features() != out || w.in_features() != in) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: %s is [%d, %d], the config implies [%d, %d]", name,
                        w.out_features(), w.in_features(), out, in));
  }
  if (w.has_bias() != bias) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: %s %s a bias, the reference's %s", name,
                        w.has_bias() ? "has" : "lacks", bias ? "has one" : "has none"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> CopyNorm(const std::string& name,
                                            const safetensors::TensorView& t, int64_t dim) {
  if (t.dtype != safetensors::DType::kF32 || t.numel() != dim || t.nbytes != dim * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: %s must be F32 [%d]", name, dim));
  }
  std::vector<float> out(dim);
  std::memcpy(out.data(), t.data, t.nbytes);  // the mapping need not be 4-byte aligned
  return out;
}

// The most aligner rows any grid of at most `max_patches` patches produces.
int64_t MaxAlignerRows(int max_patches, int ratio) {
  int64_t best = 0;
  for (int h = 1; h <= max_patches; ++h) {
    const int w = max_patches / h;
    best = std::max<int64_t>(best, int64_t{(h + ratio - 1) / ratio} * ((w + ratio - 1) / ratio));
  }
  return best;
}

}  // namespace

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Create(
    const ModelConfig& config, const VisionWeights& weights, const PreparedVision& prepared,
    const VisionEncoderOptions& options, ThreadPool* pool) {
  if (!config.vision_enabled()) {
    return absl::FailedPreconditionError("vision encoder: the config has vision_n_layers 0");
  }
  if (config.vision_n_heads < 1 || config.vision_dim % config.vision_n_heads != 0 ||
      (config.vision_dim / config.vision_n_heads) % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vision encoder: vision_dim %d must split into vision_n_heads %d heads of a multiple "
        "of 4 dims (2-D RoPE)",
        config.vision_dim, config.vision_n_heads));
  }
  if (config.vision_downsample_ratio < 1 || config.vision_patch_size < 1 ||
      config.vision_inter_dim < 1 || config.dim < 1) {
    return absl::InvalidArgumentError(
        "vision encoder: vision_downsample_ratio, vision_patch_size, vision_inter_dim and dim "
        "must be >= 1");
  }
  if (options.max_patches < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: options.max_patches %d is negative", options.max_patches));
  }
  if (options.linear_mode != kernels::LinearMode::kFast &&
      options.linear_mode != kernels::LinearMode::kExact) {
    return absl::InvalidArgumentError("vision encoder: options.linear_mode is not a LinearMode");
  }

  auto e = std::unique_ptr<VisionEncoder>(new VisionEncoder());
  e->vision_dim_ = config.vision_dim;
  e->heads_ = config.vision_n_heads;
  e->head_dim_ = config.vision_dim / config.vision_n_heads;
  e->inter_ = config.vision_inter_dim;
  e->patch_dim_ = 3 * config.vision_patch_size * config.vision_patch_size;
  e->ratio_ = config.vision_downsample_ratio;
  e->dim_ = config.dim;
  e->rope_theta_ = config.vision_rope_theta;
  e->options_ = options;
  e->pool_ = pool;
  e->max_patches_ = options.max_patches > 0 ? options.max_patches
                                            : config.vision_max_n_token * e->ratio_ * e->ratio_;
  if (e->max_patches_ < 1) {
    return absl::InvalidArgumentError(
        "vision encoder: options.max_patches is 0 and the config's vision_max_n_token is < 1");
  }

  const int64_t d = e->vision_dim_;
  const int64_t unfolded = d * e->ratio_ * e->ratio_;
  if (prepared.wqkv.size() != static_cast<size_t>(config.vision_n_layers) ||
      prepared.wo.size() != prepared.wqkv.size() || prepared.w1.size() != prepared.wqkv.size() ||
      prepared.w2.size() != prepared.wqkv.size() || weights.blocks.size() != prepared.wqkv.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vision encoder: %d prepared / %d checkpoint blocks, config vision_n_layers %d",
        prepared.wqkv.size(), weights.blocks.size(), config.vision_n_layers));
  }
  RETURN_IF_ERROR(
      CheckLinear("vision.patch_embed.proj", prepared.patch_embed, d, e->patch_dim_, true));
  for (size_t i = 0; i < prepared.wqkv.size(); ++i) {
    const std::string b = absl::StrFormat("vision.blocks.%d.", i);
    RETURN_IF_ERROR(CheckLinear(b + "attn.wqkv", prepared.wqkv[i], 3 * d, d, true));
    RETURN_IF_ERROR(CheckLinear(b + "attn.wo", prepared.wo[i], d, d, true));
    RETURN_IF_ERROR(CheckLinear(b + "mlp.w1", prepared.w1[i], 2 * e->inter_, d, false));
    RETURN_IF_ERROR(CheckLinear(b + "mlp.w2", prepared.w2[i], d, e->inter_, false));
    Block block;
    ASSIGN_OR_RETURN(block.norm1, CopyNorm(b + "norm1.weight", weights.blocks[i].norm1, d));
    ASSIGN_OR_RETURN(block.norm2, CopyNorm(b + "norm2.weight", weights.blocks[i].norm2, d));
    block.wqkv = &prepared.wqkv[i];
    block.wo = &prepared.wo[i];
    block.w1 = &prepared.w1[i];
    block.w2 = &prepared.w2[i];
    e->blocks_.push_back(std::move(block));
  }
  ASSIGN_OR_RETURN(e->final_norm_, CopyNorm("vision.norm.weight", weights.norm, d));
  RETURN_IF_ERROR(CheckLinear("aligner.w1", prepared.aligner_w1, e->dim_, unfolded, true));
  RETURN_IF_ERROR(CheckLinear("aligner.w2", prepared.aligner_w2, e->dim_, e->dim_, true));
  e->patch_embed_ = &prepared.patch_embed;
  e->aligner_w1_ = &prepared.aligner_w1;
  e->aligner_w2_ = &prepared.aligner_w2;

  const int64_t n = e->max_patches_;
  const int64_t l = MaxAlignerRows(e->max_patches_, e->ratio_);
  const int64_t inter = e->inter_;
  e->x_.resize(n * d);
  e->normed_.resize(n * d);
  e->wide_.resize(std::max({n * 3 * d, n * 2 * inter, l * unfolded}));
  e->act_.resize(std::max({n * d, n * inter, l * e->dim_}));
  e->rows_.resize(n);
  e->cols_.resize(n);
  e->sdpa_ws_.resize(VisionSdpaWorkspaceFloats(n, e->heads_, e->head_dim_, pool));
  size_t linear_bytes = 0;
  const kernels::LinearMode mode = options.linear_mode;
  linear_bytes = std::max(linear_bytes, LinearWorkspaceBytes(prepared.patch_embed, n, mode, pool));
  for (const Block& block : e->blocks_) {
    for (const PreparedLinear* w : {block.wqkv, block.wo, block.w1, block.w2}) {
      linear_bytes = std::max(linear_bytes, LinearWorkspaceBytes(*w, n, mode, pool));
    }
  }
  linear_bytes = std::max(linear_bytes, LinearWorkspaceBytes(prepared.aligner_w1, l, mode, pool));
  linear_bytes = std::max(linear_bytes, LinearWorkspaceBytes(prepared.aligner_w2, l, mode, pool));
  e->linear_ws_.resize(linear_bytes);
  return e;
}

}  // namespace flashserve::model::vit
