// The CPU backend's copy of a checkpoint's Linears, prepared once at load (kernels/gemm):
// FP8/FP4 weights keep their codes and scales (plus an fp32 expansion for the fast path), bf16
// weights are upcast, and the Linears the reference runs as true fp32 GEMMs on fp32 copies of bf16
// weights (spec §5 "Held as fp32 copies", §10 item 3: head, router gate, ratio-2 compressor,
// Markov head, confidence head) become kF32. Norms, mHC parameters, sinks and tables stay views
// into the checkpoint mapping (ModelWeights), so the LoadedCheckpoint must outlive this object.
//
// Thread safety: immutable after Prepare; Linears may run concurrently.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm/prepared_linear.h"
#include "model/weights/loader.h"

namespace flashserve::model {

using kernels::PreparedLinear;

struct PreparedAttention {
  PreparedLinear wq_a, wq_b, wkv, wo_b;
  // The grouped low-rank output (spec §4.3 step 6): wo_a [o_groups·o_lora_rank, H·d/o_groups]
  // split into one bf16 Linear per group (rows g·o_lora_rank ..), each applied to its own heads.
  std::vector<PreparedLinear> wo_a;
  std::optional<PreparedLinear> compressor_wkv;    // KV sources; kF32 at ratio 2, kBf16 at ratio 1
  std::optional<PreparedLinear> compressor_wgate;  // ratio-2 sources; kF32
  std::optional<PreparedLinear> indexer_wq_b;      // index sources
  std::optional<PreparedLinear> indexer_weights_proj;
  std::optional<PreparedLinear> indexer_wk;        // KV sources that own index keys
};

struct PreparedExpert {
  PreparedLinear w1, w2, w3;
};

struct PreparedMoe {
  PreparedLinear gate;  // kF32 (bf16 checkpoint weight used in fp32)
  std::vector<PreparedExpert> experts;
  PreparedExpert shared;
};

struct PreparedBlock {
  PreparedAttention attn;
  PreparedMoe ffn;
  std::optional<PreparedLinear> engram_wkv;
};

struct PreparedDSpark {
  std::vector<PreparedBlock> stages;
  PreparedLinear main_proj;
  PreparedLinear markov_head;      // kF32
  PreparedLinear confidence_proj;  // kF32
};

struct PreparedVision {
  PreparedLinear patch_embed;
  std::vector<PreparedLinear> wqkv, wo, w1, w2;  // per ViT block
  PreparedLinear aligner_w1, aligner_w2;
};

struct PreparedModel {
  std::vector<PreparedBlock> layers;
  PreparedLinear head;  // kF32
  std::optional<PreparedDSpark> dspark;
  std::optional<PreparedVision> vision;
  size_t resident_bytes = 0;  // heap bytes of every PreparedLinear
};

struct PrepareModelOptions {
  // Keep fp32 expansions of quantised weights (fast CPU path, 4 B/param); see PreparedLinear.
  bool expand_to_f32 = true;
};

// Prepares every Linear of `checkpoint`. Errors: InvalidArgument naming the Linear when a tensor
// view does not have the size its format implies (cannot happen for a LoadedCheckpoint, whose
// shapes were checked). Cost: O(parameters), one pass, single-threaded.
absl::StatusOr<std::unique_ptr<PreparedModel>> PrepareModel(const LoadedCheckpoint& checkpoint,
                                                            const PrepareModelOptions& options = {});

}  // namespace flashserve::model
