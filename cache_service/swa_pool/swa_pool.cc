#include "cache_service/swa_pool/swa_pool.h"

#include <unistd.h>

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/metrics/scoped_timer.h"

namespace flashserve::cache {

uint64_t DefaultSwaCapacityBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  uint64_t memory = pages > 0 && page_size > 0
                        ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                        : uint64_t{8} << 30;  // sysconf failed: assume a small 8 GiB host
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  uint64_t limit = 0;
  if (cgroup >> limit && limit > 0 && limit < memory) memory = limit;  // "max" fails to parse
  return memory / 10;
}

absl::StatusOr<std::unique_ptr<SwaPool>> SwaPool::Create(SwaPoolOptions options) {
  if (options.ttl <= absl::ZeroDuration()) return absl::InvalidArgumentError("SWA pool: ttl <= 0");
  if (options.max_ttl < options.ttl) {
    return absl::InvalidArgumentError("SWA pool: max_ttl is below ttl");
  }
  if (options.capacity_bytes == 0) options.capacity_bytes = DefaultSwaCapacityBytes();
  return std::unique_ptr<SwaPool>(new SwaPool(std::move(options)));
}

SwaPool::SwaPool(SwaPoolOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      metrics_holder_(options_.metrics, "dram"),
      m_(metrics_holder_.get()) {}

SwaPool::PoolKey SwaPool::MakeKey(const ModelFingerprint& fingerprint, const SwaKey& key) {
  PoolKey k;
  std::memcpy(k.data(), fingerprint.digest.data(), 32);
  std::memcpy(k.data() + 32, key.bytes.data(), 32);
  return k;
}

int64_t SwaPool::NowMicros() const { return absl::ToUnixMicros(clock_->Now()); }

bool SwaPool::Expired(const Entry& e, int64_t now_us) const {
  return now_us - e.last_access_us >= e.ttl_us;
}

void SwaPool::RemoveLocked(absl::flat_hash_map<PoolKey, Entry>::iterator it,
                           metrics::Counter* reason,
                           std::vector<std::shared_ptr<std::string>>* freed) {
  bytes_ -= it->second.data->size();
  lru_.erase(it->second.lru);
  freed->push_back(std::move(it->second.data));
  entries_.erase(it);
  if (reason != nullptr) reason->Increment();
}

void SwaPool::UpdateGaugesLocked() {
  m_.entries->Set(static_cast<double>(entries_.size()));
  m_.bytes->Set(static_cast<double>(bytes_));
}

absl::Status SwaPool::Put(const ModelFingerprint& fingerprint, const SwaKey& key,
                          std::string snapshot, absl::Duration ttl) {
  metrics::ScopedTimer timer(*m_.put_seconds);
  if (ttl < absl::ZeroDuration() || ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("SWA put: ttl ", absl::FormatDuration(ttl),
                                                   " is outside [0, max_ttl ",
                                                   absl::FormatDuration(options_.max_ttl), "]"));
  }
  const int64_t ttl_us = absl::ToInt64Microseconds(ttl == absl::ZeroDuration() ? options_.ttl : ttl);
  const uint64_t size = snapshot.size();
  if (size > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "SWA snapshot of ", size, " bytes exceeds the pool capacity ", options_.capacity_bytes));
  }
  const Hash128 checksum = Xxh3_128(snapshot.data(), snapshot.size());
  auto data = std::make_shared<std::string>(std::move(snapshot));
  const PoolKey k = MakeKey(fingerprint, key);
  std::vector<std::shared_ptr<std::string>> freed;  // released after the lock
  {
    absl::MutexLock lock(&mu_);
    const int64_t now_us = NowMicros();
    if (auto it = entries_.find(k); it != entries_.end()) RemoveLocked(it, nullptr, &freed);
    // Expired snapshots go first (TTLs differ, so any may have expired), then the least recently
    // used (the tail).
    if (bytes_ + size > options_.capacity_bytes) SweepExpiredLocked(now_us, &freed);
    while (!lru_.empty() && bytes_ + size > options_.capacity_bytes) {
      RemoveLocked(entries_.find(lru_.back()), m_.evicted_capacity, &freed);
    }
    lru_.push_front(k);
    entries_.emplace(k, Entry{std::move(data), checksum, now_us, now_us, ttl_us, lru_.begin()});
    bytes_ += size;
    UpdateGaugesLocked();
  }
  m_.written_bytes->Increment(static_cast<double>(size));
  return absl::OkStatus();
}

absl::StatusOr<std::string> SwaPool::Get(const ModelFingerprint& fingerprint, const SwaKey& key) {
  metrics::ScopedTimer timer(*m_.get_seconds);
  const PoolKey k = MakeKey(fingerprint, key);
  std::shared_ptr<std::string> data;
  Hash128 checksum;
  std::vector<std::shared_ptr<std::string>> freed;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(k);
    if (it == entries_.end()) {
      m_.misses->Increment();
      return absl::NotFoundError("SWA snapshot not cached");
    }
    const int64_t now_us = NowMicros();
    if (Expired(it->second, now_us)) {
      RemoveLocked(it, m_.evicted_ttl, &freed);
      UpdateGaugesLocked();
      m_.misses->Increment();
      return absl::NotFoundError("SWA snapshot expired");
    }
    it->second.last_access_us = now_us;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    data = it->second.data;
    checksum = it->second.checksum;
  }
  if (Xxh3_128(data->data(), data->size()) != checksum) {
    LOG(ERROR) << "SWA pool: snapshot failed its checksum, dropped (served as a miss) fingerprint="
               << DigestToHex(fingerprint.digest) << " key=" << key.ToHex();
    m_.checksum_failures->Increment();
    m_.misses->Increment();
    {
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(k);
      // Only the entry that was read: a concurrent Put may have replaced it with good bytes.
      if (it != entries_.end() && it->second.data == data) {
        RemoveLocked(it, m_.evicted_corrupt, &freed);
        UpdateGaugesLocked();
      }
    }
    return absl::NotFoundError("SWA snapshot failed verification");
  }
  m_.hits->Increment();
  m_.read_bytes->Increment(static_cast<double>(data->size()));
  return std::string(*data);
}

bool SwaPool::Erase(const ModelFingerprint& fingerprint, const SwaKey& key) {
  std::vector<std::shared_ptr<std::string>> freed;
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(MakeKey(fingerprint, key));
  if (it == entries_.end()) return false;
  RemoveLocked(it, nullptr, &freed);
  UpdateGaugesLocked();
  return true;
}

size_t SwaPool::Flush(const Sha256Digest& fingerprint_digest) {
  std::vector<std::shared_ptr<std::string>> freed;
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (std::memcmp(it->first.data(), fingerprint_digest.data(), 32) == 0) {
      RemoveLocked(it, m_.evicted_flush, &freed);
    }
    it = next;
  }
  UpdateGaugesLocked();
  return freed.size();
}

void SwaPool::SweepExpiredLocked(int64_t now_us, std::vector<std::shared_ptr<std::string>>* freed) {
  for (auto at = lru_.begin(); at != lru_.end();) {
    auto it = entries_.find(*at);
    ++at;  // RemoveLocked erases the current position
    if (Expired(it->second, now_us)) RemoveLocked(it, m_.evicted_ttl, freed);
  }
}

size_t SwaPool::SweepExpired() {
  std::vector<std::shared_ptr<std::string>> freed;
  absl::MutexLock lock(&mu_);
  SweepExpiredLocked(NowMicros(), &freed);
  UpdateGaugesLocked();
  return freed.size();
}

SwaPoolStats SwaPool::Stats() const {
  absl::MutexLock lock(&mu_);
  return SwaPoolStats{entries_.size(), bytes_, options_.capacity_bytes};
}

bool SwaPool::CorruptForTesting(const ModelFingerprint& fingerprint, const SwaKey& key,
                                size_t offset) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(MakeKey(fingerprint, key));
  if (it == entries_.end() || offset >= it->second.data->size()) return false;
  (*it->second.data)[offset] = static_cast<char>(~(*it->second.data)[offset]);
  return true;
}

}  // namespace flashserve::cache
