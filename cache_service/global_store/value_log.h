// The GlobalStore's value log (internal): append-only segment files under <store path>/vlog that
// hold the encoded block values, so that the values bypass RocksDB's WAL, memtables and
// compaction. RocksDB keeps only each entry's location (segment id, offset) in its metadata
// record. On-disk format: docs/kv_layout.md ("Global KV value log") and README.md ("Value log").
//
// Each Append is one write of a 4 KiB-aligned, 4 KiB-padded buffer at the end of the active
// segment followed by an fdatasync that started after the write completed. Writes and syncs are
// group-committed and pipelined: one thread at a time writes every append queued meanwhile (one
// pwritev), one thread at a time syncs every group written meanwhile (one fdatasync per segment
// involved), and the next group's write proceeds while the previous group's sync is in flight.
// The waiting callers themselves do this work. Appends return only once their bytes are durable. A segment is sealed when it reaches `segment_bytes` (a new one is
// created, its directory entry synced before any location in it is returned) and at open (the
// store never appends after a possibly torn tail).
//
// Segments are never rewritten; the store removes a sealed segment once no live entry refers to it
// (GlobalStore::ReclaimSegments). Reads are pread of exact byte ranges (O_DIRECT reads of the
// enclosing aligned range with `direct_reads`).
//
// Thread-safe. Lock order: GlobalStore::mu_ may be held while calling any method except Append.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::cache {

inline constexpr size_t kValueLogAlign = 4096;
inline constexpr size_t kSegmentHeaderBytes = kValueLogAlign;  // records start here
constexpr uint64_t AlignUp(uint64_t n) { return (n + kValueLogAlign - 1) & ~(kValueLogAlign - 1); }

// A 4 KiB-aligned heap buffer (O_DIRECT needs aligned memory). Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  ~AlignedBuffer();
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

struct ValueLogOptions {
  std::string dir;                               // created if missing
  uint64_t segment_bytes = uint64_t{256} << 20;  // a segment is sealed once this full
  bool direct_writes = true;  // O_DIRECT appends (falls back to buffered where unsupported)
  bool direct_reads = false;  // O_DIRECT reads (no page cache: warm reads cost a disk read)
  // New segments get ids >= this (and above every segment found at open): the store passes one
  // more than its checkpoint's segment so that an id never names two different segments across
  // the replay window (GlobalStore, "Durability").
  uint32_t min_segment_id = 1;
};

// Where a value lives: segment ids start at 1; 0 means "in the RocksDB blocks family".
struct ValueLocation {
  uint32_t segment = 0;
  uint64_t offset = 0;
};

class ValueLog {
 public:
  // Opens the directory: every `<id>.vseg` file with a valid header becomes a sealed segment.
  // Files with a bad header (a creation interrupted by a crash, or damage) are logged and left
  // alone, their ids never reused (entries pointing into them fail their location check at index
  // load). Errors: Unavailable (I/O).
  static absl::StatusOr<std::unique_ptr<ValueLog>> Open(ValueLogOptions options);
  ~ValueLog();
  ValueLog(const ValueLog&) = delete;
  ValueLog& operator=(const ValueLog&) = delete;

  // Appends `bytes` (data() aligned, size a multiple of kValueLogAlign) and returns where it
  // starts, after it is durable. Concurrent calls are group-committed. The returned segment is
  // held (not removable) until Release(segment) is called once per Append. Errors: Unavailable
  // (the active segment is then sealed; nothing written by the failed call is referenced).
  absl::StatusOr<ValueLocation> Append(const AlignedBuffer& bytes) {
    return Append(bytes.data(), bytes.size());
  }
  // The same for the first `len` bytes at `data` (aligned to kValueLogAlign, len a multiple of
  // it), e.g. the used part of a reused buffer.
  absl::StatusOr<ValueLocation> Append(const char* data, size_t len);
  void Release(uint32_t segment);

  // Reads exactly `len` bytes at `loc` into out. NotFound: no such segment (removed);
  // DataLoss: the segment ends before loc.offset + len; Unavailable: I/O error.
  absl::Status Read(ValueLocation loc, uint64_t len, char* out) const;

  // Where the next append would start: the active segment and its size ({0, 0} when no segment is
  // active, e.g. right after Open: the next append creates one). Appends still in flight are
  // counted (their bytes are reserved), so call it when none can be (GlobalStore checkpoints).
  ValueLocation End() const;
  // The size in bytes of a segment (0 if absent).
  uint64_t SegmentSize(uint32_t segment) const;
  // Every segment with its size, by id.
  std::vector<std::pair<uint32_t, uint64_t>> Segments() const;
  uint64_t TotalBytes() const;
  // True when the segment may be removed: sealed and not held by an Append in progress.
  bool Removable(uint32_t segment) const;
  // Forgets the segment (later reads get NotFound) and deletes its file. The caller guarantees
  // that no durable metadata refers to it any more.
  absl::Status Remove(uint32_t segment);

 private:
  struct Segment;
  struct PendingAppend;
  explicit ValueLog(ValueLogOptions options);
  absl::Status CreateSegmentLocked(uint32_t id);  // becomes the active segment
  std::shared_ptr<Segment> Find(uint32_t segment) const;
  // A group of appends written by one pwritev into one segment.
  struct WrittenGroup;
  // Writes every queued append (the caller becomes the writer): one pwritev; the group then waits
  // in written_ for a sync.
  void WriteQueued(std::unique_lock<std::mutex>& lock);
  // Syncs every written group (the caller becomes the syncer) and completes their appends.
  void SyncWritten(std::unique_lock<std::mutex>& lock);
  // Closes the write descriptor of a segment that is no longer active once no written group
  // waits for its sync.
  void MaybeCloseWriterLocked(Segment& seg);

  const ValueLogOptions options_;
  int dir_fd_ = -1;
  mutable std::mutex mu_;
  std::condition_variable committed_;
  std::map<uint32_t, std::shared_ptr<Segment>> segments_;  // guarded by mu_
  std::shared_ptr<Segment> active_;                        // guarded by mu_; null: none yet
  uint32_t next_id_ = 1;                                   // guarded by mu_
  std::vector<PendingAppend*> queue_;                      // guarded by mu_: not yet written
  std::vector<WrittenGroup> written_;                      // guarded by mu_: written, not synced
  bool writing_ = false;                                   // guarded by mu_: a writer is at work
  bool syncing_ = false;                                   // guarded by mu_: a syncer is at work
};

}  // namespace flashserve::cache
