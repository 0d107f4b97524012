// Fast non-cryptographic hashing (XXH3) for in-process tables, checksums of stored values and
// content addressing where no adversary chooses the input. Keys that an adversary could choose
// (KV cache block keys) use SHA-256 instead; see cache_service/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace flashserve {

// XXH3 64-bit of the bytes, with an optional seed. Thread-safe, no allocation.
uint64_t Xxh3_64(const void* data, size_t size, uint64_t seed = 0);
inline uint64_t Xxh3_64(std::string_view bytes, uint64_t seed = 0) {
  return Xxh3_64(bytes.data(), bytes.size(), seed);
}

// 128-bit XXH3 as (low, high).
struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Hash128&) const = default;
};
Hash128 Xxh3_128(const void* data, size_t size, uint64_t seed = 0);

// Incremental XXH3-64 over several pieces; equals Xxh3_64 of their concatenation.
class Xxh3Hasher {
 public:
  explicit Xxh3Hasher(uint64_t seed = 0);
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;

  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept opaque so xxhash.h stays out of this header.
};

}  // namespace flashserve
