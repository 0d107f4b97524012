// JSON side of config_file.h. Parsed with nlohmann's SAX interface rather than into a DOM: the
// handler flattens as it goes, sees duplicate keys (a DOM keeps only the last), keeps the raw text
// of numbers, and reports syntax errors through parse_error() instead of an exception.
#include <cstddef>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/strings.h"
#include "common/options/config_file.h"
#include "nlohmann/json.hpp"

namespace flashserve::options::internal {
namespace {

using Json = nlohmann::json;

class FlatteningHandler {
 public:
  explicit FlatteningHandler(std::string_view origin) : origin_(::flashserve::ToAbsl(origin)) {}

  bool null() { return Scalar(ConfigValue::Kind::kNull, ""); }
  bool boolean(bool v) { return Scalar(ConfigValue::Kind::kBool, v ? "true" : "false"); }
  bool number_integer(Json::number_integer_t v) {
    return Scalar(ConfigValue::Kind::kInteger, std::to_string(v));
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    return Scalar(ConfigValue::Kind::kInteger, std::to_string(v));
  }
  bool number_float(Json::number_float_t, const Json::string_t& raw) {
    return Scalar(ConfigValue::Kind::kNumber, raw);
  }
  bool string(Json::string_t& v) { return Scalar(ConfigValue::Kind::kString, v); }
  bool binary(Json::binary_t&) { return Fail("binary values are not supported"); }

  bool start_object(std::size_t) {
    if (in_list_) return Fail(absl::StrCat("'", ListKey(), "': list items must be scalars"));
    if (frames_.empty() && seen_root_) return Fail("more than one top-level value");
    if (frames_.empty()) {
      seen_root_ = true;
      frames_.push_back(Frame{});
    } else {
      frames_.push_back(Frame{CurrentKey()});
      ++frames_[frames_.size() - 2].members;
    }
    return true;
  }
  bool key(Json::string_t& k) {
    if (k.empty()) return Fail("map keys must be non-empty");
    frames_.back().key = k;
    return true;
  }
  bool end_object() {
    Frame frame = std::move(frames_.back());
    frames_.pop_back();
    if (!frames_.empty() && frame.members == 0) {
      entries_.push_back(ConfigEntry{frame.prefix, Value(ConfigValue::Kind::kMap, "")});
    }
    return true;
  }
  bool start_array(std::size_t) {
    if (frames_.empty()) return Fail("the top level of a config file must be an object");
    if (in_list_) return Fail(absl::StrCat("'", ListKey(), "': lists of lists are not supported"));
    in_list_ = true;
    list_ = Value(ConfigValue::Kind::kList, "");
    ++frames_.back().members;
    return true;
  }
  bool end_array() {
    in_list_ = false;
    entries_.push_back(ConfigEntry{CurrentKey(), std::move(list_)});
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = absl::StrCat("malformed JSON in ", origin_, ": ", e.what());
    return false;
  }

  const std::string& error() const { return error_; }
  std::vector<ConfigEntry>& entries() { return entries_; }

 private:
  struct Frame {
    std::string prefix;  // dotted key of this object; empty at the root
    std::string key;     // the member being read
    int members = 0;
  };

  std::string CurrentKey() const {
    const Frame& f = frames_.back();
    return f.prefix.empty() ? f.key : absl::StrCat(f.prefix, ".", f.key);
  }
  std::string ListKey() const { return frames_.empty() ? "" : CurrentKey(); }

  ConfigValue Value(ConfigValue::Kind kind, std::string_view text) const {
    ConfigValue v;
    v.kind = kind;
    v.text = std::string(text);
    v.location = std::string(origin_);
    return v;
  }
  bool Scalar(ConfigValue::Kind kind, std::string_view text) {
    if (frames_.empty()) return Fail("the top level of a config file must be an object");
    if (in_list_) {
      if (kind == ConfigValue::Kind::kNull) {
        return Fail(absl::StrCat("'", ListKey(), "': list items must not be null"));
      }
      list_.items.push_back(Value(kind, text));
      return true;
    }
    ++frames_.back().members;
    entries_.push_back(ConfigEntry{CurrentKey(), Value(kind, text)});
    return true;
  }
  bool Fail(absl::string_view why) {
    error_ = absl::StrCat("invalid config in ", origin_, ": ", why);
    return false;
  }

  absl::string_view origin_;
  std::vector<Frame> frames_;
  bool seen_root_ = false;
  bool in_list_ = false;
  ConfigValue list_;
  std::vector<ConfigEntry> entries_;
  std::string error_;
};

}  // namespace

absl::StatusOr<std::vector<ConfigEntry>> ParseJsonConfig(std::string_view text,
                                                         std::string_view origin) {
  FlatteningHandler handler(origin);
  bool ok = false;
  try {
    ok = Json::sax_parse(text, &handler);
  } catch (const std::exception& e) {  // defensive: the SAX path reports errors, not throws
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON in ", ::flashserve::ToAbsl(origin), ": ", e.what()));
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        handler.error().empty() ? absl::StrCat("malformed JSON in ", ::flashserve::ToAbsl(origin))
                                : handler.error());
  }
  if (!handler.error().empty()) return absl::InvalidArgumentError(handler.error());
  return std::move(handler.entries());
}

}  // namespace flashserve::options::internal
