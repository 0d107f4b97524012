// Durability with one sync per put: metadata written after the last checkpoint and lost (as a
// power loss would lose an unsynced WAL tail) is rebuilt at open from the value log; damaged
// values found there stay misses; deleted entries do not come back; checkpoints move forward.
//
// The loss is simulated exactly: the store is closed, the test opens its RocksDB directly,
// deletes the metadata records written after an earlier checkpoint and puts that checkpoint back,
// which is the state a machine crash leaves when the WAL tail after the checkpoint is gone.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache_service/global_store/meta_record.h"
#include "cache_service/global_store/store_test_util.h"
#include "rocksdb/db.h"

namespace flashserve::cache {
namespace {

using testing::KeyFor;
using testing::PayloadFor;

// The store's RocksDB opened directly (the store must be closed).
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    rocksdb::DBOptions o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"blocks", {}}, {"meta", {}}};
    rocksdb::Status s = rocksdb::DB::Open(o, path, cfs, &handles_, &db_);
    CHECK(s.ok()) << s.ToString();
  }
  ~RawDb() {
    for (auto* h : handles_) CHECK(db_->DestroyColumnFamilyHandle(h).ok());
    CHECK(db_->Close().ok());
    delete db_;
  }
  ValueLocation Checkpoint() {
    std::string v;
    CHECK(db_->Get({}, handles_[0], kCheckpointKey, &v).ok());
    absl::StatusOr<ValueLocation> l = DecodeCheckpoint(v);
    CHECK(l.ok()) << l.status();
    return *l;
  }
  void SetCheckpoint(ValueLocation l) {
    CHECK(db_->Put({}, handles_[0], kCheckpointKey, EncodeCheckpoint(l)).ok());
  }
  bool HasMeta(const StoreKey& k) {
    std::string v;
    return db_->Get({}, handles_[2], AsSliceForTest(k), &v).ok();
  }
  std::optional<EntryState> Meta(const StoreKey& k) {
    std::string v;
    if (!db_->Get({}, handles_[2], AsSliceForTest(k), &v).ok()) return std::nullopt;
    absl::StatusOr<EntryState> s = DecodeMetaRecord(v);
    CHECK(s.ok()) << s.status();
    return *s;
  }
  void DeleteMeta(const StoreKey& k) { CHECK(db_->Delete({}, handles_[2], AsSliceForTest(k)).ok()); }

 private:
  static rocksdb::Slice AsSliceForTest(const StoreKey& k) {
    return rocksdb::Slice(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
  }
  rocksdb::DB* db_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
};

bool After(ValueLocation a, ValueLocation b);

class ReplayTest : public testing::StoreTest {
 protected:
  std::string Value(uint64_t i) const { return PayloadFor(11, i, 20000 + i * 13); }
  void PutBatch(uint64_t begin, uint64_t end) {
    std::vector<std::string> payloads;
    std::vector<BlockWrite> writes;
    for (uint64_t i = begin; i < end; ++i) payloads.push_back(Value(i));
    for (uint64_t i = begin; i < end; ++i) writes.push_back({KeyFor(i), payloads[i - begin]});
    ASSERT_TRUE(store_->PutBatch(fp_, writes).ok());
  }
  StoreKey Key(uint64_t i) const { return MakeStoreKey(fp_, KeyFor(i)); }
  void Close() {
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
  }
  // Puts [0, 8), closes (checkpoint A), reopens, puts [8, 24) in two batches, closes, then loses
  // the metadata of [8, 24) and rewinds the checkpoint to A. Returns A.
  ValueLocation LoseTail() {
    Open();
    PutBatch(0, 8);
    Close();
    ValueLocation a = RawDb(options_.path).Checkpoint();
    EXPECT_NE(a.segment, 0u);
    Open();
    PutBatch(8, 16);
    PutBatch(16, 24);
    Close();
    RawDb raw(options_.path);
    const ValueLocation b = raw.Checkpoint();
    EXPECT_TRUE(After(b, a));
    for (uint64_t i = 8; i < 24; ++i) {
      EXPECT_TRUE(raw.HasMeta(Key(i)));
      raw.DeleteMeta(Key(i));
    }
    raw.SetCheckpoint(a);
    return a;
  }
};

TEST_F(ReplayTest, LostMetadataAfterTheCheckpointIsRebuiltFromTheValueLog) {
  LoseTail();
  Open();
  for (uint64_t i = 0; i < 24; ++i) ExpectHit(fp_, KeyFor(i), Value(i));
  EXPECT_EQ(store_->Stats().entries, 24u);
  // Restored entries carry their creation time as last access (conservative ages).
  const std::vector<std::optional<StoreEntryInfo>> d =
      store_->Describe(fp_.digest, std::vector<BlockKey>{KeyFor(9)});
  ASSERT_TRUE(d[0].has_value());
  EXPECT_EQ(d[0]->created_unix_micros, d[0]->last_access_unix_micros);
  Close();
  // The rebuilt metadata is durable and the checkpoint moved past it: nothing to replay again.
  RawDb raw(options_.path);
  for (uint64_t i = 0; i < 24; ++i) EXPECT_TRUE(raw.HasMeta(Key(i))) << i;
}

TEST_F(ReplayTest, ReplayedEntriesKeepTheirRequestedTtl) {
  Open();
  const std::string v = Value(50);
  const BlockWrite b{KeyFor(50), v};
  ASSERT_TRUE(store_->PutBatch(fp_, {&b, 1}, absl::Minutes(5)).ok());
  Close();
  {
    RawDb raw(options_.path);
    raw.DeleteMeta(Key(50));
    raw.SetCheckpoint(ValueLocation{});  // replay everything
  }
  Open();
  const auto d = store_->Describe(fp_.digest, std::vector<BlockKey>{KeyFor(50)});
  ASSERT_TRUE(d[0].has_value());
  EXPECT_EQ(d[0]->expires_unix_micros - d[0]->last_access_unix_micros,
            absl::ToInt64Microseconds(absl::Minutes(5)));
}

TEST_F(ReplayTest, WithoutReplayTheLostEntriesWouldBeMisses) {
  // The control: the same loss with the checkpoint left after the tail is not repaired (this is
  // what the checkpoint protects against; it proves the first test exercises the replay).
  Open();
  PutBatch(0, 8);
  PutBatch(8, 16);
  Close();
  {
    RawDb raw(options_.path);
    for (uint64_t i = 8; i < 16; ++i) raw.DeleteMeta(Key(i));
  }
  Open();
  for (uint64_t i = 0; i < 8; ++i) ExpectHit(fp_, KeyFor(i), Value(i));
  for (uint64_t i = 8; i < 16; ++i) ExpectMiss(fp_, KeyFor(i));
}

TEST_F(ReplayTest, DamagedValuesInTheTailStayMisses) {
  LoseTail();
  // Flip one payload byte of every value of key 12 in the segment files (find it by its key).
  const BlockKey k12 = KeyFor(12);
  size_t flipped = 0;
  for (const auto& e : std::filesystem::directory_iterator(options_.path + "/vlog")) {
    std::string bytes(e.file_size(), '\0');
    const int fd = open(e.path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    const std::string needle(reinterpret_cast<const char*>(k12.bytes.data()), 32);
    for (size_t at = bytes.find(needle); at != std::string::npos;
         at = bytes.find(needle, at + 1)) {
      const size_t payload_byte = at - 48 + kBlockHeaderBytes + 100;  // key echo at offset 48
      char c = static_cast<char>(bytes[payload_byte] ^ 0x40);
      ASSERT_EQ(pwrite(fd, &c, 1, static_cast<off_t>(payload_byte)), 1);
      ++flipped;
    }
    close(fd);
  }
  ASSERT_EQ(flipped, 1u);
  Open();
  ExpectMiss(fp_, k12);
  for (uint64_t i = 0; i < 24; ++i) {
    if (i != 12) ExpectHit(fp_, KeyFor(i), Value(i));
  }
  EXPECT_EQ(store_->Stats().entries, 23u);
}

bool After(ValueLocation a, ValueLocation b) {
  return a.segment > b.segment || (a.segment == b.segment && a.offset > b.offset);
}

TEST_F(ReplayTest, DeletesAndFlushesMoveTheCheckpointSoReplayCannotBringThemBack) {
  Open();
  const ValueLocation opened = store_->CheckpointPosition();
  PutBatch(0, 8);
  const ModelFingerprint other = testing::TestFingerprint("model-b");
  ASSERT_TRUE(store_->Put(other, KeyFor(100), Value(100)).ok());
  EXPECT_FALSE(After(store_->CheckpointPosition(), opened));  // far below the checkpoint bytes
  ASSERT_TRUE(store_->Delete(fp_, KeyFor(3)).ok());
  const ValueLocation after_delete = store_->CheckpointPosition();
  EXPECT_TRUE(After(after_delete, opened));
  ASSERT_TRUE(store_->Flush(other.digest).ok());
  Close();
  // A crash right after Flush: the checkpoint on disk is past both removed values, so a replay
  // (forced here by losing nothing and keeping that checkpoint) leaves them removed.
  Open();
  ExpectMiss(fp_, KeyFor(3));
  ExpectMiss(other, KeyFor(100));
  for (uint64_t i = 0; i < 8; ++i) {
    if (i != 3) ExpectHit(fp_, KeyFor(i), Value(i));
  }
  Close();
  // The control: rewound to before the puts, the replay does restore the removed values (their
  // bytes are intact), which is exactly what the checkpoint taken by Delete / Flush prevents.
  RawDb(options_.path).SetCheckpoint(opened);
  Open();
  ExpectHit(fp_, KeyFor(3), Value(3));
  ExpectHit(other, KeyFor(100), Value(100));
}

TEST_F(ReplayTest, CheckpointsFollowTheAppendedBytes) {
  options_.value_log_checkpoint_bytes = 256 << 10;  // every ~10 values of ~20 KB
  Open();
  const ValueLocation opened = store_->CheckpointPosition();
  std::vector<ValueLocation> seen = {opened};
  for (uint64_t i = 0; i < 40; ++i) {
    PutBatch(i, i + 1);
    const ValueLocation c = store_->CheckpointPosition();
    if (After(c, seen.back())) seen.push_back(c);
  }
  // ~820 KB appended with a checkpoint every 256 KiB: three automatic checkpoints, each further.
  EXPECT_EQ(seen.size(), 4u);
  Close();
  // Close checkpoints at the end of the log: the next open has nothing to replay.
  RawDb raw(options_.path);
  const ValueLocation closed = raw.Checkpoint();
  EXPECT_TRUE(After(closed, seen.back()));
}

TEST(CheckpointRecordTest, RoundTripsAndRejectsDamage) {
  const ValueLocation l{7, 123456789};
  absl::StatusOr<ValueLocation> d = DecodeCheckpoint(EncodeCheckpoint(l));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->segment, 7u);
  EXPECT_EQ(d->offset, 123456789u);
  std::string bad = EncodeCheckpoint(l);
  bad[5] = 1;
  EXPECT_EQ(DecodeCheckpoint(bad).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeCheckpoint("short").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace flashserve::cache
