// CacheState: what the cache server's RPC adapters share — the global KV store (SSD), the SWA
// pool (DRAM), the metrics registry they report into, the request limits and the serving state.
// Protobuf-free: the adapters (cache_service_impl.cc, admin_service_impl.cc) convert wire types
// and call the stores through this object.
//
// Thread safety: every accessor is thread-safe, and so are the stores; Close is not (call it once
// no RPC is in flight: after the gRPC server has shut down).
#pragma once

#include <atomic>
#include <memory>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache_service/global_store/cache_metrics.h"
#include "cache_service/global_store/global_store.h"
#include "cache_service/server/server_options.h"
#include "cache_service/swa_pool/swa_pool.h"
#include "common/metrics/registry.h"

namespace flashserve::cache {

enum class ServingState { kStarting, kServing, kDraining };

// Server-level metrics beside the per-tier ones of CacheMetrics:
//   fs_cache_lookups_total                        Lookup calls
//   fs_cache_lookup_tokens_total{result}          tokens looked up: result = hit | miss
//   fs_cache_rpc_seconds{service,method}          latency of every RPC (histogram)
//   fs_cache_rpcs_total{service,method,code}      RPCs by gRPC status code name
struct ServerMetrics {
  metrics::Counter* lookups = nullptr;
  metrics::Counter* lookup_hit_tokens = nullptr;
  metrics::Counter* lookup_miss_tokens = nullptr;
  metrics::HistogramFamily* rpc_seconds = nullptr;
  metrics::CounterFamily* rpcs = nullptr;
};

class CacheState {
 public:
  // Opens the store at options.data_dir and creates the pool, both reporting into a new registry.
  // Errors: those of GlobalStore::Open and SwaPool::Create, with context.
  static absl::StatusOr<std::unique_ptr<CacheState>> Open(const CacheServerOptions& options);
  ~CacheState();  // Close(), logging an error
  CacheState(const CacheState&) = delete;
  CacheState& operator=(const CacheState&) = delete;

  GlobalStore& store() { return *store_; }
  SwaPool& swa() { return *swa_; }
  const SwaPool& swa() const { return *swa_; }
  metrics::Registry& registry() { return registry_; }
  const TierMetrics& ssd_metrics() const { return ssd_; }
  const TierMetrics& dram_metrics() const { return dram_; }
  const ServerMetrics& server_metrics() const { return server_; }
  const CacheServerOptions& options() const { return options_; }
  const Clock& clock() const { return *clock_; }
  absl::Duration uptime() const { return absl::Now() - start_; }

  ServingState state() const { return state_.load(std::memory_order_acquire); }
  // kStarting -> kServing once the server is up.
  void set_serving() { state_.store(ServingState::kServing, std::memory_order_release); }

  // Drain support. Every RPC but Health enters before doing work and exits when done; once
  // draining has started, EnterRpc refuses (the adapter answers UNAVAILABLE) so that the calls
  // in flight can finish while no new work starts.
  bool EnterRpc();
  void ExitRpc();
  void StartDraining();
  // Waits until no admitted RPC is running, at most `timeout`; true if drained.
  bool AwaitIdle(absl::Duration timeout);

  // Counts one RPC and observes its latency. `code_name` is the gRPC code's name ("OK", ...).
  void RecordRpc(std::string_view service, std::string_view method, std::string_view code_name,
                 absl::Duration elapsed);

  // Closes the store (persists access times, flushes memtables). Idempotent; not thread-safe.
  absl::Status Close();

 private:
  explicit CacheState(const CacheServerOptions& options);

  const CacheServerOptions options_;
  Clock* const clock_;
  const absl::Time start_;
  metrics::Registry registry_;
  std::unique_ptr<CacheMetrics> cache_metrics_;
  TierMetrics ssd_{};
  TierMetrics dram_{};
  ServerMetrics server_;
  std::unique_ptr<GlobalStore> store_;
  std::unique_ptr<SwaPool> swa_;
  std::atomic<ServingState> state_{ServingState::kStarting};
  absl::Mutex rpc_mu_;
  int in_flight_ ABSL_GUARDED_BY(rpc_mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(rpc_mu_) = false;
};

}  // namespace flashserve::cache
