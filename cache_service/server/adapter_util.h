// Helpers shared by the cache server's two gRPC adapters (cache_service_impl.cc,
// admin_service_impl.cc): status conversion, key and fingerprint parsing with validation, inline
// payloads, and per-RPC metrics. Internal to server/. Wire types are only forward-declared here,
// so that generated headers stay in the adapters' .cc files.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache_service/global_store/block_key.h"
#include "cache_service/server/cache_state.h"
#include "cache_service/swa_pool/swa_key.h"
#include "grpcpp/support/status.h"

namespace flashserve::v1 {
class ModelFingerprint;
class BlockKey;
class SwaKey;
class TransferDescriptor;
class HealthCheckResponse;
}  // namespace flashserve::v1

namespace flashserve::cache::adapter {

// absl::Status -> grpc::Status with the same code (the numeric codes coincide) and message.
grpc::Status ToGrpc(const absl::Status& status);
// "OK", "INVALID_ARGUMENT", ... for a gRPC code number.
std::string_view CodeName(int code);

// A 32-byte SHA-256 from `bytes`; InvalidArgument naming `what` otherwise.
absl::StatusOr<Sha256Digest> DigestFromBytes(std::string_view bytes, std::string_view what);
absl::StatusOr<ModelFingerprint> FingerprintFromProto(const v1::ModelFingerprint& fp);
absl::StatusOr<BlockKey> BlockKeyFromProto(const v1::BlockKey& key, std::string_view what);
absl::StatusOr<SwaKey> SwaKeyFromProto(const v1::SwaKey& key, std::string_view what);
void ToProto(const BlockKey& key, v1::BlockKey* out);
void ToProto(const SwaKey& key, v1::SwaKey* out);

// The bytes of an INLINE descriptor. InvalidArgument for another backend (the transfer layer is
// not there yet) or a `length` that is neither 0 nor the inline size.
absl::StatusOr<std::string_view> InlinePayload(const v1::TransferDescriptor& d,
                                               std::string_view what);
// True when a destination descriptor asks for inline delivery (unset or INLINE).
bool WantsInline(const v1::TransferDescriptor& d);

// Milliseconds from Unix microseconds, clamped at 0.
inline uint64_t MsFromMicros(int64_t us) { return us <= 0 ? 0 : static_cast<uint64_t>(us / 1000); }

// Fills a Health reply for the cache role.
void FillHealth(const CacheState& state, v1::HealthCheckResponse* out);

// Admits an RPC (CacheState::EnterRpc), counts it and observes its latency when finished:
//   RpcRecorder rpc(state, "CacheService", "Lookup");
//   if (!rpc.admitted()) return rpc.Finish(RpcRecorder::Draining());
//   ...  return rpc.Finish(status);
// Health handlers pass admit = false: they answer while draining.
class RpcRecorder {
 public:
  RpcRecorder(CacheState* state, std::string_view service, std::string_view method,
              bool admit = true)
      : state_(state),
        service_(service),
        method_(method),
        start_(absl::Now()),
        admitted_(admit && state->EnterRpc()) {}
  ~RpcRecorder() {
    if (admitted_) state_->ExitRpc();
  }
  RpcRecorder(const RpcRecorder&) = delete;
  RpcRecorder& operator=(const RpcRecorder&) = delete;

  bool admitted() const { return admitted_; }
  static grpc::Status Draining() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the cache server is shutting down");
  }
  grpc::Status Finish(grpc::Status status) {
    state_->RecordRpc(service_, method_, CodeName(status.error_code()), absl::Now() - start_);
    return status;
  }
  grpc::Status Finish(const absl::Status& status) { return Finish(ToGrpc(status)); }

 private:
  CacheState* state_;
  std::string_view service_;
  std::string_view method_;
  absl::Time start_;
  bool admitted_;
};

}  // namespace flashserve::cache::adapter
