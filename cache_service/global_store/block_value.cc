#include "cache_service/global_store/block_value.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/endian.h"
#include "common/base/hash.h"
#include "common/base/strings.h"

namespace flashserve::cache {
namespace {

// Field offsets of the header (README.md, "Block value format"). All integers little-endian.
constexpr size_t kOffMagic = 0;
constexpr size_t kOffFormatVersion = 8;
constexpr size_t kOffHeaderBytes = 10;
constexpr size_t kOffLayoutVersion = 12;
constexpr size_t kOffFingerprint = 16;
constexpr size_t kOffKey = 48;
constexpr size_t kOffTokenCount = 80;
constexpr size_t kOffTtl = 84;  // u32 seconds, 0 = default (a zero "flags" field before store format 3)
constexpr size_t kOffPayloadLength = 88;
constexpr size_t kOffCreated = 96;
static_assert(kOffCreated + 8 == kBlockHeaderBytes);
static_assert(kBlockValueMagic.size() == 8);

constexpr auto PutLe = PutLittleEndian;
constexpr auto GetLe = GetLittleEndian;

absl::Status Loss(std::string_view what) {
  return absl::DataLossError(absl::StrCat("block value: ", ToAbsl(what)));
}

}  // namespace

void EncodeBlockValue(const ModelFingerprint& fingerprint, const BlockKey& key,
                      int64_t created_unix_micros, std::string_view payload, std::string* out,
                      uint32_t ttl_s) {
  out->resize(EncodedBlockValueBytes(payload.size()));
  EncodeBlockValueTo(fingerprint, key, created_unix_micros, payload, out->data(), ttl_s);
}

void EncodeBlockValueTo(const ModelFingerprint& fingerprint, const BlockKey& key,
                        int64_t created_unix_micros, std::string_view payload, char* p,
                        uint32_t ttl_s) {
  std::memcpy(p + kOffMagic, kBlockValueMagic.data(), kBlockValueMagic.size());
  PutLe(kBlockFormatVersion, 2, p + kOffFormatVersion);
  PutLe(kBlockHeaderBytes, 2, p + kOffHeaderBytes);
  PutLe(fingerprint.layout_version, 4, p + kOffLayoutVersion);
  std::memcpy(p + kOffFingerprint, fingerprint.digest.data(), 32);
  std::memcpy(p + kOffKey, key.bytes.data(), 32);
  PutLe(kBlockTokens, 4, p + kOffTokenCount);
  PutLe(ttl_s, 4, p + kOffTtl);
  PutLe(payload.size(), 8, p + kOffPayloadLength);
  PutLe(static_cast<uint64_t>(created_unix_micros), 8, p + kOffCreated);
  if (!payload.empty()) std::memcpy(p + kBlockHeaderBytes, payload.data(), payload.size());
  const size_t covered = kBlockHeaderBytes + payload.size();
  const Hash128 sum = Xxh3_128(p, covered);
  PutLe(sum.low, 8, p + covered);
  PutLe(sum.high, 8, p + covered + 8);
}

absl::StatusOr<DecodedBlockValue> DecodeBlockValue(std::string_view bytes, const BlockKey& key,
                                                   const ModelFingerprint& fingerprint) {
  if (bytes.size() < EncodedBlockValueBytes(0)) return Loss("shorter than header + checksum");
  const char* p = bytes.data();
  // The checksum first: a corrupted header field is then reported as what it is, corruption,
  // and no field of unverified bytes is trusted (the payload length locates the checksum, so it
  // is bounded by the input size before use).
  const uint64_t payload_length = GetLe(p + kOffPayloadLength, 8);
  if (payload_length != bytes.size() - EncodedBlockValueBytes(0)) {
    return Loss("payload length does not match the value size");
  }
  const size_t covered = kBlockHeaderBytes + payload_length;
  const Hash128 sum = Xxh3_128(p, covered);
  if (sum.low != GetLe(p + covered, 8) || sum.high != GetLe(p + covered + 8, 8)) {
    return Loss("checksum mismatch");
  }
  if (std::memcmp(p + kOffMagic, kBlockValueMagic.data(), kBlockValueMagic.size()) != 0) {
    return Loss("bad magic");
  }
  if (GetLe(p + kOffFormatVersion, 2) != kBlockFormatVersion) return Loss("unknown format version");
  if (GetLe(p + kOffHeaderBytes, 2) != kBlockHeaderBytes) return Loss("unexpected header size");
  if (std::memcmp(p + kOffFingerprint, fingerprint.digest.data(), 32) != 0) {
    return Loss("model fingerprint differs from the reader's");
  }
  if (std::memcmp(p + kOffKey, key.bytes.data(), 32) != 0) return Loss("key echo mismatch");
  if (GetLe(p + kOffTokenCount, 4) != kBlockTokens) return Loss("token count is not 64");
  if (const uint64_t v = GetLe(p + kOffLayoutVersion, 4); v != fingerprint.layout_version) {
    return absl::FailedPreconditionError(absl::StrCat("block value: layout version ", v,
                                                      " differs from the reader's ",
                                                      fingerprint.layout_version));
  }

  DecodedBlockValue out;
  out.header.format_version = kBlockFormatVersion;
  out.header.fingerprint = fingerprint;
  out.header.key = key;
  out.header.token_count = kBlockTokens;
  out.header.payload_length = payload_length;
  out.header.created_unix_micros = static_cast<int64_t>(GetLe(p + kOffCreated, 8));
  out.header.ttl_s = static_cast<uint32_t>(GetLe(p + kOffTtl, 4));
  out.payload = bytes.substr(kBlockHeaderBytes, payload_length);
  return out;
}

}  // namespace flashserve::cache
