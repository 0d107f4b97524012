// CacheClient: channel setup and the CacheService (data path) calls. Admin calls are in
// admin_client.cc.
#include "cache_service/client/cache_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/client/client_util.h"
#include "common/base/status_macros.h"
#include "flashserve/v1/cache.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace flashserve::cache {

using client_internal::FromGrpc;
using client_internal::PrepareContext;

class CacheClient::DataStub {
 public:
  explicit DataStub(const std::shared_ptr<grpc::Channel>& channel)
      : stub(v1::CacheService::NewStub(channel)) {}
  std::unique_ptr<v1::CacheService::Stub> stub;
};

void CacheClient::StubDeleter::operator()(DataStub* stub) const { delete stub; }

namespace {

absl::Duration DurationFromMs(uint64_t ms) { return absl::Milliseconds(static_cast<int64_t>(ms)); }

ReadStatus ReadStatusFrom(v1::EntryStatus s) {
  switch (s) {
    case v1::ENTRY_STATUS_OK:
      return ReadStatus::kOk;
    case v1::ENTRY_STATUS_CORRUPT:
      return ReadStatus::kCorrupt;
    default:
      return ReadStatus::kNotFound;
  }
}

PutOutcome PutOutcomeFrom(v1::PutStatus s) {
  switch (s) {
    case v1::PUT_STATUS_STORED:
      return PutOutcome::kStored;
    case v1::PUT_STATUS_ALREADY_PRESENT:
      return PutOutcome::kAlreadyPresent;
    case v1::PUT_STATUS_REJECTED_FULL:
      return PutOutcome::kRejectedFull;
    default:
      return PutOutcome::kRejectedInvalid;
  }
}

absl::Status Malformed(std::string_view rpc, std::string_view what) {
  return absl::InternalError(
      absl::StrCat(absl::string_view(rpc.data(), rpc.size()),
                   ": malformed reply: ", absl::string_view(what.data(), what.size())));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CacheClient>> CacheClient::Connect(CacheClientOptions options) {
  if (options.address.empty()) return absl::InvalidArgumentError("cache client: empty address");
  if (options.timeout <= absl::ZeroDuration() || options.compact_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("cache client: timeouts must be positive");
  }
  if (options.max_keys_per_call == 0) options.max_keys_per_call = 1;
  grpc::ChannelArguments args;
  const int max_message =
      static_cast<int>(std::clamp<int64_t>(options.max_message_bytes, 4 << 20, INT32_MAX));
  args.SetMaxReceiveMessageSize(max_message);
  args.SetMaxSendMessageSize(max_message);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args);
  std::unique_ptr<DataStub, StubDeleter> data(new DataStub(channel));
  std::unique_ptr<AdminStub, StubDeleter> admin = NewAdminStub(channel);
  return std::unique_ptr<CacheClient>(
      new CacheClient(std::move(options), std::move(data), std::move(admin)));
}

CacheClient::CacheClient(CacheClientOptions options, std::unique_ptr<DataStub, StubDeleter> data,
                         std::unique_ptr<AdminStub, StubDeleter> admin)
    : options_(std::move(options)), data_(std::move(data)), admin_(std::move(admin)) {}

CacheClient::~CacheClient() = default;

absl::StatusOr<LookupResult> CacheClient::Lookup(const ModelFingerprint& fingerprint,
                                                 std::span<const TokenId> tokens,
                                                 std::string_view tenant_salt, bool touch) {
  v1::LookupRequest req;
  client_internal::ToProto(fingerprint, req.mutable_fingerprint());
  req.mutable_tokens()->mutable_ids()->Add(tokens.begin(), tokens.end());
  req.set_tenant_salt(std::string(tenant_salt));
  req.set_touch(touch);
  v1::LookupResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, options_.timeout, "");
  RETURN_IF_ERROR(FromGrpc(data_->stub->Lookup(&ctx, req, &resp), "Lookup"));
  LookupResult out;
  out.hit_tokens = resp.hit_tokens();
  for (const v1::BlockInfo& b : resp.blocks()) {
    CachedBlock c;
    if (!client_internal::DigestFrom(b.key().sha256(), &c.key.bytes)) {
      return Malformed("Lookup", "block key");
    }
    c.residency = client_internal::TierFromProto(b.residency());
    c.age = DurationFromMs(b.age_ms());
    c.ttl_remaining = DurationFromMs(b.ttl_remaining_ms());
    c.size_bytes = b.size_bytes();
    c.pinned = b.pinned();
    out.blocks.push_back(c);
  }
  if (resp.has_swa_snapshot()) {
    const v1::SwaSnapshotInfo& w = resp.swa_snapshot();
    CachedSnapshot s;
    if (!client_internal::DigestFrom(w.key().sha256(), &s.key.bytes)) {
      return Malformed("Lookup", "SWA key");
    }
    s.prefix_tokens = w.prefix_tokens();
    s.age = DurationFromMs(w.age_ms());
    s.ttl_remaining = DurationFromMs(w.ttl_remaining_ms());
    s.size_bytes = w.size_bytes();
    out.swa = s;
  }
  return out;
}

absl::StatusOr<std::vector<BlockRead>> CacheClient::GetBlocks(const ModelFingerprint& fingerprint,
                                                              std::span<const BlockKey> keys) {
  std::vector<BlockRead> out;
  out.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += options_.max_keys_per_call) {
    const auto page =
        keys.subspan(begin, std::min(options_.max_keys_per_call, keys.size() - begin));
    v1::GetBlocksRequest req;
    client_internal::ToProto(fingerprint, req.mutable_fingerprint());
    for (const BlockKey& k : page) req.add_keys()->set_sha256(k.bytes.data(), k.bytes.size());
    v1::GetBlocksResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.timeout, "");
    RETURN_IF_ERROR(FromGrpc(data_->stub->GetBlocks(&ctx, req, &resp), "GetBlocks"));
    if (resp.blocks_size() != static_cast<int>(page.size())) {
      return Malformed("GetBlocks", "one block per key expected");
    }
    for (size_t i = 0; i < page.size(); ++i) {
      v1::BlockPayload* b = resp.mutable_blocks(static_cast<int>(i));
      BlockRead r;
      r.key = page[i];
      r.status = ReadStatusFrom(b->status());
      if (r.status == ReadStatus::kOk)
        r.payload = std::move(*b->mutable_data()->mutable_inline_data());
      out.push_back(std::move(r));
    }
  }
  return out;
}

absl::StatusOr<std::vector<PutOutcome>> CacheClient::PutBlocks(const ModelFingerprint& fingerprint,
                                                               std::span<const BlockToPut> blocks,
                                                               std::string_view tenant_salt,
                                                               bool pin, uint32_t ttl_s) {
  std::vector<PutOutcome> out;
  out.reserve(blocks.size());
  for (size_t begin = 0; begin < blocks.size(); begin += options_.max_keys_per_call) {
    const auto page =
        blocks.subspan(begin, std::min(options_.max_keys_per_call, blocks.size() - begin));
    v1::PutBlocksRequest req;
    client_internal::ToProto(fingerprint, req.mutable_fingerprint());
    req.set_tenant_salt(std::string(tenant_salt));
    req.set_pin(pin);
    req.set_ttl_s(ttl_s);
    for (const BlockToPut& b : page) {
      v1::BlockPut* p = req.add_blocks();
      p->mutable_key()->set_sha256(b.key.bytes.data(), b.key.bytes.size());
      if (!b.parent.IsRoot()) p->mutable_parent()->set_sha256(b.parent.bytes.data(), 32);
      p->mutable_token_ids()->Add(b.tokens.begin(), b.tokens.end());
      v1::TransferDescriptor* d = p->mutable_source();
      d->set_backend(v1::TRANSFER_BACKEND_INLINE);
      d->set_length(b.payload.size());
      d->set_inline_data(b.payload.data(), b.payload.size());
    }
    v1::PutBlocksResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.timeout, "");
    RETURN_IF_ERROR(FromGrpc(data_->stub->PutBlocks(&ctx, req, &resp), "PutBlocks"));
    if (resp.statuses_size() != static_cast<int>(page.size())) {
      return Malformed("PutBlocks", "one status per block expected");
    }
    for (int s : resp.statuses()) out.push_back(PutOutcomeFrom(static_cast<v1::PutStatus>(s)));
  }
  return out;
}

absl::StatusOr<SwaRead> CacheClient::GetSwa(const ModelFingerprint& fingerprint, const SwaKey& key,
                                            bool take) {
  v1::GetSwaRequest req;
  client_internal::ToProto(fingerprint, req.mutable_fingerprint());
  req.mutable_key()->set_sha256(key.bytes.data(), key.bytes.size());
  req.set_take(take);
  v1::GetSwaResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, options_.timeout, "");
  RETURN_IF_ERROR(FromGrpc(data_->stub->GetSwa(&ctx, req, &resp), "GetSwa"));
  SwaRead out;
  out.status = ReadStatusFrom(resp.status());
  out.prefix_tokens = resp.prefix_tokens();
  if (out.status == ReadStatus::kOk)
    out.snapshot = std::move(*resp.mutable_data()->mutable_inline_data());
  return out;
}

absl::StatusOr<PutSwaResult> CacheClient::PutSwa(const ModelFingerprint& fingerprint,
                                                 const SwaToPut& put,
                                                 std::string_view tenant_salt) {
  v1::PutSwaRequest req;
  client_internal::ToProto(fingerprint, req.mutable_fingerprint());
  req.set_tenant_salt(std::string(tenant_salt));
  req.mutable_key()->set_sha256(put.key.bytes.data(), put.key.bytes.size());
  if (!put.last_block.IsRoot()) {
    req.mutable_last_block()->set_sha256(put.last_block.bytes.data(), put.last_block.bytes.size());
  }
  req.mutable_tail_token_ids()->Add(put.tail.begin(), put.tail.end());
  req.set_prefix_tokens(put.prefix_tokens);
  req.set_ttl_s(put.ttl_s);
  v1::TransferDescriptor* d = req.mutable_source();
  d->set_backend(v1::TRANSFER_BACKEND_INLINE);
  d->set_length(put.snapshot.size());
  d->set_inline_data(put.snapshot.data(), put.snapshot.size());
  v1::PutSwaResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, options_.timeout, "");
  RETURN_IF_ERROR(FromGrpc(data_->stub->PutSwa(&ctx, req, &resp), "PutSwa"));
  PutSwaResult out;
  out.outcome = PutOutcomeFrom(resp.status());
  if (resp.expires_unix_ms() != 0) {
    out.expires = absl::FromUnixMillis(static_cast<int64_t>(resp.expires_unix_ms()));
  }
  return out;
}

absl::StatusOr<HealthInfo> CacheClient::Health() {
  v1::HealthCheckRequest req;
  v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, options_.timeout, "");
  RETURN_IF_ERROR(FromGrpc(data_->stub->Health(&ctx, req, &resp), "Health"));
  return client_internal::HealthFromProto(resp);
}

}  // namespace flashserve::cache
