// The gRPC adapter of flashserve.v1.AdminService (Stats, List, Inspect, Evict, Pin, Unpin, Flush,
// Verify, Compact, Health) over CacheState and admin_ops.h. Wire types stop in
// admin_service_impl.cc.
//
// Authentication: when an admin token is configured (cache.admin_token), every RPC except Health
// must carry the metadata "authorization: Bearer <token>"; a missing or wrong one fails with
// UNAUTHENTICATED before any work (compared in constant time). Without a token (loopback only,
// enforced at start-up) admin RPCs are open.
// Validation: INVALID_ARGUMENT for malformed keys, fingerprints, filters and page tokens, an
// EntryKey with no key, pinning an SWA snapshot; RESOURCE_EXHAUSTED for more keys than
// cache.max_keys_per_request.
#pragma once

#include <memory>

#include "cache_service/server/cache_state.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace flashserve::cache {

// An AdminService over `state` (not owned; must outlive the service). Thread-safe.
std::unique_ptr<grpc::Service> NewAdminService(CacheState* state);

}  // namespace flashserve::cache
