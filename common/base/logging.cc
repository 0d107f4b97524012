#include "common/base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace flashserve::logging {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::atomic<bool> g_json{false};

spdlog::level::level_enum ToSpd(Level level) {
  switch (level) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarning:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger>& Logger() {
  static auto* logger = new std::shared_ptr<spdlog::logger>(spdlog::stderr_color_mt("flashserve"));
  return *logger;
}

// Escapes a string for inclusion in a JSON string literal.
std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out;
}

}  // namespace

void InitLogging(const LoggingOptions& options) {
  g_level.store(static_cast<int>(options.level));
  auto& logger = Logger();
  logger->set_level(ToSpd(options.level));
  std::string process = options.process_name.empty() ? "flashserve" : options.process_name;
  if (options.json) {
    // %v is the message; it is escaped by Emit() in JSON mode.
    logger->set_pattern(absl::StrCat(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","proc":")",
                                     JsonEscape(process), R"(","pid":%P,"tid":%t,%v})"),
                        spdlog::pattern_time_type::utc);
  } else {
    logger->set_pattern(absl::StrCat("%Y-%m-%dT%H:%M:%S.%fZ %^%L%$ ", process, "[%P] %v"),
                        spdlog::pattern_time_type::utc);
  }
  g_json.store(options.json);
}

absl::Status ParseLevel(std::string_view name, Level* level) {
  std::string n = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (n == "debug")
    *level = Level::kDebug;
  else if (n == "info")
    *level = Level::kInfo;
  else if (n == "warning" || n == "warn")
    *level = Level::kWarning;
  else if (n == "error")
    *level = Level::kError;
  else if (n == "off")
    *level = Level::kOff;
  else
    return absl::InvalidArgumentError(absl::StrCat("unknown log level '", std::string(name),
                                                   "' (debug, info, warning, error, off)"));
  return absl::OkStatus();
}

bool Enabled(Level level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void Emit(Level level, const char* file, int line, std::string_view message) {
  std::string_view base(file);
  if (auto slash = base.rfind('/'); slash != std::string_view::npos) base.remove_prefix(slash + 1);
  if (g_json.load(std::memory_order_relaxed)) {
    Logger()->log(ToSpd(level), R"("src":"{}:{}","msg":"{}")", JsonEscape(base), line,
                  JsonEscape(message));
  } else {
    Logger()->log(ToSpd(level), "{}:{}] {}", base, line, message);
  }
}

}  // namespace flashserve::logging
