// Loading a DeepSeek-V4.1 checkpoint in the official inference format (the converted MP-1
// safetensors of convert.py: names and dtypes of spec §5/§6) into typed per-layer views.
//
//   ASSIGN_OR_RETURN(auto ckpt, LoadedCheckpoint::Open("tests/conformance/data/v41-tiny"));
//   const BlockWeights& layer2 = ckpt->weights().layers[2];
//
// Loading maps the files (no tensor data is read or copied) and checks every tensor's presence,
// dtype and shape against the config; all problems are reported at once, naming each tensor.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/checkpoint.h"
#include "model/config/layer_schedule.h"
#include "model/config/model_config.h"
#include "model/weights/model_weights.h"
#include "model/weights/tensor_spec.h"

namespace flashserve::model {

// Immutable after Open; const methods are thread-safe. Views in weights() point into the mapped
// files owned by this object.
class LoadedCheckpoint {
 public:
  // Opens the checkpoint at `dir` (model.safetensors or an index + shards) with the config.json
  // found in `dir`. Errors: the config's parse/validation errors; NotFound/DataLoss from the
  // safetensors layer; FailedPrecondition listing missing, mis-typed and unexpected tensors.
  static absl::StatusOr<std::unique_ptr<LoadedCheckpoint>> Open(const std::string& dir);

  // As above with an explicit config (e.g. one parsed from another file).
  static absl::StatusOr<std::unique_ptr<LoadedCheckpoint>> Open(const std::string& path,
                                                                const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const LayerSchedule& schedule() const { return schedule_; }
  const ModelWeights& weights() const { return weights_; }
  const safetensors::Checkpoint& checkpoint() const { return *checkpoint_; }
  // The tensors the config implies, in binding order.
  const std::vector<TensorSpec>& specs() const { return specs_; }

 private:
  LoadedCheckpoint() = default;

  ModelConfig config_;
  LayerSchedule schedule_;
  std::unique_ptr<safetensors::Checkpoint> checkpoint_;
  ModelWeights weights_;
  std::vector<TensorSpec> specs_;
};

// The tensors a checkpoint of `config` must hold, in binding order. Precondition: a validated
// config. Pure; O(number of tensors).
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config);

// Parameter and byte totals per ParamKind.
struct ParamSummary {
  std::array<int64_t, kNumParamKinds> params{};  // logical parameters (FP4: 2 per byte)
  std::array<int64_t, kNumParamKinds> bytes{};   // stored bytes incl. scales
  int64_t total_params = 0;
  int64_t total_bytes = 0;
  int64_t num_tensors = 0;
};
ParamSummary SummarizeParams(const std::vector<TensorSpec>& specs);

}  // namespace flashserve::model
