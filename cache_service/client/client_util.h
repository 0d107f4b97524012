// Helpers shared by cache_client.cc and admin_client.cc (internal to client/): contexts with
// deadlines and credentials, status conversion, key and enum conversion. Wire types are only
// forward-declared here.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cache_service/client/cache_client_types.h"
#include "grpcpp/support/status.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace flashserve::v1 {
class ModelFingerprint;
class HealthCheckResponse;
}  // namespace flashserve::v1

namespace flashserve::cache::client_internal {

// Sets the deadline (now + timeout) and, when `token` is not empty, the bearer token metadata.
void PrepareContext(grpc::ClientContext* ctx, absl::Duration timeout, const std::string& token);
// grpc::Status -> absl::Status of the same code, message "<rpc>: <message>".
absl::Status FromGrpc(const grpc::Status& status, std::string_view rpc);

void ToProto(const ModelFingerprint& fp, v1::ModelFingerprint* out);
// 32 bytes -> digest; false if the size is wrong.
bool DigestFrom(std::string_view bytes, Sha256Digest* out);
// Tier enum numbers of common.proto <-> CacheTier.
CacheTier TierFromProto(int tier);
int TierToProto(CacheTier tier);
HealthInfo HealthFromProto(const v1::HealthCheckResponse& h);

}  // namespace flashserve::cache::client_internal
