#include "cache_service/server/cache_server.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/server/admin_service_impl.h"
#include "cache_service/server/cache_service_impl.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace flashserve::cache {
namespace {

constexpr size_t kSweepBudget = 100000;  // index entries examined per sweep

std::string_view StateName(ServingState s) {
  switch (s) {
    case ServingState::kStarting:
      return "STARTING";
    case ServingState::kServing:
      return "SERVING";
    case ServingState::kDraining:
      return "DRAINING";
  }
  return "UNKNOWN";
}

}  // namespace

absl::StatusOr<std::unique_ptr<CacheServer>> CacheServer::Start(CacheServerOptions options) {
  RETURN_IF_ERROR(CheckCacheServerOptions(&options));
  ASSIGN_OR_RETURN(const HostPort grpc_at, ParseHostPort(options.listen, kDefaultCachePort));
  ASSIGN_OR_RETURN(const HostPort http_at,
                   ParseHostPort(options.http_listen, kDefaultCacheHttpPort));
  std::unique_ptr<CacheServer> s(new CacheServer());
  ASSIGN_OR_RETURN(s->state_, CacheState::Open(options));
  s->cache_service_ = NewCacheService(s->state_.get());
  s->admin_service_ = NewAdminService(s->state_.get());

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(grpc_at.ToString(), grpc::InsecureServerCredentials(), &port);
  const int max_message =
      static_cast<int>(std::min<uint64_t>(options.max_message_size.bytes, INT32_MAX));
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  builder.RegisterService(s->cache_service_.get());
  builder.RegisterService(s->admin_service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || port == 0) {
    s->server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", grpc_at.ToString(),
                                               " for gRPC (address in use or not local?)"));
  }
  s->grpc_address_ = HostPort{grpc_at.host, port};

  RETURN_IF_ERROR(
      s->http_.Start(http_at.host, http_at.port,
                     [srv = s.get()](const std::string& path) { return srv->ServeHttp(path); }));
  s->http_address_ = HostPort{http_at.host, s->http_.port()};
  s->sweeper_ = std::thread([srv = s.get()] { srv->SweepLoop(); });
  s->state_->set_serving();
  LOG(INFO) << "cache serving grpc=" << s->grpc_address_.ToString()
            << " http=" << s->http_address_.ToString() << " data_dir=" << options.data_dir
            << " admin_token=" << (s->state_->options().admin_token.empty() ? "off" : "on");
  return s;
}

CacheServer::~CacheServer() {
  absl::Status st = Shutdown();
  if (!st.ok()) LOG(ERROR) << "cache shutdown: " << st;
}

HttpResponse CacheServer::ServeHttp(const std::string& path) {
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", state_->registry().Expose()};
  }
  if (path == "/health") {
    const ServingState st = state_->state();
    return {
        st == ServingState::kServing ? 200 : 503, "application/json",
        absl::StrCat("{\"status\":\"", ToAbsl(StateName(st)), "\",\"role\":\"cache\",\"uptime_s\":",
                     absl::ToInt64Seconds(state_->uptime()), "}\n")};
  }
  return {404, "text/plain; charset=utf-8", "not found: try /metrics or /health\n"};
}

void CacheServer::SweepLoop() {
  const absl::Duration interval = state_->options().sweep_interval;
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval)) {
    mu_.Unlock();
    absl::StatusOr<size_t> blocks = state_->store().SweepExpired(kSweepBudget);
    const size_t snapshots = state_->swa().SweepExpired();
    if (!blocks.ok()) LOG(WARNING) << "cache: TTL sweep: " << blocks.status();
    if ((blocks.ok() && *blocks > 0) || snapshots > 0) {
      LOG(INFO) << "cache: TTL sweep evicted blocks=" << blocks.value_or(0)
                << " snapshots=" << snapshots;
    }
    mu_.Lock();
  }
}

absl::Status CacheServer::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  if (state_ == nullptr) return absl::OkStatus();
  // Drain ourselves rather than through grpc::Server::Shutdown(deadline), which also waits for
  // idle client connections to close and so would always take the whole grace period.
  const absl::Duration grace = state_->options().shutdown_grace;
  state_->StartDraining();
  LOG(INFO) << "cache draining: refusing new calls; in-flight calls have " << grace;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
  const bool drained = state_->AwaitIdle(grace);
  if (!drained) LOG(WARNING) << "cache: calls still running after " << grace << "; cancelling them";
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());  // cancels what is left, closes channels
    server_->Wait();
  }
  http_.Stop();
  absl::Status st = state_->Close();
  LOG(INFO) << "cache stopped" << (st.ok() ? "" : " with an error closing the store");
  return st;
}

}  // namespace flashserve::cache
