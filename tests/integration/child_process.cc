#include "tests/integration/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace flashserve::testing {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60000));
}

// The environment with `extra` ("K=V") added (replacing same-named entries) and `unset` removed.
std::vector<std::string> Environment(const std::vector<std::string>& extra,
                                     const std::vector<std::string>& unset) {
  std::vector<std::string> env;
  auto named = [](const std::string& entry, std::string_view name) {
    return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
           entry[name.size()] == '=';
  };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    bool drop = false;
    for (const std::string& u : unset) drop = drop || named(entry, u);
    for (const std::string& x : extra) drop = drop || named(entry, x.substr(0, x.find('=')));
    if (!drop) env.push_back(std::move(entry));
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Spawns with stdout -> out_fd and stderr -> err_fd (or a file at err_path when err_fd < 0).
absl::StatusOr<pid_t> SpawnWith(const std::vector<std::string>& argv, std::vector<std::string> env,
                                int out_fd, int err_fd, const std::string& err_path) {
  std::vector<std::string> args = argv;
  std::vector<char*> argp = Pointers(args);
  std::vector<char*> envp = Pointers(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  if (err_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  } else if (!err_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("spawning ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
    const std::string& stderr_path) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  absl::StatusOr<pid_t> pid =
      SpawnWith(argv, Environment(extra_env, {}), pipe_fds[1], -1, stderr_path);
  close(pipe_fds[1]);
  if (!pid.ok()) {
    close(pipe_fds[0]);
    return pid.status();
  }
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = *pid;
  child->stdout_fd_ = pipe_fds[0];
  child->pidfd_ = PidfdOpen(*pid);
  if (child->pidfd_ < 0) return absl::InternalError("pidfd_open failed");
  return child;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (pidfd_ >= 0) close(pidfd_);
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(std::string_view prefix,
                                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    for (size_t nl; (nl = buffered_.find('\n')) != std::string::npos;) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      if (line.compare(0, prefix.size(), prefix) == 0) return line;
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, PollMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      return absl::DeadlineExceededError(absl::StrCat("no line starting with '",
                                                      std::string(prefix), "' within ",
                                                      absl::FormatDuration(timeout)));
    }
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::AbortedError(absl::StrCat("stdout closed before a line starting with '",
                                             std::string(prefix), "' (the process exited)"));
    }
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void ChildProcess::Signal(int signal) {
  if (!reaped_) kill(pid_, signal);
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  if (reaped_) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    pollfd p{pidfd_, POLLIN, 0};
    const int ready = poll(&p, 1, PollMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      return absl::DeadlineExceededError(absl::StrCat("process ", pid_, " still running"));
    }
    break;
  }
  int status = 0;
  if (waitpid(pid_, &status, 0) != pid_) return absl::InternalError("waitpid failed");
  reaped_ = true;
  exit_code_ = DecodeStatus(status);
  return exit_code_;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         const std::vector<std::string>& extra_env,
                                         const std::vector<std::string>& unset_env) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError("pipe2 failed");
  }
  absl::StatusOr<pid_t> pid =
      SpawnWith(argv, Environment(extra_env, unset_env), out[1], err[1], "");
  close(out[1]);
  close(err[1]);
  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  int open_fds = 2;
  std::string* sinks[2] = {&result.out, &result.err};
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  while (pid.ok() && open_fds > 0) {
    const int ready = poll(fds, 2, PollMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      timed_out = true;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open_fds;
      }
    }
  }
  close(out[0]);
  close(err[0]);
  if (!pid.ok()) return pid.status();
  if (timed_out) kill(*pid, SIGKILL);
  int status = 0;
  waitpid(*pid, &status, 0);  // both pipes are closed or the process is killed: prompt
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(argv[0], " did not finish within ", absl::FormatDuration(timeout),
                     "; stdout: ", result.out, " stderr: ", result.err));
  }
  result.exit_code = DecodeStatus(status);
  return result;
}

}  // namespace flashserve::testing
