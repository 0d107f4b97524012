// Keys of the global KV cache: model fingerprints and the block hash chain (DESIGN.md §3).
//
// A block is 64 tokens. Its key is SHA-256 over a length-prefixed encoding of (parent block key,
// the block's 64 token ids, model fingerprint, tenant salt); the first block's parent is the root
// key (32 zero bytes). A cryptographic hash because a client that could craft a collision could
// read another tenant's KV. The exact byte encodings are in README.md ("Key encodings"); they are
// part of the on-disk format: changing one changes every key.
#pragma once

#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cache_service/global_store/sha256.h"

namespace flashserve::cache {

// Tokens per stored block: a multiple of every compress ratio (2) and of the candidate block (8).
inline constexpr int kBlockTokens = 64;
using TokenId = int32_t;

// The key of one 64-token block: 32 bytes. Value type; comparable and hashable (absl).
struct BlockKey {
  Sha256Digest bytes{};

  // The parent of the first block: 32 zero bytes.
  static BlockKey Root() { return BlockKey{}; }
  bool IsRoot() const { return *this == Root(); }
  std::string ToHex() const { return DigestToHex(bytes); }
  // InvalidArgument unless `hex` is 64 hex characters.
  static absl::StatusOr<BlockKey> FromHex(std::string_view hex);

  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockKey& k) {
    return H::combine_contiguous(std::move(h), k.bytes.data(), k.bytes.size());
  }
};

// What identifies a model's cache namespace. Callers supply stable identity strings: the exact
// config text, an identity of the weights (e.g. the shards' content hashes), of the tokenizer (e.g.
// SHA-256 of tokenizer.json) and the cache layout version (docs/kv_layout.md).
struct ModelIdentity {
  std::string config_text;
  std::string weights_identity;
  std::string tokenizer_identity;
  uint32_t layout_version = 0;
};

// The model fingerprint: a 32-byte SHA-256 digest over ModelIdentity (README.md), plus the layout
// version it covers, kept in clear so that a reader can check a stored header's layout version
// without the identity strings. Two fingerprints are equal only if both parts are.
struct ModelFingerprint {
  Sha256Digest digest{};
  uint32_t layout_version = 0;

  std::string ToHex() const { return DigestToHex(digest); }

  friend bool operator==(const ModelFingerprint&, const ModelFingerprint&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ModelFingerprint& f) {
    return H::combine(H::combine_contiguous(std::move(h), f.digest.data(), f.digest.size()),
                      f.layout_version);
  }
};

// The fingerprint of `identity`. Deterministic across processes and machines. Thread-safe.
ModelFingerprint ComputeModelFingerprint(const ModelIdentity& identity);

// The key of the block holding `tokens` whose predecessor has key `parent` (BlockKey::Root() for
// the first block). `tenant_salt` may be empty (no tenant isolation); tenants with different salts
// never share keys. Deterministic; thread-safe; cost: one SHA-256 over ~360 bytes + the salt.
BlockKey ComputeBlockKey(const BlockKey& parent, std::span<const TokenId, kBlockTokens> tokens,
                         const ModelFingerprint& fingerprint, std::string_view tenant_salt);

// The keys of every full 64-token block of `tokens`, in order (tokens.size() / 64 keys; the
// partial tail has no key). Thread-safe.
std::vector<BlockKey> ChainKeys(std::span<const TokenId> tokens,
                                const ModelFingerprint& fingerprint, std::string_view tenant_salt);

}  // namespace flashserve::cache
