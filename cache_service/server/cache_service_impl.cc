// flashserve.v1.CacheService over CacheState: wire validation and conversion only; the logic is
// in the stores and prefix_lookup.cc. Validation rules: cache_service_impl.h.
#include "cache_service/server/cache_service_impl.h"

#include <limits>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache_service/server/adapter_util.h"
#include "cache_service/server/prefix_lookup.h"
#include "cache_service/server/swa_envelope.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "flashserve/v1/cache.grpc.pb.h"

namespace flashserve::cache {
namespace {

using adapter::RpcRecorder;
constexpr std::string_view kService = "CacheService";
constexpr size_t kMaxSaltBytes = 1024;
// Room left in a reply for everything but payload bytes (keys, statuses, framing).
constexpr uint64_t kReplyOverheadBytes = 64 << 10;

absl::Status TooMany(std::string_view what, size_t n, int64_t limit, std::string_view option) {
  return absl::ResourceExhaustedError(
      absl::StrCat(ToAbsl(what), ": ", n, " exceeds the limit ", limit, " (", ToAbsl(option), ")"));
}

// Token ids arrive as uint32; ours are int32 (the vocabulary is far below 2^31).
absl::StatusOr<std::vector<TokenId>> TokensFrom(
    const google::protobuf::RepeatedField<uint32_t>& ids, std::string_view what) {
  std::vector<TokenId> out(ids.begin(), ids.end());
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] > static_cast<uint32_t>(std::numeric_limits<TokenId>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(ToAbsl(what), "[", i, "] = ", ids[i], " is not a token id (>= 2^31)"));
    }
  }
  return out;
}

absl::Status CheckSalt(const std::string& salt) {
  if (salt.size() > kMaxSaltBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant_salt of ", salt.size(), " bytes exceeds ", kMaxSaltBytes));
  }
  return absl::OkStatus();
}

uint64_t RemainingMs(int64_t expires_us, int64_t now_us) {
  return expires_us <= now_us ? 0 : static_cast<uint64_t>((expires_us - now_us) / 1000);
}

// The store reports a value that failed verification as NotFound with this message.
bool IsCorruptMiss(const absl::Status& s) {
  return ToStd(s.message()).find("failed verification") != std::string_view::npos;
}

class CacheServiceImpl final : public v1::CacheService::Service {
 public:
  explicit CacheServiceImpl(CacheState* state) : s_(state) {}

  grpc::Status Lookup(grpc::ServerContext*, const v1::LookupRequest* req,
                      v1::LookupResponse* resp) override {
    RpcRecorder rpc(s_, kService, "Lookup");
    if (!rpc.admitted()) return rpc.Finish(RpcRecorder::Draining());
    return rpc.Finish(DoLookup(*req, resp));
  }
  grpc::Status GetBlocks(grpc::ServerContext*, const v1::GetBlocksRequest* req,
                         v1::GetBlocksResponse* resp) override {
    RpcRecorder rpc(s_, kService, "GetBlocks");
    if (!rpc.admitted()) return rpc.Finish(RpcRecorder::Draining());
    return rpc.Finish(DoGetBlocks(*req, resp));
  }
  grpc::Status PutBlocks(grpc::ServerContext*, const v1::PutBlocksRequest* req,
                         v1::PutBlocksResponse* resp) override {
    RpcRecorder rpc(s_, kService, "PutBlocks");
    if (!rpc.admitted()) return rpc.Finish(RpcRecorder::Draining());
    return rpc.Finish(DoPutBlocks(*req, resp));
  }
  grpc::Status GetSwa(grpc::ServerContext*, const v1::GetSwaRequest* req,
                      v1::GetSwaResponse* resp) override {
    RpcRecorder rpc(s_, kService, "GetSwa");
    if (!rpc.admitted()) return rpc.Finish(RpcRecorder::Draining());
    return rpc.Finish(DoGetSwa(*req, resp));
  }
  grpc::Status PutSwa(grpc::ServerContext*, const v1::PutSwaRequest* req,
                      v1::PutSwaResponse* resp) override {
    RpcRecorder rpc(s_, kService, "PutSwa");
    if (!rpc.admitted()) return rpc.Finish(RpcRecorder::Draining());
    return rpc.Finish(DoPutSwa(*req, resp));
  }
  grpc::Status Health(grpc::ServerContext*, const v1::HealthCheckRequest*,
                      v1::HealthCheckResponse* resp) override {
    RpcRecorder rpc(s_, kService, "Health", /*admit=*/false);
    adapter::FillHealth(*s_, resp);
    return rpc.Finish(grpc::Status::OK);
  }

 private:
  int64_t NowMicros() const { return absl::ToUnixMicros(s_->clock().Now()); }
  absl::Status DoLookup(const v1::LookupRequest& req, v1::LookupResponse* resp);
  absl::Status DoGetBlocks(const v1::GetBlocksRequest& req, v1::GetBlocksResponse* resp);
  absl::Status DoPutBlocks(const v1::PutBlocksRequest& req, v1::PutBlocksResponse* resp);
  absl::Status DoGetSwa(const v1::GetSwaRequest& req, v1::GetSwaResponse* resp);
  absl::Status DoPutSwa(const v1::PutSwaRequest& req, v1::PutSwaResponse* resp);

  CacheState* const s_;
};

absl::Status CacheServiceImpl::DoLookup(const v1::LookupRequest& req, v1::LookupResponse* resp) {
  ASSIGN_OR_RETURN(const ModelFingerprint fp, adapter::FingerprintFromProto(req.fingerprint()));
  RETURN_IF_ERROR(CheckSalt(req.tenant_salt()));
  const auto& opt = s_->options();
  if (req.tokens().ids_size() > opt.max_lookup_tokens) {
    return TooMany("tokens", req.tokens().ids_size(), opt.max_lookup_tokens,
                   "cache.max_lookup_tokens");
  }
  ASSIGN_OR_RETURN(const std::vector<TokenId> tokens, TokensFrom(req.tokens().ids(), "tokens"));
  const PrefixLookup found =
      LookupPrefix(s_->store(), s_->swa(), fp, tokens, req.tenant_salt(), req.touch());
  const int64_t now = NowMicros();
  resp->set_hit_tokens(found.hit_tokens);
  for (const StoreEntryInfo& b : found.blocks) {
    v1::BlockInfo* info = resp->add_blocks();
    adapter::ToProto(b.key, info->mutable_key());
    info->set_residency(v1::TIER_SSD);
    info->set_age_ms(RemainingMs(now, b.created_unix_micros));
    info->set_ttl_remaining_ms(b.pinned ? 0 : RemainingMs(b.expires_unix_micros, now));
    info->set_size_bytes(b.bytes);
    info->set_pinned(b.pinned);
  }
  if (found.swa.has_value()) {
    const SwaEntryInfo& w = found.swa->info;
    v1::SwaSnapshotInfo* info = resp->mutable_swa_snapshot();
    adapter::ToProto(w.key, info->mutable_key());
    info->set_prefix_tokens(found.swa->prefix_tokens);
    info->set_age_ms(RemainingMs(now, w.created_unix_micros));
    info->set_ttl_remaining_ms(RemainingMs(w.expires_unix_micros, now));
    info->set_size_bytes(SwaPayloadBytes(w.bytes));
  }
  const ServerMetrics& m = s_->server_metrics();
  m.lookups->Increment();
  m.lookup_hit_tokens->Increment(static_cast<double>(found.hit_tokens));
  m.lookup_miss_tokens->Increment(static_cast<double>(tokens.size() - found.hit_tokens));
  return absl::OkStatus();
}

absl::Status CacheServiceImpl::DoGetBlocks(const v1::GetBlocksRequest& req,
                                           v1::GetBlocksResponse* resp) {
  ASSIGN_OR_RETURN(const ModelFingerprint fp, adapter::FingerprintFromProto(req.fingerprint()));
  const auto& opt = s_->options();
  if (req.keys_size() > opt.max_keys_per_request) {
    return TooMany("keys", req.keys_size(), opt.max_keys_per_request, "cache.max_keys_per_request");
  }
  if (!adapter::WantsInline(req.destination())) {
    return absl::InvalidArgumentError(
        "destination: only inline delivery is supported (leave it unset or INLINE)");
  }
  std::vector<BlockKey> keys;
  keys.reserve(req.keys_size());
  for (int i = 0; i < req.keys_size(); ++i) {
    ASSIGN_OR_RETURN(BlockKey k,
                     adapter::BlockKeyFromProto(req.keys(i), absl::StrCat("keys[", i, "]")));
    keys.push_back(k);
  }
  std::vector<absl::StatusOr<std::string>> values = s_->store().MultiGet(fp, keys);
  uint64_t reply_bytes = 0;
  for (const auto& v : values) {
    if (v.ok()) reply_bytes += v->size();
    if (!v.ok() && !absl::IsNotFound(v.status())) return v.status();
  }
  if (reply_bytes + kReplyOverheadBytes > opt.max_message_size.bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the reply would carry ", reply_bytes, " payload bytes, over cache.max_message_size ",
        opt.max_message_size.bytes, ": ask for fewer keys per call"));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    v1::BlockPayload* out = resp->add_blocks();
    adapter::ToProto(keys[i], out->mutable_key());
    if (!values[i].ok()) {
      out->set_status(IsCorruptMiss(values[i].status()) ? v1::ENTRY_STATUS_CORRUPT
                                                        : v1::ENTRY_STATUS_NOT_FOUND);
      continue;
    }
    out->set_status(v1::ENTRY_STATUS_OK);
    v1::TransferDescriptor* d = out->mutable_data();
    d->set_backend(v1::TRANSFER_BACKEND_INLINE);
    d->set_length(values[i]->size());
    d->set_inline_data(std::move(*values[i]));
  }
  return absl::OkStatus();
}

absl::Status CacheServiceImpl::DoPutBlocks(const v1::PutBlocksRequest& req,
                                           v1::PutBlocksResponse* resp) {
  ASSIGN_OR_RETURN(const ModelFingerprint fp, adapter::FingerprintFromProto(req.fingerprint()));
  RETURN_IF_ERROR(CheckSalt(req.tenant_salt()));
  const auto& opt = s_->options();
  const int n = req.blocks_size();
  if (n > opt.max_keys_per_request) {
    return TooMany("blocks", n, opt.max_keys_per_request, "cache.max_keys_per_request");
  }
  // Structural checks first, so that a malformed request writes nothing.
  std::vector<BlockWrite> writes(n);
  std::vector<bool> key_ok(n, false);
  for (int i = 0; i < n; ++i) {
    const v1::BlockPut& b = req.blocks(i);
    const std::string where = absl::StrCat("blocks[", i, "]");
    ASSIGN_OR_RETURN(writes[i].key, adapter::BlockKeyFromProto(b.key(), where + ".key"));
    BlockKey parent = BlockKey::Root();
    if (b.has_parent()) {
      ASSIGN_OR_RETURN(parent, adapter::BlockKeyFromProto(b.parent(), where + ".parent"));
    }
    if (b.token_ids_size() != kBlockTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has ", b.token_ids_size(), " tokens; a block has exactly ", kBlockTokens));
    }
    ASSIGN_OR_RETURN(const std::vector<TokenId> tokens, TokensFrom(b.token_ids(), where));
    ASSIGN_OR_RETURN(writes[i].payload, adapter::InlinePayload(b.source(), where + ".source"));
    if (writes[i].payload.size() > opt.max_payload_size.bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(where, " payload of ", writes[i].payload.size(),
                       " bytes exceeds cache.max_payload_size ", opt.max_payload_size.bytes));
    }
    const BlockKey expected =
        ComputeBlockKey(parent, std::span<const TokenId, kBlockTokens>(tokens.data(), kBlockTokens),
                        fp, req.tenant_salt());
    key_ok[i] = expected == writes[i].key;
    if (!key_ok[i]) {
      LOG(WARNING) << "cache: rejected a block whose key does not match its tokens: key="
                   << writes[i].key.ToHex() << " expected=" << expected.ToHex();
    }
  }
  std::vector<BlockKey> valid_keys;
  std::vector<BlockWrite> valid;
  for (int i = 0; i < n; ++i) {
    if (!key_ok[i]) continue;
    valid_keys.push_back(writes[i].key);
    valid.push_back(writes[i]);
  }
  const std::vector<std::optional<StoreEntryInfo>> before =
      s_->store().Describe(fp.digest, valid_keys);
  absl::Status put = s_->store().PutBatch(fp, valid, absl::Seconds(req.ttl_s()));
  if (!put.ok() && !absl::IsResourceExhausted(put)) return put;
  size_t j = 0;
  for (int i = 0; i < n; ++i) {
    v1::PutStatus st = v1::PUT_STATUS_REJECTED_INVALID;
    if (key_ok[i]) {
      const bool present = before[j].has_value();
      st = present ? v1::PUT_STATUS_ALREADY_PRESENT
                   : (put.ok() ? v1::PUT_STATUS_STORED : v1::PUT_STATUS_REJECTED_FULL);
      if (req.pin() && st != v1::PUT_STATUS_REJECTED_FULL) {
        absl::Status pin = s_->store().Pin(fp, writes[i].key);
        if (!pin.ok()) LOG(WARNING) << "cache: pin after put: " << pin;
      }
      ++j;
    }
    resp->add_statuses(st);
  }
  if (!put.ok()) LOG(WARNING) << "cache: put rejected: " << put;
  return absl::OkStatus();
}

absl::Status CacheServiceImpl::DoGetSwa(const v1::GetSwaRequest& req, v1::GetSwaResponse* resp) {
  ASSIGN_OR_RETURN(const ModelFingerprint fp, adapter::FingerprintFromProto(req.fingerprint()));
  ASSIGN_OR_RETURN(const SwaKey key, adapter::SwaKeyFromProto(req.key(), "key"));
  if (!adapter::WantsInline(req.destination())) {
    return absl::InvalidArgumentError(
        "destination: only inline delivery is supported (leave it unset or INLINE)");
  }
  absl::StatusOr<std::string> value = s_->swa().Get(fp, key);
  uint64_t prefix_tokens = 0;
  if (!value.ok() || !StripSwaTrailer(&*value, &prefix_tokens)) {
    resp->set_status(!value.ok() && !IsCorruptMiss(value.status()) ? v1::ENTRY_STATUS_NOT_FOUND
                                                                   : v1::ENTRY_STATUS_CORRUPT);
    return absl::OkStatus();
  }
  if (value->size() + kReplyOverheadBytes > s_->options().max_message_size.bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the snapshot of ", value->size(), " bytes exceeds cache.max_message_size"));
  }
  if (req.take()) s_->swa().Erase(fp, key);
  resp->set_status(v1::ENTRY_STATUS_OK);
  resp->set_prefix_tokens(prefix_tokens);
  v1::TransferDescriptor* d = resp->mutable_data();
  d->set_backend(v1::TRANSFER_BACKEND_INLINE);
  d->set_length(value->size());
  d->set_inline_data(std::move(*value));
  return absl::OkStatus();
}

absl::Status CacheServiceImpl::DoPutSwa(const v1::PutSwaRequest& req, v1::PutSwaResponse* resp) {
  ASSIGN_OR_RETURN(const ModelFingerprint fp, adapter::FingerprintFromProto(req.fingerprint()));
  RETURN_IF_ERROR(CheckSalt(req.tenant_salt()));
  ASSIGN_OR_RETURN(const SwaKey key, adapter::SwaKeyFromProto(req.key(), "key"));
  BlockKey last = BlockKey::Root();
  if (req.has_last_block()) {
    ASSIGN_OR_RETURN(last, adapter::BlockKeyFromProto(req.last_block(), "last_block"));
  }
  if (req.tail_token_ids_size() >= kBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("tail_token_ids has ", req.tail_token_ids_size(),
                                                   " tokens; at most 63 follow the last block"));
  }
  ASSIGN_OR_RETURN(const std::vector<TokenId> tail,
                   TokensFrom(req.tail_token_ids(), "tail_token_ids"));
  const uint64_t p = req.prefix_tokens();
  if (p % kBlockTokens != tail.size() || (last.IsRoot() != (p < kBlockTokens)) || p == 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefix_tokens ", p, " is inconsistent with ",
                                                   tail.size(), " tail tokens and ",
                                                   last.IsRoot() ? "no" : "a", " last block"));
  }
  ASSIGN_OR_RETURN(const std::string_view bytes, adapter::InlinePayload(req.source(), "source"));
  absl::StatusOr<SwaKey> expected = ComputeSwaKey(last, tail, fp, req.tenant_salt());
  RETURN_IF_ERROR(expected.status());
  if (*expected != key) {
    LOG(WARNING) << "cache: rejected an SWA snapshot whose key does not match its prefix: key="
                 << key.ToHex() << " expected=" << expected->ToHex();
    resp->set_status(v1::PUT_STATUS_REJECTED_INVALID);
    return absl::OkStatus();
  }
  std::string value;
  value.reserve(bytes.size() + kSwaTrailerBytes);
  value.assign(bytes);
  AppendSwaTrailer(p, &value);
  const absl::Duration ttl =
      req.ttl_s() == 0 ? s_->options().swa_ttl : absl::Seconds(req.ttl_s());
  absl::Status put = s_->swa().Put(fp, key, std::move(value), ttl);
  if (absl::IsResourceExhausted(put)) {
    resp->set_status(v1::PUT_STATUS_REJECTED_FULL);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(put);
  resp->set_status(v1::PUT_STATUS_STORED);
  resp->set_expires_unix_ms(adapter::MsFromMicros(NowMicros() + absl::ToInt64Microseconds(ttl)));
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<grpc::Service> NewCacheService(CacheState* state) {
  return std::make_unique<CacheServiceImpl>(state);
}

}  // namespace flashserve::cache
