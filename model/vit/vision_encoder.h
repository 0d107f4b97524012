// The vision encoder of DeepSeek-V4.1-Flash on the CPU backend: the ViT and the aligner
// (projector) of spec §4.10, with the numerics of §10 item 10 (README.md has the recipe and the
// measured agreement with the v41-tiny fixture).
//
//   ASSIGN_OR_RETURN(auto encoder,
//                    VisionEncoder::Create(ckpt->config(), *ckpt->weights().vision,
//                                          *prepared->vision, {}, &pool));
//   RETURN_IF_ERROR(encoder->Encode(patches.bf16, patches.n_vit_h, patches.n_vit_w, vit, rows));
//
// Input: preprocessed patches (model/vision ExtractPatches): bf16 [n_h·n_w, 3·patch²], row-major
// over the patch grid. Output: the ViT features bf16 [n_h·n_w, vision_dim] and the aligner rows
// bf16 [n_llm_h·n_llm_w, dim] in reading order (the IMAGE slots of the image span).
//
// Ownership: Create copies the fp32 norm weights; the PreparedVision (its Linears) and the pool
// are borrowed and must outlive the encoder. All scratch is allocated once in Create for
// options.max_patches; Encode allocates nothing.
// Thread safety: one Encode/RunVit/RunAligner at a time per encoder (they share its workspace);
// use one encoder per thread for concurrency. Must not be called from inside a task of the pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm/gemm.h"
#include "model/config/model_config.h"
#include "model/runtime/prepared_model.h"
#include "model/vit/vit_sdpa.h"
#include "model/weights/model_weights.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::model::vit {

struct VisionEncoderOptions {
  // Largest image (n_h·n_w patches) Encode accepts; sizes the workspace. 0 = the largest the
  // config's token budget allows: vision_max_n_token · downsample_ratio².
  int max_patches = 0;
  // Linear mode of every ViT / aligner Linear (kernels/gemm/gemm.h): kFast (sgemm) by default,
  // kExact for the bit-reproducible sequential fp32 sums.
  kernels::LinearMode linear_mode = kernels::LinearMode::kFast;
  // The attention core's rounding recipe; kNone is the reference's (vit_sdpa.h).
  SdpaRounding sdpa_rounding = SdpaRounding::kNone;
};

class VisionEncoder {
 public:
  // Checks that `weights` / `prepared` have the shapes `config` implies (vision_n_layers blocks,
  // vision_dim, heads, inter, patch, downsample ratio, dim; biases where the reference has them)
  // and allocates the workspace. Errors: FailedPrecondition if vision is disabled in the config;
  // InvalidArgument naming the field or tensor for a bad option or a shape mismatch.
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> Create(const ModelConfig& config,
                                                               const VisionWeights& weights,
                                                               const PreparedVision& prepared,
                                                               const VisionEncoderOptions& options,
                                                               ThreadPool* pool);

  VisionEncoder(const VisionEncoder&) = delete;
  VisionEncoder& operator=(const VisionEncoder&) = delete;

  int vision_dim() const { return vision_dim_; }
  int dim() const { return dim_; }
  int patch_dim() const { return patch_dim_; }
  int max_patches() const { return max_patches_; }
  // Aligner rows for an n_h × n_w patch grid: ceil(n_h/r) · ceil(n_w/r).
  int64_t AlignerRows(int n_h, int n_w) const;

  // RunVit then RunAligner. Errors: as the two below; nothing useful is written on error.
  absl::Status Encode(std::span<const uint16_t> patches, int n_h, int n_w,
                      std::span<uint16_t> vit_out, std::span<uint16_t> aligner_out);

  // ViT: patch_embed, the blocks, the final RMSNorm -> vit_out [n_h·n_w, vision_dim].
  // Errors: InvalidArgument naming the argument when n_h or n_w < 1, n_h·n_w > max_patches(), or
  // a span's size differs from the grid's. Cost O(layers · (n·D² + n²·D)) flops.
  absl::Status RunVit(std::span<const uint16_t> patches, int n_h, int n_w,
                      std::span<uint16_t> vit_out);

  // Aligner: zero-pad to multiples of r, 3×3 unfold (model/vision aligner_unfold.h), w1 (bias),
  // exact GELU, w2 (bias) -> aligner_out [AlignerRows(n_h, n_w), dim]. Errors as RunVit.
  absl::Status RunAligner(std::span<const uint16_t> vit_out, int n_h, int n_w,
                          std::span<uint16_t> aligner_out);

 private:
  struct Block {
    std::vector<float> norm1, norm2;
    const kernels::PreparedLinear* wqkv = nullptr;
    const kernels::PreparedLinear* wo = nullptr;
    const kernels::PreparedLinear* w1 = nullptr;
    const kernels::PreparedLinear* w2 = nullptr;
  };

  VisionEncoder() = default;
  absl::Status CheckGrid(int n_h, int n_w) const;
  absl::Status Linear(const kernels::PreparedLinear& w, int64_t m, const uint16_t* x, uint16_t* y);
  absl::Status RunBlock(const Block& block, int64_t n);

  int vision_dim_ = 0;
  int heads_ = 0;
  int head_dim_ = 0;
  int inter_ = 0;
  int patch_dim_ = 0;
  int ratio_ = 0;
  int dim_ = 0;
  double rope_theta_ = 0.0;
  int max_patches_ = 0;
  VisionEncoderOptions options_;
  ThreadPool* pool_ = nullptr;

  const kernels::PreparedLinear* patch_embed_ = nullptr;
  std::vector<Block> blocks_;
  std::vector<float> final_norm_;
  const kernels::PreparedLinear* aligner_w1_ = nullptr;
  const kernels::PreparedLinear* aligner_w2_ = nullptr;

  // Workspace, sized in Create for max_patches_ (bf16 bit patterns unless noted).
  std::vector<uint16_t> x_;           // residual stream [n, D]
  std::vector<uint16_t> normed_;      // norm output [n, D]; also the attention output
  std::vector<uint16_t> wide_;        // qkv [n, 3D] / w1 output [n, 2I] / aligner input [L, D·r²]
  std::vector<uint16_t> act_;         // sublayer output [n, D] / MLP activation [n, I] / aligner h
  std::vector<int32_t> rows_, cols_;  // patch grid coordinates for the RoPE
  std::vector<float> sdpa_ws_;
  std::vector<uint8_t> linear_ws_;
};

}  // namespace flashserve::model::vit
