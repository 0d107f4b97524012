// GlobalStore: opening, closing, the index rebuild and the administrative operations. The data
// path (put, get, lookup, eviction) is in global_store_io.cc.
#include "cache_service/global_store/global_store.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cache_service/global_store/meta_record.h"
#include "cache_service/global_store/rocks_util.h"
#include "cache_service/global_store/value_log.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace flashserve::cache {
namespace {

constexpr char kBlocksFamily[] = "blocks";
constexpr char kMetaFamily[] = "meta";
// A marker in the default column family: the store's own format version (key and value layouts).
// "1": values in the blocks family only; "2": values may also be in the value log (metadata
// records of version 2); "3": as 2, plus the value-log checkpoint record (kCheckpointKey) that
// makes puts durable with one sync (README.md, "Durability"). Every open writes "3". A binary
// that knows fewer versions refuses a newer store instead of misreading it.
constexpr char kFormatKey[] = "flashserve.cache.format";
constexpr char kFormatV1[] = "1";
constexpr char kFormatV2[] = "2";
constexpr char kFormatV3[] = "3";
// No replay: a store written before checkpoints existed synced every metadata record.
constexpr ValueLocation kNoReplay{std::numeric_limits<uint32_t>::max(), 0};

absl::Status Validate(const GlobalStoreOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError("global store: path is empty");
  if (o.capacity_bytes == 0) return absl::InvalidArgumentError("global store: capacity_bytes 0");
  if (o.ttl <= absl::ZeroDuration()) return absl::InvalidArgumentError("global store: ttl <= 0");
  if (o.max_ttl < o.ttl || o.max_ttl > absl::Seconds(std::numeric_limits<uint32_t>::max())) {
    return absl::InvalidArgumentError(
        "global store: max_ttl must be at least ttl and at most 2^32 - 1 seconds");
  }
  if (o.eviction_samples < 1 || o.max_evictions_per_put < 1 || o.access_persist_batch < 1) {
    return absl::InvalidArgumentError(
        "global store: eviction_samples, max_evictions_per_put and access_persist_batch >= 1");
  }
  if (o.read_threads < 1) return absl::InvalidArgumentError("global store: read_threads < 1");
  if (!(o.value_log_gc_live_ratio > 0 && o.value_log_gc_live_ratio <= 1)) {
    return absl::InvalidArgumentError("global store: value_log_gc_live_ratio not in (0, 1]");
  }
  if (o.value_log_segment_bytes < 2 * kValueLogAlign) {
    return absl::InvalidArgumentError("global store: value_log_segment_bytes < 8 KiB");
  }
  return absl::OkStatus();
}

std::vector<rocksdb::ColumnFamilyDescriptor> Families(const GlobalStoreOptions& o) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(o.block_cache_bytes);
  table.checksum = rocksdb::kXXH3;
  // Without a filter, a point read probes every L0 file and one file per level, and each probe of
  // a file that lacks the key reads a whole ~57 KB data block. 10 bits per key (~1% false
  // positives) costs ~1.2 MB of memory per million blocks.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions blocks;
  blocks.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  blocks.compression = o.compression ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  blocks.write_buffer_size = 64 << 20;
  blocks.level_compaction_dynamic_level_bytes = true;
  rocksdb::ColumnFamilyOptions meta;
  meta.table_factory = blocks.table_factory;
  meta.compression = rocksdb::kNoCompression;
  meta.write_buffer_size = 16 << 20;
  return {{rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
          {kBlocksFamily, blocks},
          {kMetaFamily, meta}};
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlobalStore>> GlobalStore::Open(GlobalStoreOptions options) {
  RETURN_IF_ERROR(Validate(options));
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = true;
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 4;
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(db_options, options.path, Families(options), &handles, &db),
                absl::StrCat("opening global store at ", options.path)));
  std::unique_ptr<GlobalStore> store(new GlobalStore(std::move(options), db, std::move(handles)));

  std::string format;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), store->handles_[0], kFormatKey, &format);
  if (s.ok() && format != kFormatV1 && format != kFormatV2 && format != kFormatV3) {
    return absl::FailedPreconditionError(absl::StrCat("global store at ", store->options_.path,
                                                      " has format ", format, ", expected ",
                                                      kFormatV1, ", ", kFormatV2, " or ",
                                                      kFormatV3));
  }
  if (!s.ok() && !s.IsNotFound()) {
    RETURN_IF_ERROR(FromRocks(s, "global store format marker"));
  }
  // Where to replay the value log from: the checkpoint of a "3" store (a missing or unreadable
  // one replays every segment); a new store or an older format has nothing to replay.
  store->replay_from_ = kNoReplay;
  if (s.ok() && format == kFormatV3) {
    std::string ck;
    const rocksdb::Status c =
        db->Get(rocksdb::ReadOptions(), store->handles_[0], kCheckpointKey, &ck);
    absl::StatusOr<ValueLocation> from =
        c.ok() ? DecodeCheckpoint(ck) : absl::DataLossError(c.ToString());
    if (from.ok()) {
      store->replay_from_ = *from;
    } else {
      LOG(ERROR) << "global store: value-log checkpoint unreadable (" << from.status()
                 << "); replaying every segment";
      store->replay_from_ = ValueLocation{};
    }
  }
  ValueLogOptions vo;
  vo.dir = store->options_.path + "/vlog";
  vo.segment_bytes = store->options_.value_log_segment_bytes;
  vo.direct_reads = store->options_.value_log_direct_reads;
  if (store->replay_from_.segment != kNoReplay.segment) {
    vo.min_segment_id = store->replay_from_.segment + 1;
  }
  ASSIGN_OR_RETURN(store->vlog_, ValueLog::Open(std::move(vo)));
  RETURN_IF_ERROR(store->LoadIndex());
  // Everything in the log now has metadata (replayed or found): the checkpoint moves to its end.
  // The WAL sync first makes the replayed records durable; the marker goes with the checkpoint.
  ValueLocation end{};
  for (const auto& [id, size] : store->vlog_->Segments()) end = ValueLocation{id, size};
  RETURN_IF_ERROR(FromRocks(db->FlushWAL(/*sync=*/true), "syncing the WAL at open"));
  rocksdb::WriteBatch marker;
  marker.Put(store->handles_[0], kFormatKey, kFormatV3);
  marker.Put(store->handles_[0], kCheckpointKey, EncodeCheckpoint(end));
  rocksdb::WriteOptions sync;
  sync.sync = true;
  RETURN_IF_ERROR(FromRocks(db->Write(sync, &marker), "global store format marker"));
  {
    absl::MutexLock lock(&store->checkpoint_mu_);
    store->checkpoint_ = end;
  }
  store->ReclaimSegments();  // segments emptied before the last close, or never referenced
  return store;
}

GlobalStore::GlobalStore(GlobalStoreOptions options, rocksdb::DB* db,
                         std::vector<rocksdb::ColumnFamilyHandle*> handles)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      metrics_holder_(options_.metrics, "ssd"),
      m_(metrics_holder_.get()),
      db_(db),
      handles_(std::move(handles)),
      blocks_cf_(handles_[1]),
      meta_cf_(handles_[2]) {
  if (options_.read_threads > 1) {
    read_pool_ = std::make_unique<ThreadPool>(static_cast<size_t>(options_.read_threads - 1));
  }
}

GlobalStore::~GlobalStore() {
  absl::Status s = Close();
  if (!s.ok()) LOG(ERROR) << "global store close: " << s;
}

absl::Status GlobalStore::Close() {
  if (db_ == nullptr) return absl::OkStatus();
  absl::Status status = PersistAccessTimes();
  // Flushing the memtables makes the next open fast (no WAL to replay). It is not needed for
  // durability: with sync_writes every put is in the synced WAL; without it, SyncWAL covers it.
  if (options_.flush_on_close) status.Update(FlushMemtables());
  status.Update(Checkpoint());  // the next open replays nothing
  status.Update(FromRocks(db_->SyncWAL(), "syncing the WAL on close"));
  for (rocksdb::ColumnFamilyHandle* h : handles_) {
    status.Update(FromRocks(db_->DestroyColumnFamilyHandle(h), "closing a column family"));
  }
  handles_.clear();
  status.Update(FromRocks(db_->Close(), "closing the global store"));
  delete db_;
  db_ = nullptr;
  read_pool_.reset();
  vlog_.reset();  // every append returned durable; nothing to flush
  return status;
}

absl::Status GlobalStore::LoadIndex() {
  const absl::Time start = absl::Now();
  std::vector<std::string> bad;
  absl::MutexLock lock(&mu_);
  uint64_t estimate = 0;
  if (db_->GetIntProperty(meta_cf_, "rocksdb.estimate-num-keys", &estimate)) {
    index_.Reserve(static_cast<size_t>(estimate));
  }
  rocksdb::ReadOptions scan;
  scan.fill_cache = false;  // a one-off sequential scan: keep the block cache for reads
  scan.readahead_size = 2 << 20;
  absl::flat_hash_map<uint32_t, uint64_t> segment_sizes;
  for (const auto& [id, size] : vlog_->Segments()) segment_sizes[id] = size;
  size_t dangling = 0;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, meta_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    absl::StatusOr<EntryState> state = DecodeMetaRecord(it->value().ToStringView());
    if (k.size() != sizeof(StoreKey::bytes) || !state.ok()) {
      bad.push_back(k.ToString());
      continue;
    }
    if (state->segment != 0) {
      // A location outside its segment: the segment is gone or shorter. Possible only for an
      // entry whose delete was in flight when the process died after its segment was deleted
      // (README.md, "Value log"), or after damage. Dropped like a bad record.
      auto seg = segment_sizes.find(state->segment);
      if (seg == segment_sizes.end() || state->offset < kSegmentHeaderBytes ||
          state->offset + state->bytes > seg->second) {
        ++dangling;
        bad.push_back(k.ToString());
        continue;
      }
    }
    StoreKey key;
    std::memcpy(key.bytes.data(), k.data(), k.size());
    index_.Upsert(key, *state);
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scanning the meta column family"));
  if (!bad.empty()) {
    // Unreadable metadata: drop the entries (their blocks are unreachable without it).
    LOG(ERROR) << "global store: dropping " << bad.size() << " entries with bad metadata ("
               << dangling << " naming bytes no segment holds)";
    rocksdb::WriteBatch batch;
    for (const std::string& k : bad) {
      batch.Delete(blocks_cf_, k);
      batch.Delete(meta_cf_, k);
    }
    RETURN_IF_ERROR(FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "dropping bad meta"));
  }
  if (replay_from_.segment != kNoReplay.segment) {
    ASSIGN_OR_RETURN(const size_t replayed, ReplayValueLogLocked(replay_from_));
    (void)replayed;
  }
  // The capacity may have been lowered since the last run: evict down to it now.
  std::vector<StoreKey> victims;
  const int64_t now_us = NowMicros();
  while (index_.bytes() > options_.capacity_bytes) {
    std::optional<StoreKey> k = index_.SampleLeastRecent(options_.eviction_samples);
    if (!k.has_value()) break;  // only pinned entries left
    EvictLocked(*k, Expired(*index_.Find(*k), now_us) ? m_.evicted_ttl : m_.evicted_capacity,
                &victims);
  }
  DeleteFromDisk(victims);
  last_persist_us_ = now_us;
  UpdateGaugesLocked();
  LOG(INFO) << "global store opened path=" << options_.path << " entries=" << index_.size()
            << " bytes=" << index_.bytes() << " pinned=" << index_.pinned_entries()
            << " evicted=" << victims.size() << " in " << absl::Now() - start;
  return absl::OkStatus();
}

absl::Status GlobalStore::Pin(const ModelFingerprint& fingerprint, const BlockKey& key) {
  const StoreKey k = MakeStoreKey(fingerprint, key);
  absl::MutexLock lock(&mu_);
  const EntryState* s = index_.Find(k);
  if (s == nullptr || Expired(*s, NowMicros())) return absl::NotFoundError("pin: block not cached");
  if (s->pinned) return absl::OkStatus();
  index_.SetPinned(k, true);
  rocksdb::WriteOptions w;
  w.sync = options_.sync_writes;
  // Written under the mutex so that a concurrent eviction cannot delete the record first and
  // leave this write as an orphan. Pins are rare operator actions.
  rocksdb::Status st = db_->Put(w, meta_cf_, AsSlice(k), EncodeMetaRecord(*index_.Find(k)));
  if (!st.ok()) index_.SetPinned(k, false);
  UpdateGaugesLocked();
  return FromRocks(st, "pin");
}

absl::Status GlobalStore::Unpin(const ModelFingerprint& fingerprint, const BlockKey& key) {
  const StoreKey k = MakeStoreKey(fingerprint, key);
  absl::MutexLock lock(&mu_);
  const EntryState* s = index_.Find(k);
  if (s == nullptr) return absl::NotFoundError("unpin: block not cached");
  if (!s->pinned) return absl::OkStatus();
  index_.SetPinned(k, false);
  rocksdb::WriteOptions w;
  w.sync = options_.sync_writes;
  rocksdb::Status st = db_->Put(w, meta_cf_, AsSlice(k), EncodeMetaRecord(*index_.Find(k)));
  if (!st.ok()) index_.SetPinned(k, true);
  UpdateGaugesLocked();
  return FromRocks(st, "unpin");
}

absl::Status GlobalStore::Delete(const ModelFingerprint& fingerprint, const BlockKey& key) {
  const StoreKey k = MakeStoreKey(fingerprint, key);
  {
    absl::MutexLock lock(&mu_);
    if (!index_.Erase(k).has_value()) return absl::NotFoundError("delete: block not cached");
    UpdateGaugesLocked();
  }
  rocksdb::WriteBatch batch;
  batch.Delete(blocks_cf_, AsSlice(k));
  batch.Delete(meta_cf_, AsSlice(k));
  rocksdb::WriteOptions w;
  w.sync = options_.sync_writes;
  RETURN_IF_ERROR(FromRocks(db_->Write(w, &batch), "delete"));
  ReclaimSegments();
  // Past the deleted value: a replay after a crash must not bring it back.
  return Checkpoint();
}

absl::StatusOr<size_t> GlobalStore::Flush(const Sha256Digest& fingerprint_digest) {
  std::vector<StoreKey> keys;
  {
    absl::MutexLock lock(&mu_);
    index_.KeysOfFingerprint(fingerprint_digest, &keys);
    for (const StoreKey& k : keys) index_.Erase(k);
    UpdateGaugesLocked();
  }
  m_.evicted_flush->Increment(static_cast<double>(keys.size()));
  // [digest, digest || 0xFF x 33): every 64-byte key with this 32-byte prefix sorts inside.
  const std::string begin(reinterpret_cast<const char*>(fingerprint_digest.data()), 32);
  const std::string end = begin + std::string(33, '\xff');
  rocksdb::WriteBatch batch;
  batch.DeleteRange(blocks_cf_, begin, end);
  batch.DeleteRange(meta_cf_, begin, end);
  rocksdb::WriteOptions w;
  w.sync = options_.sync_writes;
  RETURN_IF_ERROR(FromRocks(db_->Write(w, &batch), "flush fingerprint"));
  LOG(INFO) << "global store: flushed fingerprint " << DigestToHex(fingerprint_digest) << " ("
            << keys.size() << " blocks)";
  ReclaimSegments();
  RETURN_IF_ERROR(Checkpoint());  // a replay after a crash must not bring them back
  return keys.size();
}

absl::StatusOr<size_t> GlobalStore::SweepExpired(size_t budget) {
  std::vector<StoreKey> victims;
  {
    absl::MutexLock lock(&mu_);
    std::vector<StoreKey> expired;
    const int64_t now_us = NowMicros();
    index_.SweepExpired(now_us, absl::ToInt64Microseconds(options_.ttl), budget, &expired);
    for (const StoreKey& k : expired) EvictLocked(k, m_.evicted_ttl, &victims);
    UpdateGaugesLocked();
  }
  DeleteFromDisk(victims);
  if (!victims.empty()) ReclaimSegments();
  return victims.size();
}

absl::Status GlobalStore::PersistAccessTimes() {
  absl::MutexLock lock(&mu_);
  return PersistTouchedLocked(std::numeric_limits<size_t>::max());
}

absl::Status GlobalStore::FlushMemtables() {
  rocksdb::FlushOptions f;
  f.wait = true;
  // All three families: a WAL is deleted only once every family's data in it is flushed, so
  // leaving the default family's marker unflushed would keep (and replay) every old WAL.
  return FromRocks(db_->Flush(f, handles_), "flushing memtables");
}

GlobalStoreStats GlobalStore::Stats() const {
  absl::MutexLock lock(&mu_);
  return GlobalStoreStats{index_.size(), index_.bytes(), index_.pinned_entries(),
                          index_.pinned_bytes(), options_.capacity_bytes};
}

}  // namespace flashserve::cache
