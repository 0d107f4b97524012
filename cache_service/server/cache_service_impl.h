// The gRPC adapter of flashserve.v1.CacheService (Lookup, GetBlocks, PutBlocks, GetSwa, PutSwa,
// Health) over CacheState. Wire types stop in cache_service_impl.cc.
//
// Request validation (whole RPC fails, nothing is written):
//   INVALID_ARGUMENT   a fingerprint, key or parent that is not 32 bytes, a block with other than
//                      64 tokens, an SWA tail of 64 or more tokens, a token id >= 2^31, a prefix
//                      length inconsistent with the tail, a salt over 1 KiB, a transfer backend
//                      other than INLINE (the transfer layer does not exist yet).
//   RESOURCE_EXHAUSTED more keys than cache.max_keys_per_request, more tokens than
//                      cache.max_lookup_tokens, a payload over cache.max_payload_size, a reply that
//                      would exceed cache.max_message_size (gRPC itself rejects larger requests).
// Per-entry outcomes: a block whose key does not match SHA-256(parent, tokens, fingerprint,
// salt) is PUT_STATUS_REJECTED_INVALID (a poisoned put is never stored); the other blocks of the
// call are still stored.
#pragma once

#include <memory>

#include "cache_service/server/cache_state.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace flashserve::cache {

// A CacheService over `state` (not owned; must outlive the service). Thread-safe.
std::unique_ptr<grpc::Service> NewCacheService(CacheState* state);

}  // namespace flashserve::cache
