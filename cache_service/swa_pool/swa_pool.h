// SwaPool: SWA snapshots in host DRAM (DESIGN.md §3). A snapshot holds a session's SWA rings plus
// its small per-session state (compressor partial group, Engram lookback, DSpark rings,
// position), as opaque bytes laid out by the serving runtime (docs/kv_layout.md), keyed by the
// model fingerprint and the SwaKey of the exact prefix it ends. Lost on restart by design: on a
// miss the session resumes through bounded replay.
//
// Each snapshot carries an XXH3-128 checksum computed on Put and verified on every Get: a DRAM
// bit flip or a stray write is rare, but serving wrong state is the worst failure, so a mismatch
// is a miss (counted, logged, the entry dropped).
//
// Eviction: exact LRU by last access (a list), TTL from the last access (default 10 minutes),
// byte capacity (default 10% of the memory available to the process). Expired entries are
// dropped when met by Get, from the LRU tail on Put, and by SweepExpired.
//
// Thread safety: all methods are thread-safe (one absl::Mutex; checksums, copies and frees run
// outside it).
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache_service/global_store/cache_metrics.h"
#include "cache_service/swa_pool/swa_key.h"
#include "common/base/clock.h"
#include "common/base/hash.h"

namespace flashserve::cache {

struct SwaPoolOptions {
  uint64_t capacity_bytes = 0;             // snapshot bytes held; 0: DefaultSwaCapacityBytes()
  absl::Duration ttl = absl::Minutes(10);  // since last access; > 0
  absl::Duration max_ttl = absl::Hours(1);  // the largest TTL a Put may ask for; >= ttl
  Clock* clock = nullptr;                  // null: Clock::Real()
  CacheMetrics* metrics = nullptr;         // tier "dram"; null: a private registry
};

// 10% of the memory available to this process: the smaller of physical memory (sysconf) and the
// cgroup v2 limit (/sys/fs/cgroup/memory.max) when one is set.
uint64_t DefaultSwaCapacityBytes();

// One snapshot's metadata, without its bytes.
struct SwaEntryInfo {
  Sha256Digest fingerprint{};  // model fingerprint digest
  SwaKey key;
  uint64_t bytes = 0;
  int64_t created_unix_micros = 0;  // when this snapshot was put
  int64_t last_access_unix_micros = 0;
  int64_t expires_unix_micros = 0;  // last access + the snapshot's ttl
};

struct SwaPoolStats {
  size_t entries = 0;
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
};

class SwaPool {
 public:
  // InvalidArgument if ttl <= 0 or max_ttl < ttl.
  static absl::StatusOr<std::unique_ptr<SwaPool>> Create(SwaPoolOptions options);
  SwaPool(const SwaPool&) = delete;
  SwaPool& operator=(const SwaPool&) = delete;

  // Stores (or replaces) the snapshot for (fingerprint, key), evicting expired then least recently
  // used entries to fit. Takes ownership of the bytes. `ttl`: the snapshot's lifetime after its
  // last access; zero means options().ttl. ResourceExhausted if the snapshot alone exceeds the
  // capacity; InvalidArgument if ttl is negative or above max_ttl. Cost: one XXH3-128 pass
  // (outside the lock) and O(evicted); O(entries) when the pool is full (expired snapshots are
  // looked for everywhere before a live one is evicted).
  absl::Status Put(const ModelFingerprint& fingerprint, const SwaKey& key, std::string snapshot,
                   absl::Duration ttl = absl::ZeroDuration());

  // A verified copy of the snapshot. NotFound on a miss: absent, expired, or failed checksum.
  // Cost: one XXH3-128 pass and one copy, outside the lock.
  absl::StatusOr<std::string> Get(const ModelFingerprint& fingerprint, const SwaKey& key);

  // Removes one snapshot; false if absent.
  bool Erase(const ModelFingerprint& fingerprint, const SwaKey& key);
  // Removes every snapshot of the fingerprint with this digest; returns how many. O(entries).
  size_t Flush(const Sha256Digest& fingerprint_digest);
  // Removes expired snapshots; returns how many. O(entries) (TTLs differ per snapshot).
  size_t SweepExpired();

  SwaPoolStats Stats() const;

  // Metadata of one live snapshot, or nullopt (absent or expired). No copy, no checksum pass, no
  // metrics and no LRU update: for Lookup's "is there a snapshot" probes and admin tools. O(1).
  std::optional<SwaEntryInfo> Describe(const ModelFingerprint& fingerprint,
                                       const SwaKey& key) const;
  // Metadata of every live snapshot, sorted by (fingerprint digest, key). A copy of the metadata
  // is taken under the lock (O(entries)) and sorted outside it; the pool holds thousands of
  // snapshots, not millions.
  std::vector<SwaEntryInfo> Entries() const;

  // Flips the bits of byte `offset` of a stored snapshot, keeping its checksum: a test hook that
  // simulates a DRAM error. False if absent or offset is out of range.
  bool CorruptForTesting(const ModelFingerprint& fingerprint, const SwaKey& key, size_t offset);

 private:
  using PoolKey = std::array<uint8_t, 64>;  // fingerprint digest || SwaKey
  struct Entry {
    std::shared_ptr<std::string> data;  // shared so that Get can verify and copy unlocked
    Hash128 checksum;
    int64_t last_access_us = 0;
    int64_t created_us = 0;
    int64_t ttl_us = 0;  // this snapshot's TTL
    std::list<PoolKey>::iterator lru;  // position in lru_ (front = most recent)
  };

  explicit SwaPool(SwaPoolOptions options);
  static PoolKey MakeKey(const ModelFingerprint& fingerprint, const SwaKey& key);
  int64_t NowMicros() const;
  bool Expired(const Entry& e, int64_t now_us) const;
  SwaEntryInfo InfoOf(const PoolKey& key, const Entry& e) const;
  // Unlinks an entry, counts it under `reason` (may be null) and hands its bytes to *freed so that
  // they are released after the lock is dropped.
  void RemoveLocked(absl::flat_hash_map<PoolKey, Entry>::iterator it, metrics::Counter* reason,
                    std::vector<std::shared_ptr<std::string>>* freed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes every expired snapshot (counted as TTL evictions). O(entries).
  void SweepExpiredLocked(int64_t now_us, std::vector<std::shared_ptr<std::string>>* freed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SwaPoolOptions options_;
  Clock* const clock_;
  OwnedTierMetrics metrics_holder_;
  const TierMetrics& m_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<PoolKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<PoolKey> lru_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flashserve::cache
