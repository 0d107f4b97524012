// The key of a SWA snapshot: the exact token prefix the snapshot ends (DESIGN.md §3).
//
// SwaKey = SHA-256 over (tag "fs.swa.1", the key of the prefix's last full block, the tail tokens
// after it, the model fingerprint digest, the tenant salt), each field length-prefixed; byte
// layout in ../global_store/README.md ("Key encodings"). A prefix shorter than one block has the
// root key (32 zero bytes) as its last full block. Two prefixes share a SwaKey only if they are
// the same tokens under the same model and salt.
#pragma once

#include <compare>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "cache_service/global_store/block_key.h"

namespace flashserve::cache {

struct SwaKey {
  Sha256Digest bytes{};

  std::string ToHex() const { return DigestToHex(bytes); }
  friend bool operator==(const SwaKey&, const SwaKey&) = default;
  friend auto operator<=>(const SwaKey&, const SwaKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const SwaKey& k) {
    return H::combine_contiguous(std::move(h), k.bytes.data(), k.bytes.size());
  }
};

// The SwaKey of the prefix made of the blocks ending in `last_full_block` followed by `tail`
// (0 to 63 tokens). InvalidArgument if tail.size() >= 64 (that tail holds a full block: chain it
// first). Thread-safe.
absl::StatusOr<SwaKey> ComputeSwaKey(const BlockKey& last_full_block, std::span<const TokenId> tail,
                                     const ModelFingerprint& fingerprint,
                                     std::string_view tenant_salt);

// The SwaKey of a whole prefix: chains its full blocks (ChainKeys) and hashes the tail. Cost: one
// SHA-256 per 64 tokens. Thread-safe.
SwaKey SwaKeyForPrefix(std::span<const TokenId> prefix, const ModelFingerprint& fingerprint,
                       std::string_view tenant_salt);

}  // namespace flashserve::cache
