// The cache's admin operations over both tiers (global KV blocks on SSD, SWA snapshots in DRAM),
// protobuf-free: filtering, paging tokens, key resolution, flush, verification. The AdminService
// adapter (admin_service_impl.cc) converts wire types and calls these.
//
// Page tokens are opaque to clients: "b:<hex cursor>" continues the block listing after the
// 64-byte store key (fingerprint digest || block key), "s:<hex>" the snapshot listing after
// (fingerprint digest || SWA key), "s:" starts the snapshot listing. Blocks are listed first.
//
// Thread safety: every function is thread-safe (the stores are); results are not snapshots
// across tiers or pages.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cache_service/server/cache_state.h"

namespace flashserve::cache {

struct AdminFilter {
  bool blocks = true;  // include global KV blocks
  bool swa = true;     // include SWA snapshots
  std::optional<Sha256Digest> fingerprint;
  std::optional<bool> pinned;  // snapshots are never pinned
};

// One listed entry: a block (is_block) or a snapshot.
struct AdminEntry {
  bool is_block = true;
  StoreEntryInfo block;
  SwaEntryInfo swa;
};

struct AdminPage {
  std::vector<AdminEntry> entries;
  std::string next_token;  // empty: the listing is complete
};

// One page of at most `page_size` entries after `token` (empty: from the start). A page may hold
// fewer entries with a non-empty token when a filter skipped many keys (bounded work per call).
// Errors: InvalidArgument for a malformed token.
absl::StatusOr<AdminPage> ListAdminEntries(CacheState& state, const AdminFilter& filter,
                                           size_t page_size, std::string_view token);

// Digests of the model fingerprints holding blocks. Cost: a walk of the index (once per RPC).
std::vector<Sha256Digest> BlockFingerprints(CacheState& state);
// The live block with this key under one of `fingerprints` (a block key hashes its fingerprint,
// so there is at most one), or nullopt. One index probe per fingerprint.
std::optional<StoreEntryInfo> FindBlock(CacheState& state,
                                        std::span<const Sha256Digest> fingerprints,
                                        const BlockKey& key);
// The live snapshot with this key under any fingerprint, or nullopt. O(snapshots).
std::optional<SwaEntryInfo> FindSwa(const CacheState& state, const SwaKey& key);

// Entries and bytes held per model fingerprint over both tiers, sorted by digest.
struct ModelUsage {
  Sha256Digest fingerprint{};
  uint64_t blocks = 0;
  uint64_t swa_snapshots = 0;
  uint64_t bytes = 0;
};
std::vector<ModelUsage> UsageByModel(CacheState& state);

struct FlushTotals {
  uint64_t entries = 0;
  uint64_t bytes = 0;
};
// Removes (or with dry_run only counts) the entries matching `filter`; pinned blocks only with
// include_pinned. A whole fingerprint goes in one range delete; otherwise entries are deleted one
// by one. Errors: those of the store.
absl::StatusOr<FlushTotals> FlushAdminEntries(CacheState& state, const AdminFilter& filter,
                                              bool include_pinned, bool dry_run);

struct VerifyTotals {
  uint64_t checked = 0;
  std::vector<StoreEntryInfo> corrupt;
  uint64_t evicted = 0;
  std::string next_token;  // empty: every selected block has been checked
};
// Reads and verifies up to `max_entries` global KV blocks after `token` (snapshots are verified
// on every read and are not scanned here). Errors: InvalidArgument (token), store errors.
absl::StatusOr<VerifyTotals> VerifyAdminEntries(CacheState& state, const AdminFilter& filter,
                                                size_t max_entries, std::string_view token,
                                                bool evict_corrupt);

}  // namespace flashserve::cache
