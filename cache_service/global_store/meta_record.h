// The per-entry metadata record of the GlobalStore's "meta" column family (layout in README.md,
// "Metadata record"): version 1, 32 bytes, for a value in the blocks family (written in the same
// atomic WriteBatch as the value); version 2, 48 bytes, adds the value-log segment and offset
// (segment 0: the blocks family) and the entry's own TTL (written after the value is durable in
// its segment). Last-access updates are rewritten lazily (unsynced).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cache_service/global_store/store_index.h"
#include "cache_service/global_store/value_log.h"

namespace flashserve::cache {

inline constexpr size_t kMetaRecordBytes = 32;
inline constexpr size_t kMetaRecordLocatedBytes = 48;

// Encodes `state`: version 2 (48 bytes) when state.segment != 0 or state.ttl_s != 0, else
// version 1. Thread-safe.
std::string EncodeMetaRecord(const EntryState& state);
// Decodes a record. DataLoss on a wrong size, unknown version, set reserved bits or a bad check
// word. Thread-safe.
absl::StatusOr<EntryState> DecodeMetaRecord(std::string_view bytes);

// The value-log checkpoint (default column family, key kCheckpointKey; README.md, "Durability"):
// 16 bytes, u32 segment, u32 zero, u64 offset, little-endian. Every value before that offset of
// that segment, and in every segment with a lower id, has durable metadata.
inline constexpr char kCheckpointKey[] = "flashserve.cache.vlog_checkpoint";
std::string EncodeCheckpoint(ValueLocation loc);
// DataLoss on a wrong size or set reserved bytes.
absl::StatusOr<ValueLocation> DecodeCheckpoint(std::string_view bytes);

}  // namespace flashserve::cache
