// Validate: the invariants a ModelConfig must satisfy before anything sizes buffers or builds a
// layer schedule from it. The parsers call it; call it yourself for configs built in code.
#pragma once

#include "absl/status/status.h"
#include "model/config/model_config.h"

namespace flashserve::model {

// Returns OK or InvalidArgumentError whose message starts "config key '<key>': " with the
// ModelArgs key at fault. Checks, in order:
//  - sizes: vocab_size, dim, moe_inter_dim, n_layers, n_heads, n_routed_experts,
//    n_activated_experts (<= n_routed_experts), q_lora_rank, head_dim, rope_head_dim, o_groups,
//    o_lora_rank, window_size, index_n_heads, index_head_dim, index_topk, hc_mult,
//    hc_sinkhorn_iters, max_batch_size, max_seq_len > 0; n_mtp_layers, original_seq_len,
//    swiglu_limit, temperature >= 0; n_shared_experts == 1 (all the reference supports);
//    norm_eps, hc_eps, rope_theta, compress_rope_theta, rope_factor, gate_temp, route_scale,
//    beta_fast, beta_slow > 0;
//  - shapes: dim, q_lora_rank, moe_inter_dim, head_dim, index_head_dim multiples of 32 (the
//    quantisation block); rope_head_dim even and <= head_dim and <= index_head_dim;
//    n_heads % o_groups == 0;
//  - schedule: compress_ratios has n_layers + n_mtp_layers entries, each 0 or a divisor of
//    kCacheBlockTokens (64), and 0 for every DSpark stage; kv_source_layers and
//    index_source_layers strictly increasing backbone layers with ratio > 0; every KV source is
//    also an index source (it owns the index keys); every compressed layer that is not a KV
//    source reads the most recent earlier KV source, which must exist and have the same ratio
//    ("Reuse before any source" is an error); every compressed layer that is not an index source
//    needs an earlier index source;
//  - candidates: candidate_source_layer is -1 (off) or a layer that is both KV and index source,
//    with candidate_topk_blocks > 0 and candidate_block_size dividing 64; every index source after
//    it must read its compressed KV (same KV source, so the mask has the right width);
//  - DSpark: dspark_target_layer_ids strictly increasing backbone layers; when dspark_block_size
//    > 0: n_mtp_layers >= 1, targets non-empty, noise token < vocab_size, markov rank > 0,
//    drafter expert counts >= 0 with top-k <= experts (0 = backbone's);
//  - Engram: engram_layer_ids strictly increasing backbone layers; engram_num_embeddings has one
//    positive entry per Engram layer; when any: max n-gram >= 2, heads > 0, head_dim a positive
//    multiple of 32, vocab sizes > 0, engram_pad_id < vocab_size;
//  - vision: image_token_id < vocab_size; when vision_n_layers > 0: widths/patch/ratios/token
//    budget/min pixels/theta > 0, vision_dim % vision_n_heads == 0, vision_max_wh_ratio > 0 if set.
// Pure and thread-safe; cost linear in the number of layers times the source-list lengths.
absl::Status Validate(const ModelConfig& config);

}  // namespace flashserve::model
