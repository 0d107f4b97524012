#include "cache_service/server/cache_state.h"

#include <string>
#include <utility>

#include "common/base/logging.h"
#include "common/base/status_macros.h"

namespace flashserve::cache {

CacheState::CacheState(const CacheServerOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      start_(absl::Now()) {}

absl::StatusOr<std::unique_ptr<CacheState>> CacheState::Open(const CacheServerOptions& options) {
  std::unique_ptr<CacheState> s(new CacheState(options));
  ASSIGN_OR_RETURN(s->cache_metrics_, CacheMetrics::Create(&s->registry_));
  s->ssd_ = s->cache_metrics_->ForTier("ssd");
  s->dram_ = s->cache_metrics_->ForTier("dram");

  metrics::Registry& r = s->registry_;
  ASSIGN_OR_RETURN(metrics::CounterFamily * lookups,
                   r.AddCounter("fs_cache_lookups_total", "Lookup calls."));
  ASSIGN_OR_RETURN(
      metrics::CounterFamily * tokens,
      r.AddCounter("fs_cache_lookup_tokens_total",
                   "Tokens looked up, by result (hit: covered by cached blocks).", {"result"}));
  ASSIGN_OR_RETURN(s->server_.rpc_seconds,
                   r.AddHistogram("fs_cache_rpc_seconds", "Latency of cache server RPCs.",
                                  {"service", "method"}, metrics::ExponentialBuckets(1e-5, 2, 22)));
  ASSIGN_OR_RETURN(s->server_.rpcs,
                   r.AddCounter("fs_cache_rpcs_total", "Cache server RPCs by gRPC status code.",
                                {"service", "method", "code"}));
  s->server_.lookups = &lookups->WithLabels({});
  s->server_.lookup_hit_tokens = &tokens->WithLabels({"hit"});
  s->server_.lookup_miss_tokens = &tokens->WithLabels({"miss"});

  GlobalStoreOptions g;
  g.path = options.data_dir;
  g.capacity_bytes = options.capacity.bytes;
  g.ttl = options.ttl;
  g.max_ttl = options.max_ttl;
  g.clock = s->clock_;
  g.metrics = s->cache_metrics_.get();
  g.sync_writes = options.sync_writes;
  g.max_payload_bytes = options.max_payload_size.bytes;
  ASSIGN_OR_RETURN(s->store_, GlobalStore::Open(std::move(g)), "opening the global KV store");

  SwaPoolOptions p;
  p.capacity_bytes = options.swa_capacity.bytes;
  p.ttl = options.swa_ttl;
  p.max_ttl = options.swa_max_ttl;
  p.clock = s->clock_;
  p.metrics = s->cache_metrics_.get();
  ASSIGN_OR_RETURN(s->swa_, SwaPool::Create(std::move(p)), "creating the SWA pool");
  return s;
}

CacheState::~CacheState() {
  absl::Status st = Close();
  if (!st.ok()) LOG(ERROR) << "cache: closing the store: " << st;
}

void CacheState::RecordRpc(std::string_view service, std::string_view method,
                           std::string_view code_name, absl::Duration elapsed) {
  server_.rpc_seconds->WithLabels({service, method}).Observe(absl::ToDoubleSeconds(elapsed));
  server_.rpcs->WithLabels({service, method, code_name}).Increment();
}

bool CacheState::EnterRpc() {
  absl::MutexLock lock(&rpc_mu_);
  if (draining_) return false;
  ++in_flight_;
  return true;
}

void CacheState::ExitRpc() {
  absl::MutexLock lock(&rpc_mu_);
  --in_flight_;
}

void CacheState::StartDraining() {
  absl::MutexLock lock(&rpc_mu_);
  draining_ = true;
  state_.store(ServingState::kDraining, std::memory_order_release);
}

bool CacheState::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&rpc_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rpc_mu_) { return in_flight_ == 0; };
  return rpc_mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

absl::Status CacheState::Close() {
  if (store_ == nullptr) return absl::OkStatus();
  absl::Status st = store_->Close();
  store_.reset();
  return st;
}

}  // namespace flashserve::cache
