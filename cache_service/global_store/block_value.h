// The stored value of one global-KV block: a fixed 104-byte header, the opaque payload (the KV
// rows of every KV source layer, laid out by the serving runtime; docs/kv_layout.md) and a 16-byte
// XXH3-128 checksum over header + payload. Byte layout: README.md ("Block value format").
//
// Why XXH3-128 and not SHA-256: the checksum guards against accidental corruption (disk, DRAM, a
// torn or misdirected write, a reader bug), not an adversary: keys are SHA-256 and values are
// written only by trusted workers. XXH3 runs at tens of GB/s where SHA-256 manages 1-2 GB/s, and
// every read of every block is verified; 128 bits make an undetected random corruption 2^-128.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cache_service/global_store/block_key.h"

namespace flashserve::cache {

inline constexpr std::string_view kBlockValueMagic = "FSKVBLK\n";  // 8 bytes
inline constexpr uint16_t kBlockFormatVersion = 1;
inline constexpr size_t kBlockHeaderBytes = 104;
inline constexpr size_t kBlockChecksumBytes = 16;
// Encoded size of a block value with `payload_bytes` of payload.
constexpr size_t EncodedBlockValueBytes(size_t payload_bytes) {
  return kBlockHeaderBytes + payload_bytes + kBlockChecksumBytes;
}

// The header fields, as decoded (magic and format version are implied by a successful decode).
struct BlockValueHeader {
  uint16_t format_version = kBlockFormatVersion;
  ModelFingerprint fingerprint;  // digest and layout version
  BlockKey key;                  // echo of the key the value is stored under
  uint32_t token_count = kBlockTokens;
  uint64_t payload_length = 0;
  int64_t created_unix_micros = 0;
  uint32_t ttl_s = 0;  // the TTL asked for at put time, seconds; 0: the store's default
};

// Encodes header + payload + checksum into *out (replacing its contents). Thread-safe; cost:
// one copy of the payload and one XXH3-128 pass.
// `ttl_s` is recorded in the header (0: the store's default) so that a replayed entry keeps it.
void EncodeBlockValue(const ModelFingerprint& fingerprint, const BlockKey& key,
                      int64_t created_unix_micros, std::string_view payload, std::string* out,
                      uint32_t ttl_s = 0);
// The same, into EncodedBlockValueBytes(payload.size()) bytes at `out` (caller-owned memory, e.g.
// a value-log append buffer).
void EncodeBlockValueTo(const ModelFingerprint& fingerprint, const BlockKey& key,
                        int64_t created_unix_micros, std::string_view payload, char* out,
                        uint32_t ttl_s = 0);

// A decoded value: the header and a view of the payload inside the input bytes (valid while they
// are).
struct DecodedBlockValue {
  BlockValueHeader header;
  std::string_view payload;
};

// Decodes and verifies `bytes`: length, checksum, magic, format version, header size, fingerprint
// digest (== `fingerprint.digest`), key echo (== `key`), token count (64) and payload length. Any mismatch is DataLossError naming the field: the value is damaged or
// misplaced; the caller treats it as a miss, drops it and never serves the bytes.
// An intact value (all of the above pass) whose layout version differs from
// `fingerprint.layout_version` is FailedPreconditionError: the reader, not the data, is at fault
// (a fingerprint built inconsistently); still a miss, but the value is kept.
// Thread-safe; cost: one XXH3-128 pass.
absl::StatusOr<DecodedBlockValue> DecodeBlockValue(std::string_view bytes, const BlockKey& key,
                                                   const ModelFingerprint& fingerprint);

}  // namespace flashserve::cache
