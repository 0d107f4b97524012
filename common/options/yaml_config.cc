// YAML side of config_file.h. yaml-cpp reports errors by throwing; every call into it sits inside
// the one try block in ParseYamlConfig so that no exception leaves this file.
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "common/options/config_file.h"
#include "yaml-cpp/yaml.h"

namespace flashserve::options::internal {
namespace {

std::string Location(std::string_view origin, const YAML::Mark& mark) {
  if (mark.is_null()) return std::string(origin);
  return absl::StrCat(::flashserve::ToAbsl(origin), ":", mark.line + 1, ":", mark.column + 1);
}

// Quoted scalars carry the non-specific tag "!", plain ones "?": quoting makes a value a string.
ConfigValue Scalar(const YAML::Node& node, std::string_view origin) {
  ConfigValue value;
  value.kind = node.Tag() == "!" ? ConfigValue::Kind::kString : ConfigValue::Kind::kText;
  value.text = node.Scalar();
  value.location = Location(origin, node.Mark());
  return value;
}

absl::Status Flatten(const YAML::Node& map, const std::string& prefix, std::string_view origin,
                     std::vector<ConfigEntry>* out) {
  for (const auto& member : map) {
    const YAML::Node& key_node = member.first;
    const YAML::Node& node = member.second;
    if (!key_node.IsScalar() || key_node.Scalar().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(Location(origin, key_node.Mark()),
                                                     ": map keys must be non-empty plain strings"));
    }
    std::string key =
        prefix.empty() ? key_node.Scalar() : absl::StrCat(prefix, ".", key_node.Scalar());
    ConfigValue value;
    value.location = Location(origin, node.Mark().is_null() ? key_node.Mark() : node.Mark());
    switch (node.Type()) {
      case YAML::NodeType::Map:
        if (node.size() != 0) {
          RETURN_IF_ERROR(Flatten(node, key, origin, out));
          continue;
        }
        value.kind = ConfigValue::Kind::kMap;
        break;
      case YAML::NodeType::Sequence:
        value.kind = ConfigValue::Kind::kList;
        for (const YAML::Node& item : node) {
          if (!item.IsScalar()) {
            return absl::InvalidArgumentError(
                absl::StrCat(Location(origin, item.Mark()), ": '", key,
                             "': list items must be scalars, not maps, lists or nulls"));
          }
          value.items.push_back(Scalar(item, origin));
        }
        break;
      case YAML::NodeType::Scalar:
        value = Scalar(node, origin);
        break;
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        value.kind = ConfigValue::Kind::kNull;
        break;
    }
    out->push_back(ConfigEntry{std::move(key), std::move(value)});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ConfigEntry>> ParseYamlConfig(std::string_view text,
                                                         std::string_view origin) {
  std::vector<ConfigEntry> entries;
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    if (root.IsNull()) return entries;  // an empty document sets nothing
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat(::flashserve::ToAbsl(origin),
                       ": the top level of a config file must be a map of options"));
    }
    RETURN_IF_ERROR(Flatten(root, "", origin, &entries));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed YAML in ", Location(origin, e.mark), ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed YAML in ", ::flashserve::ToAbsl(origin), ": ", e.what()));
  }
  return entries;
}

}  // namespace flashserve::options::internal
