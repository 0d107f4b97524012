// Sequential scans of value-log segments (internal): garbage collection reads sealed segments
// chunk by chunk to find their values, and the open-time replay (GlobalStore, "Durability") reads
// the segments written after the last checkpoint. Both parse the same record framing: each append
// starts 4 KiB-aligned with encoded block values back to back and zero padding after them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "cache_service/global_store/store_index.h"
#include "cache_service/global_store/value_log.h"

namespace flashserve::cache {

// One value found by a scan: the store key read from its header, where it starts inside the
// step's buffer, and its encoded size. Nothing is verified yet (the header may lie: callers run
// DecodeBlockValue before trusting the value).
struct ScannedValue {
  StoreKey key;
  size_t pos = 0;
  uint64_t bytes = 0;
};

struct ScanStep {
  std::unique_ptr<char[]> buf;  // the bytes read, starting at the step's offset
  uint64_t len = 0;
  std::vector<ScannedValue> found;
  uint64_t consumed = 0;     // the next step starts at offset + consumed
  bool segment_end = false;  // this step reached the end of the segment
};

// Reads up to `budget` bytes (at least 4 KiB, more when one value is larger than that) of
// `segment` from `offset` and finds the values whose header starts in them. A value that
// straddles the end of the chunk is left for the next step; anything that is not a value header
// skips to the next 4 KiB boundary. Errors: those of ValueLog::Read.
absl::Status ScanSegmentStep(const ValueLog& log, uint32_t segment, uint64_t offset,
                             uint64_t budget, ScanStep* out);

}  // namespace flashserve::cache
