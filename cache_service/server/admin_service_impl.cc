// flashserve.v1.AdminService over CacheState: authentication, validation and wire conversion;
// the operations are in admin_ops.cc and the stores. Rules: admin_service_impl.h.
#include "cache_service/server/admin_service_impl.h"

#include <openssl/crypto.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache_service/server/adapter_util.h"
#include "cache_service/server/admin_ops.h"
#include "cache_service/server/swa_envelope.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "flashserve/v1/admin.grpc.pb.h"

namespace flashserve::cache {
namespace {

using adapter::MsFromMicros;
using adapter::RpcRecorder;
constexpr std::string_view kService = "AdminService";
constexpr uint32_t kDefaultPageSize = 100, kMaxPageSize = 1000;
constexpr uint32_t kDefaultVerifyEntries = 1000, kMaxVerifyEntries = 100000;
constexpr size_t kMaxCorruptKeysReported = 100;

absl::StatusOr<AdminFilter> FilterFrom(const v1::EntryFilter& f) {
  AdminFilter out;
  switch (f.kind()) {
    case v1::ENTRY_KIND_UNSPECIFIED:
      break;
    case v1::ENTRY_KIND_GLOBAL_BLOCK:
      out.swa = false;
      break;
    case v1::ENTRY_KIND_SWA_SNAPSHOT:
      out.blocks = false;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("filter.kind ", f.kind(), " unknown"));
  }
  switch (f.tier()) {
    case v1::TIER_UNSPECIFIED:
      break;
    case v1::TIER_SSD:
      out.swa = false;
      break;
    case v1::TIER_HOST:
      out.blocks = false;
      break;
    case v1::TIER_HBM:
      out.blocks = out.swa = false;
      break;  // the cache holds nothing in HBM
    default:
      return absl::InvalidArgumentError(absl::StrCat("filter.tier ", f.tier(), " unknown"));
  }
  if (f.has_fingerprint()) {
    ASSIGN_OR_RETURN(out.fingerprint,
                     adapter::DigestFromBytes(f.fingerprint(), "filter.fingerprint"));
  }
  if (f.has_pinned()) out.pinned = f.pinned();
  return out;
}

void FillBlockInfo(const StoreEntryInfo& b, v1::EntryInfo* out) {
  adapter::ToProto(b.key, out->mutable_key()->mutable_block());
  out->set_fingerprint(b.fingerprint.data(), b.fingerprint.size());
  out->set_tier(v1::TIER_SSD);
  out->set_size_bytes(b.bytes);
  out->set_created_unix_ms(MsFromMicros(b.created_unix_micros));
  out->set_last_access_unix_ms(MsFromMicros(b.last_access_unix_micros));
  out->set_expires_unix_ms(b.pinned ? 0 : MsFromMicros(b.expires_unix_micros));
  out->set_pinned(b.pinned);
}

void FillSwaInfo(const SwaEntryInfo& w, v1::EntryInfo* out) {
  adapter::ToProto(w.key, out->mutable_key()->mutable_swa());
  out->set_fingerprint(w.fingerprint.data(), w.fingerprint.size());
  out->set_tier(v1::TIER_HOST);
  out->set_size_bytes(SwaPayloadBytes(w.bytes));
  out->set_created_unix_ms(MsFromMicros(w.created_unix_micros));
  out->set_last_access_unix_ms(MsFromMicros(w.last_access_unix_micros));
  out->set_expires_unix_ms(MsFromMicros(w.expires_unix_micros));
}

void FillTier(v1::Tier tier, const TierMetrics& m, uint64_t entries, uint64_t bytes,
              uint64_t capacity, v1::TierStats* out) {
  auto count = [](const metrics::Counter* c) { return static_cast<uint64_t>(c->Value()); };
  out->set_tier(tier);
  out->set_entries(entries);
  out->set_bytes_used(bytes);
  out->set_bytes_capacity(capacity);
  out->set_hits(count(m.hits));
  out->set_misses(count(m.misses));
  out->set_bytes_read(count(m.read_bytes));
  out->set_bytes_written(count(m.written_bytes));
  out->set_evictions(count(m.evicted_capacity));
  out->set_expirations(count(m.evicted_ttl));
  out->set_checksum_failures(count(m.checksum_failures));
}

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  explicit AdminServiceImpl(CacheState* state) : s_(state) {}

#define FS_ADMIN_RPC(Name, Request, Response)                                             \
  grpc::Status Name(grpc::ServerContext* ctx, const v1::Request* req, v1::Response* resp) \
      override {                                                                          \
    RpcRecorder rpc(s_, kService, #Name);                                                 \
    if (!rpc.admitted()) return rpc.Finish(RpcRecorder::Draining());                      \
    if (grpc::Status auth = Authorize(*ctx); !auth.ok()) return rpc.Finish(auth);         \
    return rpc.Finish(Do##Name(*req, resp));                                              \
  }
  FS_ADMIN_RPC(Stats, CacheStatsRequest, CacheStatsResponse)
  FS_ADMIN_RPC(List, ListRequest, ListResponse)
  FS_ADMIN_RPC(Inspect, InspectRequest, InspectResponse)
  FS_ADMIN_RPC(Evict, EvictRequest, EvictResponse)
  FS_ADMIN_RPC(Pin, PinRequest, PinResponse)
  FS_ADMIN_RPC(Unpin, UnpinRequest, UnpinResponse)
  FS_ADMIN_RPC(Flush, FlushRequest, FlushResponse)
  FS_ADMIN_RPC(Verify, VerifyRequest, VerifyResponse)
  FS_ADMIN_RPC(Compact, CompactRequest, CompactResponse)
#undef FS_ADMIN_RPC

  grpc::Status Health(grpc::ServerContext*, const v1::HealthCheckRequest*,
                      v1::HealthCheckResponse* resp) override {
    RpcRecorder rpc(s_, kService, "Health", /*admit=*/false);
    adapter::FillHealth(*s_, resp);
    return rpc.Finish(grpc::Status::OK);
  }

 private:
  grpc::Status Authorize(const grpc::ServerContext& ctx) const;
  absl::Status DoStats(const v1::CacheStatsRequest&, v1::CacheStatsResponse* resp);
  absl::Status DoList(const v1::ListRequest& req, v1::ListResponse* resp);
  absl::Status DoInspect(const v1::InspectRequest& req, v1::InspectResponse* resp);
  absl::Status DoEvict(const v1::EvictRequest& req, v1::EvictResponse* resp);
  absl::Status DoPin(const v1::PinRequest& req, v1::PinResponse* resp) {
    return SetPinned(req.keys(), true, resp);
  }
  absl::Status DoUnpin(const v1::UnpinRequest& req, v1::UnpinResponse* resp) {
    return SetPinned(req.keys(), false, resp);
  }
  template <typename Response>
  absl::Status SetPinned(const google::protobuf::RepeatedPtrField<v1::EntryKey>& keys, bool pin,
                         Response* resp);
  absl::Status DoFlush(const v1::FlushRequest& req, v1::FlushResponse* resp);
  absl::Status DoVerify(const v1::VerifyRequest& req, v1::VerifyResponse* resp);
  absl::Status DoCompact(const v1::CompactRequest&, v1::CompactResponse* resp);
  absl::Status CheckKeyCount(int n) const {
    if (n <= s_->options().max_keys_per_request) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat("keys: ", n, " exceeds the limit ",
                                                     s_->options().max_keys_per_request,
                                                     " (cache.max_keys_per_request)"));
  }

  CacheState* const s_;
};

grpc::Status AdminServiceImpl::Authorize(const grpc::ServerContext& ctx) const {
  const std::string& token = s_->options().admin_token;
  if (token.empty()) return grpc::Status::OK;
  const std::string expected = "Bearer " + token;
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  const bool ok = it != md.end() && it->second.size() == expected.size() &&
                  CRYPTO_memcmp(it->second.data(), expected.data(), expected.size()) == 0;
  if (ok) return grpc::Status::OK;
  LOG(WARNING) << "cache admin: rejected a call without a valid admin token from " << ctx.peer();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      it == md.end() ? "admin token required (authorization: Bearer <token>)"
                                     : "admin token rejected");
}

absl::Status AdminServiceImpl::DoStats(const v1::CacheStatsRequest&, v1::CacheStatsResponse* resp) {
  const GlobalStoreStats ssd = s_->store().Stats();
  const SwaPoolStats dram = s_->swa().Stats();
  FillTier(v1::TIER_HOST, s_->dram_metrics(), dram.entries, dram.bytes, dram.capacity_bytes,
           resp->add_tiers());
  FillTier(v1::TIER_SSD, s_->ssd_metrics(), ssd.entries, ssd.bytes, ssd.capacity_bytes,
           resp->add_tiers());
  for (const ModelUsage& u : UsageByModel(*s_)) {
    v1::FingerprintUsage* f = resp->add_fingerprints();
    f->mutable_fingerprint()->set_digest(u.fingerprint.data(), u.fingerprint.size());
    f->mutable_fingerprint()->set_display(DigestToHex(u.fingerprint).substr(0, 16));
    f->set_blocks(u.blocks);
    f->set_swa_snapshots(u.swa_snapshots);
    f->set_bytes(u.bytes);
  }
  const ServerMetrics& m = s_->server_metrics();
  resp->set_lookups(static_cast<uint64_t>(m.lookups->Value()));
  resp->set_lookup_hit_tokens(static_cast<uint64_t>(m.lookup_hit_tokens->Value()));
  resp->set_lookup_miss_tokens(static_cast<uint64_t>(m.lookup_miss_tokens->Value()));
  resp->set_uptime_s(static_cast<uint64_t>(absl::ToInt64Seconds(s_->uptime())));
  return absl::OkStatus();
}

absl::Status AdminServiceImpl::DoList(const v1::ListRequest& req, v1::ListResponse* resp) {
  ASSIGN_OR_RETURN(const AdminFilter filter, FilterFrom(req.filter()));
  const uint32_t size =
      req.page_size() == 0 ? kDefaultPageSize : std::min(req.page_size(), kMaxPageSize);
  ASSIGN_OR_RETURN(AdminPage page, ListAdminEntries(*s_, filter, size, req.page_token()));
  for (const AdminEntry& e : page.entries) {
    if (e.is_block) {
      FillBlockInfo(e.block, resp->add_entries());
    } else {
      FillSwaInfo(e.swa, resp->add_entries());
    }
  }
  resp->set_next_page_token(page.next_token);
  return absl::OkStatus();
}

absl::Status AdminServiceImpl::DoInspect(const v1::InspectRequest& req, v1::InspectResponse* resp) {
  v1::ValueHeader* h = resp->mutable_header();
  h->set_checksum_algorithm("xxh3-128");
  if (req.key().has_block()) {
    ASSIGN_OR_RETURN(const BlockKey key,
                     adapter::BlockKeyFromProto(req.key().block(), "key.block"));
    const std::optional<StoreEntryInfo> found = FindBlock(*s_, BlockFingerprints(*s_), key);
    if (!found.has_value()) return absl::NotFoundError("no cached block with this key");
    ASSIGN_OR_RETURN(const InspectedBlock b,
                     s_->store().InspectBlock(found->fingerprint, key, req.verify()));
    FillBlockInfo(b.info, resp->mutable_info());
    if (b.header_readable) {
      resp->mutable_info()->set_layout_version(b.header.fingerprint.layout_version);
      h->set_layout_version(b.header.fingerprint.layout_version);
      h->set_header_bytes(static_cast<uint32_t>(kBlockHeaderBytes));
    }
    h->set_checksum(b.stored_checksum);
    if (b.checksum_ok.has_value()) resp->set_checksum_ok(*b.checksum_ok);
    return absl::OkStatus();
  }
  if (req.key().has_swa()) {
    ASSIGN_OR_RETURN(const SwaKey key, adapter::SwaKeyFromProto(req.key().swa(), "key.swa"));
    const std::optional<SwaEntryInfo> found = FindSwa(*s_, key);
    if (!found.has_value()) return absl::NotFoundError("no cached SWA snapshot with this key");
    FillSwaInfo(*found, resp->mutable_info());
    if (req.verify()) {
      // The pool verifies on every read; a failure drops the snapshot, as a data-path read would.
      ModelFingerprint fp;
      fp.digest = found->fingerprint;
      resp->set_checksum_ok(s_->swa().Get(fp, key).ok());
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("key: set block or swa");
}

absl::Status AdminServiceImpl::DoEvict(const v1::EvictRequest& req, v1::EvictResponse* resp) {
  RETURN_IF_ERROR(CheckKeyCount(req.keys_size()));
  const std::vector<Sha256Digest> fingerprints = BlockFingerprints(*s_);
  for (int i = 0; i < req.keys_size(); ++i) {
    const v1::EntryKey& k = req.keys(i);
    const std::string where = absl::StrCat("keys[", i, "]");
    if (k.has_block()) {
      ASSIGN_OR_RETURN(const BlockKey key, adapter::BlockKeyFromProto(k.block(), where));
      const std::optional<StoreEntryInfo> found = FindBlock(*s_, fingerprints, key);
      if (!found.has_value()) {
        resp->set_not_found(resp->not_found() + 1);
      } else if (found->pinned && !req.force()) {
        resp->set_skipped_pinned(resp->skipped_pinned() + 1);
      } else {
        ModelFingerprint fp;
        fp.digest = found->fingerprint;
        absl::Status st = s_->store().Delete(fp, key);
        if (absl::IsNotFound(st)) {
          resp->set_not_found(resp->not_found() + 1);
          continue;
        }
        RETURN_IF_ERROR(st);
        resp->set_evicted(resp->evicted() + 1);
      }
    } else if (k.has_swa()) {
      ASSIGN_OR_RETURN(const SwaKey key, adapter::SwaKeyFromProto(k.swa(), where));
      const std::optional<SwaEntryInfo> found = FindSwa(*s_, key);
      ModelFingerprint fp;
      if (found.has_value()) fp.digest = found->fingerprint;
      if (found.has_value() && s_->swa().Erase(fp, key)) {
        resp->set_evicted(resp->evicted() + 1);
      } else {
        resp->set_not_found(resp->not_found() + 1);
      }
    } else {
      return absl::InvalidArgumentError(where + ": set block or swa");
    }
  }
  LOG(INFO) << "cache admin: evict " << req.keys_size() << " keys: evicted=" << resp->evicted()
            << " not_found=" << resp->not_found() << " skipped_pinned=" << resp->skipped_pinned();
  return absl::OkStatus();
}

template <typename Response>
absl::Status AdminServiceImpl::SetPinned(
    const google::protobuf::RepeatedPtrField<v1::EntryKey>& keys, bool pin, Response* resp) {
  RETURN_IF_ERROR(CheckKeyCount(keys.size()));
  for (int i = 0; i < keys.size(); ++i) {
    if (!keys[i].has_block()) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys[", i, "]: only global KV blocks can be pinned"));
    }
  }
  const std::vector<Sha256Digest> fingerprints = BlockFingerprints(*s_);
  for (int i = 0; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(const BlockKey key,
                     adapter::BlockKeyFromProto(keys[i].block(), absl::StrCat("keys[", i, "]")));
    const std::optional<StoreEntryInfo> found = FindBlock(*s_, fingerprints, key);
    if (!found.has_value()) {
      resp->set_not_found(resp->not_found() + 1);
      continue;
    }
    if (found->pinned == pin) continue;
    ModelFingerprint fp;
    fp.digest = found->fingerprint;
    // An unpinned entry's TTL restarts now (admin.proto), not from its last access long ago:
    // touch it while the pin still keeps it from expiring; Unpin then persists that time.
    if (!pin) s_->store().Describe(fp.digest, std::span<const BlockKey>(&key, 1), /*touch=*/true);
    absl::Status st = pin ? s_->store().Pin(fp, key) : s_->store().Unpin(fp, key);
    if (absl::IsNotFound(st)) {
      resp->set_not_found(resp->not_found() + 1);
      continue;
    }
    RETURN_IF_ERROR(st);
    resp->set_changed(resp->changed() + 1);
  }
  return absl::OkStatus();
}

absl::Status AdminServiceImpl::DoFlush(const v1::FlushRequest& req, v1::FlushResponse* resp) {
  ASSIGN_OR_RETURN(const AdminFilter filter, FilterFrom(req.filter()));
  ASSIGN_OR_RETURN(const FlushTotals t,
                   FlushAdminEntries(*s_, filter, req.include_pinned(), req.dry_run()));
  resp->set_entries_removed(t.entries);
  resp->set_bytes_freed(t.bytes);
  LOG(INFO) << "cache admin: flush" << (req.dry_run() ? " (dry run)" : "") << ": " << t.entries
            << " entries, " << t.bytes << " bytes";
  return absl::OkStatus();
}

absl::Status AdminServiceImpl::DoVerify(const v1::VerifyRequest& req, v1::VerifyResponse* resp) {
  ASSIGN_OR_RETURN(const AdminFilter filter, FilterFrom(req.filter()));
  const uint32_t n = req.max_entries() == 0 ? kDefaultVerifyEntries
                                            : std::min(req.max_entries(), kMaxVerifyEntries);
  ASSIGN_OR_RETURN(const VerifyTotals t,
                   VerifyAdminEntries(*s_, filter, n, req.page_token(), req.evict_corrupt()));
  resp->set_checked(t.checked);
  resp->set_corrupt(t.corrupt.size());
  for (size_t i = 0; i < t.corrupt.size() && i < kMaxCorruptKeysReported; ++i) {
    adapter::ToProto(t.corrupt[i].key, resp->add_corrupt_keys()->mutable_block());
  }
  resp->set_evicted(t.evicted);
  resp->set_next_page_token(t.next_token);
  return absl::OkStatus();
}

absl::Status AdminServiceImpl::DoCompact(const v1::CompactRequest&, v1::CompactResponse* resp) {
  ASSIGN_OR_RETURN(const CompactionReport r, s_->store().Compact());
  resp->set_bytes_before(r.bytes_before);
  resp->set_bytes_after(r.bytes_after);
  resp->set_duration_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(r.duration)));
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<grpc::Service> NewAdminService(CacheState* state) {
  return std::make_unique<AdminServiceImpl>(state);
}

}  // namespace flashserve::cache
