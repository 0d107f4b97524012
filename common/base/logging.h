// Structured process logging on spdlog. Only logging.cc includes spdlog, so that this header is
// cheap to include everywhere.
//
//   LOG(INFO) << "cache opened path=" << path << " blocks=" << n;
//   LOG(WARNING) << ...;  LOG(ERROR) << ...;  VLOG(1) << ... (debug level)
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace flashserve::logging {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

struct LoggingOptions {
  Level level = Level::kInfo;  // messages below this level are dropped
  bool json = false;           // one JSON object per line instead of the human-readable pattern
  std::string process_name;    // added to every line, e.g. "cache" or "gateway"
};

// Configures the process logger (stderr sink). Call once at start-up; thread-safe afterwards.
void InitLogging(const LoggingOptions& options);

// Parses "debug" | "info" | "warning" | "warn" | "error" | "off".
absl::Status ParseLevel(std::string_view name, Level* level);

// True when messages at `level` are emitted.
bool Enabled(Level level);

// Emits one line. Thread-safe.
void Emit(Level level, const char* file, int line, std::string_view message);

// Builds a message with operator<< and emits it on destruction.
class LogMessage {
 public:
  LogMessage(Level level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  ~LogMessage() { Emit(level_, file_, line_, stream_.str()); }
  std::ostream& stream() { return stream_; }

 private:
  Level level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace flashserve::logging

#define FS_LOG_LEVEL_DEBUG ::flashserve::logging::Level::kDebug
#define FS_LOG_LEVEL_INFO ::flashserve::logging::Level::kInfo
#define FS_LOG_LEVEL_WARNING ::flashserve::logging::Level::kWarning
#define FS_LOG_LEVEL_ERROR ::flashserve::logging::Level::kError

#define LOG(severity)                                                                      \
  !::flashserve::logging::Enabled(FS_LOG_LEVEL_##severity)                                 \
      ? (void)0                                                                            \
      : ::flashserve::logging::LogVoidify() &                                              \
            ::flashserve::logging::LogMessage(FS_LOG_LEVEL_##severity, __FILE__, __LINE__) \
                .stream()
#define VLOG(n) LOG(DEBUG)
