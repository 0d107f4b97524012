#include "cache_service/server/adapter_util.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "flashserve/v1/common.pb.h"

namespace flashserve::cache::adapter {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(ToStd(status.message())));
}

std::string_view CodeName(int code) {
  static constexpr std::string_view kNames[] = {"OK",
                                                "CANCELLED",
                                                "UNKNOWN",
                                                "INVALID_ARGUMENT",
                                                "DEADLINE_EXCEEDED",
                                                "NOT_FOUND",
                                                "ALREADY_EXISTS",
                                                "PERMISSION_DENIED",
                                                "RESOURCE_EXHAUSTED",
                                                "FAILED_PRECONDITION",
                                                "ABORTED",
                                                "OUT_OF_RANGE",
                                                "UNIMPLEMENTED",
                                                "INTERNAL",
                                                "UNAVAILABLE",
                                                "DATA_LOSS",
                                                "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[code];
}

absl::StatusOr<Sha256Digest> DigestFromBytes(std::string_view bytes, std::string_view what) {
  Sha256Digest d;
  if (bytes.size() != d.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(what), " must be 32 bytes (SHA-256), got ", bytes.size()));
  }
  std::memcpy(d.data(), bytes.data(), d.size());
  return d;
}

absl::StatusOr<ModelFingerprint> FingerprintFromProto(const v1::ModelFingerprint& fp) {
  ModelFingerprint out;
  auto digest = DigestFromBytes(fp.digest(), "fingerprint.digest");
  if (!digest.ok()) return digest.status();
  out.digest = *digest;
  out.layout_version = fp.layout_version();
  return out;
}

absl::StatusOr<BlockKey> BlockKeyFromProto(const v1::BlockKey& key, std::string_view what) {
  auto digest = DigestFromBytes(key.sha256(), what);
  if (!digest.ok()) return digest.status();
  return BlockKey{*digest};
}

absl::StatusOr<SwaKey> SwaKeyFromProto(const v1::SwaKey& key, std::string_view what) {
  auto digest = DigestFromBytes(key.sha256(), what);
  if (!digest.ok()) return digest.status();
  return SwaKey{*digest};
}

void ToProto(const BlockKey& key, v1::BlockKey* out) {
  out->set_sha256(key.bytes.data(), key.bytes.size());
}
void ToProto(const SwaKey& key, v1::SwaKey* out) {
  out->set_sha256(key.bytes.data(), key.bytes.size());
}

absl::StatusOr<std::string_view> InlinePayload(const v1::TransferDescriptor& d,
                                               std::string_view what) {
  if (d.backend() != v1::TRANSFER_BACKEND_INLINE) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(what), ": only TRANSFER_BACKEND_INLINE is supported (got backend ",
                     static_cast<int>(d.backend()), ")"));
  }
  if (d.length() != 0 && d.length() != d.inline_data().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(what), ": length ", d.length(), " != inline_data size ", d.inline_data().size()));
  }
  return std::string_view(d.inline_data());
}

bool WantsInline(const v1::TransferDescriptor& d) {
  return d.backend() == v1::TRANSFER_BACKEND_UNSPECIFIED ||
         d.backend() == v1::TRANSFER_BACKEND_INLINE;
}

void FillHealth(const CacheState& state, v1::HealthCheckResponse* out) {
  switch (state.state()) {
    case ServingState::kStarting:
      out->set_status(v1::SERVING_STATUS_STARTING);
      out->set_detail("opening the store");
      break;
    case ServingState::kServing:
      out->set_status(v1::SERVING_STATUS_SERVING);
      break;
    case ServingState::kDraining:
      out->set_status(v1::SERVING_STATUS_DRAINING);
      out->set_detail("shutting down: finishing in-flight requests");
      break;
  }
  out->set_role("cache");
  out->set_version("flashserve 0.1.0");
  out->set_uptime_s(static_cast<uint64_t>(absl::ToInt64Seconds(state.uptime())));
}

}  // namespace flashserve::cache::adapter
