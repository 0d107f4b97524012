// LayerSchedule: what each layer of a DeepSeek-V4.1 config does (spec §3, §4.4-4.6, §4.9),
// derived once from a validated ModelConfig. The runtime, the cache layout and the CLI's schedule
// table read it instead of re-deriving the rules.
//
// Thread safety: plain values; BuildSchedule is pure.
#pragma once

#include <string_view>
#include <vector>

#include "model/config/model_config.h"

namespace flashserve::model {

// How a layer gets its compressed-KV attention entries.
enum class LayerKind {
  kSwaOnly,  // ratio 0: sliding window only (layers 0-1, DSpark stages)
  kFull,     // KV source: own Compressor + compressed KV cache, own indexer + index keys
  kReindex,  // own indexer (queries + scoring + top-k) over an earlier source's KV and index keys
  kReuse,    // reads an earlier KV source's cache and the latest index source's top-k
};

// "SwaOnly", "Full", "Reindex", "Reuse".
std::string_view LayerKindName(LayerKind kind);

// RoPE table of a layer (q, window KV, compressed KV and index q/k all share it).
enum class RopeKind {
  kPlain,            // theta = rope_theta, no YaRN (ratio 0)
  kYarn,             // theta = compress_rope_theta with YaRN (ratio > 0 and original_seq_len > 0)
  kCompressedPlain,  // theta = compress_rope_theta, YaRN off (ratio > 0, original_seq_len == 0)
};

// "plain", "yarn", "compressed-plain".
std::string_view RopeKindName(RopeKind kind);

// Causal encoder-decoder role. Rule: the decoder begins at the first KV source whose compress
// ratio is 1 (layer 20 in the released model: its ratio-1 KV is projected from the encoder
// output, and no layer after it owns another global KV source of a different ratio); layers
// before it are the encoder. Without a ratio-1 KV source every backbone layer is encoder.
// DSpark stages are kDrafter.
enum class CedRole { kEncoder, kDecoder, kDrafter };

// "encoder", "decoder", "drafter".
std::string_view CedRoleName(CedRole role);

struct LayerInfo {
  int layer_id = 0;        // 0..n_layers-1 backbone, then n_layers + stage for DSpark
  int dspark_stage = -1;   // 0.. for DSpark stages (checkpoint mtp.{stage}), else -1
  int compress_ratio = 0;  // compress_ratios[layer_id]
  LayerKind kind = LayerKind::kSwaOnly;
  int kv_source_layer = -1;      // layer whose compressed KV this layer reads; -1 for SwaOnly
  int index_source_layer = -1;   // layer whose top-k this layer uses (self if it indexes); -1 none
  bool owns_compressor = false;  // kFull: Compressor + compressed KV cache
  bool owns_indexer = false;     // kFull or kReindex: indexer queries, scoring, top-k
  bool owns_index_keys = false;  // indexer wk/k_norm + index key cache (KV source + index source)
  bool is_candidate_source = false;  // publishes the candidate block mask
  bool candidate_masked = false;     // own indexer scores only inside the candidate mask
  bool has_engram = false;           // Engram runs on the stream before this block
  int engram_index = -1;             // position in engram_layer_ids, else -1
  bool is_dspark_tap = false;        // this block's input feeds the drafter
  int dspark_tap_index = -1;         // position in dspark_target_layer_ids, else -1
  RopeKind rope = RopeKind::kPlain;
  double rope_theta = 0.0;  // theta of this layer's RoPE table
  CedRole ced_role = CedRole::kEncoder;
  int n_routed_experts = 0;     // MoE experts of this block (drafter sizes for stages)
  int n_activated_experts = 0;  // MoE top-k of this block

  friend bool operator==(const LayerInfo&, const LayerInfo&) = default;
};

struct LayerSchedule {
  int n_backbone_layers = 0;    // == config.n_layers
  int n_dspark_stages = 0;      // n_mtp_layers when DSpark is on (dspark_block_size > 0), else 0
  int decoder_start_layer = 0;  // first decoder layer (n_backbone_layers if no decoder)
  int candidate_source_layer = -1;
  std::vector<LayerInfo> layers;  // backbone layers, then DSpark stages, in layer_id order

  friend bool operator==(const LayerSchedule&, const LayerSchedule&) = default;
};

// Derives the schedule. Precondition: Validate(config).ok(); an invalid config yields an
// unspecified (but memory-safe) schedule. Cost: O(layers x list sizes).
LayerSchedule BuildSchedule(const ModelConfig& config);

}  // namespace flashserve::model
