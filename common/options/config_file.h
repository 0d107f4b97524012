// Reading config files into flat (dotted key, value) entries. Internal to common/options.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/options/config_value.h"

namespace flashserve::options::internal {

// Reads `path` and parses it by extension: .yaml / .yml with yaml-cpp, .json with nlohmann.
// Nested maps flatten to dotted keys; keys are returned in file order, duplicates included (the
// caller rejects them). Errors: NotFound if the file cannot be opened; InvalidArgument for an
// unknown extension or malformed content (the message names the file and, where the parser
// knows it, the line and column). Never throws.
absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path);

// Parse `text`; `origin` (usually the path) prefixes locations and messages. The top level must
// be a map/object (an empty YAML document gives no entries). Lists may hold only scalars.
absl::StatusOr<std::vector<ConfigEntry>> ParseYamlConfig(std::string_view text,
                                                         std::string_view origin);
absl::StatusOr<std::vector<ConfigEntry>> ParseJsonConfig(std::string_view text,
                                                         std::string_view origin);

}  // namespace flashserve::options::internal
