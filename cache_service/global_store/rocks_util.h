// RocksDB helpers internal to global_store/: status conversion and key slices.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "cache_service/global_store/store_index.h"
#include "rocksdb/slice.h"
#include "rocksdb/status.h"

namespace flashserve::cache {

// OK -> OkStatus; NotFound -> NotFound; Corruption -> DataLoss; IOError -> Unavailable (the disk
// may recover); Busy/TimedOut/TryAgain -> Unavailable; InvalidArgument -> InvalidArgument;
// anything else -> Internal. The message is "<context>: <rocksdb message>".
absl::Status FromRocks(const rocksdb::Status& status, std::string_view context);

// The 64 key bytes as a Slice (no copy; valid while `key` is).
inline rocksdb::Slice AsSlice(const StoreKey& key) {
  return rocksdb::Slice(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
}

}  // namespace flashserve::cache
