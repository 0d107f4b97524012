// CacheServer: the cache process's serving stack — CacheState (store + pool + metrics), the gRPC
// server carrying CacheService and AdminService on one port, the HTTP endpoint (GET /metrics,
// GET /health) and a background TTL sweeper. `flashserve cache` (cache_main.h) runs one; tests
// may run one in-process.
//
// Lifecycle: Start (ready when it returns) -> Shutdown (drain: Health answers DRAINING, the gRPC
// server stops accepting calls and in-flight ones get cache.shutdown_grace to finish before they
// are cancelled, then HTTP stops and the store is closed cleanly).
// Thread safety: Shutdown from one thread; the accessors are safe from any thread until then.
#pragma once

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache_service/server/cache_state.h"
#include "cache_service/server/http_server.h"
#include "cache_service/server/server_options.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace flashserve::cache {

class CacheServer {
 public:
  // Validates `options` (CheckCacheServerOptions), opens the store, binds both ports and starts
  // serving. Errors: InvalidArgument (options), the store's open errors, Unavailable (a port
  // cannot be bound).
  static absl::StatusOr<std::unique_ptr<CacheServer>> Start(CacheServerOptions options);
  ~CacheServer();  // Shutdown(), logging an error
  CacheServer(const CacheServer&) = delete;
  CacheServer& operator=(const CacheServer&) = delete;

  // The bound addresses (the chosen ports when 0 was asked).
  const HostPort& grpc_address() const { return grpc_address_; }
  const HostPort& http_address() const { return http_address_; }
  CacheState& state() { return *state_; }

  // Drains and stops (see the file comment), then closes the store; returns the close status.
  // Idempotent.
  absl::Status Shutdown();

 private:
  CacheServer() = default;
  void SweepLoop();
  HttpResponse ServeHttp(const std::string& path);

  std::unique_ptr<CacheState> state_;
  std::unique_ptr<grpc::Service> cache_service_;
  std::unique_ptr<grpc::Service> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  HttpServer http_;
  HostPort grpc_address_;
  HostPort http_address_;
  std::thread sweeper_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ = false;
};

}  // namespace flashserve::cache
