// OptionSet::LoadCommandLine: the argv side of option loading. Written by hand (no CLI11) because
// it is only key=value handling and CLI11 costs ~11 s of compile time per translation unit.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/options/option_set.h"

namespace flashserve::options {

absl::StatusOr<CommandLine> OptionSet::LoadCommandLine(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return LoadCommandLine(args);
}

absl::StatusOr<CommandLine> OptionSet::LoadCommandLine(absl::Span<const std::string> args) {
  CommandLine result;
  bool config_seen = false;
  std::vector<std::pair<std::string, std::string>> overrides;  // (key, value) in order

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      result.positional.insert(result.positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "--help" || arg == "-h") {
      result.help = true;
      return result;  // help must work even when the rest of the line or the config is broken
    }
    if (arg == "--print-config") {
      result.print_config = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) {
      if (arg.size() > 1 && arg[0] == '-') {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown flag '", arg, "' (options are --key=value)"));
      }
      result.positional.push_back(arg);
      continue;
    }

    const std::string_view body = std::string_view(arg).substr(2);
    const size_t eq = body.find('=');
    const std::string key(body.substr(0, eq));
    std::string value;
    bool has_value = eq != std::string_view::npos;
    if (has_value) value = std::string(body.substr(eq + 1));

    const internal::OptionBase* option = key == "config" ? nullptr : Find(key);
    if (key != "config" && option == nullptr) return UnknownKey(key, absl::StrCat("flag --", key));
    if (!has_value && option != nullptr && option->IsBool()) {
      value = "true";  // bare --flag; --flag=false to turn off
      has_value = true;
    }
    if (!has_value) {
      if (i + 1 >= args.size() || absl::StartsWith(args[i + 1], "--")) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", key, " needs a value"));
      }
      value = args[++i];
    }
    if (key == "config") {
      if (config_seen) return absl::InvalidArgumentError("--config given more than once");
      config_seen = true;
      result.config_path = std::move(value);
      if (result.config_path.empty()) return absl::InvalidArgumentError("--config is empty");
      continue;
    }
    overrides.emplace_back(key, std::move(value));
  }

  if (config_seen) {
    RETURN_IF_ERROR(LoadFile(result.config_path));
  }
  for (const auto& [key, value] : overrides) {
    RETURN_IF_ERROR(Set(key, value, absl::StrCat("flag --", key)));
  }
  RETURN_IF_ERROR(Validate());
  return result;
}

}  // namespace flashserve::options
