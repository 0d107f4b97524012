// WeightBinder: looks tensors up by their official names while recording what was asked for.
//
// The model walk (bind_model.h) asks the binder for every tensor the config implies. With a
// checkpoint attached the binder returns views and records each problem (missing tensor, wrong
// dtype, wrong shape) instead of stopping at the first; Finish() then also finds the tensors the
// checkpoint has but the config does not explain, and reports everything in one error. Without a
// checkpoint it only records the expected TensorSpec list (views are empty).
//
// Not thread-safe; one binder per load.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/safetensors/checkpoint.h"
#include "model/weights/model_weights.h"
#include "model/weights/tensor_spec.h"

namespace flashserve::model {

class WeightBinder {
 public:
  // `checkpoint` may be null (spec collection only); not owned, must outlive the binder.
  explicit WeightBinder(const safetensors::Checkpoint* checkpoint) : checkpoint_(checkpoint) {}

  // One tensor of the given dtype and shape. Returns an empty view when absent or mismatched.
  TensorView Tensor(const std::string& name, safetensors::DType dtype, std::vector<int64_t> shape,
                    ParamKind kind, TensorRole role = TensorRole::kParams);

  // A Linear stored in `format` under `prefix` (".weight", plus ".scale" for FP8/FP4 and
  // ".bias" when `bias`). FP4 needs in_features to be a multiple of 32.
  Linear LinearLayer(const std::string& prefix, LinearFormat format, int64_t out_features,
                     int64_t in_features, ParamKind kind, bool bias = false);

  const std::vector<TensorSpec>& specs() const { return specs_; }

  // While set, every recorded tensor is attributed to `kind` (the DSpark stages' blocks count as
  // drafter parameters, not backbone attention/MoE). Reset with std::nullopt.
  void SetKindOverride(std::optional<ParamKind> kind) { kind_override_ = kind; }

  // Completes the check against the checkpoint (unexpected tensors) and returns OK, or
  // FailedPrecondition listing every missing, mis-typed/mis-shaped and unexpected tensor (up to
  // 20 of each, then a count). `allowed_extra` names tensors that may be present but are not
  // needed (e.g. DSpark embed/head aliases). Without a checkpoint: always OK.
  absl::Status Finish(const std::vector<std::string>& allowed_extra = {});

 private:
  const safetensors::Checkpoint* checkpoint_;
  std::optional<ParamKind> kind_override_;
  std::vector<TensorSpec> specs_;
  std::vector<std::string> missing_;
  std::vector<std::string> mismatched_;
};

}  // namespace flashserve::model
