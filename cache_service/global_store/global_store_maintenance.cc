// GlobalStore maintenance shared by the data path and the admin operations: expiry, eviction,
// deletes, access-time persistence, gauges and the handling of corrupt values.
#include "absl/strings/str_cat.h"
#include "cache_service/global_store/global_store.h"
#include "cache_service/global_store/meta_record.h"
#include "cache_service/global_store/rocks_util.h"
#include "common/base/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace flashserve::cache {

int64_t GlobalStore::NowMicros() const { return absl::ToUnixMicros(clock_->Now()); }

int64_t GlobalStore::TtlMicros(const EntryState& state) const {
  return state.ttl_s != 0 ? int64_t{state.ttl_s} * 1000000 : absl::ToInt64Microseconds(options_.ttl);
}

bool GlobalStore::Expired(const EntryState& state, int64_t now_us) const {
  return !state.pinned && now_us - state.last_access_unix_micros >= TtlMicros(state);
}

void GlobalStore::EvictLocked(const StoreKey& key, metrics::Counter* reason,
                              std::vector<StoreKey>* victims) {
  if (!index_.Erase(key).has_value()) return;
  reason->Increment();
  victims->push_back(key);
}

void GlobalStore::MakeRoomLocked(uint64_t incoming, int64_t now_us,
                                 std::vector<StoreKey>* victims) {
  std::vector<StoreKey> expired;
  index_.SweepExpired(now_us, absl::ToInt64Microseconds(options_.ttl), options_.ttl_sweep_per_put,
                      &expired);
  for (const StoreKey& k : expired) EvictLocked(k, m_.evicted_ttl, victims);
  for (int round = 0; round < options_.max_evictions_per_put &&
                      index_.bytes() + reserved_bytes_ + incoming > options_.capacity_bytes;
       ++round) {
    std::optional<StoreKey> k = index_.SampleLeastRecent(options_.eviction_samples);
    if (!k.has_value()) break;  // every sampled entry was pinned
    EvictLocked(*k, Expired(*index_.Find(*k), now_us) ? m_.evicted_ttl : m_.evicted_capacity,
                victims);
  }
}

void GlobalStore::DeleteFromDisk(const std::vector<StoreKey>& keys) {
  if (keys.empty()) return;
  rocksdb::WriteBatch batch;
  for (const StoreKey& k : keys) {
    batch.Delete(blocks_cf_, AsSlice(k));
    batch.Delete(meta_cf_, AsSlice(k));
  }
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) {
    LOG(WARNING) << "global store: deleting " << keys.size() << " entries: " << s.ToString();
  }
}

absl::Status GlobalStore::PersistTouchedLocked(size_t max) {
  std::vector<std::pair<StoreKey, EntryState>> touched;
  index_.TakeTouched(max, &touched);
  last_persist_us_ = NowMicros();
  if (touched.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const auto& [k, state] : touched) batch.Put(meta_cf_, AsSlice(k), EncodeMetaRecord(state));
  // Unsynced: losing the latest access times to a machine crash only makes ages approximate.
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "persisting access times");
}

void GlobalStore::MaybePersistTouched() {
  absl::MutexLock lock(&mu_);
  if (NowMicros() - last_persist_us_ <
      absl::ToInt64Microseconds(options_.access_persist_interval)) {
    return;
  }
  absl::Status s = PersistTouchedLocked(options_.access_persist_batch);
  if (!s.ok()) LOG(WARNING) << "global store: " << s;
}

void GlobalStore::UpdateGaugesLocked() {
  m_.entries->Set(static_cast<double>(index_.size()));
  m_.bytes->Set(static_cast<double>(index_.bytes()));
  m_.pinned_bytes->Set(static_cast<double>(index_.pinned_bytes()));
}

void GlobalStore::DropCorrupt(const StoreKey& key, std::string_view why) {
  LOG(ERROR) << "global store: block failed verification, dropped (served as a miss) fingerprint="
             << DigestToHex(FingerprintOf(key)) << " key=" << BlockKeyOf(key).ToHex() << ": "
             << why;
  m_.checksum_failures->Increment();
  std::vector<StoreKey> victims;
  {
    absl::MutexLock lock(&mu_);
    EvictLocked(key, m_.evicted_corrupt, &victims);
    UpdateGaugesLocked();
  }
  DeleteFromDisk(victims);
}

}  // namespace flashserve::cache
