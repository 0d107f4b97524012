#include "model/weights/loader.h"

#include "common/base/status_macros.h"
#include "model/config/config_parser.h"
#include "model/weights/bind_model.h"
#include "model/weights/weight_binder.h"

namespace flashserve::model {

absl::StatusOr<std::unique_ptr<LoadedCheckpoint>> LoadedCheckpoint::Open(const std::string& dir) {
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  return Open(dir, config);
}

absl::StatusOr<std::unique_ptr<LoadedCheckpoint>> LoadedCheckpoint::Open(
    const std::string& path, const ModelConfig& config) {
  auto loaded = std::unique_ptr<LoadedCheckpoint>(new LoadedCheckpoint());
  loaded->config_ = config;
  loaded->schedule_ = BuildSchedule(config);
  ASSIGN_OR_RETURN(loaded->checkpoint_, safetensors::Checkpoint::Open(path));
  WeightBinder binder(loaded->checkpoint_.get());
  loaded->weights_ = BindModel(loaded->config_, loaded->schedule_, &binder);
  RETURN_IF_ERROR(binder.Finish(AllowedExtraTensors(config)));
  loaded->specs_ = binder.specs();
  return loaded;
}

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config) {
  WeightBinder binder(nullptr);
  BindModel(config, BuildSchedule(config), &binder);
  return binder.specs();
}

ParamSummary SummarizeParams(const std::vector<TensorSpec>& specs) {
  ParamSummary s;
  for (const TensorSpec& spec : specs) {
    const int k = static_cast<int>(spec.kind);
    s.params[k] += spec.params;
    s.bytes[k] += spec.bytes;
    s.total_params += spec.params;
    s.total_bytes += spec.bytes;
    ++s.num_tensors;
  }
  return s;
}

std::string_view ParamKindName(ParamKind kind) {
  switch (kind) {
    case ParamKind::kEmbedding:
      return "embedding";
    case ParamKind::kHead:
      return "head";
    case ParamKind::kNorm:
      return "norms";
    case ParamKind::kMhc:
      return "mhc";
    case ParamKind::kAttention:
      return "attention";
    case ParamKind::kCompressor:
      return "compressor";
    case ParamKind::kIndexer:
      return "indexer";
    case ParamKind::kRouter:
      return "router";
    case ParamKind::kRoutedExperts:
      return "routed_experts";
    case ParamKind::kSharedExperts:
      return "shared_experts";
    case ParamKind::kEngramTable:
      return "engram_tables";
    case ParamKind::kEngram:
      return "engram";
    case ParamKind::kVision:
      return "vision";
    case ParamKind::kAligner:
      return "aligner";
    case ParamKind::kDSpark:
      return "dspark";
  }
  return "unknown";
}

}  // namespace flashserve::model
