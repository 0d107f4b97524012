// The value of one option as read from a config file or a flag, before it is converted to the
// option's type. Internal to common/options; also the form Dump() and Help() print from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/base/strings.h"

namespace flashserve::options::internal {

struct ConfigValue {
  enum class Kind {
    kNull,     // YAML `key:` / `~`, JSON null
    kMap,      // an empty map (non-empty maps are flattened into dotted keys)
    kText,     // an untyped scalar: YAML plain scalar; converted by the option's type
    kFlag,     // a command-line value; like kText, and lists accept "a,b,c"
    kString,   // a JSON string or a quoted YAML scalar
    kBool,     // JSON true/false
    kInteger,  // JSON integer
    kNumber,   // JSON number with a fraction or exponent
    kList,     // a sequence of scalars, in `items`
  };

  Kind kind = Kind::kNull;
  std::string text;  // the scalar's text (kText, kFlag, kString, kBool, kInteger, kNumber)
  std::vector<ConfigValue> items;  // kList only; items are scalars
  std::string location;            // where it came from: "file.yaml:3:7", "file.json", "flag --k"
};

// One flattened entry: `cache: {ttl_hours: 48}` becomes {"cache.ttl_hours", 48}.
struct ConfigEntry {
  std::string key;
  ConfigValue value;
};

// "a string", "an integer", "a list", ... for error messages.
std::string_view DescribeKind(ConfigValue::Kind kind);

// Debian's Abseil has its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0): convert
// explicitly before handing a std::string_view to absl::StrCat and friends.
inline std::string_view AsStd(absl::string_view s) { return {s.data(), s.size()}; }

// The value as a person reads it: 72, "a string", [1, 2], 10m.
std::string DisplayValue(const ConfigValue& value);

}  // namespace flashserve::options::internal
