// CacheClient: the AdminService calls (every call but AdminHealth carries the admin token).
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/client/cache_client.h"
#include "cache_service/client/client_util.h"
#include "common/base/status_macros.h"
#include "flashserve/v1/admin.grpc.pb.h"
#include "grpcpp/channel.h"

namespace flashserve::cache {

using client_internal::FromGrpc;
using client_internal::PrepareContext;

class CacheClient::AdminStub {
 public:
  explicit AdminStub(const std::shared_ptr<grpc::Channel>& channel)
      : stub(v1::AdminService::NewStub(channel)) {}
  std::unique_ptr<v1::AdminService::Stub> stub;
};

void CacheClient::StubDeleter::operator()(AdminStub* stub) const { delete stub; }

std::unique_ptr<CacheClient::AdminStub, CacheClient::StubDeleter> CacheClient::NewAdminStub(
    const std::shared_ptr<grpc::Channel>& channel) {
  return std::unique_ptr<AdminStub, StubDeleter>(new AdminStub(channel));
}

namespace {

void ToProto(const EntryRef& ref, v1::EntryKey* out) {
  if (ref.is_block) {
    out->mutable_block()->set_sha256(ref.key.data(), ref.key.size());
  } else {
    out->mutable_swa()->set_sha256(ref.key.data(), ref.key.size());
  }
}

void ToProto(const EntryFilterSpec& f, v1::EntryFilter* out) {
  if (f.blocks && !f.swa) out->set_kind(v1::ENTRY_KIND_GLOBAL_BLOCK);
  if (f.swa && !f.blocks) out->set_kind(v1::ENTRY_KIND_SWA_SNAPSHOT);
  if (f.fingerprint.has_value()) out->set_fingerprint(f.fingerprint->data(), 32);
  out->set_tier(static_cast<v1::Tier>(client_internal::TierToProto(f.tier)));
  if (f.pinned.has_value()) out->set_pinned(*f.pinned);
}

absl::StatusOr<EntryRef> RefFrom(const v1::EntryKey& k, std::string_view rpc) {
  EntryRef ref;
  ref.is_block = k.has_block();
  const std::string& bytes = ref.is_block ? k.block().sha256() : k.swa().sha256();
  if (!client_internal::DigestFrom(bytes, &ref.key)) {
    return absl::InternalError(absl::StrCat(absl::string_view(rpc.data(), rpc.size()),
                                            ": malformed entry key in the reply"));
  }
  return ref;
}

absl::Time TimeFromMs(uint64_t ms) { return absl::FromUnixMillis(static_cast<int64_t>(ms)); }

absl::StatusOr<EntryDetails> DetailsFrom(const v1::EntryInfo& e, std::string_view rpc) {
  EntryDetails d;
  ASSIGN_OR_RETURN(d.ref, RefFrom(e.key(), rpc));
  client_internal::DigestFrom(e.fingerprint(), &d.fingerprint);
  d.tier = client_internal::TierFromProto(e.tier());
  d.size_bytes = e.size_bytes();
  d.created = TimeFromMs(e.created_unix_ms());
  d.last_access = TimeFromMs(e.last_access_unix_ms());
  if (e.expires_unix_ms() != 0) d.expires = TimeFromMs(e.expires_unix_ms());
  d.pinned = e.pinned();
  d.layout_version = e.layout_version();
  return d;
}

}  // namespace

// Runs one admin RPC with the token and the given deadline.
#define FS_ADMIN_CALL(Rpc, req, resp, timeout)                            \
  do {                                                                    \
    grpc::ClientContext ctx;                                              \
    PrepareContext(&ctx, timeout, options_.admin_token);                  \
    RETURN_IF_ERROR(FromGrpc(admin_->stub->Rpc(&ctx, req, &resp), #Rpc)); \
  } while (false)

absl::StatusOr<CacheStatsInfo> CacheClient::Stats() {
  v1::CacheStatsRequest req;
  v1::CacheStatsResponse resp;
  FS_ADMIN_CALL(Stats, req, resp, options_.timeout);
  CacheStatsInfo out;
  for (const v1::TierStats& t : resp.tiers()) {
    TierStatsInfo s;
    s.tier = client_internal::TierFromProto(t.tier());
    s.entries = t.entries();
    s.bytes_used = t.bytes_used();
    s.bytes_capacity = t.bytes_capacity();
    s.hits = t.hits();
    s.misses = t.misses();
    s.bytes_read = t.bytes_read();
    s.bytes_written = t.bytes_written();
    s.evictions = t.evictions();
    s.expirations = t.expirations();
    s.checksum_failures = t.checksum_failures();
    out.tiers.push_back(s);
  }
  for (const v1::FingerprintUsage& f : resp.fingerprints()) {
    ModelUsageInfo m;
    client_internal::DigestFrom(f.fingerprint().digest(), &m.fingerprint);
    m.blocks = f.blocks();
    m.swa_snapshots = f.swa_snapshots();
    m.bytes = f.bytes();
    out.models.push_back(m);
  }
  out.lookups = resp.lookups();
  out.lookup_hit_tokens = resp.lookup_hit_tokens();
  out.lookup_miss_tokens = resp.lookup_miss_tokens();
  out.uptime = absl::Seconds(static_cast<int64_t>(resp.uptime_s()));
  return out;
}

absl::StatusOr<EntryPageInfo> CacheClient::List(const EntryFilterSpec& filter, uint32_t page_size,
                                                std::string_view page_token) {
  v1::ListRequest req;
  ToProto(filter, req.mutable_filter());
  req.set_page_size(page_size);
  req.set_page_token(std::string(page_token));
  v1::ListResponse resp;
  FS_ADMIN_CALL(List, req, resp, options_.timeout);
  EntryPageInfo out;
  for (const v1::EntryInfo& e : resp.entries()) {
    ASSIGN_OR_RETURN(EntryDetails d, DetailsFrom(e, "List"));
    out.entries.push_back(std::move(d));
  }
  out.next_page_token = resp.next_page_token();
  return out;
}

absl::StatusOr<InspectInfo> CacheClient::Inspect(const EntryRef& entry, bool verify) {
  v1::InspectRequest req;
  ToProto(entry, req.mutable_key());
  req.set_verify(verify);
  v1::InspectResponse resp;
  FS_ADMIN_CALL(Inspect, req, resp, options_.timeout);
  InspectInfo out;
  ASSIGN_OR_RETURN(out.entry, DetailsFrom(resp.info(), "Inspect"));
  out.header_bytes = resp.header().header_bytes();
  out.checksum_algorithm = resp.header().checksum_algorithm();
  out.checksum = resp.header().checksum();
  if (resp.has_checksum_ok()) out.checksum_ok = resp.checksum_ok();
  return out;
}

absl::StatusOr<EvictCounts> CacheClient::Evict(std::span<const EntryRef> entries, bool force) {
  v1::EvictRequest req;
  for (const EntryRef& e : entries) ToProto(e, req.add_keys());
  req.set_force(force);
  v1::EvictResponse resp;
  FS_ADMIN_CALL(Evict, req, resp, options_.timeout);
  return EvictCounts{resp.evicted(), resp.not_found(), resp.skipped_pinned()};
}

absl::StatusOr<PinCounts> CacheClient::Pin(std::span<const EntryRef> entries) {
  v1::PinRequest req;
  for (const EntryRef& e : entries) ToProto(e, req.add_keys());
  v1::PinResponse resp;
  FS_ADMIN_CALL(Pin, req, resp, options_.timeout);
  return PinCounts{resp.changed(), resp.not_found()};
}

absl::StatusOr<PinCounts> CacheClient::Unpin(std::span<const EntryRef> entries) {
  v1::UnpinRequest req;
  for (const EntryRef& e : entries) ToProto(e, req.add_keys());
  v1::UnpinResponse resp;
  FS_ADMIN_CALL(Unpin, req, resp, options_.timeout);
  return PinCounts{resp.changed(), resp.not_found()};
}

absl::StatusOr<FlushCounts> CacheClient::Flush(const EntryFilterSpec& filter, bool include_pinned,
                                               bool dry_run) {
  v1::FlushRequest req;
  ToProto(filter, req.mutable_filter());
  req.set_include_pinned(include_pinned);
  req.set_dry_run(dry_run);
  v1::FlushResponse resp;
  FS_ADMIN_CALL(Flush, req, resp, options_.timeout);
  return FlushCounts{resp.entries_removed(), resp.bytes_freed()};
}

absl::StatusOr<VerifyPageInfo> CacheClient::Verify(const EntryFilterSpec& filter,
                                                   uint32_t max_entries,
                                                   std::string_view page_token,
                                                   bool evict_corrupt) {
  v1::VerifyRequest req;
  ToProto(filter, req.mutable_filter());
  req.set_max_entries(max_entries);
  req.set_page_token(std::string(page_token));
  req.set_evict_corrupt(evict_corrupt);
  v1::VerifyResponse resp;
  FS_ADMIN_CALL(Verify, req, resp, options_.timeout);
  VerifyPageInfo out;
  out.checked = resp.checked();
  out.corrupt = resp.corrupt();
  for (const v1::EntryKey& k : resp.corrupt_keys()) {
    ASSIGN_OR_RETURN(EntryRef ref, RefFrom(k, "Verify"));
    out.corrupt_keys.push_back(ref);
  }
  out.evicted = resp.evicted();
  out.next_page_token = resp.next_page_token();
  return out;
}

absl::StatusOr<CompactionInfo> CacheClient::Compact() {
  v1::CompactRequest req;
  v1::CompactResponse resp;
  FS_ADMIN_CALL(Compact, req, resp, options_.compact_timeout);
  return CompactionInfo{resp.bytes_before(), resp.bytes_after(),
                        absl::Milliseconds(static_cast<int64_t>(resp.duration_ms()))};
}

absl::StatusOr<HealthInfo> CacheClient::AdminHealth() {
  v1::HealthCheckRequest req;
  v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, options_.timeout, "");
  RETURN_IF_ERROR(FromGrpc(admin_->stub->Health(&ctx, req, &resp), "AdminHealth"));
  return client_internal::HealthFromProto(resp);
}

#undef FS_ADMIN_CALL

}  // namespace flashserve::cache
