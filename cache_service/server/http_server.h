// A tiny blocking HTTP/1.1 server for operational endpoints (GET /metrics, GET /health): one
// accept thread, one request per connection (`Connection: close`), GET and HEAD only. Not for
// traffic: each connection is served to completion before the next is accepted, with a 5 s
// socket timeout so that a stalled client cannot hold the thread for long.
//
// Thread safety: Start and Stop from one thread; the handler runs on the server's thread and must
// be thread-safe with respect to the rest of the program.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace flashserve::cache {

struct HttpResponse {
  int status = 200;  // 200, 404, 503, ...
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called with the request path (query string removed); returns the response.
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

class HttpServer {
 public:
  HttpServer() = default;
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0: a free port), listens and starts the accept thread. `host` is an
  // IPv4 or IPv6 literal or "localhost". Errors: InvalidArgument (host), Unavailable (bind or
  // listen failed, e.g. the port is taken), FailedPrecondition (already started).
  absl::Status Start(const std::string& host, int port, HttpHandler handler);
  // The bound port (after Start).
  int port() const { return port_; }
  // Stops accepting, finishes the connection being served and joins the thread. Idempotent.
  void Stop();

 private:
  void Loop();
  void Serve(int fd);

  HttpHandler handler_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: Stop writes to wake the accept loop's poll
  int port_ = 0;
  std::thread thread_;
};

}  // namespace flashserve::cache
