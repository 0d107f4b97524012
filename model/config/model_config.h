// ModelConfig: the DeepSeek-V4.1 model arguments, one field per key of the flat inference
// config.json (the reference's ModelArgs; spec §2a/§2c). Field names are the JSON keys.
//
// Required vs optional: every key of the released inference/config.json is required when parsing.
// Only the five ModelArgs fields that the released config omits (max_batch_size, max_seq_len,
// temperature, gate_temp, norm_topk_prob) are optional; their defaults below are the ModelArgs
// defaults. The other initialisers here are zero/empty placeholders, not defaults.
//
// Thread safety: a plain value type; const access from several threads is safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace flashserve::model {

// Storage dtype of the non-expert Linear weights (ModelArgs.dtype).
enum class WeightDtype { kBf16, kFp8 };
// Storage dtype of the routed experts (ModelArgs.expert_dtype; JSON null = same as `dtype`).
enum class ExpertDtype { kSameAsDtype, kFp4 };
// Router score function (ModelArgs.score_func).
enum class ScoreFunc { kSoftmax, kSigmoid, kSqrtSoftplus };

// JSON spellings: "bf16"/"fp8"; "fp4" (kSameAsDtype is JSON null); "softmax"/"sigmoid"/
// "sqrtsoftplus". The returned views point to static storage.
std::string_view WeightDtypeName(WeightDtype dtype);
std::string_view ExpertDtypeName(ExpertDtype dtype);  // "null" for kSameAsDtype
std::string_view ScoreFuncName(ScoreFunc func);

struct ModelConfig {
  // ---- runtime limits (optional keys; ModelArgs defaults) ----
  int max_batch_size = 4;    // sequences the reference's caches are sized for
  int max_seq_len = 4096;    // positions the reference's caches and RoPE tables cover
  double temperature = 1.0;  // sampling temperature of the reference loop (0 = greedy)

  // ---- storage ----
  WeightDtype dtype = WeightDtype::kFp8;         // non-expert Linear weight storage
  ExpertDtype expert_dtype = ExpertDtype::kFp4;  // routed expert weight storage

  // ---- width ----
  int vocab_size = 0;     // token ids (embed rows, head rows)
  int dim = 0;            // residual width per hc stream
  int moe_inter_dim = 0;  // expert (routed and shared) intermediate width
  int n_layers = 0;       // backbone blocks, layer ids 0..n_layers-1
  int n_mtp_layers = 0;   // DSpark stages, layer ids n_layers.. (checkpoint prefix mtp.{k})
  int n_heads = 0;        // attention query heads

  // ---- MoE ----
  int n_routed_experts = 0;     // routed experts per backbone layer
  int n_shared_experts = 0;     // always-on shared experts (the reference supports exactly 1)
  int n_activated_experts = 0;  // routed experts chosen per token (top-k)
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;  // router score function
  double gate_temp = 1.0;      // router logits are divided by this (optional key)
  bool norm_topk_prob = true;  // renormalise the chosen weights when top-k > 1 (optional key)
  double route_scale = 0.0;    // routing weights are multiplied by this
  double swiglu_limit = 0.0;   // SwiGLU clamp (0 = off)

  // ---- attention ----
  int q_lora_rank = 0;    // low-rank query width (wq_a output)
  int head_dim = 0;       // width of q heads and of the shared K=V latent
  int rope_head_dim = 0;  // trailing dims of each head that carry RoPE
  double norm_eps = 0.0;  // epsilon of every text RMSNorm, mHC mixes and Engram gates
  int o_groups = 0;       // groups of the low-rank output projection
  int o_lora_rank = 0;    // per-group rank of the output projection
  int window_size = 0;    // sliding-window ring length per layer

  // ---- compressed KV schedule (§3) ----
  std::vector<int> compress_ratios;      // per layer incl. DSpark stages; 0 = window only
  std::vector<int> kv_source_layers;     // layers that own a Compressor + compressed KV cache
  std::vector<int> index_source_layers;  // layers that run their own indexer

  // ---- RoPE ----
  double compress_rope_theta = 0.0;  // theta of layers with ratio > 0
  int original_seq_len = 0;          // YaRN original context (0 = YaRN off)
  double rope_theta = 0.0;           // theta of ratio-0 layers (no YaRN)
  double rope_factor = 0.0;          // YaRN scaling factor
  int beta_fast = 0;                 // YaRN ramp: rotations at the fast end
  int beta_slow = 0;                 // YaRN ramp: rotations at the slow end

  // ---- indexer ----
  int index_n_heads = 0;   // indexer query heads
  int index_head_dim = 0;  // indexer q/k width
  int index_topk = 0;      // compressed positions kept per query

  // ---- hierarchical (candidate) indexer ----
  int candidate_source_layer = -1;  // layer publishing the candidate block mask; -1 = off
  int candidate_topk_blocks = 0;    // candidate blocks kept per query
  int candidate_block_size = 0;     // compressed positions per candidate block

  // ---- mHC ----
  int hc_mult = 0;            // residual streams
  int hc_sinkhorn_iters = 0;  // Sinkhorn iterations of the comb matrix
  double hc_eps = 0.0;        // Sinkhorn / pre-mix epsilon

  // ---- Engram ----
  std::vector<int> engram_layer_ids;           // layers with an Engram before the block
  std::vector<int64_t> engram_num_embeddings;  // table rows per Engram layer
  int engram_max_ngram_size = 0;               // largest n-gram (n = 2..max)
  int64_t engram_vocab_size = 0;               // prime search start per (n, head)
  int engram_n_heads = 0;                      // hash heads per n-gram size
  int engram_head_dim = 0;                     // width of one table row
  int engram_pad_id = 0;                       // token filling n-gram slots with no history
  int engram_compressed_vocab_size = 0;        // classes of the compressed token map

  // ---- vision ----
  int vision_n_layers = 0;                 // ViT blocks (0 = vision off)
  int vision_dim = 0;                      // ViT width
  int vision_n_heads = 0;                  // ViT heads
  int vision_inter_dim = 0;                // ViT MLP width
  int vision_patch_size = 0;               // pixels per patch side
  double vision_rope_theta = 0.0;          // ViT 2-D RoPE theta
  int vision_downsample_ratio = 0;         // aligner pixel-unshuffle factor per side
  int vision_max_n_token = 0;              // image span token budget
  int vision_min_pixels = 0;               // images below this area are upscaled
  std::optional<int> vision_max_wh_ratio;  // aspect-ratio cap; nullopt = JSON null (off)
  int image_token_id = 0;                  // placeholder id carried by every image-span token

  // ---- DSpark drafter ----
  int dspark_block_size = 0;                 // anchor + noise tokens per draft block (0 = off)
  int dspark_noise_token_id = 0;             // token id filling the draft positions
  std::vector<int> dspark_target_layer_ids;  // backbone layers whose inputs feed the drafter
  int dspark_markov_rank = 0;                // Markov head embedding width
  int dspark_n_routed_experts = 0;           // drafter routed experts (0 = backbone's)
  int dspark_n_activated_experts = 0;        // drafter top-k (0 = backbone's)

  // Field-by-field equality (doubles compared exactly).
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;

  // n_layers + n_mtp_layers: the length compress_ratios must have.
  int TotalLayers() const { return n_layers + n_mtp_layers; }
  bool vision_enabled() const { return vision_n_layers > 0; }
  bool dspark_enabled() const { return dspark_block_size > 0; }
  bool candidates_enabled() const { return candidate_source_layer >= 0; }
};

}  // namespace flashserve::model
