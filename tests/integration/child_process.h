// Child processes for integration tests: spawn a binary with its stdout on a pipe and its stderr
// in a file, wait for a line on stdout with a deadline, signal it, wait for its exit with a
// deadline (pidfd + poll: no sleeps). A ChildProcess kills (SIGKILL) and reaps its process on
// destruction if it is still running, so a failing test leaves nothing behind.
// Tests only. Not thread-safe (one owner).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace flashserve::testing {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with `argv`, the current environment plus `extra_env` ("K=V"),
  // stdout on a pipe and stderr appended to `stderr_path` (empty: inherited).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(
      const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {},
      const std::string& stderr_path = "");
  ~ChildProcess();  // SIGKILL and reap if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Reads stdout until a line starting with `prefix` arrives (returned without the newline).
  // DeadlineExceeded after `timeout`; Aborted if stdout closes first (the process died).
  absl::StatusOr<std::string> WaitForLine(std::string_view prefix, absl::Duration timeout);

  // Sends `signal` (if still running).
  void Signal(int signal);
  // Waits for the exit and returns the exit code (128 + signal when killed by one).
  // DeadlineExceeded after `timeout` (the process keeps running).
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  ChildProcess() = default;

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdout_fd_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  std::string buffered_;  // stdout read but not yet returned as a line
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv to completion with stdout and stderr captured; the environment is the current one
// plus `extra_env`, minus the names in `unset_env`. DeadlineExceeded (and the process killed) if
// it takes longer than `timeout`.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         const std::vector<std::string>& extra_env = {},
                                         const std::vector<std::string>& unset_env = {});

}  // namespace flashserve::testing
