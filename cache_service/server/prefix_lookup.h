// The cache's answer to "how much of this prompt is cached": the longest prefix of full 64-token
// blocks present in the global store, each block's metadata, and whether an SWA snapshot exists
// for an exact prefix end in [hit_tokens, hit_tokens + 64) (DESIGN.md §3, "Lookup").
// Protobuf-free; used by the CacheService adapter.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cache_service/global_store/global_store.h"
#include "cache_service/swa_pool/swa_pool.h"

namespace flashserve::cache {

struct PrefixSnapshot {
  size_t prefix_tokens = 0;  // the exact prefix length the snapshot ends
  SwaEntryInfo info;
};

struct PrefixLookup {
  size_t hit_tokens = 0;               // 64 x blocks.size()
  std::vector<StoreEntryInfo> blocks;  // the hit blocks, in chain order
  std::optional<PrefixSnapshot> swa;   // the longest prefix end holding a snapshot
  std::vector<BlockKey> chain;         // keys of every full block of the request (hit or not)
};

// Chains the keys of `tokens` (fingerprint digest + salt), finds the longest present prefix (index
// only: no disk read; a block found corrupt later is a miss then) and probes the SWA pool for
// prefix ends hit_tokens + t, t from min(63, tokens.size() - hit_tokens) down to 0 (the empty
// prefix excluded). With `touch`, the hit blocks count as accessed now. Thread-safe.
// Cost: one SHA-256 per 64 tokens, one index probe per block, up to 64 SHA-256 + pool probes.
PrefixLookup LookupPrefix(GlobalStore& store, const SwaPool& swa,
                          const ModelFingerprint& fingerprint, std::span<const TokenId> tokens,
                          std::string_view tenant_salt, bool touch);

}  // namespace flashserve::cache
