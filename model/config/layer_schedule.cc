#include "model/config/layer_schedule.h"

#include <algorithm>

#include "model/config/source_lists.h"

namespace flashserve::model {
namespace {

using config_internal::Contains;
using config_internal::IndexOf;
using config_internal::MostRecentAtOrBefore;

int RatioOf(const ModelConfig& config, int layer) {
  if (layer < 0 || layer >= static_cast<int>(config.compress_ratios.size())) return 0;
  return config.compress_ratios[layer];
}

int DecoderStart(const ModelConfig& config) {
  for (int layer : config.kv_source_layers) {
    if (RatioOf(config, layer) == 1) return layer;
  }
  return config.n_layers;
}

void SetRope(const ModelConfig& config, LayerInfo& info) {
  if (info.compress_ratio == 0) {
    info.rope = RopeKind::kPlain;
    info.rope_theta = config.rope_theta;
  } else {
    info.rope = config.original_seq_len > 0 ? RopeKind::kYarn : RopeKind::kCompressedPlain;
    info.rope_theta = config.compress_rope_theta;
  }
}

LayerInfo BackboneLayer(const ModelConfig& config, int layer, int decoder_start) {
  LayerInfo info;
  info.layer_id = layer;
  info.compress_ratio = RatioOf(config, layer);
  const bool kv_source = Contains(config.kv_source_layers, layer);
  const bool index_source = Contains(config.index_source_layers, layer);
  if (info.compress_ratio > 0) {
    if (kv_source) {
      info.kind = LayerKind::kFull;
    } else if (index_source) {
      info.kind = LayerKind::kReindex;
    } else {
      info.kind = LayerKind::kReuse;
    }
    info.kv_source_layer = MostRecentAtOrBefore(config.kv_source_layers, layer);
    info.index_source_layer = MostRecentAtOrBefore(config.index_source_layers, layer);
    info.owns_compressor = kv_source;
    info.owns_indexer = index_source;
    info.owns_index_keys = kv_source && index_source;
    info.is_candidate_source =
        config.candidates_enabled() && layer == config.candidate_source_layer;
    // Reference: Indexer.uses_candidates = 0 <= candidate_source_layer < layer_id; only layers
    // with their own indexer apply it (Reuse layers take the already-masked top-k).
    info.candidate_masked =
        index_source && config.candidates_enabled() && layer > config.candidate_source_layer;
  }
  info.engram_index = IndexOf(config.engram_layer_ids, layer);
  info.has_engram = info.engram_index >= 0;
  info.dspark_tap_index = IndexOf(config.dspark_target_layer_ids, layer);
  info.is_dspark_tap = info.dspark_tap_index >= 0;
  SetRope(config, info);
  info.ced_role = layer < decoder_start ? CedRole::kEncoder : CedRole::kDecoder;
  info.n_routed_experts = config.n_routed_experts;
  info.n_activated_experts = config.n_activated_experts;
  return info;
}

LayerInfo DSparkStage(const ModelConfig& config, int stage) {
  LayerInfo info;
  info.layer_id = config.n_layers + stage;
  info.dspark_stage = stage;
  info.compress_ratio = RatioOf(config, info.layer_id);
  info.kind = LayerKind::kSwaOnly;
  SetRope(config, info);
  info.ced_role = CedRole::kDrafter;
  // Reference get_moe_config: a zero drafter size falls back to the backbone's.
  info.n_routed_experts =
      config.dspark_n_routed_experts ? config.dspark_n_routed_experts : config.n_routed_experts;
  info.n_activated_experts = config.dspark_n_activated_experts ? config.dspark_n_activated_experts
                                                               : config.n_activated_experts;
  return info;
}

}  // namespace

std::string_view LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kSwaOnly:
      return "SwaOnly";
    case LayerKind::kFull:
      return "Full";
    case LayerKind::kReindex:
      return "Reindex";
    case LayerKind::kReuse:
      return "Reuse";
  }
  return "?";
}

std::string_view RopeKindName(RopeKind kind) {
  switch (kind) {
    case RopeKind::kPlain:
      return "plain";
    case RopeKind::kYarn:
      return "yarn";
    case RopeKind::kCompressedPlain:
      return "compressed-plain";
  }
  return "?";
}

std::string_view CedRoleName(CedRole role) {
  switch (role) {
    case CedRole::kEncoder:
      return "encoder";
    case CedRole::kDecoder:
      return "decoder";
    case CedRole::kDrafter:
      return "drafter";
  }
  return "?";
}

LayerSchedule BuildSchedule(const ModelConfig& config) {
  LayerSchedule schedule;
  schedule.n_backbone_layers = std::max(config.n_layers, 0);
  schedule.n_dspark_stages = config.dspark_enabled() ? std::max(config.n_mtp_layers, 0) : 0;
  schedule.decoder_start_layer = DecoderStart(config);
  schedule.candidate_source_layer = config.candidate_source_layer;
  schedule.layers.reserve(schedule.n_backbone_layers + schedule.n_dspark_stages);
  for (int layer = 0; layer < schedule.n_backbone_layers; ++layer) {
    schedule.layers.push_back(BackboneLayer(config, layer, schedule.decoder_start_layer));
  }
  for (int stage = 0; stage < schedule.n_dspark_stages; ++stage) {
    schedule.layers.push_back(DSparkStage(config, stage));
  }
  return schedule;
}

}  // namespace flashserve::model
