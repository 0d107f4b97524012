#include "common/options/config_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace flashserve::options::internal {

std::string_view DescribeKind(ConfigValue::Kind kind) {
  switch (kind) {
    case ConfigValue::Kind::kNull:
      return "no value (null)";
    case ConfigValue::Kind::kMap:
      return "a map";
    case ConfigValue::Kind::kText:
    case ConfigValue::Kind::kFlag:
      return "a scalar";
    case ConfigValue::Kind::kString:
      return "a string";
    case ConfigValue::Kind::kBool:
      return "a boolean";
    case ConfigValue::Kind::kInteger:
      return "an integer";
    case ConfigValue::Kind::kNumber:
      return "a number";
    case ConfigValue::Kind::kList:
      return "a list";
  }
  return "an unknown value";
}

absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path) {
  const std::string lower = absl::AsciiStrToLower(path);
  const bool is_json = absl::EndsWith(lower, ".json");
  const bool is_yaml = absl::EndsWith(lower, ".yaml") || absl::EndsWith(lower, ".yml");
  if (!is_json && !is_yaml) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config file '", path, "': unsupported extension (expected .yaml, .yml or .json)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open config file '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading config file '", path, "'"));
  }
  return is_json ? ParseJsonConfig(contents.str(), path) : ParseYamlConfig(contents.str(), path);
}

}  // namespace flashserve::options::internal
