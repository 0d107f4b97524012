#include "model/config/validate.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "model/config/kv_sizes.h"
#include "model/config/source_lists.h"

namespace flashserve::model {
namespace {

using config_internal::Contains;
using config_internal::MostRecentAtOrBefore;

// Quantisation block along K / channels (FP8 activations, FP4 E8M0 groups, weight scales).
constexpr int kQuantBlock = 32;

template <typename... Args>
absl::Status Bad(absl::string_view key, const Args&... message) {
  return absl::InvalidArgumentError(absl::StrCat("config key '", key, "': ", message...));
}

absl::Status CheckSizes(const ModelConfig& c) {
  const std::pair<absl::string_view, int64_t> positive[] = {
      {"vocab_size", c.vocab_size},
      {"dim", c.dim},
      {"moe_inter_dim", c.moe_inter_dim},
      {"n_layers", c.n_layers},
      {"n_heads", c.n_heads},
      {"n_routed_experts", c.n_routed_experts},
      {"n_activated_experts", c.n_activated_experts},
      {"q_lora_rank", c.q_lora_rank},
      {"head_dim", c.head_dim},
      {"rope_head_dim", c.rope_head_dim},
      {"o_groups", c.o_groups},
      {"o_lora_rank", c.o_lora_rank},
      {"window_size", c.window_size},
      {"index_n_heads", c.index_n_heads},
      {"index_head_dim", c.index_head_dim},
      {"index_topk", c.index_topk},
      {"hc_mult", c.hc_mult},
      {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
      {"max_batch_size", c.max_batch_size},
      {"max_seq_len", c.max_seq_len},
      {"beta_fast", c.beta_fast},
      {"beta_slow", c.beta_slow},
  };
  for (const auto& [key, value] : positive) {
    if (value <= 0) return Bad(key, "must be > 0, got ", value);
  }
  const std::pair<absl::string_view, double> non_negative[] = {
      {"n_mtp_layers", c.n_mtp_layers},       {"original_seq_len", c.original_seq_len},
      {"swiglu_limit", c.swiglu_limit},       {"temperature", c.temperature},
      {"vision_n_layers", c.vision_n_layers}, {"dspark_block_size", c.dspark_block_size},
  };
  for (const auto& [key, value] : non_negative) {
    if (!(value >= 0)) return Bad(key, "must be >= 0, got ", value);
  }
  const std::pair<absl::string_view, double> positive_real[] = {
      {"norm_eps", c.norm_eps},       {"hc_eps", c.hc_eps},
      {"rope_theta", c.rope_theta},   {"compress_rope_theta", c.compress_rope_theta},
      {"rope_factor", c.rope_factor}, {"gate_temp", c.gate_temp},
      {"route_scale", c.route_scale},
  };
  for (const auto& [key, value] : positive_real) {
    if (!(value > 0)) return Bad(key, "must be > 0, got ", value);
  }
  if (c.n_shared_experts != 1) {
    return Bad("n_shared_experts", "the reference supports exactly 1, got ", c.n_shared_experts);
  }
  if (c.n_activated_experts > c.n_routed_experts) {
    return Bad("n_activated_experts", c.n_activated_experts, " exceeds n_routed_experts ",
               c.n_routed_experts);
  }
  return absl::OkStatus();
}

absl::Status CheckShapes(const ModelConfig& c) {
  const std::pair<absl::string_view, int> blocked[] = {{"dim", c.dim},
                                                       {"q_lora_rank", c.q_lora_rank},
                                                       {"moe_inter_dim", c.moe_inter_dim},
                                                       {"head_dim", c.head_dim},
                                                       {"index_head_dim", c.index_head_dim}};
  for (const auto& [key, value] : blocked) {
    if (value % kQuantBlock != 0) {
      return Bad(key, "must be a multiple of ", kQuantBlock, " (quantisation block), got ", value);
    }
  }
  if (c.rope_head_dim % 2 != 0) return Bad("rope_head_dim", "must be even, got ", c.rope_head_dim);
  if (c.rope_head_dim > c.head_dim) {
    return Bad("rope_head_dim", c.rope_head_dim, " exceeds head_dim ", c.head_dim);
  }
  if (c.rope_head_dim > c.index_head_dim) {
    return Bad("rope_head_dim", c.rope_head_dim, " exceeds index_head_dim ", c.index_head_dim);
  }
  if (c.n_heads % c.o_groups != 0) {
    return Bad("o_groups", "n_heads ", c.n_heads, " is not divisible by o_groups ", c.o_groups);
  }
  return absl::OkStatus();
}

// Strictly increasing, every entry in [0, limit).
absl::Status CheckLayerList(absl::string_view key, const std::vector<int>& layers, int limit) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= limit) {
      return Bad(key, "layer ", layers[i], " is outside the backbone [0, ", limit, ")");
    }
    if (i > 0 && layers[i] <= layers[i - 1]) {
      return Bad(key, "must be strictly increasing, got [", absl::StrJoin(layers, ","), "]");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSchedule(const ModelConfig& c) {
  const std::vector<int>& ratios = c.compress_ratios;
  if (static_cast<int>(ratios.size()) != c.TotalLayers()) {
    return Bad("compress_ratios", "has ", ratios.size(), " entries, expected n_layers + ",
               "n_mtp_layers = ", c.TotalLayers());
  }
  for (int i = 0; i < c.TotalLayers(); ++i) {
    const int r = ratios[i];
    if (r < 0 || (r > 0 && kCacheBlockTokens % r != 0)) {
      return Bad("compress_ratios", "entry ", i, " is ", r, "; must be 0 or divide the ",
                 kCacheBlockTokens, "-token cache block");
    }
    if (i >= c.n_layers && r != 0) {
      return Bad("compress_ratios", "entry ", i, " is a DSpark stage and must be 0, got ", r);
    }
  }
  RETURN_IF_ERROR(CheckLayerList("kv_source_layers", c.kv_source_layers, c.n_layers));
  RETURN_IF_ERROR(CheckLayerList("index_source_layers", c.index_source_layers, c.n_layers));
  for (absl::string_view key : {"kv_source_layers", "index_source_layers"}) {
    const auto& list = key == "kv_source_layers" ? c.kv_source_layers : c.index_source_layers;
    for (int layer : list) {
      if (ratios[layer] == 0) {
        return Bad(key, "layer ", layer, " has compress_ratios[", layer, "] = 0");
      }
    }
  }
  for (int layer : c.kv_source_layers) {
    if (!Contains(c.index_source_layers, layer)) {
      return Bad("index_source_layers", "KV source layer ", layer,
                 " must also be an index source (it owns the index keys)");
    }
  }
  for (int i = 0; i < c.n_layers; ++i) {
    if (ratios[i] == 0) continue;
    const int kv = MostRecentAtOrBefore(c.kv_source_layers, i);
    if (kv < 0) {
      return Bad("kv_source_layers", "layer ", i, " (compress_ratios[", i, "] = ", ratios[i],
                 ") reads compressed KV but no KV source precedes it");
    }
    if (ratios[kv] != ratios[i]) {
      return Bad("compress_ratios", "layer ", i, " has ratio ", ratios[i],
                 " but reads the compressed KV of source layer ", kv, " with ratio ", ratios[kv]);
    }
    if (MostRecentAtOrBefore(c.index_source_layers, i) < 0) {
      return Bad("index_source_layers", "layer ", i, " needs an earlier index source");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCandidates(const ModelConfig& c) {
  const int src = c.candidate_source_layer;
  if (src == -1) return absl::OkStatus();
  if (src < 0 || src >= c.n_layers) {
    return Bad("candidate_source_layer", "must be -1 or a backbone layer, got ", src);
  }
  if (!Contains(c.kv_source_layers, src) || !Contains(c.index_source_layers, src)) {
    return Bad("candidate_source_layer", "layer ", src,
               " must be both a KV source and an index source");
  }
  if (c.candidate_topk_blocks <= 0) {
    return Bad("candidate_topk_blocks", "must be > 0 when candidates are on, got ",
               c.candidate_topk_blocks);
  }
  if (c.candidate_block_size <= 0 || kCacheBlockTokens % c.candidate_block_size != 0) {
    return Bad("candidate_block_size", "must divide the ", kCacheBlockTokens,
               "-token cache block, got ", c.candidate_block_size);
  }
  for (int layer : c.index_source_layers) {
    if (layer > src && MostRecentAtOrBefore(c.kv_source_layers, layer) != src) {
      return Bad("candidate_source_layer", "index source ", layer,
                 " is masked by the candidates of layer ", src,
                 " but reads the compressed KV of another source");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDSpark(const ModelConfig& c) {
  RETURN_IF_ERROR(CheckLayerList("dspark_target_layer_ids", c.dspark_target_layer_ids, c.n_layers));
  if (!c.dspark_enabled()) return absl::OkStatus();
  if (c.n_mtp_layers < 1) return Bad("n_mtp_layers", "must be >= 1 when DSpark is on");
  if (c.dspark_target_layer_ids.empty()) {
    return Bad("dspark_target_layer_ids", "must not be empty when DSpark is on");
  }
  if (c.dspark_noise_token_id < 0 || c.dspark_noise_token_id >= c.vocab_size) {
    return Bad("dspark_noise_token_id", c.dspark_noise_token_id, " is not a token id below ",
               c.vocab_size);
  }
  if (c.dspark_markov_rank <= 0) return Bad("dspark_markov_rank", "must be > 0");
  if (c.dspark_n_routed_experts < 0) return Bad("dspark_n_routed_experts", "must be >= 0");
  if (c.dspark_n_activated_experts < 0) return Bad("dspark_n_activated_experts", "must be >= 0");
  const int experts = c.dspark_n_routed_experts ? c.dspark_n_routed_experts : c.n_routed_experts;
  const int topk =
      c.dspark_n_activated_experts ? c.dspark_n_activated_experts : c.n_activated_experts;
  if (topk > experts) {
    return Bad("dspark_n_activated_experts", topk, " exceeds the drafter's ", experts,
               " routed experts");
  }
  return absl::OkStatus();
}

absl::Status CheckEngram(const ModelConfig& c) {
  RETURN_IF_ERROR(CheckLayerList("engram_layer_ids", c.engram_layer_ids, c.n_layers));
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size()) {
    return Bad("engram_num_embeddings", "has ", c.engram_num_embeddings.size(), " entries for ",
               c.engram_layer_ids.size(), " engram_layer_ids");
  }
  if (c.engram_layer_ids.empty()) return absl::OkStatus();
  for (int64_t rows : c.engram_num_embeddings) {
    if (rows <= 0) return Bad("engram_num_embeddings", "entries must be > 0, got ", rows);
  }
  if (c.engram_max_ngram_size < 2) {
    return Bad("engram_max_ngram_size", "must be >= 2, got ", c.engram_max_ngram_size);
  }
  if (c.engram_n_heads <= 0) return Bad("engram_n_heads", "must be > 0");
  if (c.engram_head_dim <= 0 || c.engram_head_dim % kQuantBlock != 0) {
    return Bad("engram_head_dim", "must be a positive multiple of ", kQuantBlock, ", got ",
               c.engram_head_dim);
  }
  if (c.engram_vocab_size <= 0) return Bad("engram_vocab_size", "must be > 0");
  if (c.engram_compressed_vocab_size <= 0) {
    return Bad("engram_compressed_vocab_size", "must be > 0");
  }
  if (c.engram_pad_id < 0 || c.engram_pad_id >= c.vocab_size) {
    return Bad("engram_pad_id", c.engram_pad_id, " is not a token id below ", c.vocab_size);
  }
  return absl::OkStatus();
}

absl::Status CheckVision(const ModelConfig& c) {
  if (c.image_token_id < 0 || c.image_token_id >= c.vocab_size) {
    return Bad("image_token_id", c.image_token_id, " is not a token id below ", c.vocab_size);
  }
  if (!c.vision_enabled()) return absl::OkStatus();
  const std::pair<absl::string_view, double> positive[] = {
      {"vision_dim", c.vision_dim},
      {"vision_n_heads", c.vision_n_heads},
      {"vision_inter_dim", c.vision_inter_dim},
      {"vision_patch_size", c.vision_patch_size},
      {"vision_rope_theta", c.vision_rope_theta},
      {"vision_downsample_ratio", c.vision_downsample_ratio},
      {"vision_max_n_token", c.vision_max_n_token},
      {"vision_min_pixels", c.vision_min_pixels},
  };
  for (const auto& [key, value] : positive) {
    if (!(value > 0)) return Bad(key, "must be > 0 when vision is on, got ", value);
  }
  if (c.vision_dim % c.vision_n_heads != 0) {
    return Bad("vision_n_heads", "vision_dim ", c.vision_dim, " is not divisible by ",
               c.vision_n_heads);
  }
  if (c.vision_max_wh_ratio.has_value() && *c.vision_max_wh_ratio <= 0) {
    return Bad("vision_max_wh_ratio", "must be null or > 0, got ", *c.vision_max_wh_ratio);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const ModelConfig& config) {
  RETURN_IF_ERROR(CheckSizes(config));
  RETURN_IF_ERROR(CheckShapes(config));
  RETURN_IF_ERROR(CheckSchedule(config));
  RETURN_IF_ERROR(CheckCandidates(config));
  RETURN_IF_ERROR(CheckDSpark(config));
  RETURN_IF_ERROR(CheckEngram(config));
  RETURN_IF_ERROR(CheckVision(config));
  return absl::OkStatus();
}

}  // namespace flashserve::model
