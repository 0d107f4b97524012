// How the cache server stores an SWA snapshot in the SwaPool: the caller's bytes followed by an
// 8-byte trailer, the exact prefix length the snapshot ends (u64 little-endian), so that GetSwa
// can answer prefix_tokens. A trailer rather than a header: appending to the received string and
// truncating the returned copy move no bytes. The pool's checksum covers the trailer too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace flashserve::cache {

inline constexpr size_t kSwaTrailerBytes = 8;

// Appends the trailer to *snapshot.
inline void AppendSwaTrailer(uint64_t prefix_tokens, std::string* snapshot) {
  for (int i = 0; i < 8; ++i) snapshot->push_back(static_cast<char>(prefix_tokens >> (8 * i)));
}

// Removes the trailer from *value and returns the prefix length through *prefix_tokens. False
// (value untouched) if the value is shorter than the trailer.
inline bool StripSwaTrailer(std::string* value, uint64_t* prefix_tokens) {
  if (value->size() < kSwaTrailerBytes) return false;
  const size_t at = value->size() - kSwaTrailerBytes;
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>((*value)[at + i]);
  *prefix_tokens = v;
  value->resize(at);
  return true;
}

// The caller-visible size of a stored value (without the trailer).
inline uint64_t SwaPayloadBytes(uint64_t stored_bytes) {
  return stored_bytes >= kSwaTrailerBytes ? stored_bytes - kSwaTrailerBytes : 0;
}

}  // namespace flashserve::cache
