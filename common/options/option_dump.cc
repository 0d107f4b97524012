// OptionSet::Dump and OptionSet::Help: printing the effective options and their documentation.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/check.h"
#include "common/base/strings.h"
#include "common/options/option_set.h"
#include "yaml-cpp/yaml.h"

namespace flashserve::options {
namespace internal {

std::string DisplayValue(const ConfigValue& value) {
  switch (value.kind) {
    case ConfigValue::Kind::kString:
      return absl::StrCat("\"", absl::CHexEscape(value.text), "\"");
    case ConfigValue::Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < value.items.size(); ++i) {
        absl::StrAppend(&out, i == 0 ? "" : ", ", DisplayValue(value.items[i]));
      }
      return out + "]";
    }
    case ConfigValue::Kind::kNull:
      return "null";
    case ConfigValue::Kind::kMap:
      return "{}";
    default:
      return value.text;
  }
}

}  // namespace internal
namespace {

// Strings are always double-quoted so that a value such as "true", "~" or "" stays a string when
// the dump is loaded again; everything else is a plain scalar.
void EmitValue(YAML::Emitter& out, const internal::ConfigValue& value) {
  switch (value.kind) {
    case internal::ConfigValue::Kind::kString:
      out << YAML::DoubleQuoted << value.text;
      break;
    case internal::ConfigValue::Kind::kList:
      out << YAML::Flow << YAML::BeginSeq;
      for (const internal::ConfigValue& item : value.items) EmitValue(out, item);
      out << YAML::EndSeq;
      break;
    default:
      out << value.text;
      break;
  }
}

}  // namespace

std::string OptionSet::Dump() const {
  // Sorted keys keep every group contiguous: each key closes the groups it is not in and opens
  // the ones it enters.
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;
  for (const auto& [key, option] : options_) {
    const std::vector<std::string> parts = absl::StrSplit(key, '.');
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << parts.back() << YAML::Value;
    EmitValue(out, option->Current());
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  CHECK(out.good()) << "YAML emitter failed: " << out.GetLastError();
  return absl::StrCat(out.c_str(), "\n");
}

std::string OptionSet::Help() const {
  std::string out =
      "Options (set in the --config file, .yaml or .json, or as --key=value; flags win):\n";
  for (const auto& [key, option] : options_) {
    absl::StrAppend(&out, "  --", key, " (", ::flashserve::ToAbsl(option->TypeName()),
                    ", default: ", internal::DisplayValue(option->Default()), ")\n      ",
                    option->help(), "\n");
  }
  return out;
}

}  // namespace flashserve::options
