// SHA-256 over OpenSSL's EVP interface, for cache keys that an adversary could choose (block keys,
// model fingerprints, SWA keys). Non-adversarial hashing uses XXH3 (common/base/hash.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace flashserve::cache {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. Not thread-safe (one hasher per thread); the class owns an EVP_MD_CTX.
// OpenSSL failures here can only be allocation failures: they CHECK-fail (OOM aborts the process,
// STYLE.md). Cost: ~0.5-2 GB/s depending on SHA extensions; Reset() reuses the context.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  // Starts a new message (the constructor already did).
  void Reset();
  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // Appends v as 8 little-endian bytes.
  void UpdateU64(uint64_t v);
  // Appends u64le(size) then the bytes: the length-prefixed field of every key encoding.
  void UpdateField(const void* data, size_t size);
  void UpdateField(std::string_view bytes) { UpdateField(bytes.data(), bytes.size()); }
  // Finishes the message; the hasher must be Reset() before reuse.
  Sha256Digest Finish();

 private:
  void* ctx_;  // EVP_MD_CTX, opaque so that OpenSSL headers stay out of this header.
};

// One-shot SHA-256 of `bytes`.
Sha256Digest Sha256Of(std::string_view bytes);

// 64 lowercase hex characters.
std::string DigestToHex(const Sha256Digest& digest);
// Parses 64 hex characters (either case). InvalidArgument on any other input.
absl::StatusOr<Sha256Digest> DigestFromHex(std::string_view hex);

}  // namespace flashserve::cache
