// The checkpoint's expected tensors for a config: name, dtype, shape and what part of the model
// each belongs to. Derived by the same walk that binds a checkpoint (bind_model.h), so the list
// and the loader can never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/safetensors/dtype.h"

namespace flashserve::model {

// What part of the model a tensor belongs to (for parameter counts and reports).
enum class ParamKind {
  kEmbedding,      // embed, image_start/end/newline
  kHead,           // output head
  kNorm,           // RMSNorm weights
  kMhc,            // hyper-connection mix parameters
  kAttention,      // q/kv/o projections, sinks
  kCompressor,     // KV-source compressors
  kIndexer,        // indexer queries, keys, head weights
  kRouter,         // MoE gate weights and biases
  kRoutedExperts,  // routed experts (FP4)
  kSharedExperts,  // shared experts (FP8)
  kEngramTable,    // Engram n-gram embedding tables
  kEngram,         // Engram projections and gates
  kVision,         // ViT
  kAligner,        // vision -> text projector
  kDSpark,         // drafter-only tensors (main_proj, heads) and the stages' blocks
};
inline constexpr int kNumParamKinds = 15;

// "embedding", "head", ... (stable names for tables and JSON).
std::string_view ParamKindName(ParamKind kind);

// Whether a tensor holds parameters or the block scales of another tensor.
enum class TensorRole { kParams, kScales };

struct TensorSpec {
  std::string name;
  safetensors::DType dtype = safetensors::DType::kBF16;
  std::vector<int64_t> shape;
  ParamKind kind = ParamKind::kAttention;
  TensorRole role = TensorRole::kParams;
  // Logical parameters: numel, or 2·numel for packed FP4 bytes; 0 for scale tensors.
  int64_t params = 0;
  // Stored bytes: numel · dtype size.
  int64_t bytes = 0;
};

}  // namespace flashserve::model
