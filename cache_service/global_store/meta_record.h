// The per-entry metadata record of the GlobalStore's "meta" column family (32 bytes; layout in
// README.md, "Metadata record"). Written in the same atomic WriteBatch as the block value, so a
// durable block always has its record; last-access updates are rewritten lazily (unsynced).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cache_service/global_store/store_index.h"

namespace flashserve::cache {

inline constexpr size_t kMetaRecordBytes = 32;

// Encodes `state` (32 bytes). Thread-safe.
std::string EncodeMetaRecord(const EntryState& state);
// Decodes a record. DataLoss on a wrong size, unknown version, set reserved bits or a bad check
// word. Thread-safe.
absl::StatusOr<EntryState> DecodeMetaRecord(std::string_view bytes);

}  // namespace flashserve::cache
