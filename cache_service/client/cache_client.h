// CacheClient: the only way other modules talk to the cache service (STYLE.md): a small C++
// client over the gRPC stubs of flashserve.v1.CacheService and AdminService, with our own structs
// (cache_client_types.h) — no protobuf or gRPC types in this header.
//
//   ASSIGN_OR_RETURN(auto cache, CacheClient::Connect({.address = "127.0.0.1:8100"}));
//   ASSIGN_OR_RETURN(LookupResult hit, cache->Lookup(fingerprint, tokens));
//   ASSIGN_OR_RETURN(std::vector<BlockRead> blocks, cache->GetBlocks(fingerprint, keys));
//
// Every call carries a deadline (options.timeout, or the call's own where it takes one). Payloads
// travel inline in the gRPC messages (the transfer layer does not exist yet), so a call's bytes
// are bounded by max_message_bytes; GetBlocks and PutBlocks split long key lists into calls of
// max_keys_per_call.
//
// Errors: the RPC's gRPC status mapped to the absl::Status of the same code, the message prefixed
// with the call's name: InvalidArgument / ResourceExhausted for requests the server rejects,
// Unauthenticated for a missing or wrong admin token, Unavailable when the server cannot be
// reached, DeadlineExceeded. Per-entry outcomes (a miss, a rejected block) are values, not errors.
//
// Thread safety: a CacheClient is thread-safe; share one per process and server (one channel).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache_service/client/cache_client_types.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace flashserve::cache {

struct CacheClientOptions {
  std::string address;                         // "host:port" of the cache server
  std::string admin_token;                     // sent as "authorization: Bearer" on admin calls
  absl::Duration timeout = absl::Seconds(10);  // deadline of each data-path and admin call
  absl::Duration compact_timeout = absl::Minutes(30);  // Compact's deadline
  int64_t max_message_bytes = int64_t{64} << 20;       // must not exceed the server's limit
  size_t max_keys_per_call = 64;  // GetBlocks/PutBlocks page size (64 full-model blocks ~ 3.6 MB)
};

class CacheClient {
 public:
  // Creates the channel (connection is lazy: an unreachable server shows on the first call).
  // InvalidArgument for an empty address or a non-positive timeout.
  static absl::StatusOr<std::unique_ptr<CacheClient>> Connect(CacheClientOptions options);
  ~CacheClient();
  CacheClient(const CacheClient&) = delete;
  CacheClient& operator=(const CacheClient&) = delete;

  // ---- data path (CacheService) ----

  // Longest cached prefix of `tokens` with per-block metadata and the SWA snapshot, if any.
  // `touch` refreshes the hit blocks' recency (true for real requests, false for tools).
  absl::StatusOr<LookupResult> Lookup(const ModelFingerprint& fingerprint,
                                      std::span<const TokenId> tokens,
                                      std::string_view tenant_salt = {}, bool touch = true);
  // One BlockRead per key, in order (split into calls of max_keys_per_call).
  absl::StatusOr<std::vector<BlockRead>> GetBlocks(const ModelFingerprint& fingerprint,
                                                   std::span<const BlockKey> keys);
  // Stores blocks (parents before children); one outcome per block, in order. `pin` exempts the
  // new blocks from eviction; `ttl_s` is their lifetime after the last access (0: the server's
  // cache.ttl; above cache.max_ttl the call fails with InvalidArgument).
  absl::StatusOr<std::vector<PutOutcome>> PutBlocks(const ModelFingerprint& fingerprint,
                                                    std::span<const BlockToPut> blocks,
                                                    std::string_view tenant_salt = {},
                                                    bool pin = false, uint32_t ttl_s = 0);
  // Reads a snapshot; `take` removes it once read.
  absl::StatusOr<SwaRead> GetSwa(const ModelFingerprint& fingerprint, const SwaKey& key,
                                 bool take = false);
  absl::StatusOr<PutSwaResult> PutSwa(const ModelFingerprint& fingerprint, const SwaToPut& put,
                                      std::string_view tenant_salt = {});
  // CacheService.Health (no token needed).
  absl::StatusOr<HealthInfo> Health();

  // ---- admin (AdminService; carry the admin token) ----

  absl::StatusOr<CacheStatsInfo> Stats();
  // One page; page_size 0 = server default (100), capped at 1000 by the server.
  absl::StatusOr<EntryPageInfo> List(const EntryFilterSpec& filter, uint32_t page_size = 0,
                                     std::string_view page_token = {});
  // One entry's metadata and value header; `verify` reads the value and checks its checksum.
  // NotFound if no such entry.
  absl::StatusOr<InspectInfo> Inspect(const EntryRef& entry, bool verify = false);
  absl::StatusOr<EvictCounts> Evict(std::span<const EntryRef> entries, bool force = false);
  absl::StatusOr<PinCounts> Pin(std::span<const EntryRef> entries);
  absl::StatusOr<PinCounts> Unpin(std::span<const EntryRef> entries);
  // Removes every entry matching `filter` (an empty filter: everything), pinned blocks only with
  // include_pinned; dry_run only counts.
  absl::StatusOr<FlushCounts> Flush(const EntryFilterSpec& filter, bool include_pinned = false,
                                    bool dry_run = false);
  // Verifies one page of blocks (max_entries 0 = server default 1000); loop on next_page_token.
  absl::StatusOr<VerifyPageInfo> Verify(const EntryFilterSpec& filter, uint32_t max_entries = 0,
                                        std::string_view page_token = {},
                                        bool evict_corrupt = false);
  // RocksDB compaction; deadline options.compact_timeout.
  absl::StatusOr<CompactionInfo> Compact();
  // AdminService.Health (no token needed).
  absl::StatusOr<HealthInfo> AdminHealth();

 private:
  // The generated stubs live in the .cc files (one per service), so that no generated header is
  // included here.
  class DataStub;
  class AdminStub;
  struct StubDeleter {
    void operator()(DataStub* stub) const;
    void operator()(AdminStub* stub) const;
  };

  CacheClient(CacheClientOptions options, std::unique_ptr<DataStub, StubDeleter> data,
              std::unique_ptr<AdminStub, StubDeleter> admin);
  // Defined in admin_client.cc, beside AdminStub.
  static std::unique_ptr<AdminStub, StubDeleter> NewAdminStub(
      const std::shared_ptr<grpc::Channel>& channel);

  const CacheClientOptions options_;
  std::unique_ptr<DataStub, StubDeleter> data_;
  std::unique_ptr<AdminStub, StubDeleter> admin_;
};

}  // namespace flashserve::cache
