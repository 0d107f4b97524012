// VisionEncoder forward: the ViT blocks and the aligner (vision_encoder.h; spec §4.10, §10.10).
#include "model/vit/vision_encoder.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/norm_rope/norm_rope.h"
#include "model/vision/aligner_unfold.h"
#include "model/vit/vit_activations.h"

namespace flashserve::model::vit {
namespace {

constexpr float kVisionNormEps = 1e-6f;

// x = bf16(x + y) elementwise: the residual add of two bf16 tensors.
void AddInPlace(uint16_t* x, const uint16_t* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    x[i] =
        formats::FloatToBf16Bits(formats::Bf16BitsToFloat(x[i]) + formats::Bf16BitsToFloat(y[i]));
  }
}

// fn(begin, end) over [0, n) rows, on the pool when there is one.
template <typename Fn>
void ForRows(ThreadPool* pool, int64_t n, const Fn& fn) {
  if (pool == nullptr || n < 2) {
    fn(size_t{0}, static_cast<size_t>(n));
  } else {
    pool->ParallelFor(static_cast<size_t>(n), 1, fn);
  }
}

absl::Status RmsNorm(const uint16_t* x, const std::vector<float>& weight, int64_t rows,
                     uint16_t* out, ThreadPool* pool) {
  kernels::RmsNormParams p;
  p.rows = rows;
  p.cols = static_cast<int64_t>(weight.size());
  p.x = x;
  p.x_stride = p.cols;
  p.weight_f32 = weight.data();
  p.eps = kVisionNormEps;
  p.out = out;
  p.out_stride = p.cols;
  return kernels::RmsNormCpu(p, pool);
}

}  // namespace

int64_t VisionEncoder::AlignerRows(int n_h, int n_w) const {
  return int64_t{(n_h + ratio_ - 1) / ratio_} * ((n_w + ratio_ - 1) / ratio_);
}

absl::Status VisionEncoder::CheckGrid(int n_h, int n_w) const {
  if (n_h < 1 || n_w < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: grid n_h %d x n_w %d must be at least 1 x 1", n_h, n_w));
  }
  if (int64_t{n_h} * n_w > max_patches_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: grid %d x %d has %d patches, more than max_patches %d",
                        n_h, n_w, int64_t{n_h} * n_w, max_patches_));
  }
  return absl::OkStatus();
}

absl::Status VisionEncoder::Linear(const kernels::PreparedLinear& w, int64_t m, const uint16_t* x,
                                   uint16_t* y) {
  kernels::LinearParams p;
  p.weight = &w;
  p.m = m;
  p.x_bf16 = x;
  p.x_stride = w.in_features();
  p.y_bf16 = y;
  p.y_stride = w.out_features();
  p.mode = options_.linear_mode;
  p.workspace = linear_ws_.data();
  p.workspace_bytes = linear_ws_.size();
  return kernels::LinearCpu(p, pool_);
}

absl::Status VisionEncoder::Encode(std::span<const uint16_t> patches, int n_h, int n_w,
                                   std::span<uint16_t> vit_out, std::span<uint16_t> aligner_out) {
  RETURN_IF_ERROR(CheckGrid(n_h, n_w));
  if (aligner_out.size() != static_cast<size_t>(AlignerRows(n_h, n_w) * dim_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vision encoder: aligner_out holds %d values, the %d x %d grid needs %d rows x %d",
        aligner_out.size(), n_h, n_w, AlignerRows(n_h, n_w), dim_));
  }
  RETURN_IF_ERROR(RunVit(patches, n_h, n_w, vit_out));
  return RunAligner(vit_out, n_h, n_w, aligner_out);
}

absl::Status VisionEncoder::RunVit(std::span<const uint16_t> patches, int n_h, int n_w,
                                   std::span<uint16_t> vit_out) {
  RETURN_IF_ERROR(CheckGrid(n_h, n_w));
  const int64_t n = int64_t{n_h} * n_w;
  if (patches.size() != static_cast<size_t>(n * patch_dim_)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: patches holds %d values, the %d x %d grid needs %d x %d",
                        patches.size(), n_h, n_w, n, patch_dim_));
  }
  if (vit_out.size() != static_cast<size_t>(n * vision_dim_)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: vit_out holds %d values, the %d x %d grid needs %d x %d",
                        vit_out.size(), n_h, n_w, n, vision_dim_));
  }
  for (int64_t t = 0; t < n; ++t) {  // row-major patch order (reference get_vision_cos_sin)
    rows_[t] = static_cast<int32_t>(t / n_w);
    cols_[t] = static_cast<int32_t>(t % n_w);
  }
  RETURN_IF_ERROR(Linear(*patch_embed_, n, patches.data(), x_.data())) << "vision patch_embed";
  for (size_t i = 0; i < blocks_.size(); ++i) {
    RETURN_IF_ERROR(RunBlock(blocks_[i], n)) << "vision block " << i;
  }
  return RmsNorm(x_.data(), final_norm_, n, vit_out.data(), pool_);
}

absl::Status VisionEncoder::RunBlock(const Block& block, int64_t n) {
  const int64_t d = vision_dim_;
  // Attention: norm1 -> wqkv (q | k | v thirds) -> 2-D RoPE on q, k -> SDPA -> wo -> residual.
  RETURN_IF_ERROR(RmsNorm(x_.data(), block.norm1, n, normed_.data(), pool_));
  RETURN_IF_ERROR(Linear(*block.wqkv, n, normed_.data(), wide_.data()));
  for (int64_t part = 0; part < 2; ++part) {
    kernels::VisionRope2dParams rope;
    rope.patches = n;
    rope.heads = heads_;
    rope.head_dim = head_dim_;
    rope.theta = rope_theta_;
    rope.rows = rows_.data();
    rope.cols = cols_.data();
    rope.x = wide_.data() + part * d;
    rope.x_stride = 3 * d;
    rope.x_head_stride = head_dim_;
    rope.out = wide_.data() + part * d;
    rope.out_stride = 3 * d;
    rope.out_head_stride = head_dim_;
    RETURN_IF_ERROR(kernels::VisionRope2dCpu(rope, pool_));
  }
  VisionSdpaParams sdpa;
  sdpa.patches = n;
  sdpa.heads = heads_;
  sdpa.head_dim = head_dim_;
  sdpa.q = wide_.data();
  sdpa.k = wide_.data() + d;
  sdpa.v = wide_.data() + 2 * d;
  sdpa.qkv_stride = 3 * d;
  sdpa.out = normed_.data();
  sdpa.out_stride = d;
  sdpa.rounding = options_.sdpa_rounding;
  sdpa.workspace = sdpa_ws_.data();
  sdpa.workspace_floats = sdpa_ws_.size();
  RETURN_IF_ERROR(VisionSdpaCpu(sdpa, pool_));
  RETURN_IF_ERROR(Linear(*block.wo, n, normed_.data(), act_.data()));
  AddInPlace(x_.data(), act_.data(), n * d);

  // MLP: norm2 -> w1 (gate | up halves) -> bf16(silu(gate)) * up -> w2 -> residual.
  RETURN_IF_ERROR(RmsNorm(x_.data(), block.norm2, n, normed_.data(), pool_));
  RETURN_IF_ERROR(Linear(*block.w1, n, normed_.data(), wide_.data()));
  const int64_t inter = inter_;
  ForRows(pool_, n, [&](size_t begin, size_t end) {
    SiluMulBf16(static_cast<int64_t>(end - begin), inter, wide_.data() + begin * 2 * inter,
                wide_.data() + begin * 2 * inter + inter, 2 * inter, act_.data() + begin * inter,
                inter);
  });
  RETURN_IF_ERROR(Linear(*block.w2, n, act_.data(), normed_.data()));
  AddInPlace(x_.data(), normed_.data(), n * d);
  return absl::OkStatus();
}

absl::Status VisionEncoder::RunAligner(std::span<const uint16_t> vit_out, int n_h, int n_w,
                                       std::span<uint16_t> aligner_out) {
  RETURN_IF_ERROR(CheckGrid(n_h, n_w));
  const int64_t n = int64_t{n_h} * n_w;
  if (vit_out.size() != static_cast<size_t>(n * vision_dim_)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision encoder: vit_out holds %d values, the %d x %d grid needs %d x %d",
                        vit_out.size(), n_h, n_w, n, vision_dim_));
  }
  ASSIGN_OR_RETURN(const vision::AlignerUnfold unfold, vision::MakeAlignerUnfold(n_h, n_w, ratio_));
  const int64_t l = unfold.num_tokens();
  if (aligner_out.size() != static_cast<size_t>(l * dim_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vision encoder: aligner_out holds %d values, the %d x %d grid needs %d rows x %d",
        aligner_out.size(), n_h, n_w, l, dim_));
  }
  // Zero-padded r x r unfold into wide_ [L, D·r²] (index map from model/vision).
  const int64_t width = int64_t{vision_dim_} * unfold.taps();
  uint16_t* in = wide_.data();
  for (int64_t t = 0; t < l; ++t) {
    for (int kh = 0; kh < ratio_; ++kh) {
      for (int kw = 0; kw < ratio_; ++kw) {
        const int src = vision::AlignerSourcePatch(unfold, static_cast<int>(t), kh, kw);
        const int64_t base = vision::AlignerVectorIndex(unfold, 0, kh, kw);
        for (int64_t c = 0; c < vision_dim_; ++c) {
          in[t * width + base + c * unfold.taps()] =
              src < 0 ? uint16_t{0} : vit_out[src * int64_t{vision_dim_} + c];
        }
      }
    }
  }
  RETURN_IF_ERROR(Linear(*aligner_w1_, l, in, act_.data())) << "aligner.w1";
  GeluBf16InPlace(act_.data(), l * dim_);
  RETURN_IF_ERROR(Linear(*aligner_w2_, l, act_.data(), aligner_out.data())) << "aligner.w2";
  return absl::OkStatus();
}

}  // namespace flashserve::model::vit
