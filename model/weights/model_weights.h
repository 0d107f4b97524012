// Typed, zero-copy views of a DeepSeek-V4.1 checkpoint's weights, one struct per module of the
// model (spec §6). Every view points into the checkpoint's mmap and stays valid while the
// LoadedCheckpoint that produced it lives. The runtime converts what it needs (e.g. FP8 -> bf16
// for the CPU backend) when it builds its own buffers.
//
// Thread safety: plain values; read-only after loading.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/safetensors/safetensors.h"

namespace flashserve::model {

using safetensors::TensorView;

// How a Linear's weight is stored.
enum class LinearFormat {
  kBf16,        // weight BF16 [out, in]
  kFp8Block32,  // weight F8_E4M3 [out, in] + scale F8_E8M0 [ceil(out/32), ceil(in/32)]
  kFp4Block32,  // weight I8 [out, in/2] (packed E2M1, even element low nibble) + scale F8_E8M0
                // [out, in/32]
};

// A linear layer y = x W^T (+ b).
struct Linear {
  LinearFormat format = LinearFormat::kBf16;
  int64_t out_features = 0;
  int64_t in_features = 0;
  TensorView weight;
  TensorView scale;                // empty view (data == nullptr) for kBf16
  std::optional<TensorView> bias;  // vision and aligner Linears only
};

// The mHC parameters of one site (attention or FFN): fn [mixes, hc·dim], base [mixes], scale [3].
struct MhcSite {
  TensorView fn;
  TensorView base;
  TensorView scale;
};

// Compressor of a KV source (spec §4.4). wgate exists only for ratio > 1.
struct CompressorWeights {
  Linear wkv;
  std::optional<Linear> wgate;
  TensorView norm;
};

// Indexer parts a layer owns (spec §4.5): queries (wq_b, weights_proj) at index sources; keys
// (wk, k_norm) at KV sources that are also index sources.
struct IndexerWeights {
  std::optional<Linear> wq_b;
  std::optional<Linear> weights_proj;
  std::optional<Linear> wk;
  std::optional<TensorView> k_norm;
};

struct AttentionWeights {
  Linear wq_a;
  TensorView q_norm;
  Linear wq_b;
  Linear wkv;
  TensorView kv_norm;
  Linear wo_a;  // bf16, [o_groups·o_lora_rank, n_heads·head_dim/o_groups]
  Linear wo_b;
  TensorView attn_sink;
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;  // set when the layer owns any indexer part
};

struct ExpertWeights {
  Linear w1;  // gate projection [inter, dim]
  Linear w2;  // down projection [dim, inter]
  Linear w3;  // up projection [inter, dim]
};

struct MoeWeights {
  Linear gate;                             // bf16 [experts, dim]
  TensorView gate_bias;                    // f32 [experts]
  std::optional<TensorView> gate_bias_vl;  // f32 [experts], when vision is enabled
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

// Engram n-gram memory of one layer (spec §4.8).
struct EngramWeights {
  TensorView table_codes;   // F8_E4M3 [rows, head_dim]
  TensorView table_scales;  // F8_E8M0 [rows, head_dim/32]
  Linear wkv;               // FP8 [(hc+1)·dim, n-gram sizes·heads·head_dim]
  TensorView q_weight;      // bf16 [hc, dim]
  TensorView k_weight;      // bf16 [hc, dim]
};

// One transformer block: a backbone layer or a DSpark stage.
struct BlockWeights {
  int layer_id = 0;
  TensorView attn_norm;
  TensorView ffn_norm;
  MhcSite hc_attn;
  MhcSite hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
  std::optional<EngramWeights> engram;
};

// The DSpark drafter (spec §4.9): stages plus the stage-0 input projection and last-stage heads.
struct DSparkWeights {
  std::vector<BlockWeights> stages;
  Linear main_proj;         // FP8 [dim, taps·dim] (mtp.0)
  TensorView main_norm;     // [dim] (mtp.0)
  TensorView norm;          // [dim] (last stage)
  TensorView markov_embed;  // bf16 [vocab, markov_rank]
  Linear markov_head;       // bf16 [vocab, markov_rank]
  Linear confidence_proj;   // bf16 [1, dim + markov_rank]
};

struct VisionBlockWeights {
  TensorView norm1;  // f32 [vision_dim]
  TensorView norm2;  // f32 [vision_dim]
  Linear wqkv;       // [3·vision_dim, vision_dim] + bias
  Linear wo;         // [vision_dim, vision_dim] + bias
  Linear w1;         // [2·vision_inter, vision_dim]
  Linear w2;         // [vision_dim, vision_inter]
};

struct VisionWeights {
  Linear patch_embed;  // [vision_dim, 3·patch²] + bias
  std::vector<VisionBlockWeights> blocks;
  TensorView norm;    // f32 [vision_dim]
  Linear aligner_w1;  // [dim, vision_dim·r²] + bias
  Linear aligner_w2;  // [dim, dim] + bias
  TensorView image_start;
  TensorView image_end;
  TensorView image_newline;
};

struct ModelWeights {
  TensorView embed;  // bf16 [vocab, dim]
  Linear head;       // bf16 [vocab, dim]
  TensorView norm;   // bf16 [dim]
  std::vector<BlockWeights> layers;
  std::optional<DSparkWeights> dspark;
  std::optional<VisionWeights> vision;
};

}  // namespace flashserve::model
