#include "cache_service/server/cache_main.h"

#include <signal.h>

#include <cstdio>
#include <iostream>

#include "cache_service/server/cache_server.h"
#include "common/base/logging.h"
#include "common/options/option_set.h"

namespace flashserve::cache {

int RunCacheCommand(std::span<const std::string> args) {
  // Block the shutdown signals before any thread exists, so that every thread inherits the mask
  // and only the sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  CacheServerOptions options;
  options::OptionSet set;
  RegisterCacheServerOptions(&set, &options);
  absl::StatusOr<options::CommandLine> cl =
      set.LoadCommandLine(absl::Span<const std::string>(args.data(), args.size()));
  if (!cl.ok()) {
    std::cerr << "flashserve cache: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->help) {
    std::cout << "usage: flashserve cache [--config FILE] [--key=value ...]\n\n" << set.Help();
    return 0;
  }
  if (cl->print_config) {
    if (!options.admin_token.empty()) options.admin_token = "<redacted>";  // a secret
    std::cout << set.Dump();
    return 0;
  }
  if (!cl->positional.empty()) {
    std::cerr << "flashserve cache: unexpected argument '" << cl->positional[0] << "'\n";
    return 2;
  }
  if (absl::Status st = CheckCacheServerOptions(&options); !st.ok()) {
    std::cerr << "flashserve cache: " << st.message() << "\n";
    return 2;
  }
  logging::LoggingOptions log;
  if (absl::Status st = logging::ParseLevel(options.log_level, &log.level); !st.ok()) {
    std::cerr << "flashserve cache: " << st.message() << "\n";
    return 2;
  }
  log.json = options.log_json;
  log.process_name = "cache";
  logging::InitLogging(log);

  absl::StatusOr<std::unique_ptr<CacheServer>> server = CacheServer::Start(options);
  if (!server.ok()) {
    LOG(ERROR) << "cache failed to start: " << server.status();
    std::cerr << "flashserve cache: " << server.status().message() << "\n";
    return 1;
  }
  std::printf("cache listening on %s http %s\n", (*server)->grpc_address().ToString().c_str(),
              (*server)->http_address().ToString().c_str());
  std::fflush(stdout);

  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  LOG(INFO) << "cache received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", shutting down";
  absl::Status st = (*server)->Shutdown();
  if (!st.ok()) {
    LOG(ERROR) << "cache shutdown: " << st;
    return 1;
  }
  return 0;
}

}  // namespace flashserve::cache
