#include "common/base/hash.h"

#include <xxhash.h>

#include "common/base/check.h"

namespace flashserve {

uint64_t Xxh3_64(const void* data, size_t size, uint64_t seed) {
  return XXH3_64bits_withSeed(data, size, seed);
}

Hash128 Xxh3_128(const void* data, size_t size, uint64_t seed) {
  XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return Hash128{h.low64, h.high64};
}

Xxh3Hasher::Xxh3Hasher(uint64_t seed) : state_(XXH3_createState()) {
  CHECK(state_ != nullptr) << "XXH3_createState: out of memory";
  XXH3_64bits_reset_withSeed(static_cast<XXH3_state_t*>(state_), seed);
}

Xxh3Hasher::~Xxh3Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Hasher::Update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t Xxh3Hasher::Digest() const {
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_));
}

}  // namespace flashserve
