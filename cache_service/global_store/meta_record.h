// The per-entry metadata record of the GlobalStore's "meta" column family (layout in README.md,
// "Metadata record"): version 1, 32 bytes, for a value in the blocks family (written in the same
// atomic WriteBatch as the value); version 2, 48 bytes, adds the value-log segment and offset
// (written, synced, after the value is durable in its segment). Last-access updates are
// rewritten lazily (unsynced).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cache_service/global_store/store_index.h"

namespace flashserve::cache {

inline constexpr size_t kMetaRecordBytes = 32;
inline constexpr size_t kMetaRecordLocatedBytes = 48;

// Encodes `state`: version 2 (48 bytes) when state.segment != 0, else version 1. Thread-safe.
std::string EncodeMetaRecord(const EntryState& state);
// Decodes a record. DataLoss on a wrong size, unknown version, set reserved bits or a bad check
// word. Thread-safe.
absl::StatusOr<EntryState> DecodeMetaRecord(std::string_view bytes);

}  // namespace flashserve::cache
