#include "common/options/option_set.h"

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "common/options/config_file.h"

namespace flashserve::options {
namespace {

using internal::ConfigEntry;
using internal::ConfigValue;

// Dotted lower-case identifiers: "cache.ttl_hours".
bool IsValidKey(std::string_view key) {
  if (key.empty() || key.front() == '.' || key.back() == '.') return false;
  char prev = '.';
  for (char c : key) {
    const bool ident = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ident && !(c == '.' && prev != '.')) return false;
    prev = c;
  }
  return true;
}

// Levenshtein distance, giving up (returning limit + 1) once it must exceed `limit`.
size_t EditDistance(std::string_view a, std::string_view b, size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) return limit + 1;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    size_t best = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
      best = std::min(best, row[j]);
    }
    if (best > limit) return limit + 1;
  }
  return row[b.size()];
}

}  // namespace

OptionSet::~OptionSet() = default;

void OptionSet::AddOption(std::unique_ptr<internal::OptionBase> option) {
  const std::string& key = option->key();
  CHECK(IsValidKey(key)) << "invalid option key '" << key << "' (want dotted [a-z0-9_]+)";
  CHECK(!options_.contains(key)) << "option '" << key << "' registered twice";
  const auto next = options_.lower_bound(absl::StrCat(key, "."));
  CHECK(next == options_.end() || !absl::StartsWith(next->first, absl::StrCat(key, ".")))
      << "option '" << key << "' is also the group of '" << next->first << "'";
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
    CHECK(!options_.contains(key.substr(0, dot)))
        << "option '" << key << "' is inside option '" << key.substr(0, dot) << "'";
  }
  const absl::Status default_ok = option->Validate();
  CHECK(default_ok.ok()) << "default of option '" << key << "' fails its validator: " << default_ok;
  options_.emplace(key, std::move(option));
}

internal::OptionBase* OptionSet::Find(std::string_view key) const {
  const auto it = options_.find(key);
  return it == options_.end() ? nullptr : it->second.get();
}

bool OptionSet::Contains(std::string_view key) const { return Find(key) != nullptr; }

const std::string& OptionSet::SourceOf(std::string_view key) const {
  const internal::OptionBase* option = Find(key);
  CHECK(option != nullptr) << "SourceOf: option '" << key << "' is not registered";
  return option->source();
}

absl::Status OptionSet::UnknownKey(std::string_view std_key, std::string_view std_where) const {
  const absl::string_view key = ::flashserve::ToAbsl(std_key);
  const absl::string_view where = ::flashserve::ToAbsl(std_where);
  const auto group = options_.lower_bound(absl::StrCat(key, "."));
  if (group != options_.end() && absl::StartsWith(group->first, absl::StrCat(key, "."))) {
    return absl::InvalidArgumentError(absl::StrCat("'", key, "' in ", where,
                                                   " is a group of options (such as '",
                                                   group->first, "'), not an option"));
  }
  std::string message = absl::StrCat("unknown option '", key, "' in ", where);
  constexpr size_t kMaxSuggestDistance = 2;
  size_t best = kMaxSuggestDistance + 1;
  absl::string_view suggestion;
  for (const auto& [known, option] : options_) {
    const size_t d = EditDistance(std_key, known, kMaxSuggestDistance);
    if (d < best) {
      best = d;
      suggestion = known;
    }
  }
  if (!suggestion.empty()) absl::StrAppend(&message, " (did you mean '", suggestion, "'?)");
  return absl::InvalidArgumentError(message);
}

absl::Status OptionSet::Apply(const ConfigEntry& entry) {
  internal::OptionBase* option = Find(entry.key);
  if (option == nullptr) {
    // `cache:` with every member commented out, or `cache: {}`, names a group and sets nothing.
    const bool empty =
        entry.value.kind == ConfigValue::Kind::kNull || entry.value.kind == ConfigValue::Kind::kMap;
    const auto group = options_.lower_bound(absl::StrCat(entry.key, "."));
    if (empty && group != options_.end() &&
        absl::StartsWith(group->first, absl::StrCat(entry.key, "."))) {
      return absl::OkStatus();
    }
    return UnknownKey(entry.key, entry.value.location);
  }
  absl::Status status = option->Set(entry.value);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("option '", entry.key, "' (", ::flashserve::ToAbsl(option->TypeName()),
                     ") in ", entry.value.location, ": ", status.message()));
  }
  option->set_source(entry.value.location);
  return absl::OkStatus();
}

absl::Status OptionSet::LoadFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<ConfigEntry> entries, internal::ReadConfigFile(path));
  absl::flat_hash_set<std::string> seen;
  for (const ConfigEntry& entry : entries) {
    if (!seen.insert(entry.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("option '", entry.key, "' is set twice in ", entry.value.location));
    }
    RETURN_IF_ERROR(Apply(entry));
  }
  return absl::OkStatus();
}

absl::Status OptionSet::Set(std::string_view key, std::string_view text, std::string_view source) {
  ConfigEntry entry;
  entry.key = std::string(key);
  entry.value.kind = ConfigValue::Kind::kFlag;
  entry.value.text = std::string(text);
  entry.value.location = std::string(source);
  return Apply(entry);
}

absl::Status OptionSet::Validate() const {
  std::vector<std::string> problems;
  for (const auto& [key, option] : options_) {
    const absl::Status status = option->Validate();
    if (status.ok()) continue;
    problems.push_back(absl::StrCat("option '", key,
                                    "' = ", internal::DisplayValue(option->Current()), " (from ",
                                    option->source(), "): ", status.message()));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

}  // namespace flashserve::options
