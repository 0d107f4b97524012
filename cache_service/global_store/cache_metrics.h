// The cache service's metrics, shared by its tiers ("ssd": GlobalStore, "dram": SwaPool). Create
// one CacheMetrics per Registry and hand it to every tier: the families are registered once.
//
//   fs_cache_hits_total{tier}                     blocks / snapshots served
//   fs_cache_misses_total{tier}                   lookups that served nothing (incl. corrupt)
//   fs_cache_read_bytes_total{tier}               payload bytes served
//   fs_cache_written_bytes_total{tier}            payload bytes stored
//   fs_cache_evictions_total{tier,reason}         reason: ttl | capacity | flush | corrupt
//   fs_cache_checksum_failures_total{tier}        values that failed verification (never served)
//   fs_cache_get_seconds{tier}, fs_cache_put_seconds{tier}   latency per call (batch = one call)
//   fs_cache_entries{tier}, fs_cache_bytes{tier}, fs_cache_pinned_bytes{tier}   current state
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/metrics/registry.h"

namespace flashserve::cache {

// The children of one tier, looked up once; updates are lock-free.
struct TierMetrics {
  metrics::Counter* hits;
  metrics::Counter* misses;
  metrics::Counter* read_bytes;
  metrics::Counter* written_bytes;
  metrics::Counter* evicted_ttl;
  metrics::Counter* evicted_capacity;
  metrics::Counter* evicted_flush;
  metrics::Counter* evicted_corrupt;
  metrics::Counter* checksum_failures;
  metrics::Histogram* get_seconds;
  metrics::Histogram* put_seconds;
  metrics::Gauge* entries;
  metrics::Gauge* bytes;
  metrics::Gauge* pinned_bytes;
};

class CacheMetrics {
 public:
  // Registers the families in `registry` (not owned; must outlive this object). Errors: those of
  // Registry::Add* (AlreadyExists when a CacheMetrics was already created on this registry).
  static absl::StatusOr<std::unique_ptr<CacheMetrics>> Create(metrics::Registry* registry);

  // The children for `tier` ("ssd", "dram"), created on first use. Thread-safe; the returned
  // pointers stay valid for the life of the registry.
  TierMetrics ForTier(std::string_view tier);

 private:
  CacheMetrics() = default;

  metrics::CounterFamily* hits_ = nullptr;
  metrics::CounterFamily* misses_ = nullptr;
  metrics::CounterFamily* read_bytes_ = nullptr;
  metrics::CounterFamily* written_bytes_ = nullptr;
  metrics::CounterFamily* evictions_ = nullptr;
  metrics::CounterFamily* checksum_failures_ = nullptr;
  metrics::HistogramFamily* get_seconds_ = nullptr;
  metrics::HistogramFamily* put_seconds_ = nullptr;
  metrics::GaugeFamily* entries_ = nullptr;
  metrics::GaugeFamily* bytes_ = nullptr;
  metrics::GaugeFamily* pinned_bytes_ = nullptr;
};

// A tier's metrics whether or not the caller provided a CacheMetrics: when `shared` is null a
// private Registry and CacheMetrics are created and owned here (tests, tools). Not copyable.
class OwnedTierMetrics {
 public:
  OwnedTierMetrics(CacheMetrics* shared, std::string_view tier);
  const TierMetrics& get() const { return tier_; }

 private:
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<CacheMetrics> metrics_;
  TierMetrics tier_;
};

}  // namespace flashserve::cache
