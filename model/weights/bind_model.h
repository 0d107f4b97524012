// The walk over a DeepSeek-V4.1 model's modules, asking a WeightBinder for each tensor by its
// official inference-checkpoint name (spec §5 "Checkpoint dtypes", §6; the converted MP-1 format
// of the fixture README). It is the single description of the checkpoint layout: the loader and
// the expected-tensor list both come from it.
#pragma once

#include "model/config/layer_schedule.h"
#include "model/config/model_config.h"
#include "model/weights/model_weights.h"
#include "model/weights/weight_binder.h"

namespace flashserve::model {

// Binds every tensor of `config` (whose schedule is `schedule`). Problems are recorded in the
// binder (see WeightBinder::Finish). Precondition: Validate(config).ok().
ModelWeights BindModel(const ModelConfig& config, const LayerSchedule& schedule,
                       WeightBinder* binder);

// Tensor names a checkpoint may hold that the model does not read: the DSpark stages' aliases of
// the shared embed and head (mtp.{k}.embed.weight, mtp.{k}.head.weight).
std::vector<std::string> AllowedExtraTensors(const ModelConfig& config);

}  // namespace flashserve::model
