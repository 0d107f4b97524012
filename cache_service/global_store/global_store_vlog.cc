// GlobalStore and its value log: coalesced reads, raw reads, garbage collection of sealed
// segments and their deletion (README.md, "Value log").
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>

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

// Adjacent values are read together up to this size: a put batch's values are contiguous on disk
// and usually read together again (one prompt prefix), so one pread serves the batch. A request
// is still split over the read threads (reads in flight, and decoding on several cores) down to
// runs of kMinRunBytes.
constexpr uint64_t kMaxRunBytes = uint64_t{8} << 20;
constexpr uint64_t kMinRunBytes = uint64_t{256} << 10;

// The layout-version field of the block-value header (block_value.cc).
constexpr size_t kOffLayoutVersion = 12;

}  // namespace

void GlobalStore::ReadFromLog(
    std::span<const EntryState> states,
    const std::function<void(size_t, const absl::Status&, std::string_view)>& fn) const {
  std::vector<size_t> order(states.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return states[a].segment != states[b].segment ? states[a].segment < states[b].segment
                                                  : states[a].offset < states[b].offset;
  });
  struct Run {
    size_t first, last;  // into `order`, inclusive..exclusive
    uint64_t begin, end;
  };
  uint64_t total = 0;
  for (const EntryState& s : states) total += s.bytes;
  const uint64_t threads = read_pool_ != nullptr ? read_pool_->size() + 1 : 1;
  const uint64_t max_run = std::clamp(total / threads + 1, kMinRunBytes, kMaxRunBytes);
  std::vector<Run> runs;
  for (size_t k = 0; k < order.size(); ++k) {
    const EntryState& s = states[order[k]];
    const uint64_t end = s.offset + s.bytes;
    if (!runs.empty()) {
      Run& r = runs.back();
      const EntryState& prev = states[order[k - 1]];
      // Same segment, starting within the alignment padding after the run, run not too large.
      if (prev.segment == s.segment && s.offset >= r.end && s.offset - r.end < kValueLogAlign &&
          end - r.begin <= max_run) {
        r.last = k + 1;
        r.end = end;
        continue;
      }
    }
    runs.push_back(Run{k, k + 1, s.offset, end});
  }
  const auto read_runs = [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const Run& run = runs[r];
      const uint32_t segment = states[order[run.first]].segment;
      std::unique_ptr<char[]> buf(new char[run.end - run.begin]);
      const absl::Status st =
          vlog_->Read(ValueLocation{segment, run.begin}, run.end - run.begin, buf.get());
      for (size_t k = run.first; k < run.last; ++k) {
        const EntryState& s = states[order[k]];
        fn(order[k], st,
           st.ok() ? std::string_view(buf.get() + (s.offset - run.begin), s.bytes)
                   : std::string_view());
      }
    }
  };
  if (read_pool_ != nullptr && runs.size() > 1) {
    read_pool_->ParallelFor(runs.size(), 1, read_runs);
  } else {
    read_runs(0, runs.size());
  }
}

absl::StatusOr<std::string> GlobalStore::ReadRawValue(const StoreKey& key,
                                                      const EntryState& state) const {
  if (state.segment != 0) {
    std::string out(state.bytes, '\0');
    RETURN_IF_ERROR(
        vlog_->Read(ValueLocation{state.segment, state.offset}, state.bytes, out.data()));
    return out;
  }
  rocksdb::ReadOptions ro;
  ro.verify_checksums = options_.rocksdb_verify_checksums;
  ro.fill_cache = false;
  rocksdb::PinnableSlice value;
  const rocksdb::Status st = db_->Get(ro, blocks_cf_, AsSlice(key), &value);
  if (st.IsCorruption()) return absl::DataLossError(st.ToString());
  RETURN_IF_ERROR(FromRocks(st, "reading a block"));
  return std::string(value.ToStringView());
}

bool GlobalStore::CollectGarbage(uint64_t budget, bool wait) {
  if (wait) {
    gc_mu_.Lock();
  } else if (!gc_mu_.TryLock()) {
    return true;  // another thread is collecting
  }
  const bool more = CollectGarbageLocked(budget);
  gc_mu_.Unlock();
  return more;
}

bool GlobalStore::CollectGarbageLocked(uint64_t budget) {
  if (gc_segment_ != 0 && vlog_->SegmentSize(gc_segment_) == 0) gc_segment_ = 0;
  if (gc_segment_ == 0) {
    double best = options_.value_log_gc_live_ratio;
    absl::MutexLock lock(&mu_);
    for (const auto& [id, size] : vlog_->Segments()) {
      if (!vlog_->Removable(id)) continue;  // the active segment, or one with appends in flight
      if (std::find(gc_stuck_.begin(), gc_stuck_.end(), id) != gc_stuck_.end()) continue;
      const SegmentUse u = index_.SegmentUseOf(id);
      if (u.entries == 0) continue;  // ReclaimSegments deletes it
      const double ratio =
          static_cast<double>(u.bytes) /
          static_cast<double>(std::max<uint64_t>(1, size - std::min(size, kSegmentHeaderBytes)));
      if (ratio < best) {
        best = ratio;
        gc_segment_ = id;
      }
    }
    if (gc_segment_ == 0) return false;
    gc_offset_ = kSegmentHeaderBytes;
  }
  const uint32_t seg = gc_segment_;
  ScanStep step;
  const absl::Status st = ScanSegmentStep(*vlog_, seg, gc_offset_, budget, &step);
  if (!st.ok()) {
    LOG(ERROR) << "global store: collecting segment " << seg << ": " << st;
    gc_stuck_.push_back(seg);
    gc_segment_ = 0;
    return true;
  }
  using Found = ScannedValue;
  const std::vector<Found>& found = step.found;
  const char* const buf = step.buf.get();
  const bool segment_end = step.segment_end;
  const uint64_t consumed = step.consumed;

  std::vector<Found> live;
  {
    absl::MutexLock lock(&mu_);
    for (const Found& f : found) {
      const EntryState* s = index_.Find(f.key);
      if (s != nullptr && s->segment == seg && s->offset == gc_offset_ + f.pos &&
          s->bytes == f.bytes) {
        live.push_back(f);
      }
    }
  }
  // Verify before copying: a damaged value is dropped here as a Get would drop it.
  uint64_t total = 0;
  std::vector<Found> keep;
  for (const Found& f : live) {
    const std::string_view v(buf + f.pos, f.bytes);
    ModelFingerprint fp;
    fp.digest = FingerprintOf(f.key);
    fp.layout_version = static_cast<uint32_t>(GetLittleEndian(v.data() + kOffLayoutVersion, 4));
    absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(v, BlockKeyOf(f.key), fp);
    if (!d.ok()) {
      DropCorrupt(f.key, ToStd(d.status().message()));
      continue;
    }
    keep.push_back(f);
    total += f.bytes;
  }
  if (!keep.empty()) {
    AlignedBuffer out(AlignUp(total));
    uint64_t at = 0;
    for (const Found& f : keep) {
      std::memcpy(out.data() + at, buf + f.pos, f.bytes);
      at += f.bytes;
    }
    std::memset(out.data() + at, 0, out.size() - at);
    // Shared until the relocations are written: a checkpoint must not pass the copies first.
    absl::ReaderMutexLock log_lock(&log_mu_);
    absl::StatusOr<ValueLocation> loc = vlog_->Append(out);
    if (!loc.ok()) {
      LOG(WARNING) << "global store: collecting segment " << seg << ": " << loc.status();
      return true;  // retried on a later step
    }
    appended_since_checkpoint_.fetch_add(out.size(), std::memory_order_relaxed);
    {
      // Under the index mutex so that an eviction cannot delete a record between the check and
      // this write (the late write would resurrect it). Unsynced: the old copy stays valid until
      // ReclaimSegments syncs the WAL and only then deletes its segment.
      absl::MutexLock lock(&mu_);
      rocksdb::WriteBatch batch;
      std::vector<std::pair<const Found*, uint64_t>> moved;
      at = 0;
      for (const Found& f : keep) {
        const EntryState* s = index_.Find(f.key);
        if (s != nullptr && s->segment == seg && s->offset == gc_offset_ + f.pos) {
          EntryState n = *s;
          n.segment = loc->segment;
          n.offset = loc->offset + at;
          batch.Put(meta_cf_, AsSlice(f.key), EncodeMetaRecord(n));
          moved.emplace_back(&f, n.offset);
        }
        at += f.bytes;
      }
      const rocksdb::Status w = db_->Write(rocksdb::WriteOptions(), &batch);
      if (w.ok()) {
        for (const auto& [f, offset] : moved) {
          index_.Relocate(f->key, seg, gc_offset_ + f->pos, loc->segment, offset);
        }
      } else {
        LOG(WARNING) << "global store: relocating values: " << w.ToString();
      }
    }
    vlog_->Release(loc->segment);
  }
  gc_offset_ += consumed;
  if (segment_end) {
    absl::MutexLock lock(&mu_);
    if (index_.SegmentUseOf(seg).entries > 0) {
      LOG(ERROR) << "global store: segment " << seg << " still has "
                 << index_.SegmentUseOf(seg).entries
                 << " live entries its scan did not find; left in place";
      gc_stuck_.push_back(seg);
    }
    gc_segment_ = 0;
  }
  return true;
}

void GlobalStore::ReclaimSegments() {
  std::vector<uint32_t> dead;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, size] : vlog_->Segments()) {
      // Removable: sealed (no new append can land there) and held by no append whose entries
      // are not yet in the index; with no live entry it can never gain one again.
      if (index_.SegmentUseOf(id).entries == 0 && vlog_->Removable(id)) dead.push_back(id);
    }
  }
  if (dead.empty()) return;
  // The deletes and relocations that emptied these segments were written to the WAL unsynced:
  // make them durable before the bytes they used to name disappear.
  const rocksdb::Status s = db_->FlushWAL(/*sync=*/true);
  if (!s.ok()) {
    LOG(WARNING) << "global store: syncing the WAL before deleting segments: " << s.ToString();
    return;
  }
  for (uint32_t id : dead) {
    absl::Status r = vlog_->Remove(id);
    if (!r.ok()) LOG(WARNING) << "global store: " << r;
  }
}

}  // namespace flashserve::cache
