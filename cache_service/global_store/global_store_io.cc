// GlobalStore data path: put, get, multiget, lookup.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cache_service/global_store/block_value.h"
#include "cache_service/global_store/global_store.h"
#include "cache_service/global_store/meta_record.h"
#include "cache_service/global_store/rocks_util.h"
#include "cache_service/global_store/value_log.h"
#include "common/base/logging.h"
#include "common/base/strings.h"
#include "common/metrics/scoped_timer.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace flashserve::cache {
namespace {

// Append buffers up to this size are kept per thread and reused: a fresh multi-megabyte buffer
// per batch costs a page fault per 4 KiB touched (measured: twice the put CPU per GB at batches
// of 64 blocks). Larger batches allocate and free theirs.
constexpr size_t kReusedAppendBytes = size_t{8} << 20;

// A 4 KiB-aligned buffer of at least `bytes` for this thread's next append.
char* AppendBuffer(size_t bytes, AlignedBuffer* fresh) {
  thread_local AlignedBuffer reused;
  if (bytes > kReusedAppendBytes) {
    *fresh = AlignedBuffer(bytes);
    return fresh->data();
  }
  if (reused.size() < bytes) reused = AlignedBuffer(std::max(bytes, size_t{1} << 20));
  return reused.data();
}

}  // namespace

absl::Status GlobalStore::Put(const ModelFingerprint& fingerprint, const BlockKey& key,
                              std::string_view payload) {
  const BlockWrite block{key, payload};
  return PutBatch(fingerprint, std::span<const BlockWrite>(&block, 1));
}

absl::Status GlobalStore::PutBatch(const ModelFingerprint& fingerprint,
                                   std::span<const BlockWrite> blocks, absl::Duration ttl) {
  metrics::ScopedTimer timer(*m_.put_seconds);
  if (ttl < absl::ZeroDuration() || ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("put: ttl ", absl::FormatDuration(ttl),
                                                   " is outside [0, max_ttl ",
                                                   absl::FormatDuration(options_.max_ttl), "]"));
  }
  // Whole seconds, rounded up; 0 stays "the default". The default itself is stored as 0 so that
  // changing the store's ttl later applies to those entries.
  uint32_t ttl_s = static_cast<uint32_t>(absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  if (absl::Seconds(ttl_s) == options_.ttl) ttl_s = 0;
  for (const BlockWrite& b : blocks) {
    if (b.payload.size() > options_.max_payload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("put: payload of ", b.payload.size(),
                                                     " bytes exceeds max_payload_bytes ",
                                                     options_.max_payload_bytes));
    }
  }
  const int64_t now_us = NowMicros();
  std::vector<size_t> fresh;  // indices into blocks of the entries to write
  std::vector<StoreKey> victims;
  uint64_t incoming = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<BlockKey> seen;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (!seen.insert(blocks[i].key).second) continue;
      const StoreKey k = MakeStoreKey(fingerprint, blocks[i].key);
      const EntryState* s = index_.Find(k);
      if (s != nullptr && !Expired(*s, now_us)) {
        // Same key, same KV: keep the value, refresh its age, extend its TTL if asked for more.
        if (ttl_s != 0 && int64_t{ttl_s} * 1000000 > TtlMicros(*s)) index_.SetTtl(k, ttl_s);
        index_.Touch(k, now_us);
        continue;
      }
      fresh.push_back(i);
      incoming += EncodedBlockValueBytes(blocks[i].payload.size());
    }
    if (fresh.empty()) return absl::OkStatus();
    if (index_.pinned_bytes() + incoming > options_.capacity_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("put: ", incoming, " bytes do not fit: ", index_.pinned_bytes(),
                       " of the capacity ", options_.capacity_bytes, " bytes are pinned"));
    }
    MakeRoomLocked(incoming, now_us, &victims);
    reserved_bytes_ += incoming;
    UpdateGaugesLocked();
  }

  // With the value log, the values go first: one write of the batch's values (back to back,
  // the buffer padded to 4 KiB) and one fdatasync. Only then is the metadata naming them written
  // (unsynced: the value log is its redo log, see Durability in global_store.h), so a crash in
  // between leaves unreferenced bytes, never a record naming lost bytes. log_mu_ is held until
  // the metadata is written so that a checkpoint never passes a value without metadata.
  std::vector<uint64_t> at(fresh.size(), 0);  // offset of each fresh value in its segment
  ValueLocation loc;
  absl::Status appended;
  uint64_t appended_bytes = 0;
  log_mu_.ReaderLock();
  if (options_.value_log) {
    uint64_t total = 0;
    for (size_t f = 0; f < fresh.size(); ++f) {
      at[f] = total;
      total += EncodedBlockValueBytes(blocks[fresh[f]].payload.size());
    }
    const size_t padded = AlignUp(total);
    AlignedBuffer large;
    char* values = AppendBuffer(padded, &large);
    for (size_t f = 0; f < fresh.size(); ++f) {
      EncodeBlockValueTo(fingerprint, blocks[fresh[f]].key, now_us, blocks[fresh[f]].payload,
                         values + at[f], ttl_s);
    }
    std::memset(values + total, 0, padded - total);
    appended_bytes = padded;
    absl::StatusOr<ValueLocation> l = vlog_->Append(values, padded);
    if (l.ok()) {
      loc = *l;
      for (uint64_t& a : at) a += loc.offset;
    } else {
      appended = l.status();
    }
  }
  const auto state_of = [&](size_t f) {
    EntryState st{
        EncodedBlockValueBytes(blocks[fresh[f]].payload.size()), now_us, now_us, false, 0, 0,
        ttl_s};
    if (options_.value_log) {
      st.segment = loc.segment;
      st.offset = at[f];
    }
    return st;
  };

  rocksdb::Status s;
  uint64_t payload_bytes = 0;
  if (appended.ok()) {
    rocksdb::WriteBatch batch;
    // Deletes first: a victim may be a key this batch rewrites (an expired entry put again), and
    // a batch applies in order, so the new value must come after its delete.
    for (const StoreKey& k : victims) {
      batch.Delete(blocks_cf_, AsSlice(k));
      batch.Delete(meta_cf_, AsSlice(k));
    }
    std::string value;
    for (size_t f = 0; f < fresh.size(); ++f) {
      const size_t i = fresh[f];
      const StoreKey k = MakeStoreKey(fingerprint, blocks[i].key);
      if (!options_.value_log) {
        EncodeBlockValue(fingerprint, blocks[i].key, now_us, blocks[i].payload, &value, ttl_s);
        batch.Put(blocks_cf_, AsSlice(k), value);
      }
      batch.Put(meta_cf_, AsSlice(k), EncodeMetaRecord(state_of(f)));
      payload_bytes += blocks[i].payload.size();
    }
    rocksdb::WriteOptions w;
    w.sync = options_.sync_writes && !options_.value_log;
    s = db_->Write(w, &batch);
  }
  log_mu_.ReaderUnlock();
  {
    absl::MutexLock lock(&mu_);
    reserved_bytes_ -= incoming;
    if (appended.ok() && s.ok()) {
      for (size_t f = 0; f < fresh.size(); ++f) {
        index_.Upsert(MakeStoreKey(fingerprint, blocks[fresh[f]].key), state_of(f));
      }
    }
    UpdateGaugesLocked();
  }
  // Released after the index update: until then the segment's new entries are not counted, and
  // the hold keeps ReclaimSegments from deleting it.
  if (options_.value_log && appended.ok()) vlog_->Release(loc.segment);
  if (!appended.ok() || !s.ok()) {
    timer.Cancel();
    DeleteFromDisk(victims);  // they already left the index
    return appended.ok() ? FromRocks(s, "put batch") : appended;
  }
  m_.written_bytes->Increment(static_cast<double>(payload_bytes));
  MaybeCheckpoint(appended_bytes);
  MaybePersistTouched();
  if (options_.value_log_gc_bytes_per_put > 0) {
    CollectGarbage(options_.value_log_gc_bytes_per_put, /*wait=*/false);
  }
  if (!victims.empty() || options_.value_log) ReclaimSegments();
  return absl::OkStatus();
}

absl::StatusOr<std::string> GlobalStore::Get(const ModelFingerprint& fingerprint,
                                             const BlockKey& key) {
  std::vector<absl::StatusOr<std::string>> r =
      MultiGet(fingerprint, std::span<const BlockKey>(&key, 1));
  return std::move(r[0]);
}

std::vector<absl::StatusOr<std::string>> GlobalStore::MultiGet(const ModelFingerprint& fingerprint,
                                                               std::span<const BlockKey> keys) {
  metrics::ScopedTimer timer(*m_.get_seconds);
  std::vector<absl::StatusOr<std::string>> out(keys.size(),
                                               absl::NotFoundError("block not cached"));
  std::vector<StoreKey> skeys(keys.size());
  std::vector<size_t> in_rocks, in_log;  // indices into keys, by where the value lives
  std::vector<EntryState> log_states;    // parallel to in_log
  std::vector<StoreKey> expired;
  const int64_t now_us = NowMicros();
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      skeys[i] = MakeStoreKey(fingerprint, keys[i]);
      const EntryState* s = index_.Find(skeys[i]);
      if (s == nullptr) continue;
      if (Expired(*s, now_us)) {
        EvictLocked(skeys[i], m_.evicted_ttl, &expired);
        out[i] = absl::NotFoundError("block expired");
        continue;
      }
      index_.Touch(skeys[i], now_us);
      if (s->segment != 0) {
        in_log.push_back(i);
        log_states.push_back(*s);
      } else {
        in_rocks.push_back(i);
      }
    }
    if (!expired.empty()) UpdateGaugesLocked();
  }
  DeleteFromDisk(expired);

  // Outcome of one read, resolved after all reads: decoding runs on the reading threads.
  std::vector<std::string> corrupt(keys.size());  // why, for values that failed verification
  std::vector<char> stale(keys.size(), 0);        // index and disk disagree (a race)
  const auto decode = [&](size_t i, std::string_view bytes) {
    absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(bytes, keys[i], fingerprint);
    if (d.ok()) {
      out[i] = std::string(d->payload);
      return;
    }
    if (absl::IsFailedPrecondition(d.status())) {  // intact, but the reader's layout differs
      LOG(WARNING) << "global store: " << d.status();
      out[i] = absl::NotFoundError("block has another layout version");
      return;
    }
    corrupt[i] = std::string(ToStd(d.status().message()));
  };

  // Values in the blocks family: RocksDB MultiGet in contiguous chunks over the read pool.
  const size_t n = in_rocks.size();
  std::vector<rocksdb::Slice> rkeys(n);
  for (size_t j = 0; j < n; ++j) rkeys[j] = AsSlice(skeys[in_rocks[j]]);
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions ro;
  ro.verify_checksums = options_.rocksdb_verify_checksums;
  // Values are ~57 KB and read about once per prefill: caching them would only churn the block
  // cache (~1,100 blocks at its 64 MB default); the OS page cache still serves repeated reads.
  // Measured: ~20% less CPU per GB on cold reads (bench_cache_store).
  ro.fill_cache = false;
  // Each chunk is one RocksDB MultiGet of contiguous keys; chunks run on the read pool and the
  // calling thread. Two or more keys per chunk: a lone key gains nothing from a hand-off.
  const auto read = [&](size_t begin, size_t end) {
    db_->MultiGet(ro, blocks_cf_, end - begin, rkeys.data() + begin, values.data() + begin,
                  statuses.data() + begin);
  };
  if (read_pool_ != nullptr) {
    read_pool_->ParallelFor(n, 2, read);
  } else if (n > 0) {
    read(0, n);
  }
  for (size_t j = 0; j < n; ++j) {
    const size_t i = in_rocks[j];
    const rocksdb::Status& st = statuses[j];
    if (st.ok()) {
      decode(i, values[j].ToStringView());
    } else if (st.IsCorruption()) {  // RocksDB's own block checksum caught it
      corrupt[i] = st.ToString();
    } else if (st.IsNotFound()) {  // index and disk disagree after a race with a delete
      stale[i] = 1;
    } else {
      out[i] = FromRocks(st, "reading a block");
    }
  }

  // Values in the value log: exact byte ranges, adjacent values in one read. A segment that is
  // gone means the entry moved (garbage collection) or left since the index was read: look again
  // and read the new location, once.
  for (int attempt = 0; attempt < 2 && !in_log.empty(); ++attempt) {
    std::vector<char> moved(in_log.size(), 0);
    ReadFromLog(log_states, [&](size_t j, const absl::Status& st, std::string_view bytes) {
      const size_t i = in_log[j];
      if (st.ok()) {
        decode(i, bytes);
      } else if (absl::IsNotFound(st)) {
        moved[j] = 1;
      } else if (absl::IsDataLoss(st)) {
        corrupt[i] = std::string(ToStd(st.message()));
      } else {
        out[i] = st;
      }
    });
    std::vector<size_t> again;
    std::vector<EntryState> again_states;
    absl::MutexLock lock(&mu_);
    for (size_t j = 0; j < in_log.size(); ++j) {
      if (!moved[j]) continue;
      const size_t i = in_log[j];
      const EntryState* s = index_.Find(skeys[i]);
      if (s == nullptr) continue;  // left meanwhile: a miss
      if (s->segment != log_states[j].segment || s->offset != log_states[j].offset) {
        again.push_back(i);
        again_states.push_back(*s);
      } else {
        corrupt[i] = "value log segment missing";
      }
    }
    in_log.swap(again);
    log_states.swap(again_states);
  }

  std::vector<StoreKey> victims;
  bool any_stale = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!corrupt[i].empty()) {
      DropCorrupt(skeys[i], corrupt[i]);
      out[i] = absl::NotFoundError("block failed verification");
    }
    any_stale = any_stale || stale[i];
  }
  if (any_stale) {
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (stale[i] && index_.Erase(skeys[i]).has_value()) victims.push_back(skeys[i]);
      }
      UpdateGaugesLocked();
    }
    DeleteFromDisk(victims);
  }
  size_t hits = 0, misses = 0;
  uint64_t read_bytes = 0;
  for (const auto& r : out) {
    if (r.ok()) {
      ++hits;
      read_bytes += r->size();
    }
    if (absl::IsNotFound(r.status())) ++misses;
  }
  m_.read_bytes->Increment(static_cast<double>(read_bytes));
  m_.hits->Increment(static_cast<double>(hits));
  m_.misses->Increment(static_cast<double>(misses));
  MaybePersistTouched();
  return out;
}

absl::StatusOr<size_t> GlobalStore::LongestPrefix(const ModelFingerprint& fingerprint,
                                                  std::span<const BlockKey> chain,
                                                  LookupMode mode) {
  size_t n = 0;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now_us = NowMicros();
    for (; n < chain.size(); ++n) {
      const EntryState* s = index_.Find(MakeStoreKey(fingerprint, chain[n]));
      if (s == nullptr || Expired(*s, now_us)) break;
    }
  }
  if (mode == LookupMode::kIndexOnly || n == 0) return n;
  std::vector<absl::StatusOr<std::string>> blocks = MultiGet(fingerprint, chain.first(n));
  size_t verified = 0;
  for (const auto& b : blocks) {
    if (absl::IsNotFound(b.status())) break;
    if (!b.ok()) return b.status();
    ++verified;
  }
  return verified;
}

}  // namespace flashserve::cache
