#include "cache_service/global_store/cache_metrics.h"

#include "common/base/check.h"
#include "common/base/status_macros.h"

namespace flashserve::cache {

absl::StatusOr<std::unique_ptr<CacheMetrics>> CacheMetrics::Create(metrics::Registry* registry) {
  std::unique_ptr<CacheMetrics> m(new CacheMetrics());
  const std::vector<std::string> tier = {"tier"};
  ASSIGN_OR_RETURN(m->hits_,
                   registry->AddCounter("fs_cache_hits_total", "Entries served, by tier.", tier));
  ASSIGN_OR_RETURN(m->misses_,
                   registry->AddCounter("fs_cache_misses_total",
                                        "Lookups that served nothing (absent, expired or corrupt), "
                                        "by tier.",
                                        tier));
  ASSIGN_OR_RETURN(m->read_bytes_, registry->AddCounter("fs_cache_read_bytes_total",
                                                        "Payload bytes served, by tier.", tier));
  ASSIGN_OR_RETURN(m->written_bytes_, registry->AddCounter("fs_cache_written_bytes_total",
                                                           "Payload bytes stored, by tier.", tier));
  ASSIGN_OR_RETURN(m->evictions_,
                   registry->AddCounter("fs_cache_evictions_total",
                                        "Entries removed, by tier and reason (ttl, capacity, "
                                        "flush, corrupt).",
                                        {"tier", "reason"}));
  ASSIGN_OR_RETURN(m->checksum_failures_,
                   registry->AddCounter("fs_cache_checksum_failures_total",
                                        "Stored values that failed verification and were not "
                                        "served, by tier.",
                                        tier));
  ASSIGN_OR_RETURN(m->get_seconds_,
                   registry->AddHistogram("fs_cache_get_seconds", "Latency of a get call.", tier,
                                          metrics::ExponentialBuckets(1e-5, 2, 22)));
  ASSIGN_OR_RETURN(m->put_seconds_,
                   registry->AddHistogram("fs_cache_put_seconds", "Latency of a put call.", tier,
                                          metrics::ExponentialBuckets(1e-5, 2, 22)));
  ASSIGN_OR_RETURN(m->entries_,
                   registry->AddGauge("fs_cache_entries", "Entries held, by tier.", tier));
  ASSIGN_OR_RETURN(m->bytes_,
                   registry->AddGauge("fs_cache_bytes", "Encoded bytes held, by tier.", tier));
  ASSIGN_OR_RETURN(m->pinned_bytes_,
                   registry->AddGauge("fs_cache_pinned_bytes", "Bytes of pinned entries.", tier));
  return m;
}

TierMetrics CacheMetrics::ForTier(std::string_view tier) {
  TierMetrics t;
  t.hits = &hits_->WithLabels({tier});
  t.misses = &misses_->WithLabels({tier});
  t.read_bytes = &read_bytes_->WithLabels({tier});
  t.written_bytes = &written_bytes_->WithLabels({tier});
  t.evicted_ttl = &evictions_->WithLabels({tier, "ttl"});
  t.evicted_capacity = &evictions_->WithLabels({tier, "capacity"});
  t.evicted_flush = &evictions_->WithLabels({tier, "flush"});
  t.evicted_corrupt = &evictions_->WithLabels({tier, "corrupt"});
  t.checksum_failures = &checksum_failures_->WithLabels({tier});
  t.get_seconds = &get_seconds_->WithLabels({tier});
  t.put_seconds = &put_seconds_->WithLabels({tier});
  t.entries = &entries_->WithLabels({tier});
  t.bytes = &bytes_->WithLabels({tier});
  t.pinned_bytes = &pinned_bytes_->WithLabels({tier});
  return t;
}

OwnedTierMetrics::OwnedTierMetrics(CacheMetrics* shared, std::string_view tier) {
  if (shared == nullptr) {
    registry_ = std::make_unique<metrics::Registry>();
    auto created = CacheMetrics::Create(registry_.get());
    CHECK_OK(created.status());  // a fresh registry cannot hold these names already
    metrics_ = std::move(created).value();
    shared = metrics_.get();
  }
  tier_ = shared->ForTier(tier);
}

}  // namespace flashserve::cache
