#include "cache_service/global_store/value_log_scan.h"

#include <algorithm>
#include <cstring>

#include "cache_service/global_store/block_value.h"
#include "common/base/endian.h"

namespace flashserve::cache {
namespace {

// Offsets of the block-value header fields a scan needs (block_value.cc).
constexpr size_t kOffFingerprint = 16;
constexpr size_t kOffKey = 48;
constexpr size_t kOffPayloadLength = 88;

}  // namespace

absl::Status ScanSegmentStep(const ValueLog& log, uint32_t segment, uint64_t offset,
                             uint64_t budget, ScanStep* out) {
  const uint64_t size = log.SegmentSize(segment);
  out->found.clear();
  out->consumed = 0;
  out->segment_end = offset >= size;
  out->len = 0;
  if (out->segment_end) return absl::OkStatus();
  uint64_t len = std::min(std::max<uint64_t>(budget, kValueLogAlign), size - offset);
  out->buf.reset(new char[len]);
  out->len = len;
  absl::Status st = log.Read(ValueLocation{segment, offset}, len, out->buf.get());
  size_t pos = 0;
  while (st.ok() && pos + EncodedBlockValueBytes(0) <= len) {
    const char* p = out->buf.get() + pos;
    const uint64_t payload = GetLittleEndian(p + kOffPayloadLength, 8);
    if (std::memcmp(p, kBlockValueMagic.data(), kBlockValueMagic.size()) != 0 || payload > size) {
      pos = AlignUp(offset + pos + 1) - offset;
      continue;
    }
    const uint64_t rec = EncodedBlockValueBytes(payload);
    if (pos + rec > len) {
      if (pos != 0 || offset + rec > size) break;
      len = rec;  // one value larger than the budget: read it whole
      out->buf.reset(new char[len]);
      out->len = len;
      st = log.Read(ValueLocation{segment, offset}, len, out->buf.get());
      continue;
    }
    ScannedValue v;
    std::memcpy(v.key.bytes.data(), p + kOffFingerprint, 32);
    std::memcpy(v.key.bytes.data() + 32, p + kOffKey, 32);
    v.pos = pos;
    v.bytes = rec;
    out->found.push_back(v);
    pos += rec;
  }
  if (!st.ok()) return st;
  // Where the scan stopped: the end of the chunk unless a value straddles it.
  out->segment_end = offset + len >= size;
  out->consumed = out->segment_end ? len : std::min<uint64_t>(pos, len);
  return absl::OkStatus();
}

}  // namespace flashserve::cache
