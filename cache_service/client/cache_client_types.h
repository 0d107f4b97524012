// The value types of CacheClient (cache_client.h includes this; include that header, not this
// one). Plain structs: no protobuf types, so modules that talk to the cache never see wire types.
// Keys and fingerprints are the storage core's own types (global_store/block_key.h,
// swa_pool/swa_key.h, library fs_cache_keys).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "cache_service/global_store/block_key.h"
#include "cache_service/swa_pool/swa_key.h"

namespace flashserve::cache {

enum class CacheTier { kUnspecified, kHbm, kHost, kSsd };
// "hbm", "host", "ssd", "any".
std::string_view CacheTierName(CacheTier tier);

enum class ReadStatus { kOk, kNotFound, kCorrupt };
enum class PutOutcome { kStored, kAlreadyPresent, kRejectedInvalid, kRejectedFull };
std::string_view PutOutcomeName(PutOutcome outcome);  // "stored", "already_present", ...

// ---- data path ----------------------------------------------------------------------------

struct CachedBlock {
  BlockKey key;
  CacheTier residency = CacheTier::kSsd;  // fastest tier holding it
  absl::Duration age;                     // since it was written
  absl::Duration ttl_remaining;           // zero when pinned
  uint64_t size_bytes = 0;                // stored (encoded) value size
  bool pinned = false;
};

struct CachedSnapshot {
  SwaKey key;
  uint64_t prefix_tokens = 0;  // the exact prefix it ends, in [hit_tokens, hit_tokens + 64)
  absl::Duration age;
  absl::Duration ttl_remaining;
  uint64_t size_bytes = 0;
};

struct LookupResult {
  uint64_t hit_tokens = 0;            // 64 x blocks.size()
  std::vector<CachedBlock> blocks;    // the hit blocks, in chain order
  std::optional<CachedSnapshot> swa;  // set iff an SWA snapshot exists for a prefix end
};

struct BlockRead {
  BlockKey key;
  ReadStatus status = ReadStatus::kNotFound;
  std::string payload;  // the KV rows, only when status == kOk
};

// One full block to store. The server recomputes `key` from (parent, tokens, fingerprint, salt)
// and rejects a mismatch (PutOutcome::kRejectedInvalid).
struct BlockToPut {
  BlockKey key;
  BlockKey parent = BlockKey::Root();  // Root() for the first block of a sequence
  std::vector<TokenId> tokens;         // exactly 64
  std::string_view payload;            // not owned; valid during the call
};

struct SwaRead {
  ReadStatus status = ReadStatus::kNotFound;
  std::string snapshot;        // only when status == kOk
  uint64_t prefix_tokens = 0;  // the exact prefix length it ends
};

struct SwaToPut {
  SwaKey key;                              // SwaKeyForPrefix(prefix, fingerprint, salt)
  BlockKey last_block = BlockKey::Root();  // key of the prefix's last full block
  std::vector<TokenId> tail;               // the 0-63 tokens after last_block
  uint64_t prefix_tokens = 0;              // 64 x full blocks + tail.size()
  std::string_view snapshot;               // not owned
  uint32_t ttl_s = 0;                      // lifetime after the last access; 0: server default
};

struct PutSwaResult {
  PutOutcome outcome = PutOutcome::kRejectedInvalid;
  absl::Time expires = absl::InfinitePast();  // when stored
};

enum class ServingStatus { kUnspecified, kServing, kStarting, kDraining, kNotServing };

struct HealthInfo {
  ServingStatus status = ServingStatus::kUnspecified;
  std::string role;
  std::string version;
  absl::Duration uptime;
  std::string detail;
};

// ---- admin --------------------------------------------------------------------------------

struct TierStatsInfo {
  CacheTier tier = CacheTier::kUnspecified;
  uint64_t entries = 0, bytes_used = 0, bytes_capacity = 0;
  uint64_t hits = 0, misses = 0, bytes_read = 0, bytes_written = 0;
  uint64_t evictions = 0;    // for capacity
  uint64_t expirations = 0;  // for TTL
  uint64_t checksum_failures = 0;
};

struct ModelUsageInfo {
  Sha256Digest fingerprint{};
  uint64_t blocks = 0, swa_snapshots = 0, bytes = 0;
};

struct CacheStatsInfo {
  std::vector<TierStatsInfo> tiers;  // host (SWA pool), ssd (global store)
  std::vector<ModelUsageInfo> models;
  uint64_t lookups = 0, lookup_hit_tokens = 0, lookup_miss_tokens = 0;
  absl::Duration uptime;
};

// Names an entry of either kind.
struct EntryRef {
  bool is_block = true;  // a global KV block; false: an SWA snapshot
  Sha256Digest key{};
  static EntryRef Block(const BlockKey& k) { return EntryRef{true, k.bytes}; }
  static EntryRef Swa(const SwaKey& k) { return EntryRef{false, k.bytes}; }
};

struct EntryFilterSpec {
  bool blocks = true;  // include global KV blocks
  bool swa = true;     // include SWA snapshots
  std::optional<Sha256Digest> fingerprint;
  CacheTier tier = CacheTier::kUnspecified;  // any
  std::optional<bool> pinned;
};

struct EntryDetails {
  EntryRef ref;
  Sha256Digest fingerprint{};
  CacheTier tier = CacheTier::kUnspecified;
  uint64_t size_bytes = 0;
  absl::Time created = absl::UnixEpoch();
  absl::Time last_access = absl::UnixEpoch();
  std::optional<absl::Time> expires;  // nullopt when pinned
  bool pinned = false;
  uint32_t layout_version = 0;  // from the value header (Inspect only)
};

struct EntryPageInfo {
  std::vector<EntryDetails> entries;
  std::string next_page_token;  // empty: last page
};

struct InspectInfo {
  EntryDetails entry;
  uint32_t header_bytes = 0;
  std::string checksum_algorithm;
  std::string checksum;             // raw stored checksum bytes
  std::optional<bool> checksum_ok;  // when verification was asked
};

struct EvictCounts {
  uint32_t evicted = 0, not_found = 0, skipped_pinned = 0;
};
struct PinCounts {
  uint32_t changed = 0, not_found = 0;
};
struct FlushCounts {
  uint64_t entries = 0, bytes = 0;
};

struct VerifyPageInfo {
  uint64_t checked = 0;
  uint64_t corrupt = 0;
  std::vector<EntryRef> corrupt_keys;  // at most 100 per page
  uint64_t evicted = 0;
  std::string next_page_token;  // empty: done
};

struct CompactionInfo {
  uint64_t bytes_before = 0, bytes_after = 0;
  absl::Duration duration;
};

}  // namespace flashserve::cache
