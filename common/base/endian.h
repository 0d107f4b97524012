// Little-endian integer encoding for on-disk and on-wire layouts (docs/kv_layout.md): every
// multi-byte integer FlashServe writes is little-endian regardless of the host.
#pragma once

#include <cstdint>

namespace flashserve {

// Writes the low `bytes` bytes of v (1..8) at out, least significant first.
inline void PutLittleEndian(uint64_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>(v >> (8 * i));
}

// Reads `bytes` bytes (1..8) written by PutLittleEndian.
inline uint64_t GetLittleEndian(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return v;
}

}  // namespace flashserve
