// GlobalStore durability without a second sync per put: checkpoints of the value-log position
// whose metadata is durable, and the open-time replay of the values written after it
// (global_store.h, "Durability"; README.md, "Durability").
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cache_service/global_store/block_value.h"
#include "cache_service/global_store/global_store.h"
#include "cache_service/global_store/meta_record.h"
#include "cache_service/global_store/rocks_util.h"
#include "cache_service/global_store/value_log.h"
#include "cache_service/global_store/value_log_scan.h"
#include "common/base/endian.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace flashserve::cache {
namespace {

// Field offsets of the block-value header that replay reads (block_value.cc).
constexpr size_t kOffLayoutVersion = 12;
constexpr size_t kOffCreated = 96;
// Values scanned per read while replaying.
constexpr uint64_t kReplayChunkBytes = uint64_t{8} << 20;
// Metadata records per replay write batch.
constexpr size_t kReplayBatch = 1024;

}  // namespace

absl::Status GlobalStore::Checkpoint() {
  if (db_ == nullptr) return absl::FailedPreconditionError("checkpoint: store closed");
  ValueLocation end;
  {
    // No append is between its write and its metadata while this is held: every value before
    // `end` has had its metadata written (unsynced) to RocksDB.
    absl::WriterMutexLock lock(&log_mu_);
    end = vlog_->End();
    appended_since_checkpoint_.store(0, std::memory_order_relaxed);
  }
  // No active segment: nothing was appended since Open, whose own checkpoint covers everything.
  if (end.segment == 0) return absl::OkStatus();
  RETURN_IF_ERROR(FromRocks(db_->FlushWAL(/*sync=*/true), "syncing the WAL for a checkpoint"));
  rocksdb::WriteOptions sync;
  sync.sync = true;
  RETURN_IF_ERROR(FromRocks(db_->Put(sync, handles_[0], kCheckpointKey, EncodeCheckpoint(end)),
                            "writing a checkpoint"));
  absl::MutexLock lock(&checkpoint_mu_);
  checkpoint_ = end;
  return absl::OkStatus();
}

ValueLocation GlobalStore::CheckpointPosition() const {
  absl::MutexLock lock(&checkpoint_mu_);
  return checkpoint_;
}

void GlobalStore::MaybeCheckpoint(uint64_t appended) {
  const uint64_t total =
      appended_since_checkpoint_.fetch_add(appended, std::memory_order_relaxed) + appended;
  if (total < options_.value_log_checkpoint_bytes) return;
  if (checkpointing_.exchange(true, std::memory_order_acq_rel)) return;  // another thread does it
  const absl::Status s = Checkpoint();
  if (!s.ok()) LOG(WARNING) << "global store: " << s;
  checkpointing_.store(false, std::memory_order_release);
}

absl::StatusOr<size_t> GlobalStore::ReplayValueLogLocked(ValueLocation from) {
  size_t replayed = 0, damaged = 0;
  uint64_t scanned = 0;
  rocksdb::WriteBatch batch;
  const auto write = [&]() -> absl::Status {
    if (batch.Count() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "replaying metadata"));
    batch.Clear();
    return absl::OkStatus();
  };
  for (const auto& [id, size] : vlog_->Segments()) {
    if (id < from.segment) continue;
    uint64_t offset = id == from.segment ? std::max(from.offset, kSegmentHeaderBytes)
                                         : kSegmentHeaderBytes;
    ScanStep step;
    while (offset < size) {
      const absl::Status st = ScanSegmentStep(*vlog_, id, offset, kReplayChunkBytes, &step);
      if (!st.ok()) {
        // Unreadable: its values stay unreferenced (a miss), as if never written.
        LOG(ERROR) << "global store: replaying segment " << id << " at " << offset << ": " << st;
        break;
      }
      for (const ScannedValue& v : step.found) {
        if (index_.Find(v.key) != nullptr) continue;  // metadata survived (the common case)
        const std::string_view bytes(step.buf.get() + v.pos, v.bytes);
        ModelFingerprint fp;
        fp.digest = FingerprintOf(v.key);
        fp.layout_version =
            static_cast<uint32_t>(GetLittleEndian(bytes.data() + kOffLayoutVersion, 4));
        absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(bytes, BlockKeyOf(v.key), fp);
        if (!d.ok()) {
          // A torn append (never acknowledged) or damage: the value is not referenced.
          ++damaged;
          continue;
        }
        EntryState e;
        e.bytes = v.bytes;
        e.created_unix_micros = static_cast<int64_t>(GetLittleEndian(bytes.data() + kOffCreated, 8));
        // The last access is unknown: the creation time is the conservative choice (an entry
        // that had expired stays expired).
        e.last_access_unix_micros = e.created_unix_micros;
        e.ttl_s = d->header.ttl_s;
        e.segment = id;
        e.offset = offset + v.pos;
        index_.Upsert(v.key, e);
        batch.Put(meta_cf_, AsSlice(v.key), EncodeMetaRecord(e));
        ++replayed;
        if (batch.Count() >= kReplayBatch) {
          RETURN_IF_ERROR(write());
        }
      }
      scanned += step.consumed;
      if (step.segment_end || step.consumed == 0) break;
      offset += step.consumed;
    }
  }
  RETURN_IF_ERROR(write());
  if (replayed > 0 || damaged > 0) {
    LOG(WARNING) << "global store: replayed the value log from segment " << from.segment
                 << " offset " << from.offset << ": " << scanned << " bytes scanned, " << replayed
                 << " entries restored, " << damaged << " damaged values skipped";
  }
  return replayed;
}

}  // namespace flashserve::cache
