#include "cache_service/global_store/meta_record.h"

#include "common/base/endian.h"
#include "common/base/hash.h"

namespace flashserve::cache {
namespace {

constexpr uint8_t kMetaVersion = 1;         // 32 bytes: the value is in the blocks family
constexpr uint8_t kMetaVersionLocated = 2;  // 48 bytes: + value-log segment and offset
constexpr uint8_t kFlagPinned = 1;

constexpr auto PutLe = PutLittleEndian;
constexpr auto GetLe = GetLittleEndian;
// The check word: low 32 bits of XXH3-64 over bytes 0-3 and 8-(size-1).
uint32_t CheckWord(const char* p, size_t size) {
  char buf[kMetaRecordLocatedBytes - 4];
  for (int i = 0; i < 4; ++i) buf[i] = p[i];
  for (size_t i = 8; i < size; ++i) buf[i - 4] = p[i];
  return static_cast<uint32_t>(Xxh3_64(buf, size - 4));
}

}  // namespace

std::string EncodeMetaRecord(const EntryState& state) {
  // Version 2 also carries a TTL (bytes 36..39; zero before store format 3), so an entry with its
  // own TTL is written as version 2 even when its value is in the blocks family (segment 0).
  const bool located = state.segment != 0 || state.ttl_s != 0;
  std::string out(located ? kMetaRecordLocatedBytes : kMetaRecordBytes, '\0');
  char* p = out.data();
  p[0] = static_cast<char>(located ? kMetaVersionLocated : kMetaVersion);
  p[1] = static_cast<char>(state.pinned ? kFlagPinned : 0);
  PutLe(state.bytes, 8, p + 8);
  PutLe(static_cast<uint64_t>(state.created_unix_micros), 8, p + 16);
  PutLe(static_cast<uint64_t>(state.last_access_unix_micros), 8, p + 24);
  if (located) {
    PutLe(state.segment, 4, p + 32);
    PutLe(state.ttl_s, 4, p + 36);
    PutLe(state.offset, 8, p + 40);
  }
  PutLe(CheckWord(p, out.size()), 4, p + 4);
  return out;
}

absl::StatusOr<EntryState> DecodeMetaRecord(std::string_view bytes) {
  if (bytes.size() != kMetaRecordBytes && bytes.size() != kMetaRecordLocatedBytes) {
    return absl::DataLossError("meta record: wrong size");
  }
  const char* p = bytes.data();
  if (GetLe(p + 4, 4) != CheckWord(p, bytes.size())) {
    return absl::DataLossError("meta record: check word");
  }
  const bool located = bytes.size() == kMetaRecordLocatedBytes;
  if (static_cast<uint8_t>(p[0]) != (located ? kMetaVersionLocated : kMetaVersion)) {
    return absl::DataLossError("meta record: unknown version");
  }
  const uint8_t flags = static_cast<uint8_t>(p[1]);
  if ((flags & ~kFlagPinned) != 0 || p[2] != 0 || p[3] != 0) {
    return absl::DataLossError("meta record: reserved bits set");
  }
  EntryState s;
  s.pinned = (flags & kFlagPinned) != 0;
  s.bytes = GetLe(p + 8, 8);
  s.created_unix_micros = static_cast<int64_t>(GetLe(p + 16, 8));
  s.last_access_unix_micros = static_cast<int64_t>(GetLe(p + 24, 8));
  if (located) {
    s.segment = static_cast<uint32_t>(GetLe(p + 32, 4));
    s.ttl_s = static_cast<uint32_t>(GetLe(p + 36, 4));
    s.offset = GetLe(p + 40, 8);
    if (s.segment == 0 && s.offset != 0) {
      return absl::DataLossError("meta record: an offset without a segment");
    }
  }
  return s;
}

std::string EncodeCheckpoint(ValueLocation loc) {
  std::string out(16, '\0');
  PutLittleEndian(loc.segment, 4, out.data());
  PutLittleEndian(loc.offset, 8, out.data() + 8);
  return out;
}

absl::StatusOr<ValueLocation> DecodeCheckpoint(std::string_view bytes) {
  if (bytes.size() != 16 || GetLittleEndian(bytes.data() + 4, 4) != 0) {
    return absl::DataLossError("value-log checkpoint: malformed record");
  }
  return ValueLocation{static_cast<uint32_t>(GetLittleEndian(bytes.data(), 4)),
                       GetLittleEndian(bytes.data() + 8, 8)};
}

}  // namespace flashserve::cache
