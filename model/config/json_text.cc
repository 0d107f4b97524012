// ParseJsonObject: nlohmann parsing behind a Status, with duplicate-key detection.
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/config/model_args_fields.h"

namespace flashserve::model::config_internal {

using json = nlohmann::json;

absl::StatusOr<json> ParseJsonObject(std::string_view text, absl::string_view what) {
  // Duplicate keys are silently merged by nlohmann; the callback sees every key first, so it
  // tracks the keys of each open object and records the first duplicate.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json parsed;
  try {
    parsed = json::parse(text.begin(), text.end(), callback);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": invalid JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": key '", duplicate, "' appears twice in one object"));
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a JSON object at the top level, got ", parsed.type_name()));
  }
  return parsed;
}

}  // namespace flashserve::model::config_internal
