// ParseFlatConfig and ToFlatConfigJson: the flat inference config.json is ModelArgs itself, so
// both directions are a walk over the field table.
#include "common/base/status_macros.h"
#include "model/config/config_parser.h"
#include "model/config/model_args_fields.h"
#include "model/config/validate.h"

namespace flashserve::model {

absl::StatusOr<ModelConfig> ParseFlatConfig(std::string_view json) {
  ASSIGN_OR_RETURN(nlohmann::json object, config_internal::ParseJsonObject(json, "flat config"));
  ASSIGN_OR_RETURN(ModelConfig config, config_internal::ConfigFromArgsObject(object, {}),
                   "in the flat (inference) config");
  RETURN_IF_ERROR(Validate(config)) << "in the flat (inference) config";
  return config;
}

std::string ToFlatConfigJson(const ModelConfig& config) {
  // ordered_json keeps insertion order, i.e. the ModelArgs order of the field table.
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const config_internal::FieldSpec& spec : config_internal::ModelArgsFields()) {
    out[std::string(spec.name)] = config_internal::WriteField(spec, config);
  }
  return out.dump(1);
}

}  // namespace flashserve::model
