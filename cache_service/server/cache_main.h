// `flashserve cache [--config FILE] [--cache.key=value ...]`: runs the cache server until SIGTERM
// or SIGINT, then drains and exits. Prints exactly one line to stdout once both ports are bound:
//
//   cache listening on 127.0.0.1:PORT http 127.0.0.1:HTTP_PORT
//
// (tests and launchers read the chosen ports from it); everything else goes to the log on
// stderr. Exit codes: 0 after a clean shutdown, 1 when the server failed to start or to close
// the store cleanly, 2 for bad options (one line on stderr).
#pragma once

#include <span>
#include <string>

namespace flashserve::cache {

// `args` are the arguments after "cache". Blocks SIGTERM and SIGINT in the calling thread (and
// so in every thread it starts) and waits for them with sigwait: call before starting threads.
int RunCacheCommand(std::span<const std::string> args);

}  // namespace flashserve::cache
