// Typed, declarative process options: every FlashServe binary takes `--config FILE` (YAML or JSON)
// plus `--dotted.key=value` flags, and components declare the options they read.
//
// Binding approach: an option is bound to a field of the component's own options struct, so call
// sites stay typed and there are no string lookups after start-up:
//
//   struct CacheOptions { int64_t ttl_hours; absl::Duration sweep; ByteSize capacity; };
//   CacheOptions cache;
//   OptionSet options;
//   options.Add("cache.ttl_hours", &cache.ttl_hours, 72, "How long blocks live.",
//               AtLeast<int64_t>(1));
//   options.Add("cache.sweep", &cache.sweep, absl::Minutes(10), "Eviction sweep period.");
//   ASSIGN_OR_RETURN(CommandLine cl, options.LoadCommandLine(argc, argv));
//   if (cl.help) { std::cout << options.Help(); return 0; }
//
// Add() writes the default into the field at once; LoadFile()/Set()/LoadCommandLine() overwrite it.
// Supported field types: bool, int64_t, double, std::string, absl::Duration ("10m", "72h",
// "500ms"), ByteSize ("10GiB", "1.5GB"), std::vector<std::string>, std::vector<int64_t>.
// Any other field type is a compile error. Keys are lower-case dotted identifiers
// ([a-z0-9_]+ segments); a key may not also be the prefix of another key.
//
// Strictness: an unknown key in a file or a flag is an error naming the key and where it came from,
// with the closest registered key suggested (edit distance <= 2). A value of the wrong type is an
// error naming the key, the expected type and the value. In JSON files types are exact (a string
// is not an integer); in YAML, plain scalars are converted by the option's type and quoted scalars
// are strings. Lists come from file sequences or from comma-separated flag values ("a,b,c").
//
// Ownership: bound fields are not owned and must outlive every call on the OptionSet.
// Thread safety: none; use from one thread during start-up, then read the fields freely.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/options/byte_size.h"
#include "common/options/config_value.h"

namespace flashserve::options {

// Checks a final value; returns InvalidArgument (or any error) with a message that need not name
// the key (OptionSet adds it).
template <typename T>
using Validator = std::function<absl::Status(const T&)>;

namespace internal {

template <typename T>
inline constexpr bool kIsOptionType =
    std::is_same_v<T, bool> || std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
    std::is_same_v<T, std::string> || std::is_same_v<T, absl::Duration> ||
    std::is_same_v<T, ByteSize> || std::is_same_v<T, std::vector<std::string>> ||
    std::is_same_v<T, std::vector<int64_t>>;

// One registered option; the typed implementation lives in option_types.cc.
class OptionBase {
 public:
  OptionBase(std::string key, std::string help) : key_(std::move(key)), help_(std::move(help)) {}
  virtual ~OptionBase() = default;

  virtual std::string_view TypeName() const = 0;
  virtual bool IsBool() const = 0;
  // Converts and stores `value`; on error the field is unchanged.
  virtual absl::Status Set(const ConfigValue& value) = 0;
  virtual absl::Status Validate() const = 0;
  virtual ConfigValue Current() const = 0;
  virtual ConfigValue Default() const = 0;

  const std::string& key() const { return key_; }
  const std::string& help() const { return help_; }
  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

 private:
  std::string key_;
  std::string help_;
  std::string source_ = "default";
};

// Explicitly instantiated in option_types.cc for every kIsOptionType.
template <typename T>
std::unique_ptr<OptionBase> MakeOption(std::string key, T* field, T default_value, std::string help,
                                       Validator<T> validator);

}  // namespace internal

// What LoadCommandLine found besides option overrides.
struct CommandLine {
  bool help = false;                    // --help or -h was given; nothing was loaded
  bool print_config = false;            // --print-config was given
  std::string config_path;              // --config FILE, empty when absent
  std::vector<std::string> positional;  // non-flag arguments, and everything after "--"
};

class OptionSet {
 public:
  OptionSet() = default;
  OptionSet(const OptionSet&) = delete;
  OptionSet& operator=(const OptionSet&) = delete;
  ~OptionSet();

  // Registers `key` bound to `*field` and stores `default_value` into it. `validator` (optional)
  // runs in Validate(). Registration mistakes (bad key, duplicate, key that is the prefix of
  // another, null field, default rejected by the validator) are programming errors: CHECK-fail.
  template <typename T>
  void Add(std::string_view key, T* field, std::type_identity_t<T> default_value,
           std::string_view help, std::type_identity_t<Validator<T>> validator = nullptr) {
    static_assert(internal::kIsOptionType<T>,
                  "option fields must be bool, int64_t, double, std::string, absl::Duration, "
                  "ByteSize, std::vector<std::string> or std::vector<int64_t>");
    AddOption(internal::MakeOption<T>(std::string(key), field, std::move(default_value),
                                      std::string(help), std::move(validator)));
  }

  // Reads a .yaml/.yml/.json file and sets every option it names. Errors: NotFound (cannot open),
  // InvalidArgument (malformed file, unknown key, wrong type, key set twice in the file). On error
  // some options of the file may already be set. Does not run validators.
  absl::Status LoadFile(const std::string& path);

  // Sets one option from text as a flag would ("48", "10m", "a,b"). `source` is recorded for
  // messages and SourceOf(). Errors: InvalidArgument for an unknown key or a bad value.
  absl::Status Set(std::string_view key, std::string_view text, std::string_view source = "api");

  // Parses args (without argv[0]): --config FILE | --config=FILE, --help | -h, --print-config,
  // --key=value, --key value, bare --key for bool options (true), "--" ending flags. Loads the
  // config file first, then applies the flags in order (flags win; a later flag wins over an
  // earlier one), then runs Validate(). With --help, returns at once without loading anything.
  // Errors: InvalidArgument for an unknown flag (named, with a suggestion), a missing value,
  // --config given twice; plus those of LoadFile, Set and Validate.
  absl::StatusOr<CommandLine> LoadCommandLine(absl::Span<const std::string> args);
  // Same, from main's arguments; argv[0] is skipped.
  absl::StatusOr<CommandLine> LoadCommandLine(int argc, const char* const* argv);

  // Runs every validator on the current values. Errors: InvalidArgument listing each rejected
  // option with its value and where the value came from.
  absl::Status Validate() const;

  // The effective options as YAML (nested maps, keys sorted); LoadFile of the output restores the
  // same values. For --print-config.
  std::string Dump() const;

  // One entry per option, sorted: key, type, default, help. For --help.
  std::string Help() const;

  bool Contains(std::string_view key) const;
  // Where the current value of `key` came from: "default", "file.yaml:3:5", "flag --k", or the
  // `source` given to Set(). CHECK-fails if `key` is not registered.
  const std::string& SourceOf(std::string_view key) const;

 private:
  void AddOption(std::unique_ptr<internal::OptionBase> option);
  internal::OptionBase* Find(std::string_view key) const;
  absl::Status Apply(const internal::ConfigEntry& entry);
  absl::Status UnknownKey(std::string_view key, std::string_view where) const;

  std::map<std::string, std::unique_ptr<internal::OptionBase>, std::less<>> options_;
};

}  // namespace flashserve::options
