// Bytes corrupted on disk are detected and served as a miss: a value is written, the store is
// closed, one byte of the value is flipped in RocksDB's own files (found by a raw byte search for
// a distinctive pattern), and the store is reopened.
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cache_service/global_store/store_test_util.h"

namespace flashserve::cache {
namespace {

using testing::KeyFor;
using testing::PayloadFor;

constexpr std::string_view kMarker = "<<FLASHSERVE-CORRUPTION-TARGET-7f3a>>";

struct FileHit {
  std::string file;
  size_t offset;
};

// Every occurrence of `needle` in the files of `dir` whose names end in `suffix`.
std::vector<FileHit> FindInFiles(const std::string& dir, std::string_view needle,
                                 std::string_view suffix) {
  std::vector<FileHit> hits;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().string();
    if (!name.ends_with(suffix)) continue;
    std::ifstream in(name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t at = bytes.find(needle); at != std::string::npos; at = bytes.find(needle, at + 1)) {
      hits.push_back({name, at});
    }
  }
  return hits;
}

void FlipByte(const std::string& file, size_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << file;
}

// A payload with the marker in its middle.
std::string TargetPayload(size_t size) {
  std::string p = PayloadFor(77, 0, size);
  p.replace(size / 2, kMarker.size(), kMarker);
  return p;
}

class GlobalStoreCorruptionTest : public testing::StoreTest {
 protected:
  // Writes 5 ordinary blocks and the target (key 100), flushes them into an SST file if asked,
  // closes the store and flips one byte of the target's payload in files ending in `suffix`.
  void WriteCorruptAndReopen(bool flush_to_sst, std::string_view suffix, size_t payload_bytes,
                             const std::string& subdir = "") {
    Open();
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(store_->Put(fp_, KeyFor(i), Other(i)).ok());
    ASSERT_TRUE(store_->Put(fp_, KeyFor(100), TargetPayload(payload_bytes)).ok());
    if (flush_to_sst) {
      ASSERT_TRUE(store_->FlushMemtables().ok());
    }
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
    const std::vector<FileHit> hits = FindInFiles(options_.path + subdir, kMarker, suffix);
    ASSERT_FALSE(hits.empty()) << "the payload pattern is in no " << suffix << " file";
    for (const FileHit& h : hits) FlipByte(h.file, h.offset + kMarker.size() / 2);
    Open();
  }
  // Full-size blocks by default: each value then fills its own RocksDB data block, so a damaged
  // data block holds only the target (smaller values would share it, and all would be misses).
  std::string Other(uint64_t i) const { return PayloadFor(78, i, other_bytes_); }
  size_t other_bytes_ = 56960;

  // No read serves wrong bytes: each is a miss or exactly what was put.
  void ExpectNoWrongBytes() {
    for (uint64_t i = 0; i < 5; ++i) ExpectHit(fp_, KeyFor(i), Other(i));
    absl::StatusOr<std::string> t = store_->Get(fp_, KeyFor(100));
    EXPECT_TRUE(absl::IsNotFound(t.status())) << "corrupted bytes were served";
  }
};

// Our own checksum alone (RocksDB's block checksums off) catches the flipped byte.
TEST_F(GlobalStoreCorruptionTest, FlippedByteInSstIsCaughtByTheValueChecksum) {
  options_.value_log = false;  // values in the blocks family
  options_.rocksdb_verify_checksums = false;
  ASSERT_NO_FATAL_FAILURE(WriteCorruptAndReopen(/*flush_to_sst=*/true, ".sst", 56960));
  EXPECT_EQ(store_->Stats().entries, 6u);  // the index does not know yet
  ExpectMiss(fp_, KeyFor(100));
  EXPECT_EQ(tier_.checksum_failures->Value(), 1);
  EXPECT_EQ(tier_.evicted_corrupt->Value(), 1);
  EXPECT_EQ(*store_->LongestPrefix(fp_, std::vector<BlockKey>{KeyFor(100)}), 0u);
  ExpectMiss(fp_, KeyFor(100));  // now a plain miss: the entry was dropped
  EXPECT_EQ(tier_.checksum_failures->Value(), 1);
  ExpectNoWrongBytes();
  Reopen();
  EXPECT_EQ(store_->Stats().entries, 5u);
}

// With RocksDB's block checksums on (the default) the same corruption is caught one layer down,
// and handled the same way.
TEST_F(GlobalStoreCorruptionTest, FlippedByteInSstIsCaughtByRocksDbChecksums) {
  options_.value_log = false;
  ASSERT_NO_FATAL_FAILURE(WriteCorruptAndReopen(/*flush_to_sst=*/true, ".sst", 56960));
  absl::StatusOr<size_t> n =
      store_->LongestPrefix(fp_, std::vector<BlockKey>{KeyFor(100)}, LookupMode::kVerified);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(tier_.checksum_failures->Value(), 1);
  ExpectNoWrongBytes();
}

// A flipped byte in the WAL: RocksDB's record checksum stops recovery before the damaged write,
// so the block (written last) is simply absent; earlier writes survive.
TEST_F(GlobalStoreCorruptionTest, FlippedByteInWalLosesOnlyTheDamagedWrite) {
  options_.value_log = false;
  other_bytes_ = 3000;              // the WAL's 32 KB fragments must not split the pattern
  options_.flush_on_close = false;  // leave the writes in the WAL, as a crash would
  ASSERT_NO_FATAL_FAILURE(WriteCorruptAndReopen(/*flush_to_sst=*/false, ".log", 2000));
  ExpectNoWrongBytes();
  EXPECT_EQ(store_->Stats().entries, 5u);
}

// A flipped byte in a value-log segment: our checksum (the only one on those bytes) catches it on
// the first read; the entry is dropped, counted, and its neighbours in the same write are intact.
TEST_F(GlobalStoreCorruptionTest, FlippedByteInValueLogIsCaughtByTheValueChecksum) {
  ASSERT_NO_FATAL_FAILURE(WriteCorruptAndReopen(/*flush_to_sst=*/true, ".vseg", 56960, "/vlog"));
  EXPECT_EQ(store_->Stats().entries, 6u);
  ExpectMiss(fp_, KeyFor(100));
  EXPECT_EQ(tier_.checksum_failures->Value(), 1);
  EXPECT_EQ(tier_.evicted_corrupt->Value(), 1);
  ExpectNoWrongBytes();
  EXPECT_EQ(tier_.checksum_failures->Value(), 1);
  Reopen();
  EXPECT_EQ(store_->Stats().entries, 5u);
}

// The same damage found by VerifyBlocks (the admin scan reads the value log too).
TEST_F(GlobalStoreCorruptionTest, VerifyBlocksFindsDamageInTheValueLog) {
  ASSERT_NO_FATAL_FAILURE(WriteCorruptAndReopen(/*flush_to_sst=*/false, ".vseg", 56960, "/vlog"));
  absl::StatusOr<VerifyReport> r = store_->VerifyBlocks(EntryScan{}, /*drop_corrupt=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checked, 6u);
  ASSERT_EQ(r->corrupt.size(), 1u);
  EXPECT_EQ(r->corrupt[0].key, KeyFor(100));
  EXPECT_EQ(store_->Stats().entries, 5u);
  ExpectNoWrongBytes();
}

// A segment cut short (a lost tail): the entries whose bytes are gone are dropped when the store
// opens (their metadata names bytes no segment holds); the others are served.
TEST_F(GlobalStoreCorruptionTest, TruncatedSegmentDropsOnlyTheLostEntries) {
  Open();
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(store_->Put(fp_, KeyFor(i), Other(i)).ok());
  ASSERT_TRUE(store_->Put(fp_, KeyFor(100), TargetPayload(56960)).ok());  // the last value
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  const std::vector<FileHit> hits = FindInFiles(options_.path + "/vlog", kMarker, ".vseg");
  ASSERT_EQ(hits.size(), 1u);
  std::filesystem::resize_file(hits[0].file, hits[0].offset);
  Open();
  EXPECT_EQ(store_->Stats().entries, 5u);
  ExpectNoWrongBytes();
}

}  // namespace
}  // namespace flashserve::cache
