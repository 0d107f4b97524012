#include "cache_service/client/client_util.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "flashserve/v1/common.pb.h"
#include "grpcpp/client_context.h"

namespace flashserve::cache {

std::string_view CacheTierName(CacheTier tier) {
  switch (tier) {
    case CacheTier::kHbm:
      return "hbm";
    case CacheTier::kHost:
      return "host";
    case CacheTier::kSsd:
      return "ssd";
    case CacheTier::kUnspecified:
      break;
  }
  return "any";
}

std::string_view PutOutcomeName(PutOutcome outcome) {
  switch (outcome) {
    case PutOutcome::kStored:
      return "stored";
    case PutOutcome::kAlreadyPresent:
      return "already_present";
    case PutOutcome::kRejectedInvalid:
      return "rejected_invalid";
    case PutOutcome::kRejectedFull:
      return "rejected_full";
  }
  return "unknown";
}

namespace client_internal {

void PrepareContext(grpc::ClientContext* ctx, absl::Duration timeout, const std::string& token) {
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

absl::Status FromGrpc(const grpc::Status& status, std::string_view rpc) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrCat(absl::string_view(rpc.data(), rpc.size()), ": ", status.error_message()));
}

void ToProto(const ModelFingerprint& fp, v1::ModelFingerprint* out) {
  out->set_digest(fp.digest.data(), fp.digest.size());
  out->set_layout_version(fp.layout_version);
}

bool DigestFrom(std::string_view bytes, Sha256Digest* out) {
  if (bytes.size() != out->size()) return false;
  std::memcpy(out->data(), bytes.data(), out->size());
  return true;
}

CacheTier TierFromProto(int tier) {
  switch (tier) {
    case v1::TIER_HBM:
      return CacheTier::kHbm;
    case v1::TIER_HOST:
      return CacheTier::kHost;
    case v1::TIER_SSD:
      return CacheTier::kSsd;
    default:
      return CacheTier::kUnspecified;
  }
}

int TierToProto(CacheTier tier) {
  switch (tier) {
    case CacheTier::kHbm:
      return v1::TIER_HBM;
    case CacheTier::kHost:
      return v1::TIER_HOST;
    case CacheTier::kSsd:
      return v1::TIER_SSD;
    case CacheTier::kUnspecified:
      break;
  }
  return v1::TIER_UNSPECIFIED;
}

HealthInfo HealthFromProto(const v1::HealthCheckResponse& h) {
  HealthInfo out;
  switch (h.status()) {
    case v1::SERVING_STATUS_SERVING:
      out.status = ServingStatus::kServing;
      break;
    case v1::SERVING_STATUS_STARTING:
      out.status = ServingStatus::kStarting;
      break;
    case v1::SERVING_STATUS_DRAINING:
      out.status = ServingStatus::kDraining;
      break;
    case v1::SERVING_STATUS_NOT_SERVING:
      out.status = ServingStatus::kNotServing;
      break;
    default:
      out.status = ServingStatus::kUnspecified;
      break;
  }
  out.role = h.role();
  out.version = h.version();
  out.uptime = absl::Seconds(static_cast<int64_t>(h.uptime_s()));
  out.detail = h.detail();
  return out;
}

}  // namespace client_internal
}  // namespace flashserve::cache
