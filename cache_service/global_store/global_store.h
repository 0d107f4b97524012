// GlobalStore: the global KV cache tier on local SSD, on RocksDB (DESIGN.md §3, "Blocks").
//
// Entries are 64-token blocks keyed by (model fingerprint, block key); the value is the encoded
// block (block_value.h) whose checksum, key echo and fingerprint are verified on every read: a
// failed check is a miss (counted, logged, the entry deleted), never bytes served.
//
// Durability (README.md, "Durability"): Put returns once its values are durable and only then
// makes them visible. With the value log (the default) that takes one fdatasync per batch, shared
// by concurrent batches (group commit): the values are synced in their segment, and the metadata
// records naming them are written to RocksDB unsynced. The value log is itself the redo log for
// that metadata: every `value_log_checkpoint_bytes` (and on Close, Delete and Flush) the store
// syncs RocksDB's WAL and records the value-log position up to which every value has durable
// metadata (the checkpoint); Open scans the segments from there, verifies every value found
// (checksum, key echo, fingerprint) and re-inserts the entries whose metadata a power loss took.
// Without the value log, `sync_writes` (the default) makes Put sync the RocksDB WAL holding the
// batch; with sync_writes = false a crash of the machine (not of the process) may then lose
// acknowledged puts.
//
// Eviction: an in-memory index (store_index.h) holds each entry's size, last access and pin; TTL
// counts from the last access; capacity eviction samples entries and evicts the least recently
// accessed (approximate LRU). Each Put does bounded work (a TTL sweep of `ttl_sweep_per_put`
// entries and at most `max_evictions_per_put` evictions). Pinned entries are never evicted.
// Last-access times live in memory and are persisted in unsynced batches at most once per
// `access_persist_interval` and on Close: after a crash, ages are as old as the last batch.
//
// Thread safety: every method is thread-safe except Close (call it with no other call in flight).
// Disk I/O runs outside the index mutex, except Pin/Unpin and the periodic access-time batch.
// MultiGet splits its RocksDB reads over `read_threads` threads (a pool owned by the store).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache_service/global_store/block_key.h"
#include "cache_service/global_store/block_value.h"
#include "cache_service/global_store/cache_metrics.h"
#include "cache_service/global_store/store_index.h"
#include "cache_service/global_store/value_log.h"
#include "common/base/clock.h"
#include "common/base/thread_pool.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace flashserve::cache {

struct GlobalStoreOptions {
  std::string path;                                 // RocksDB directory; created if missing
  uint64_t capacity_bytes = uint64_t{64} << 30;     // encoded value bytes held; > 0
  absl::Duration ttl = absl::Hours(72);             // since last access; > 0
  // The largest TTL a PutBatch may ask for (>= ttl, < 2^32 s); larger requests: InvalidArgument.
  absl::Duration max_ttl = absl::Hours(24 * 30);
  Clock* clock = nullptr;                           // TTL and LRU ages; null: Clock::Real()
  CacheMetrics* metrics = nullptr;                  // tier "ssd"; null: a private registry
  bool sync_writes = true;  // blocks-family puts, pins and deletes sync the WAL (see Durability)
  bool compression = false;                         // LZ4 on blocks (FP4 KV barely compresses)
  bool rocksdb_verify_checksums = true;             // RocksDB's block checksums too, not only ours
  bool flush_on_close = true;                       // Close writes memtables to SST files
  uint64_t max_payload_bytes = uint64_t{64} << 20;  // larger payloads: InvalidArgument
  int eviction_samples = 8;                         // entries examined per capacity eviction
  int max_evictions_per_put = 64;                   // bound on capacity evictions per Put call
  size_t ttl_sweep_per_put = 16;                    // entries checked for TTL expiry per Put call
  absl::Duration access_persist_interval = absl::Minutes(1);
  size_t access_persist_batch = 4096;               // records per periodic last-access batch
  uint64_t block_cache_bytes = uint64_t{64} << 20;  // RocksDB block cache
  // RocksDB reads of one MultiGet are split over this many threads (the caller's and
  // read_threads - 1 pool workers started at Open): a cold read waits on the disk, and one
  // thread keeps one read in flight (Debian's RocksDB has no io_uring MultiRead). >= 1.
  int read_threads = 2;

  // ---- value log (README.md, "Value log") ----
  // New values go to append-only segment files under <path>/vlog (one write + one fdatasync per
  // batch, then the unsynced metadata record naming segment and offset, see Durability); RocksDB
  // keeps only the metadata. false: values in the blocks column family. Entries of either kind stay readable
  // whatever this says.
  bool value_log = true;
  uint64_t value_log_segment_bytes = uint64_t{256} << 20;  // a segment is sealed at this size
  // A sealed segment whose live bytes fall below this fraction of its size is rewritten (its live
  // values copied to the active segment, their metadata updated, the segment deleted); one with
  // no live value is deleted. In (0, 1].
  double value_log_gc_live_ratio = 0.5;
  uint64_t value_log_gc_bytes_per_put = uint64_t{8} << 20;  // segment bytes GC reads per PutBatch
  bool value_log_direct_reads = false;  // O_DIRECT reads (README.md: measured, off by default)
  // A checkpoint is taken once this many value bytes were appended since the last one; Open
  // replays at most about this much (a read and a checksum pass). > 0.
  uint64_t value_log_checkpoint_bytes = uint64_t{256} << 20;
};

// LongestPrefix modes. kIndexOnly answers from the in-memory index (present, not expired): no
// disk read, and a block found corrupt later by Get is a miss then. kVerified also reads and
// verifies every reported block (the cost of reading them) and stops at the first failure.
enum class LookupMode { kIndexOnly, kVerified };

struct GlobalStoreStats {
  size_t entries = 0;
  uint64_t bytes = 0;  // encoded value bytes (header + payload + checksum)
  size_t pinned_entries = 0;
  uint64_t pinned_bytes = 0;
  uint64_t capacity_bytes = 0;
};

// One entry as the index sees it (no disk read), for Lookup's per-block metadata and admin tools.
struct StoreEntryInfo {
  Sha256Digest fingerprint{};  // the model fingerprint digest it is stored under
  BlockKey key;
  uint64_t bytes = 0;  // encoded value size (header + payload + checksum)
  int64_t created_unix_micros = 0;
  int64_t last_access_unix_micros = 0;
  int64_t expires_unix_micros = 0;  // last access + ttl; 0 when pinned
  bool pinned = false;
};

// Entries and bytes held for one model fingerprint.
struct FingerprintUsage {
  Sha256Digest fingerprint{};
  size_t entries = 0;
  uint64_t bytes = 0;
  size_t pinned_entries = 0;
  uint64_t pinned_bytes = 0;
};

// Which entries ListEntries / VerifyBlocks visit, in RocksDB key order (fingerprint digest, then
// block key). `start_after` is a cursor: the 64-byte store key (digest || block key) of the last
// entry already visited; empty starts from the beginning.
struct EntryScan {
  std::optional<Sha256Digest> fingerprint;  // only this model's entries
  std::optional<bool> pinned;               // only entries in this pin state (ListEntries only)
  std::string start_after;
  size_t limit = 100;           // entries returned (List) or checked (Verify) at most
  size_t scan_budget = 100000;  // keys examined at most per call (bounds the work of a filter)
};

// One page of a scan. `resume_after` is the cursor for the next call; empty when the scan reached
// the end of the selected range.
struct EntryPage {
  std::vector<StoreEntryInfo> entries;
  std::string resume_after;
};

struct VerifyReport {
  size_t checked = 0;
  std::vector<StoreEntryInfo> corrupt;  // entries whose value failed verification
  size_t dropped = 0;                   // of those, removed (drop_corrupt)
  std::string resume_after;             // as EntryPage
};

// The stored value of one block, read raw (not verified, nothing dropped or counted), with its
// header fields parsed at their fixed offsets (README.md, "Block value format").
struct InspectedBlock {
  StoreEntryInfo info;
  BlockValueHeader header;          // as written; meaningful only when header_readable
  bool header_readable = false;     // the value is at least header + checksum long
  std::string stored_checksum;      // the 16 checksum bytes at the end of the value
  std::optional<bool> checksum_ok;  // set when verification was asked: the full check passed
  std::string verify_error;         // why it failed, when it did
};

struct CompactionReport {
  uint64_t bytes_before = 0;  // SST bytes of the blocks and meta families before
  uint64_t bytes_after = 0;
  absl::Duration duration;
};

// One block to put: its key and the payload (KV rows), not owned.
struct BlockWrite {
  BlockKey key;
  std::string_view payload;
};

class GlobalStore {
 public:
  // Opens (creating if needed) the store at options.path and rebuilds the index from the meta
  // column family (cost per million entries, measured: ~1.5 s of CPU and ~300 MB resident).
  // Errors: InvalidArgument (options), FailedPrecondition (a store of another format version),
  // Internal/Unavailable (RocksDB open errors).
  static absl::StatusOr<std::unique_ptr<GlobalStore>> Open(GlobalStoreOptions options);
  ~GlobalStore();  // Close(), logging any error
  GlobalStore(const GlobalStore&) = delete;
  GlobalStore& operator=(const GlobalStore&) = delete;

  // Persists last-access times, flushes memtables to SST files (flush_on_close; reopening then
  // replays no WAL), syncs the WAL and closes the database. Idempotent. Not
  // thread-safe: no other call may be in flight or follow (they would use a closed database).
  absl::Status Close();

  // Stores one block; see PutBatch.
  absl::Status Put(const ModelFingerprint& fingerprint, const BlockKey& key,
                   std::string_view payload);
  // Stores blocks (values appended with one fdatasync, then one RocksDB WriteBatch of metadata),
  // evicting as needed, and returns once they are durable (see Durability) and visible. A batch
  // is all-or-nothing across process crashes; after a machine crash, a batch whose append was
  // torn may come back in part (each value verified on its own; blocks are independent entries). A key already present is not rewritten (keys are content addresses: same key, same
  // KV); its last access is refreshed.
  // Errors: InvalidArgument (payload over max_payload_bytes), ResourceExhausted (pinned bytes
  // leave no room), IO errors from RocksDB (nothing of the batch is visible then; entries chosen
  // for eviction may have left the index early and return on reopen).
  // `ttl`: how long the new blocks live after their last access; zero means options().ttl, and a
  // fraction of a second rounds up. A key already present keeps the longer of its TTL and this
  // one. InvalidArgument also when `ttl` is negative or above max_ttl.
  absl::Status PutBatch(const ModelFingerprint& fingerprint, std::span<const BlockWrite> blocks,
                        absl::Duration ttl = absl::ZeroDuration());

  // The payload of one block. NotFound on a miss: absent, expired, or failed verification.
  absl::StatusOr<std::string> Get(const ModelFingerprint& fingerprint, const BlockKey& key);
  // One result per key, in order, read with one batched RocksDB MultiGet. Per-key errors as Get.
  std::vector<absl::StatusOr<std::string>> MultiGet(const ModelFingerprint& fingerprint,
                                                    std::span<const BlockKey> keys);

  // The number of leading keys of `chain` that are present (and, in kVerified mode, read and
  // verified). Stops at the first miss. kVerified errors: IO errors from RocksDB.
  absl::StatusOr<size_t> LongestPrefix(const ModelFingerprint& fingerprint,
                                       std::span<const BlockKey> chain,
                                       LookupMode mode = LookupMode::kIndexOnly);

  // Pins / unpins a present block (idempotent; persisted, synced). A pinned block is never
  // evicted (TTL or capacity); Flush and Delete still remove it. NotFound if absent.
  absl::Status Pin(const ModelFingerprint& fingerprint, const BlockKey& key);
  absl::Status Unpin(const ModelFingerprint& fingerprint, const BlockKey& key);
  // Removes one block. NotFound if absent.
  absl::Status Delete(const ModelFingerprint& fingerprint, const BlockKey& key);
  // Drops every block of the fingerprint with this digest (pinned included); returns how many.
  // Cost: a scan of the index and one RocksDB DeleteRange per column family.
  absl::StatusOr<size_t> Flush(const Sha256Digest& fingerprint_digest);
  // Evicts expired blocks among up to `budget` examined (for a periodic timer); returns how many.
  absl::StatusOr<size_t> SweepExpired(size_t budget);
  // Writes every pending last-access time (unsynced). Close does this.
  absl::Status PersistAccessTimes();
  // Forces RocksDB memtables into SST files (tests and tools; not needed for durability).
  absl::Status FlushMemtables();
  // Syncs RocksDB's WAL and records the value-log position up to which every value has durable
  // metadata, so that Open replays only what follows (see Durability). Puts wait while the
  // position is read (until the puts in flight have written their metadata); the syncs run after.
  // Thread-safe. Errors: RocksDB write / sync errors (the previous checkpoint stays in force).
  absl::Status Checkpoint();
  // The position the last checkpoint recorded (Open writes one; {0, 0}: an empty log).
  ValueLocation CheckpointPosition() const;

  GlobalStoreStats Stats() const;

  // ---- inspection and maintenance (global_store_admin.cc) ----

  // Index state of each key of the chain, in order: nullopt for absent or expired entries. No disk
  // I/O and no metrics; with `touch`, present entries count as accessed now (refreshing their TTL
  // and LRU age, as a Get would). Cost: one index probe per key under the mutex.
  std::vector<std::optional<StoreEntryInfo>> Describe(const Sha256Digest& fingerprint_digest,
                                                      std::span<const BlockKey> keys,
                                                      bool touch = false);
  // Per-fingerprint usage (unexpired and expired-but-not-yet-swept entries alike), sorted by
  // digest. Cost: a walk of the whole index under the mutex, O(entries).
  std::vector<FingerprintUsage> UsageByFingerprint() const;
  // A page of live entries in key order, read from the meta column family from the cursor and
  // answered from the index (expired entries are skipped). Errors: InvalidArgument (a cursor that
  // is not 64 bytes), RocksDB iterator errors.
  absl::StatusOr<EntryPage> ListEntries(const EntryScan& scan) const;
  // Reads one block's raw value and parses its header; with `verify` also runs the full check
  // (DecodeBlockValue). Nothing is dropped or counted. NotFound if the index has no live entry.
  absl::StatusOr<InspectedBlock> InspectBlock(const Sha256Digest& fingerprint_digest,
                                              const BlockKey& key, bool verify);
  // Reads and verifies up to scan.limit live entries from the cursor (raw reads: no hits, misses
  // or touches). Each failure is logged and counted in fs_cache_checksum_failures_total; with
  // `drop_corrupt` it is also removed as a Get would remove it. scan.pinned is ignored.
  // Errors: InvalidArgument (cursor), RocksDB iterator errors on the meta family.
  absl::StatusOr<VerifyReport> VerifyBlocks(const EntryScan& scan, bool drop_corrupt);
  // RocksDB manual compaction of the blocks and meta families (bottommost level forced), so that
  // deleted and overwritten values leave the disk. Blocks the caller until done; reads and puts
  // continue meanwhile. Errors: those of CompactRange (a Corruption found while compacting puts
  // RocksDB in its read-only background-error state; README.md, "Failure modes").
  absl::StatusOr<CompactionReport> Compact();

 private:
  GlobalStore(GlobalStoreOptions options, rocksdb::DB* db,
              std::vector<rocksdb::ColumnFamilyHandle*> handles);
  absl::Status LoadIndex();
  int64_t NowMicros() const;
  StoreEntryInfo InfoOf(const StoreKey& key, const EntryState& state) const;
  // Up to `limit` keys of the meta family after the scan's cursor whose index entries are live
  // and pass the filter; `*resume_after` gets the cursor for the next call.
  absl::StatusOr<std::vector<StoreEntryInfo>> ScanLive(const EntryScan& scan,
                                                       std::string* resume_after) const;
  bool Expired(const EntryState& state, int64_t now_us) const;
  int64_t TtlMicros(const EntryState& state) const;  // the entry's TTL, else the default
  // Removes `key` from the index (so later lookups miss), counts it under `reason` and appends it
  // to *victims for DeleteFromDisk.
  void EvictLocked(const StoreKey& key, metrics::Counter* reason, std::vector<StoreKey>* victims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts expired entries (a bounded sweep), then least recently accessed ones until `incoming`
  // more bytes fit (at most max_evictions_per_put).
  void MakeRoomLocked(uint64_t incoming, int64_t now_us, std::vector<StoreKey>* victims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes keys from both column families in one unsynced batch. A failure is logged, not
  // returned: the entry is already out of the index and reappears only on reopen, where it is
  // still verified on read.
  void DeleteFromDisk(const std::vector<StoreKey>& keys);
  absl::Status PersistTouchedLocked(size_t max) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybePersistTouched();
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Handles a value that failed verification: counted, logged, removed.
  void DropCorrupt(const StoreKey& key, std::string_view why);

  // ---- value log (global_store_vlog.cc) ----
  // Reads the values of value-log entries (segment > 0), coalescing values that are adjacent on
  // disk into one read, spread over the read pool. fn(j, status, bytes) is called once per entry,
  // concurrently for distinct j; `bytes` is valid during the call. status: NotFound (the segment
  // was removed: the entry moved or left), DataLoss (short read), Unavailable (I/O).
  void ReadFromLog(
      std::span<const EntryState> states,
      const std::function<void(size_t, const absl::Status&, std::string_view)>& fn) const;
  // One raw value, from the value log or the blocks family. NotFound: gone; DataLoss: short
  // read or a RocksDB checksum failure; Unavailable: I/O.
  absl::StatusOr<std::string> ReadRawValue(const StoreKey& key, const EntryState& state) const;
  // One bounded garbage-collection step: reads up to `budget` bytes of the sealed segment being
  // collected (chosen by live ratio) and moves its live values to the active segment. Returns
  // false when no segment needed collecting. Without `wait`, returns true at once when another
  // thread is collecting.
  bool CollectGarbage(uint64_t budget, bool wait);
  bool CollectGarbageLocked(uint64_t budget) ABSL_EXCLUSIVE_LOCKS_REQUIRED(gc_mu_);
  // Deletes the sealed segments no index entry refers to, after a WAL sync (so that the deletes
  // and relocations that emptied them are durable first).
  void ReclaimSegments();

  // ---- checkpoint and replay (global_store_replay.cc) ----
  // Re-inserts the entries of values at or after `from` (a checkpoint) whose metadata is missing,
  // after verifying each value; returns how many. Called by LoadIndex before the capacity check.
  absl::StatusOr<size_t> ReplayValueLogLocked(ValueLocation from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoint() when enough bytes were appended since the last one (one caller at a time).
  void MaybeCheckpoint(uint64_t appended);

  const GlobalStoreOptions options_;
  Clock* const clock_;
  OwnedTierMetrics metrics_holder_;
  const TierMetrics& m_;
  rocksdb::DB* db_;                                    // owned; null after Close
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // default, blocks, meta (owned)
  rocksdb::ColumnFamilyHandle* blocks_cf_;
  rocksdb::ColumnFamilyHandle* meta_cf_;
  std::unique_ptr<ThreadPool> read_pool_;  // read_threads - 1 workers; null when 1
  std::unique_ptr<ValueLog> vlog_;         // always open: older entries may live there

  absl::Mutex gc_mu_ ABSL_ACQUIRED_BEFORE(log_mu_);         // one GC step at a time
  uint32_t gc_segment_ ABSL_GUARDED_BY(gc_mu_) = 0;         // the segment being collected; 0: none
  uint64_t gc_offset_ ABSL_GUARDED_BY(gc_mu_) = 0;          // next byte of it to scan
  std::vector<uint32_t> gc_stuck_ ABSL_GUARDED_BY(gc_mu_);  // scanned, live entries not found

  // Held shared from a value-log append until the metadata naming its values is written (puts,
  // GC), exclusively by Checkpoint while it reads the log's end.
  absl::Mutex log_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  ValueLocation replay_from_;  // the checkpoint read at Open (set before LoadIndex)
  std::atomic<uint64_t> appended_since_checkpoint_{0};
  std::atomic<bool> checkpointing_{false};
  mutable absl::Mutex checkpoint_mu_;
  ValueLocation checkpoint_ ABSL_GUARDED_BY(checkpoint_mu_);

  mutable absl::Mutex mu_;
  StoreIndex index_ ABSL_GUARDED_BY(mu_);
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // puts in flight
  int64_t last_persist_us_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flashserve::cache
