// GlobalStore inspection and maintenance for the cache server's admin API and Lookup metadata:
// describe, per-fingerprint usage, paged listing, raw inspection, verification and compaction.
#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_service/global_store/global_store.h"
#include "cache_service/global_store/rocks_util.h"
#include "cache_service/global_store/value_log.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace flashserve::cache {
namespace {

constexpr size_t kScanBatch = 256;  // keys read from the iterator per index lock

uint64_t LoadU64(std::string_view b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}
uint32_t LoadU32(std::string_view b, size_t at) { return static_cast<uint32_t>(LoadU64(b, at)); }
uint16_t LoadU16(std::string_view b, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[at]) | static_cast<uint8_t>(b[at + 1]) << 8);
}

// Header fields at their fixed offsets (README.md, "Block value format"), without verification.
bool ParseHeaderUnverified(std::string_view v, BlockValueHeader* h) {
  if (v.size() < kBlockHeaderBytes + kBlockChecksumBytes) return false;
  if (v.substr(0, kBlockValueMagic.size()) != kBlockValueMagic) return false;
  h->format_version = LoadU16(v, 8);
  h->fingerprint.layout_version = LoadU32(v, 12);
  std::memcpy(h->fingerprint.digest.data(), v.data() + 16, 32);
  std::memcpy(h->key.bytes.data(), v.data() + 48, 32);
  h->token_count = LoadU32(v, 80);
  h->payload_length = LoadU64(v, 88);
  h->created_unix_micros = static_cast<int64_t>(LoadU64(v, 96));
  return true;
}

// The layout version written in a value's header (0 if too short): verification checks a value
// against its own layout version, since the admin reader has no model configuration of its own.
uint32_t LayoutVersionOf(std::string_view v) { return v.size() >= 16 ? LoadU32(v, 12) : 0; }

uint64_t SstBytes(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf) {
  uint64_t v = 0;
  db->GetIntProperty(cf, "rocksdb.total-sst-files-size", &v);
  return v;
}

}  // namespace

StoreEntryInfo GlobalStore::InfoOf(const StoreKey& key, const EntryState& state) const {
  StoreEntryInfo info;
  info.fingerprint = FingerprintOf(key);
  info.key = BlockKeyOf(key);
  info.bytes = state.bytes;
  info.created_unix_micros = state.created_unix_micros;
  info.last_access_unix_micros = state.last_access_unix_micros;
  info.pinned = state.pinned;
  info.expires_unix_micros =
      state.pinned ? 0 : state.last_access_unix_micros + TtlMicros(state);
  return info;
}

std::vector<std::optional<StoreEntryInfo>> GlobalStore::Describe(
    const Sha256Digest& fingerprint_digest, std::span<const BlockKey> keys, bool touch) {
  std::vector<std::optional<StoreEntryInfo>> out(keys.size());
  ModelFingerprint fp;
  fp.digest = fingerprint_digest;  // StoreKeys use the digest only
  {
    absl::MutexLock lock(&mu_);
    const int64_t now_us = NowMicros();
    for (size_t i = 0; i < keys.size(); ++i) {
      const StoreKey k = MakeStoreKey(fp, keys[i]);
      const EntryState* s = index_.Find(k);
      if (s == nullptr || Expired(*s, now_us)) continue;
      if (touch) {
        index_.Touch(k, now_us);
        s = index_.Find(k);
      }
      out[i] = InfoOf(k, *s);
    }
  }
  if (touch) MaybePersistTouched();
  return out;
}

std::vector<FingerprintUsage> GlobalStore::UsageByFingerprint() const {
  std::map<Sha256Digest, FingerprintUsage> usage;
  {
    absl::MutexLock lock(&mu_);
    index_.ForEach([&usage](const StoreKey& key, const EntryState& state) {
      FingerprintUsage& u = usage[FingerprintOf(key)];
      ++u.entries;
      u.bytes += state.bytes;
      if (state.pinned) {
        ++u.pinned_entries;
        u.pinned_bytes += state.bytes;
      }
    });
  }
  std::vector<FingerprintUsage> out;
  out.reserve(usage.size());
  for (auto& [digest, u] : usage) {
    u.fingerprint = digest;
    out.push_back(u);
  }
  return out;
}

absl::StatusOr<std::vector<StoreEntryInfo>> GlobalStore::ScanLive(const EntryScan& scan,
                                                                  std::string* resume_after) const {
  resume_after->clear();
  if (!scan.start_after.empty() && scan.start_after.size() != sizeof(StoreKey::bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("scan cursor must be ", sizeof(StoreKey::bytes),
                                                   " bytes, got ", scan.start_after.size()));
  }
  std::string lower;
  std::string upper;  // exclusive; empty = no bound
  if (scan.fingerprint.has_value()) {
    lower.assign(reinterpret_cast<const char*>(scan.fingerprint->data()), 32);
    upper = lower + std::string(33, '\xff');
  }
  const std::string start = std::max(lower, scan.start_after);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;  // an admin scan: keep the block cache for the data path
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, meta_cf_));
  it->Seek(start);
  if (it->Valid() && !scan.start_after.empty() && it->key() == rocksdb::Slice(scan.start_after)) {
    it->Next();
  }

  std::vector<StoreEntryInfo> out;
  size_t examined = 0;
  bool more = false;  // keys may follow the cursor
  std::vector<StoreKey> batch;
  while (it->Valid()) {
    if (out.size() >= scan.limit || examined >= scan.scan_budget) {
      more = true;
      break;
    }
    batch.clear();
    for (; it->Valid() && batch.size() < kScanBatch && examined + batch.size() < scan.scan_budget;
         it->Next()) {
      if (it->key().size() != sizeof(StoreKey::bytes)) continue;  // never written by us
      StoreKey k;
      std::memcpy(k.bytes.data(), it->key().data(), k.bytes.size());
      batch.push_back(k);
    }
    absl::MutexLock lock(&mu_);
    const int64_t now_us = NowMicros();
    for (size_t i = 0; i < batch.size(); ++i) {
      const StoreKey& k = batch[i];
      ++examined;
      resume_after->assign(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
      const EntryState* s = index_.Find(k);
      if (s == nullptr || Expired(*s, now_us)) continue;
      if (scan.pinned.has_value() && s->pinned != *scan.pinned) continue;
      out.push_back(InfoOf(k, *s));
      if (out.size() >= scan.limit) {
        more = more || i + 1 < batch.size();
        break;
      }
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scanning the meta column family"));
  if (!more) resume_after->clear();
  return out;
}

absl::StatusOr<EntryPage> GlobalStore::ListEntries(const EntryScan& scan) const {
  EntryPage page;
  ASSIGN_OR_RETURN(page.entries, ScanLive(scan, &page.resume_after));
  return page;
}

absl::StatusOr<InspectedBlock> GlobalStore::InspectBlock(const Sha256Digest& fingerprint_digest,
                                                         const BlockKey& key, bool verify) {
  ModelFingerprint fp;
  fp.digest = fingerprint_digest;
  const StoreKey k = MakeStoreKey(fp, key);
  InspectedBlock out;
  EntryState state;
  {
    absl::MutexLock lock(&mu_);
    const EntryState* s = index_.Find(k);
    if (s == nullptr || Expired(*s, NowMicros())) {
      return absl::NotFoundError("inspect: block not cached");
    }
    out.info = InfoOf(k, *s);
    state = *s;
  }
  absl::StatusOr<std::string> value = ReadRawValue(k, state);
  if (absl::IsDataLoss(value.status())) {  // RocksDB's block checksum or a short read: no bytes
    out.checksum_ok = false;
    out.verify_error = std::string(ToStd(value.status().message()));
    return out;
  }
  RETURN_IF_ERROR(value.status()) << "inspect: reading the block";
  const std::string_view bytes = *value;
  out.header_readable = ParseHeaderUnverified(bytes, &out.header);
  if (bytes.size() >= kBlockChecksumBytes) {
    out.stored_checksum = std::string(bytes.substr(bytes.size() - kBlockChecksumBytes));
  }
  if (verify) {
    fp.layout_version = LayoutVersionOf(bytes);
    absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(bytes, key, fp);
    out.checksum_ok = d.ok();
    if (!d.ok()) out.verify_error = std::string(ToStd(d.status().message()));
  }
  return out;
}

absl::StatusOr<VerifyReport> GlobalStore::VerifyBlocks(const EntryScan& scan, bool drop_corrupt) {
  VerifyReport report;
  EntryScan live = scan;
  live.pinned.reset();
  ASSIGN_OR_RETURN(std::vector<StoreEntryInfo> entries, ScanLive(live, &report.resume_after));
  const size_t n = entries.size();
  std::vector<StoreKey> skeys(n);
  std::vector<std::optional<EntryState>> states(n);
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < n; ++i) {
      ModelFingerprint fp;
      fp.digest = entries[i].fingerprint;
      skeys[i] = MakeStoreKey(fp, entries[i].key);
      if (const EntryState* s = index_.Find(skeys[i]); s != nullptr) states[i] = *s;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!states[i].has_value()) continue;  // deleted since the scan: a race, not damage
    absl::StatusOr<std::string> value = ReadRawValue(skeys[i], *states[i]);
    std::string why;
    if (value.ok()) {
      ModelFingerprint fp{entries[i].fingerprint, LayoutVersionOf(*value)};
      absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(*value, entries[i].key, fp);
      if (!d.ok()) why = std::string(ToStd(d.status().message()));
    } else if (absl::IsDataLoss(value.status())) {
      why = std::string(ToStd(value.status().message()));
    } else {
      // NotFound: deleted or moved since the scan (a race, not damage); other errors: not checked.
      if (!absl::IsNotFound(value.status())) {
        LOG(WARNING) << "global store verify: reading " << entries[i].key.ToHex() << ": "
                     << value.status();
      }
      continue;
    }
    ++report.checked;
    if (why.empty()) continue;
    report.corrupt.push_back(entries[i]);
    if (drop_corrupt) {
      DropCorrupt(skeys[i], why);  // logs and counts the failure
      ++report.dropped;
    } else {
      LOG(ERROR) << "global store verify: block failed verification (kept) fingerprint="
                 << DigestToHex(entries[i].fingerprint) << " key=" << entries[i].key.ToHex() << ": "
                 << why;
      m_.checksum_failures->Increment();
    }
  }
  return report;
}

absl::StatusOr<CompactionReport> GlobalStore::Compact() {
  CompactionReport report;
  const absl::Time start = absl::Now();
  report.bytes_before = SstBytes(db_, blocks_cf_) + SstBytes(db_, meta_cf_) + vlog_->TotalBytes();
  // Value-log segments under the live ratio, all of them (the per-put steps are bounded).
  while (CollectGarbage(uint64_t{64} << 20, /*wait=*/true)) {
  }
  ReclaimSegments();
  rocksdb::CompactRangeOptions cro;
  cro.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (rocksdb::ColumnFamilyHandle* cf : {blocks_cf_, meta_cf_}) {
    RETURN_IF_ERROR(FromRocks(db_->CompactRange(cro, cf, nullptr, nullptr), "compaction"));
  }
  report.bytes_after = SstBytes(db_, blocks_cf_) + SstBytes(db_, meta_cf_) + vlog_->TotalBytes();
  report.duration = absl::Now() - start;
  LOG(INFO) << "global store compacted: " << report.bytes_before << " -> " << report.bytes_after
            << " bytes (SST + value log) in " << report.duration;
  return report;
}

}  // namespace flashserve::cache
