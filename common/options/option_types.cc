// Conversion between ConfigValue and each supported field type, and the typed option that binds a
// field. One Traits specialisation per type: Parse() says which value kinds it accepts.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "common/options/option_set.h"

namespace flashserve::options::internal {
namespace {

using Kind = ConfigValue::Kind;

bool IsOneOf(Kind kind, std::initializer_list<Kind> kinds) {
  for (Kind k : kinds) {
    if (k == kind) return true;
  }
  return false;
}

bool IsUntyped(Kind kind) { return kind == Kind::kText || kind == Kind::kFlag; }

absl::Status Expected(absl::string_view what, const ConfigValue& v) {
  if (IsOneOf(v.kind, {Kind::kNull, Kind::kMap, Kind::kList})) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", what, ", got ", ::flashserve::ToAbsl(DescribeKind(v.kind))));
  }
  if (IsUntyped(v.kind)) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", what, ", got '", v.text, "'"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "expected ", what, ", got ", ::flashserve::ToAbsl(DescribeKind(v.kind)), " '", v.text, "'"));
}

ConfigValue Make(Kind kind, std::string text) {
  ConfigValue v;
  v.kind = kind;
  v.text = std::move(text);
  return v;
}

template <typename T>
struct Traits;

template <>
struct Traits<bool> {
  static constexpr std::string_view kName = "bool";
  static absl::StatusOr<bool> Parse(const ConfigValue& v) {
    if (v.kind == Kind::kBool || IsUntyped(v.kind)) {
      const std::string t = absl::AsciiStrToLower(v.text);
      if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
      if (t == "false" || t == "no" || t == "off" || t == "0") return false;
    }
    return Expected("a boolean (true/false)", v);
  }
  static ConfigValue Format(bool b) { return Make(Kind::kBool, b ? "true" : "false"); }
};

template <>
struct Traits<int64_t> {
  static constexpr std::string_view kName = "int64";
  static absl::StatusOr<int64_t> Parse(const ConfigValue& v) {
    int64_t out = 0;
    if ((v.kind == Kind::kInteger || IsUntyped(v.kind)) && absl::SimpleAtoi(v.text, &out)) {
      return out;
    }
    return Expected("an integer", v);
  }
  static ConfigValue Format(int64_t i) { return Make(Kind::kInteger, absl::StrCat(i)); }
};

template <>
struct Traits<double> {
  static constexpr std::string_view kName = "double";
  static absl::StatusOr<double> Parse(const ConfigValue& v) {
    double out = 0;
    if (IsOneOf(v.kind, {Kind::kInteger, Kind::kNumber, Kind::kText, Kind::kFlag}) &&
        absl::SimpleAtod(v.text, &out) && std::isfinite(out)) {
      return out;
    }
    return Expected("a finite number", v);
  }
  static ConfigValue Format(double d) {
    char buf[64];
    const auto result = std::to_chars(buf, buf + sizeof(buf), d);  // shortest round-trip form
    return Make(Kind::kNumber, std::string(buf, result.ptr));
  }
};

template <>
struct Traits<std::string> {
  static constexpr std::string_view kName = "string";
  static absl::StatusOr<std::string> Parse(const ConfigValue& v) {
    if (v.kind == Kind::kString || IsUntyped(v.kind)) return v.text;
    return Expected("a string", v);
  }
  static ConfigValue Format(const std::string& s) { return Make(Kind::kString, s); }
};

template <>
struct Traits<absl::Duration> {
  static constexpr std::string_view kName = "duration";
  static absl::StatusOr<absl::Duration> Parse(const ConfigValue& v) {
    absl::Duration out;
    if ((v.kind == Kind::kString || IsUntyped(v.kind)) && absl::ParseDuration(v.text, &out)) {
      return out;
    }
    return Expected("a duration such as 500ms, 10m, 72h or 1h30m", v);
  }
  static ConfigValue Format(absl::Duration d) {
    return Make(Kind::kString, absl::FormatDuration(d));
  }
};

template <>
struct Traits<ByteSize> {
  static constexpr std::string_view kName = "bytes";
  static absl::StatusOr<ByteSize> Parse(const ConfigValue& v) {
    if (IsOneOf(v.kind, {Kind::kString, Kind::kInteger, Kind::kText, Kind::kFlag})) {
      absl::StatusOr<ByteSize> size = ParseByteSize(v.text);
      if (size.ok()) return size;
      return absl::InvalidArgumentError(
          absl::StrCat("expected a byte size, got ", size.status().message()));
    }
    return Expected("a byte size such as 4096, 512MiB or 10GiB", v);
  }
  static ConfigValue Format(ByteSize b) { return Make(Kind::kString, FormatByteSize(b)); }
};

// Lists: a file sequence, or a comma-separated flag value ("" is the empty list).
template <typename Item>
struct ListTraits {
  static absl::StatusOr<std::vector<Item>> Parse(const ConfigValue& v) {
    std::vector<ConfigValue> items;
    if (v.kind == Kind::kList) {
      items = v.items;
    } else if (v.kind == Kind::kFlag) {
      if (!v.text.empty()) {
        for (absl::string_view part : absl::StrSplit(v.text, ',')) {
          items.push_back(Make(Kind::kFlag, std::string(absl::StripAsciiWhitespace(part))));
        }
      }
    } else {
      return Expected(absl::StrCat("a list of ", ::flashserve::ToAbsl(Traits<Item>::kName)), v);
    }
    std::vector<Item> out;
    for (size_t i = 0; i < items.size(); ++i) {
      absl::StatusOr<Item> item = Traits<Item>::Parse(items[i]);
      if (!item.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("item ", i, ": ", item.status().message()));
      }
      out.push_back(*std::move(item));
    }
    return out;
  }
  static ConfigValue Format(const std::vector<Item>& list) {
    ConfigValue v = Make(Kind::kList, "");
    for (const Item& item : list) v.items.push_back(Traits<Item>::Format(item));
    return v;
  }
};

template <>
struct Traits<std::vector<std::string>> : ListTraits<std::string> {
  static constexpr std::string_view kName = "list<string>";
};
template <>
struct Traits<std::vector<int64_t>> : ListTraits<int64_t> {
  static constexpr std::string_view kName = "list<int64>";
};

template <typename T>
class TypedOption final : public OptionBase {
 public:
  TypedOption(std::string key, T* field, T default_value, std::string help, Validator<T> validator)
      : OptionBase(std::move(key), std::move(help)),
        field_(field),
        default_(std::move(default_value)),
        validator_(std::move(validator)) {
    CHECK(field_ != nullptr) << "option '" << this->key() << "' bound to a null field";
    *field_ = default_;
  }

  std::string_view TypeName() const override { return Traits<T>::kName; }
  bool IsBool() const override { return std::is_same_v<T, bool>; }
  absl::Status Set(const ConfigValue& value) override {
    ASSIGN_OR_RETURN(*field_, Traits<T>::Parse(value));
    return absl::OkStatus();
  }
  absl::Status Validate() const override {
    return validator_ ? validator_(*field_) : absl::OkStatus();
  }
  ConfigValue Current() const override { return Traits<T>::Format(*field_); }
  ConfigValue Default() const override { return Traits<T>::Format(default_); }

 private:
  T* field_;
  const T default_;
  Validator<T> validator_;
};

}  // namespace

template <typename T>
std::unique_ptr<OptionBase> MakeOption(std::string key, T* field, T default_value, std::string help,
                                       Validator<T> validator) {
  return std::make_unique<TypedOption<T>>(std::move(key), field, std::move(default_value),
                                          std::move(help), std::move(validator));
}

#define FS_INSTANTIATE_OPTION_(T) \
  template std::unique_ptr<OptionBase> MakeOption<T>(std::string, T*, T, std::string, Validator<T>)
FS_INSTANTIATE_OPTION_(bool);
FS_INSTANTIATE_OPTION_(int64_t);
FS_INSTANTIATE_OPTION_(double);
FS_INSTANTIATE_OPTION_(std::string);
FS_INSTANTIATE_OPTION_(absl::Duration);
FS_INSTANTIATE_OPTION_(ByteSize);
FS_INSTANTIATE_OPTION_(std::vector<std::string>);
FS_INSTANTIATE_OPTION_(std::vector<int64_t>);
#undef FS_INSTANTIATE_OPTION_

}  // namespace flashserve::options::internal
