// The GlobalStore's in-memory index of its entries: the authority for presence, size, last
// access and pins, used for lookups, TTL expiry and approximate-LRU eviction. Internal to
// global_store/. Rebuilt from the "meta" column family when the store opens.
//
// Memory: ~100 bytes per entry in the hash map (64-byte key + 40 bytes of state, at flat_hash_map's
// load factor) plus 64 bytes in the dense slot array used for sampling: ~190 MB for 1M blocks
// (1M blocks = 57 GB of full-model KV), i.e. ~0.3% of the data it indexes.
//
// Not thread-safe: GlobalStore guards it with its mutex.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cache_service/global_store/block_key.h"

namespace flashserve::cache {

// The RocksDB key of an entry, in both column families: fingerprint digest || block key.
struct StoreKey {
  std::array<uint8_t, 64> bytes{};

  friend bool operator==(const StoreKey&, const StoreKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const StoreKey& k) {
    return H::combine_contiguous(std::move(h), k.bytes.data(), k.bytes.size());
  }
};
StoreKey MakeStoreKey(const ModelFingerprint& fingerprint, const BlockKey& key);
// The first 32 bytes (fingerprint digest) and the last 32 (block key).
Sha256Digest FingerprintOf(const StoreKey& key);
BlockKey BlockKeyOf(const StoreKey& key);

struct EntryState {
  uint64_t bytes = 0;  // encoded value size
  int64_t created_unix_micros = 0;
  int64_t last_access_unix_micros = 0;
  bool pinned = false;
  // Where the value is: segment 0 = the RocksDB blocks family; otherwise a value-log segment
  // (value_log.h) and the byte offset of the value in it.
  uint32_t segment = 0;
  uint64_t offset = 0;
  // The entry's own TTL in seconds (counted from the last access); 0: the store's default.
  uint32_t ttl_s = 0;
};

// Live entries and encoded bytes that the index places in one value-log segment.
struct SegmentUse {
  size_t entries = 0;
  uint64_t bytes = 0;
};

class StoreIndex {
 public:
  explicit StoreIndex(uint64_t seed = 0x5eed) : rng_(seed) {}

  // Pre-sizes the tables for `n` entries (a rebuild knows its approximate size).
  void Reserve(size_t n) {
    entries_.reserve(n);
    slots_.reserve(n);
  }

  // The entry's state, or null. The pointer is valid until the next mutation of the index.
  const EntryState* Find(const StoreKey& key) const;
  // Inserts or replaces `key` (a replaced entry keeps its pin). O(1).
  void Upsert(const StoreKey& key, EntryState state);
  // Removes `key`; returns its state, or nullopt if absent. O(1).
  std::optional<EntryState> Erase(const StoreKey& key);
  // Sets the last access and marks the entry for persistence. False if absent.
  bool Touch(const StoreKey& key, int64_t now_unix_micros);
  // Sets the entry's TTL (seconds, 0 = default) and marks it for persistence. False if absent.
  bool SetTtl(const StoreKey& key, uint32_t ttl_s);
  // Sets the pin flag. False if absent.
  bool SetPinned(const StoreKey& key, bool pinned);
  // Moves the entry's value to (segment, offset) if it is still at (from_segment, from_offset);
  // false otherwise (erased or replaced meanwhile). O(1).
  bool Relocate(const StoreKey& key, uint32_t from_segment, uint64_t from_offset, uint32_t segment,
                uint64_t offset);
  // Live use of a value-log segment (zero when nothing refers to it). O(1).
  SegmentUse SegmentUseOf(uint32_t segment) const;

  // Approximate LRU: examines `samples` entries chosen uniformly at random (every entry when there
  // are no more than `samples`) and returns the unpinned one with the oldest last access, or
  // nullopt when all examined entries are pinned. O(samples).
  std::optional<StoreKey> SampleLeastRecent(int samples);
  // Examines up to `budget` entries from a rotating cursor and appends those expired at `now` to
  // *expired: unpinned, and last access + TTL (the entry's own, else `default_ttl_us`) <= now.
  // O(budget).
  void SweepExpired(int64_t now_unix_micros, int64_t default_ttl_us, size_t budget,
                    std::vector<StoreKey>* expired);
  // Appends every key of the fingerprint `digest` to *keys. O(entries).
  void KeysOfFingerprint(const Sha256Digest& digest, std::vector<StoreKey>* keys) const;
  // Calls f(key, state) for every entry, in no particular order. O(entries).
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [key, entry] : entries_) f(key, entry.state);
  }
  // Moves up to `max` entries touched since their last persistence into *out (key and state) and
  // clears their mark. O(max) amortised.
  void TakeTouched(size_t max, std::vector<std::pair<StoreKey, EntryState>>* out);

  size_t size() const { return slots_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t pinned_bytes() const { return pinned_bytes_; }
  size_t pinned_entries() const { return pinned_entries_; }

 private:
  struct Entry {
    EntryState state;
    uint32_t slot = 0;     // position in slots_
    bool touched = false;  // last access changed since it was last persisted
  };

  absl::flat_hash_map<StoreKey, Entry> entries_;
  std::vector<StoreKey> slots_;    // dense, for uniform sampling and the sweep cursor
  std::vector<StoreKey> touched_;  // keys whose `touched` went false -> true (may hold stale keys)
  size_t sweep_cursor_ = 0;
  uint64_t bytes_ = 0;
  uint64_t pinned_bytes_ = 0;
  size_t pinned_entries_ = 0;
  std::mt19937_64 rng_;
  absl::flat_hash_map<uint32_t, SegmentUse> segments_;  // value-log segments only (id > 0)

  void AddUse(const EntryState& s);
  void RemoveUse(const EntryState& s);
};

}  // namespace flashserve::cache
