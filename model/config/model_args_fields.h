// Internal to fs_model_config: the table of ModelArgs keys (one entry per ModelConfig field) and
// the JSON <-> field conversions shared by the flat parser, the HF parser and the writer.
// Not for use outside model/config/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/config/model_config.h"
#include "nlohmann/json.hpp"

namespace flashserve::model::config_internal {

using FieldRef =
    std::variant<int ModelConfig::*, int64_t ModelConfig::*, double ModelConfig::*,
                 bool ModelConfig::*, std::vector<int> ModelConfig::*,
                 std::vector<int64_t> ModelConfig::*, std::optional<int> ModelConfig::*,
                 WeightDtype ModelConfig::*, ExpertDtype ModelConfig::*, ScoreFunc ModelConfig::*>;

struct FieldSpec {
  absl::string_view name;  // the ModelArgs / flat config.json key
  FieldRef ref;
  bool required;  // false only for the keys whose ModelArgs default applies when absent
};

// Every ModelArgs field, in the order of the reference's dataclass.
absl::Span<const FieldSpec> ModelArgsFields();

// The spec of `name`, or nullptr when `name` is not a ModelArgs key.
const FieldSpec* FindField(absl::string_view name);

// Stores `value` into the field of `config` named by `spec`. Errors (InvalidArgument) name
// `display_name` (the key as the user wrote it) and the expected JSON type or allowed values.
absl::Status ReadField(const nlohmann::json& value, const FieldSpec& spec,
                       absl::string_view display_name, ModelConfig& config);

// The JSON value of the field named by `spec`.
nlohmann::ordered_json WriteField(const FieldSpec& spec, const ModelConfig& config);

// Parses JSON text into an object. Syntax errors, a non-object top level and duplicate keys
// (at any depth) are InvalidArgument naming `what` (e.g. "flat config"). Never throws.
absl::StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, absl::string_view what);

// Fills a ModelConfig from an object whose keys are ModelArgs names. `display` maps a ModelArgs
// key to the name used in error messages (absent: the key itself). Unknown keys and missing
// required keys are InvalidArgument naming the key. Does not run Validate.
using DisplayNames = std::vector<std::pair<std::string, std::string>>;
absl::StatusOr<ModelConfig> ConfigFromArgsObject(const nlohmann::json& object,
                                                 const DisplayNames& display);

}  // namespace flashserve::model::config_internal
