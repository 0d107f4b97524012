#include "model/weights/bind_model.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace flashserve::model {
namespace {

using safetensors::DType;

// Storage format of the non-expert quantised Linears (wq_a, wq_b, wkv, wo_b, indexer.wq_b,
// shared experts, engram.wkv, main_proj).
LinearFormat DenseFormat(const ModelConfig& c) {
  return c.dtype == WeightDtype::kFp8 ? LinearFormat::kFp8Block32 : LinearFormat::kBf16;
}

// Storage format of the routed experts.
LinearFormat ExpertFormat(const ModelConfig& c) {
  return c.expert_dtype == ExpertDtype::kFp4 ? LinearFormat::kFp4Block32 : DenseFormat(c);
}

class ModelWalk {
 public:
  ModelWalk(const ModelConfig& c, WeightBinder* b) : c_(c), b_(*b) {}

  TensorView Norm(const std::string& name, int64_t width, DType dtype = DType::kBF16) {
    return b_.Tensor(name, dtype, {width}, ParamKind::kNorm);
  }

  MhcSite Mhc(const std::string& p, const std::string& site) {
    const int64_t mixes = static_cast<int64_t>(c_.hc_mult) * (2 + c_.hc_mult);
    return MhcSite{
        .fn = b_.Tensor(p + "hc_" + site + "_fn", DType::kF32,
                        {mixes, c_.hc_mult * int64_t{c_.dim}}, ParamKind::kMhc),
        .base = b_.Tensor(p + "hc_" + site + "_base", DType::kF32, {mixes}, ParamKind::kMhc),
        .scale = b_.Tensor(p + "hc_" + site + "_scale", DType::kF32, {3}, ParamKind::kMhc),
    };
  }

  AttentionWeights Attention(const std::string& p, const LayerInfo& info) {
    const int64_t d = c_.dim, hd = c_.head_dim, q = c_.q_lora_rank;
    const int64_t o = int64_t{c_.o_groups} * c_.o_lora_rank;
    const LinearFormat f = DenseFormat(c_);
    const ParamKind k = ParamKind::kAttention;
    AttentionWeights a{
        .wq_a = b_.LinearLayer(p + "attn.wq_a", f, q, d, k),
        .q_norm = Norm(p + "attn.q_norm.weight", q),
        .wq_b = b_.LinearLayer(p + "attn.wq_b", f, c_.n_heads * hd, q, k),
        .wkv = b_.LinearLayer(p + "attn.wkv", f, hd, d, k),
        .kv_norm = Norm(p + "attn.kv_norm.weight", hd),
        // convert.py stores wo_a dequantised to bf16 (spec §6).
        .wo_a = b_.LinearLayer(p + "attn.wo_a", LinearFormat::kBf16, o,
                               c_.n_heads * hd / c_.o_groups, k),
        .wo_b = b_.LinearLayer(p + "attn.wo_b", f, d, o, k),
        .attn_sink = b_.Tensor(p + "attn.attn_sink", DType::kF32, {c_.n_heads}, k),
    };
    if (info.owns_compressor) {
      CompressorWeights comp{.wkv = b_.LinearLayer(p + "attn.compressor.wkv", LinearFormat::kBf16,
                                                   hd, d, ParamKind::kCompressor)};
      if (info.compress_ratio > 1) {
        comp.wgate = b_.LinearLayer(p + "attn.compressor.wgate", LinearFormat::kBf16, hd, d,
                                    ParamKind::kCompressor);
      }
      comp.norm =
          b_.Tensor(p + "attn.compressor.norm.weight", DType::kBF16, {hd}, ParamKind::kCompressor);
      a.compressor = comp;
    }
    if (info.owns_indexer || info.owns_index_keys) {
      const ParamKind ik = ParamKind::kIndexer;
      const int64_t ihd = c_.index_head_dim;
      IndexerWeights idx;
      if (info.owns_indexer) {
        idx.wq_b = b_.LinearLayer(p + "attn.indexer.wq_b", f, c_.index_n_heads * ihd, q, ik);
        idx.weights_proj = b_.LinearLayer(p + "attn.indexer.weights_proj", LinearFormat::kBf16,
                                          c_.index_n_heads, d, ik);
      }
      if (info.owns_index_keys) {
        idx.wk = b_.LinearLayer(p + "attn.indexer.wk", LinearFormat::kBf16, ihd, hd, ik);
        idx.k_norm = b_.Tensor(p + "attn.indexer.k_norm.weight", DType::kBF16, {ihd}, ik);
      }
      a.indexer = idx;
    }
    return a;
  }

  ExpertWeights Expert(const std::string& p, LinearFormat f, ParamKind k) {
    const int64_t d = c_.dim, inter = c_.moe_inter_dim;
    return ExpertWeights{.w1 = b_.LinearLayer(p + ".w1", f, inter, d, k),
                         .w2 = b_.LinearLayer(p + ".w2", f, d, inter, k),
                         .w3 = b_.LinearLayer(p + ".w3", f, inter, d, k)};
  }

  MoeWeights Moe(const std::string& p, const LayerInfo& info) {
    const int64_t e = info.n_routed_experts;
    MoeWeights m{
        .gate = b_.LinearLayer(p + "ffn.gate", LinearFormat::kBf16, e, c_.dim, ParamKind::kRouter),
        .gate_bias = b_.Tensor(p + "ffn.gate.bias", DType::kF32, {e}, ParamKind::kRouter),
    };
    if (c_.vision_enabled()) {
      m.gate_bias_vl = b_.Tensor(p + "ffn.gate.bias_vl", DType::kF32, {e}, ParamKind::kRouter);
    }
    m.experts.reserve(e);
    for (int64_t i = 0; i < e; ++i) {
      m.experts.push_back(
          Expert(absl::StrCat(p, "ffn.experts.", i), ExpertFormat(c_), ParamKind::kRoutedExperts));
    }
    m.shared = Expert(p + "ffn.shared_experts", DenseFormat(c_), ParamKind::kSharedExperts);
    return m;
  }

  EngramWeights Engram(const std::string& p, int engram_index) {
    const int64_t rows = c_.engram_num_embeddings[engram_index];
    const int64_t hd = c_.engram_head_dim;
    const int64_t n_sizes = c_.engram_max_ngram_size - 1;  // n-grams of size 2..max
    const int64_t in = n_sizes * c_.engram_n_heads * hd;
    const int64_t out = int64_t{c_.hc_mult + 1} * c_.dim;  // one key per stream + the value
    return EngramWeights{
        .table_codes = b_.Tensor(p + "engram.embed.weight", DType::kF8E4M3, {rows, hd},
                                 ParamKind::kEngramTable),
        .table_scales = b_.Tensor(p + "engram.embed.scale", DType::kF8E8M0, {rows, hd / 32},
                                  ParamKind::kEngramTable, TensorRole::kScales),
        .wkv = b_.LinearLayer(p + "engram.wkv", DenseFormat(c_), out, in, ParamKind::kEngram),
        .q_weight = b_.Tensor(p + "engram.q_weight", DType::kBF16, {c_.hc_mult, c_.dim},
                              ParamKind::kEngram),
        .k_weight = b_.Tensor(p + "engram.k_weight", DType::kBF16, {c_.hc_mult, c_.dim},
                              ParamKind::kEngram),
    };
  }

  BlockWeights Block(const std::string& p, const LayerInfo& info) {
    BlockWeights blk{.layer_id = info.layer_id};
    blk.attn_norm = Norm(p + "attn_norm.weight", c_.dim);
    blk.ffn_norm = Norm(p + "ffn_norm.weight", c_.dim);
    blk.hc_attn = Mhc(p, "attn");
    blk.hc_ffn = Mhc(p, "ffn");
    blk.attn = Attention(p, info);
    blk.ffn = Moe(p, info);
    if (info.has_engram) blk.engram = Engram(p, info.engram_index);
    return blk;
  }

  DSparkWeights DSpark(const LayerSchedule& schedule) {
    DSparkWeights ds;
    const int stages = schedule.n_dspark_stages;
    b_.SetKindOverride(ParamKind::kDSpark);
    for (int s = 0; s < stages; ++s) {
      ds.stages.push_back(
          Block(absl::StrCat("mtp.", s, "."), schedule.layers[schedule.n_backbone_layers + s]));
    }
    b_.SetKindOverride(std::nullopt);
    const int64_t taps = static_cast<int64_t>(c_.dspark_target_layer_ids.size());
    const ParamKind k = ParamKind::kDSpark;
    ds.main_proj = b_.LinearLayer("mtp.0.main_proj", DenseFormat(c_), c_.dim, taps * c_.dim, k);
    ds.main_norm = b_.Tensor("mtp.0.main_norm.weight", DType::kBF16, {c_.dim}, k);
    const std::string last = absl::StrCat("mtp.", stages - 1, ".");
    ds.norm = b_.Tensor(last + "norm.weight", DType::kBF16, {c_.dim}, k);
    ds.markov_embed = b_.Tensor(last + "markov_head.embed.weight", DType::kBF16,
                                {c_.vocab_size, c_.dspark_markov_rank}, k);
    ds.markov_head = b_.LinearLayer(last + "markov_head.head", LinearFormat::kBf16, c_.vocab_size,
                                    c_.dspark_markov_rank, k);
    ds.confidence_proj = b_.LinearLayer(last + "confidence_head.proj", LinearFormat::kBf16, 1,
                                        int64_t{c_.dim} + c_.dspark_markov_rank, k);
    return ds;
  }

  VisionWeights Vision() {
    const int64_t vd = c_.vision_dim, patch = c_.vision_patch_size;
    const int64_t r = c_.vision_downsample_ratio;
    VisionWeights v;
    v.patch_embed = b_.LinearLayer("vision.patch_embed.proj", LinearFormat::kBf16, vd,
                                   3 * patch * patch, ParamKind::kVision, /*bias=*/true);
    for (int i = 0; i < c_.vision_n_layers; ++i) {
      const std::string p = absl::StrCat("vision.blocks.", i, ".");
      VisionBlockWeights blk;
      blk.norm1 = b_.Tensor(p + "norm1.weight", DType::kF32, {vd}, ParamKind::kVision);
      blk.norm2 = b_.Tensor(p + "norm2.weight", DType::kF32, {vd}, ParamKind::kVision);
      blk.wqkv = b_.LinearLayer(p + "attn.wqkv", LinearFormat::kBf16, 3 * vd, vd,
                                ParamKind::kVision, true);
      blk.wo = b_.LinearLayer(p + "attn.wo", LinearFormat::kBf16, vd, vd, ParamKind::kVision, true);
      blk.w1 = b_.LinearLayer(p + "mlp.w1", LinearFormat::kBf16, 2 * int64_t{c_.vision_inter_dim},
                              vd, ParamKind::kVision);
      blk.w2 = b_.LinearLayer(p + "mlp.w2", LinearFormat::kBf16, vd, c_.vision_inter_dim,
                              ParamKind::kVision);
      v.blocks.push_back(blk);
    }
    v.norm = b_.Tensor("vision.norm.weight", DType::kF32, {vd}, ParamKind::kVision);
    v.aligner_w1 = b_.LinearLayer("aligner.w1", LinearFormat::kBf16, c_.dim, vd * r * r,
                                  ParamKind::kAligner, true);
    v.aligner_w2 = b_.LinearLayer("aligner.w2", LinearFormat::kBf16, c_.dim, c_.dim,
                                  ParamKind::kAligner, true);
    v.image_start = b_.Tensor("image_start", DType::kBF16, {c_.dim}, ParamKind::kEmbedding);
    v.image_end = b_.Tensor("image_end", DType::kBF16, {c_.dim}, ParamKind::kEmbedding);
    v.image_newline = b_.Tensor("image_newline", DType::kBF16, {c_.dim}, ParamKind::kEmbedding);
    return v;
  }

 private:
  const ModelConfig& c_;
  WeightBinder& b_;
};

}  // namespace

ModelWeights BindModel(const ModelConfig& config, const LayerSchedule& schedule,
                       WeightBinder* binder) {
  ModelWalk walk(config, binder);
  ModelWeights w;
  w.embed = binder->Tensor("embed.weight", DType::kBF16, {config.vocab_size, config.dim},
                           ParamKind::kEmbedding);
  for (int i = 0; i < schedule.n_backbone_layers; ++i) {
    w.layers.push_back(walk.Block(absl::StrCat("layers.", i, "."), schedule.layers[i]));
  }
  w.norm = walk.Norm("norm.weight", config.dim);
  w.head = binder->LinearLayer("head", LinearFormat::kBf16, config.vocab_size, config.dim,
                               ParamKind::kHead);
  if (schedule.n_dspark_stages > 0) w.dspark = walk.DSpark(schedule);
  if (config.vision_enabled()) w.vision = walk.Vision();
  return w;
}

std::vector<std::string> AllowedExtraTensors(const ModelConfig& config) {
  std::vector<std::string> names;
  for (int s = 0; s < config.n_mtp_layers; ++s) {
    names.push_back(absl::StrCat("mtp.", s, ".embed.weight"));
    names.push_back(absl::StrCat("mtp.", s, ".head.weight"));
  }
  return names;
}

}  // namespace flashserve::model
