// The value log: segment deletion, garbage collection (per put and by Compact), reads across
// relocations and reopen, stores that mix both value placements, the located meta record, and
// concurrent (pipelined) appends on the log itself.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "cache_service/global_store/meta_record.h"
#include "cache_service/global_store/value_log.h"
#include "cache_service/global_store/store_test_util.h"

namespace flashserve::cache {
namespace {

using testing::KeyFor;
using testing::PayloadFor;

class ValueLogTest : public testing::StoreTest {
 protected:
  ValueLogTest() {
    options_.value_log_segment_bytes = 64 << 10;  // a few values per segment
    options_.value_log_gc_bytes_per_put = 0;      // tests drive GC explicitly unless they say so
  }
  size_t SegmentFiles() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(options_.path + "/vlog")) {
      n += e.path().extension() == ".vseg";
    }
    return n;
  }
  uint64_t SegmentBytes() const {
    uint64_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(options_.path + "/vlog")) {
      n += e.file_size();
    }
    return n;
  }
  std::string Value(uint64_t i) const { return PayloadFor(5, i, 9000 + i * 7); }
  void PutRange(uint64_t begin, uint64_t end) {
    for (uint64_t i = begin; i < end; ++i) ASSERT_TRUE(store_->Put(fp_, KeyFor(i), Value(i)).ok());
  }
};

TEST_F(ValueLogTest, SegmentsWithoutLiveValuesAreDeleted) {
  Open();
  PutRange(0, 40);
  const size_t before = SegmentFiles();
  EXPECT_GE(before, 5u);
  for (uint64_t i = 0; i < 40; ++i) ASSERT_TRUE(store_->Delete(fp_, KeyFor(i)).ok());
  EXPECT_LE(SegmentFiles(), 1u);  // only the active segment may remain
  Reopen();
  EXPECT_EQ(store_->Stats().entries, 0u);
  EXPECT_EQ(SegmentFiles(), 0u);  // sealed at open, empty: deleted
}

TEST_F(ValueLogTest, CompactRewritesSparseSegmentsAndKeepsEveryLiveValue) {
  Open();
  PutRange(0, 60);
  for (uint64_t i = 0; i < 60; ++i) {
    if (i % 4 != 0) {
      ASSERT_TRUE(store_->Delete(fp_, KeyFor(i)).ok());  // 25% stay live
    }
  }
  const uint64_t before = SegmentBytes();
  absl::StatusOr<CompactionReport> r = store_->Compact();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(SegmentBytes(), before / 2);
  Reopen();  // the relocations are durable (no read first: Close would persist touched entries)
  EXPECT_EQ(store_->Stats().entries, 15u);
  for (uint64_t i = 0; i < 60; i += 4) ExpectHit(fp_, KeyFor(i), Value(i));
  for (uint64_t i = 1; i < 60; i += 4) ExpectMiss(fp_, KeyFor(i));
  EXPECT_EQ(tier_.checksum_failures->Value(), 0);
}

TEST_F(ValueLogTest, PutsCollectGarbageInBoundedSteps) {
  options_.value_log_gc_bytes_per_put = 16 << 10;
  Open();
  PutRange(0, 60);
  for (uint64_t i = 0; i < 60; ++i) {
    if (i % 4 != 0) {
      ASSERT_TRUE(store_->Delete(fp_, KeyFor(i)).ok());
    }
  }
  const uint64_t before = SegmentBytes();
  PutRange(100, 140);  // each put reads at most 16 KiB of a sparse segment
  EXPECT_LT(SegmentBytes(), before + 40 * 9300);  // some sparse segments are gone
  for (uint64_t i = 0; i < 60; i += 4) ExpectHit(fp_, KeyFor(i), Value(i));
  for (uint64_t i = 100; i < 140; ++i) ExpectHit(fp_, KeyFor(i), Value(i));
  Reopen();
  EXPECT_EQ(store_->Stats().entries, 55u);
  for (uint64_t i = 0; i < 60; i += 4) ExpectHit(fp_, KeyFor(i), Value(i));
}

TEST_F(ValueLogTest, EvictionAndFlushEmptySegments) {
  options_.capacity_bytes = 20 * 9500;
  options_.value_log_gc_bytes_per_put = 64 << 10;  // random-sample eviction leaves sparse segments
  Open();
  PutRange(0, 100);  // capacity eviction drops the oldest
  EXPECT_LE(store_->Stats().bytes, options_.capacity_bytes);
  EXPECT_LE(SegmentBytes(), 3 * options_.capacity_bytes);
  absl::StatusOr<size_t> n = store_->Flush(fp_.digest);
  ASSERT_TRUE(n.ok());
  EXPECT_LE(SegmentFiles(), 1u);
}

TEST_F(ValueLogTest, StoresMixingBothPlacementsServeEveryEntry) {
  options_.value_log = false;
  Open();
  PutRange(0, 5);  // in the blocks family
  Reopen();
  options_.value_log = true;
  Reopen();
  PutRange(5, 10);  // in the value log
  Reopen();
  for (uint64_t i = 0; i < 10; ++i) ExpectHit(fp_, KeyFor(i), Value(i));
  absl::StatusOr<VerifyReport> r = store_->VerifyBlocks(EntryScan{}, false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checked, 10u);
  EXPECT_TRUE(r->corrupt.empty());
  absl::StatusOr<InspectedBlock> b = store_->InspectBlock(fp_.digest, KeyFor(7), true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->header_readable);
  EXPECT_EQ(b->checksum_ok, true);
}

TEST(MetaRecordTest, LocatedRecordRoundTripsAndRejectsDamage) {
  EntryState s{57080, 11, 22, true, 7, 4096 * 3 + 120};
  const std::string rec = EncodeMetaRecord(s);
  ASSERT_EQ(rec.size(), kMetaRecordLocatedBytes);
  absl::StatusOr<EntryState> d = DecodeMetaRecord(rec);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->segment, 7u);
  EXPECT_EQ(d->offset, 4096u * 3 + 120);
  EXPECT_TRUE(d->pinned);
  EXPECT_EQ(d->bytes, 57080u);
  for (size_t i = 0; i < rec.size(); ++i) {
    if (i >= 4 && i < 8) continue;  // the check word itself: damage there fails too, tested below
    std::string bad = rec;
    bad[i] = static_cast<char>(bad[i] ^ 1);
    EXPECT_FALSE(DecodeMetaRecord(bad).ok()) << "byte " << i;
  }
  std::string bad = rec;
  bad[5] = static_cast<char>(bad[5] ^ 1);
  EXPECT_FALSE(DecodeMetaRecord(bad).ok());
  EXPECT_EQ(EncodeMetaRecord(EntryState{1, 2, 3, false, 0, 0}).size(), kMetaRecordBytes);
  // An entry with its own TTL: version 2 even in the blocks family (segment 0); the TTL round
  // trips; an offset without a segment is damage.
  const std::string ttl_rec = EncodeMetaRecord(EntryState{1, 2, 3, false, 0, 0, 3600});
  ASSERT_EQ(ttl_rec.size(), kMetaRecordLocatedBytes);
  absl::StatusOr<EntryState> t = DecodeMetaRecord(ttl_rec);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ttl_s, 3600u);
  EXPECT_EQ(t->segment, 0u);
  EXPECT_EQ(DecodeMetaRecord(EncodeMetaRecord(EntryState{1, 2, 3, false, 7, 99, 60}))->ttl_s, 60u);
  EXPECT_FALSE(DecodeMetaRecord(EncodeMetaRecord(EntryState{1, 2, 3, false, 0, 99, 60})).ok());
}

}  // namespace
}  // namespace flashserve::cache

namespace flashserve::cache {
namespace {

// ValueLog on its own: concurrent appends (pipelined group commits across segment rollovers)
// each get a distinct, non-overlapping location whose bytes read back exactly, and the segments
// hold them after a reopen.
TEST(ValueLogConcurrencyTest, ConcurrentAppendsAcrossRolloversReadBackExactly) {
  testing::TempDir dir;
  ValueLogOptions o;
  o.dir = dir.Sub("vlog");
  o.segment_bytes = 256 << 10;  // many rollovers
  auto log = ValueLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  constexpr int kThreads = 8, kPerThread = 40;
  struct Put {
    ValueLocation loc;
    uint64_t size;
    char fill;
  };
  std::vector<std::vector<Put>> puts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t size = kValueLogAlign * static_cast<uint64_t>(1 + (t * 7 + i) % 9);
        AlignedBuffer b(size);
        const char fill = static_cast<char>('A' + (t * kPerThread + i) % 50);
        std::memset(b.data(), fill, size);
        std::memcpy(b.data(), &t, sizeof(t));
        std::memcpy(b.data() + sizeof(t), &i, sizeof(i));
        absl::StatusOr<ValueLocation> l = (*log)->Append(b);
        ASSERT_TRUE(l.ok()) << l.status();
        (*log)->Release(l->segment);
        puts[t].push_back(Put{*l, size, fill});
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const auto check = [&](const ValueLog& vl) {
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> ranges;  // (segment, offset) -> size
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_EQ(puts[t].size(), static_cast<size_t>(kPerThread));
      for (int i = 0; i < kPerThread; ++i) {
        const Put& p = puts[t][i];
        ASSERT_TRUE(ranges.emplace(std::make_pair(p.loc.segment, p.loc.offset), p.size).second);
        std::string got(p.size, '\0');
        ASSERT_TRUE(vl.Read(p.loc, p.size, got.data()).ok());
        int gt = -1, gi = -1;
        std::memcpy(&gt, got.data(), sizeof(gt));
        std::memcpy(&gi, got.data() + sizeof(gt), sizeof(gi));
        EXPECT_EQ(gt, t);
        EXPECT_EQ(gi, i);
        EXPECT_EQ(got.find_first_not_of(p.fill, sizeof(t) + sizeof(i)), std::string::npos);
      }
    }
    // No two appends overlap inside a segment, and none overlaps a segment header.
    std::pair<uint32_t, uint64_t> prev{0, 0};
    uint64_t prev_end = 0;
    for (const auto& [at, size] : ranges) {
      EXPECT_GE(at.second, kSegmentHeaderBytes);
      if (at.first == prev.first) {
        EXPECT_GE(at.second, prev_end);
      }
      prev = at;
      prev_end = at.second + size;
    }
    EXPECT_GT(vl.Segments().size(), 4u);
  };
  check(**log);
  log->reset();
  auto reopened = ValueLog::Open(o);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  check(**reopened);
}

// A crash while creating a segment leaves a file without a valid header: it is ignored, and its
// id is not handed out again (the next append would otherwise fail on the existing file).
TEST(ValueLogConcurrencyTest, ASegmentWithABadHeaderKeepsItsId) {
  testing::TempDir dir;
  ValueLogOptions o;
  o.dir = dir.Sub("vlog");
  {
    auto log = ValueLog::Open(o);
    ASSERT_TRUE(log.ok());
    AlignedBuffer b(kValueLogAlign);
    std::memset(b.data(), 'x', b.size());
    ASSERT_TRUE((*log)->Append(b).ok());  // segment 1
  }
  { std::ofstream(o.dir + "/00000002.vseg") << "torn"; }  // an interrupted creation
  auto log = ValueLog::Open(o);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ((*log)->Segments().size(), 1u);
  AlignedBuffer b(kValueLogAlign);
  std::memset(b.data(), 'y', b.size());
  absl::StatusOr<ValueLocation> l = (*log)->Append(b);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->segment, 3u);
}

}  // namespace
}  // namespace flashserve::cache
