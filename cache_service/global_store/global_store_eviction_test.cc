// GlobalStore TTL and capacity eviction under an injected clock, and pins.
#include "cache_service/global_store/store_test_util.h"

namespace flashserve::cache {
namespace {

using testing::KeyFor;
using testing::PayloadFor;

constexpr size_t kPayload = 1000;
constexpr uint64_t kEntryBytes = EncodedBlockValueBytes(kPayload);

class GlobalStoreEvictionTest : public testing::StoreTest {
 protected:
  void PutN(uint64_t i) { ASSERT_TRUE(store_->Put(fp_, KeyFor(i), P(i)).ok()); }
  static std::string P(uint64_t i) { return PayloadFor(9, i, kPayload); }
};

TEST_F(GlobalStoreEvictionTest, TtlCountsFromTheLastAccess) {
  options_.ttl = absl::Hours(72);
  Open();
  PutN(1);
  PutN(2);
  clock_.Advance(absl::Hours(71));
  ExpectHit(fp_, KeyFor(1), P(1));  // refreshes block 1 only
  clock_.Advance(absl::Hours(1));   // block 2: exactly 72 h since its put
  ExpectMiss(fp_, KeyFor(2));
  EXPECT_EQ(tier_.evicted_ttl->Value(), 1);
  EXPECT_EQ(*store_->LongestPrefix(fp_, std::vector<BlockKey>{KeyFor(1)}), 1u);
  clock_.Advance(absl::Hours(70));  // 71 h since block 1's last access
  ExpectHit(fp_, KeyFor(1), P(1));
  clock_.Advance(absl::Hours(72));
  EXPECT_EQ(*store_->LongestPrefix(fp_, std::vector<BlockKey>{KeyFor(1)}), 0u);
  ExpectMiss(fp_, KeyFor(1));
  EXPECT_EQ(tier_.evicted_ttl->Value(), 2);
  EXPECT_EQ(store_->Stats().entries, 0u);
  Reopen();  // expired entries were deleted from disk too
  EXPECT_EQ(store_->Stats().entries, 0u);
}

// Re-putting an expired block: the put's own TTL sweep may pick the old entry as a victim in the
// same batch; the new value must win, on disk and in the index.
TEST_F(GlobalStoreEvictionTest, AnExpiredBlockCanBePutAgain) {
  Open();
  PutN(1);
  clock_.Advance(absl::Hours(73));
  PutN(1);
  EXPECT_EQ(tier_.evicted_ttl->Value(), 1);
  ExpectHit(fp_, KeyFor(1), P(1));
  Reopen();
  ExpectHit(fp_, KeyFor(1), P(1));
}

// Per-request TTLs (PutBatch's ttl): shorter and longer than the default, counted from the last
// access like the default, kept across reopen, swept by SweepExpired, extended (never shortened)
// by a re-put, bounded by max_ttl.
TEST_F(GlobalStoreEvictionTest, PerRequestTtlsOverrideTheDefault) {
  options_.ttl = absl::Hours(72);
  options_.max_ttl = absl::Hours(240);
  Open();
  const std::string p1 = P(1), p2 = P(2), p3 = P(3);
  const BlockWrite short_block{KeyFor(1), p1}, long_block{KeyFor(2), p2}, plain{KeyFor(3), p3};
  ASSERT_TRUE(store_->PutBatch(fp_, {&short_block, 1}, absl::Minutes(30)).ok());
  ASSERT_TRUE(store_->PutBatch(fp_, {&long_block, 1}, absl::Hours(200)).ok());
  ASSERT_TRUE(store_->PutBatch(fp_, {&plain, 1}).ok());
  const auto expires = [&](uint64_t i) {
    return store_->Describe(fp_.digest, std::vector<BlockKey>{KeyFor(i)})[0]->expires_unix_micros -
           absl::ToUnixMicros(clock_.Now());
  };
  EXPECT_EQ(expires(1), absl::ToInt64Microseconds(absl::Minutes(30)));
  EXPECT_EQ(expires(2), absl::ToInt64Microseconds(absl::Hours(200)));
  EXPECT_EQ(expires(3), absl::ToInt64Microseconds(absl::Hours(72)));
  Reopen();  // the TTLs are in the metadata records
  EXPECT_EQ(expires(1), absl::ToInt64Microseconds(absl::Minutes(30)));
  EXPECT_EQ(expires(2), absl::ToInt64Microseconds(absl::Hours(200)));
  clock_.Advance(absl::Minutes(20));
  ExpectHit(fp_, KeyFor(1), p1);    // an access restarts its 30 minutes
  clock_.Advance(absl::Minutes(29));
  ExpectHit(fp_, KeyFor(1), p1);
  clock_.Advance(absl::Minutes(30));
  ExpectMiss(fp_, KeyFor(1));
  EXPECT_EQ(tier_.evicted_ttl->Value(), 1);
  clock_.Advance(absl::Hours(100));  // 101 h: the default-TTL block is gone, the 200 h one not
  absl::StatusOr<size_t> swept = store_->SweepExpired(100);
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(*swept, 1u);
  ExpectMiss(fp_, KeyFor(3));
  ExpectHit(fp_, KeyFor(2), p2);
  // A re-put asking for less keeps the longer TTL; asking for more extends it.
  ASSERT_TRUE(store_->PutBatch(fp_, {&long_block, 1}, absl::Hours(1)).ok());
  EXPECT_EQ(expires(2), absl::ToInt64Microseconds(absl::Hours(200)));
  ASSERT_TRUE(store_->PutBatch(fp_, {&long_block, 1}, absl::Hours(240)).ok());
  EXPECT_EQ(expires(2), absl::ToInt64Microseconds(absl::Hours(240)));
  Reopen();  // the extension was persisted with the access times
  EXPECT_EQ(expires(2), absl::ToInt64Microseconds(absl::Hours(240)));
  // Out of range: rejected, nothing stored.
  const std::string p4 = P(4);
  const BlockWrite b4{KeyFor(4), p4};
  EXPECT_EQ(store_->PutBatch(fp_, {&b4, 1}, absl::Hours(241)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->PutBatch(fp_, {&b4, 1}, -absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  ExpectMiss(fp_, KeyFor(4));
  // Fractions of a second round up.
  ASSERT_TRUE(store_->PutBatch(fp_, {&b4, 1}, absl::Milliseconds(1500)).ok());
  EXPECT_EQ(expires(4), absl::ToInt64Microseconds(absl::Seconds(2)));
}

TEST_F(GlobalStoreEvictionTest, MaxTtlBelowTheDefaultIsRejectedAtOpen) {
  options_.ttl = absl::Hours(72);
  options_.max_ttl = absl::Hours(1);
  EXPECT_EQ(GlobalStore::Open(options_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GlobalStoreEvictionTest, SweepRemovesExpiredEntriesWithoutReads) {
  Open();
  for (uint64_t i = 0; i < 20; ++i) PutN(i);
  clock_.Advance(absl::Hours(50));
  for (uint64_t i = 20; i < 25; ++i) PutN(i);
  ASSERT_TRUE(store_->Pin(fp_, KeyFor(0)).ok());
  clock_.Advance(absl::Hours(23));  // 73 h for 0-19, 23 h for 20-24
  absl::StatusOr<size_t> swept = store_->SweepExpired(1000);
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(*swept, 19u);  // 1-19; 0 is pinned
  EXPECT_EQ(store_->Stats().entries, 6u);
  ExpectHit(fp_, KeyFor(0), P(0));
  ExpectHit(fp_, KeyFor(24), P(24));
}

TEST_F(GlobalStoreEvictionTest, CapacityEvictsTheLeastRecentlyAccessed) {
  options_.capacity_bytes = 3 * kEntryBytes;
  Open();
  PutN(1);
  clock_.Advance(absl::Seconds(1));
  PutN(2);
  clock_.Advance(absl::Seconds(1));
  PutN(3);
  clock_.Advance(absl::Seconds(1));
  ExpectHit(fp_, KeyFor(1), P(1));  // 2 is now the least recently accessed
  clock_.Advance(absl::Seconds(1));
  PutN(4);
  EXPECT_EQ(tier_.evicted_capacity->Value(), 1);
  ExpectMiss(fp_, KeyFor(2));
  clock_.Advance(absl::Seconds(1));
  PutN(5);  // now 3 is the oldest
  ExpectMiss(fp_, KeyFor(3));
  ExpectHit(fp_, KeyFor(1), P(1));
  ExpectHit(fp_, KeyFor(4), P(4));
  ExpectHit(fp_, KeyFor(5), P(5));
  EXPECT_LE(store_->Stats().bytes, options_.capacity_bytes);
  EXPECT_EQ(tier_.bytes->Value(), store_->Stats().bytes);
}

// Last-access times survive a clean restart: the LRU order is the same afterwards.
TEST_F(GlobalStoreEvictionTest, AccessTimesArePersistedOnClose) {
  options_.capacity_bytes = 2 * kEntryBytes;
  Open();
  PutN(1);
  clock_.Advance(absl::Seconds(1));
  PutN(2);
  clock_.Advance(absl::Seconds(1));
  ExpectHit(fp_, KeyFor(1), P(1));
  Reopen();
  clock_.Advance(absl::Seconds(1));
  PutN(3);
  ExpectMiss(fp_, KeyFor(2));
  ExpectHit(fp_, KeyFor(1), P(1));
}

TEST_F(GlobalStoreEvictionTest, ReopeningWithASmallerCapacityEvictsDownToIt) {
  Open();
  for (uint64_t i = 0; i < 10; ++i) {
    PutN(i);
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_TRUE(store_->Close().ok());
  options_.capacity_bytes = 4 * kEntryBytes;
  options_.eviction_samples = 16;  // more than the entries: exact LRU
  Open();
  EXPECT_EQ(store_->Stats().entries, 4u);
  for (uint64_t i = 6; i < 10; ++i) ExpectHit(fp_, KeyFor(i), P(i));  // the 4 most recent
}

TEST_F(GlobalStoreEvictionTest, PinnedEntriesAreNeverEvicted) {
  options_.capacity_bytes = 2 * kEntryBytes;
  Open();
  PutN(1);
  ASSERT_TRUE(store_->Pin(fp_, KeyFor(1)).ok());
  ASSERT_TRUE(store_->Pin(fp_, KeyFor(1)).ok());  // idempotent
  for (uint64_t i = 2; i < 10; ++i) {
    clock_.Advance(absl::Seconds(1));
    PutN(i);
  }
  clock_.Advance(absl::Hours(1000));  // far past the TTL
  PutN(10);
  ExpectHit(fp_, KeyFor(1), P(1));
  EXPECT_EQ(store_->Stats().pinned_entries, 1u);
  EXPECT_EQ(tier_.pinned_bytes->Value(), kEntryBytes);
  // The pin survives a restart.
  Reopen();
  clock_.Advance(absl::Seconds(1));
  PutN(11);
  PutN(12);
  ExpectHit(fp_, KeyFor(1), P(1));
  // Unpinned, it becomes the least recently used and goes.
  ASSERT_TRUE(store_->Unpin(fp_, KeyFor(1)).ok());
  EXPECT_EQ(store_->Stats().pinned_entries, 0u);
  clock_.Advance(absl::Seconds(1));
  ExpectHit(fp_, KeyFor(12), P(12));
  clock_.Advance(absl::Seconds(1));
  PutN(13);
  ExpectMiss(fp_, KeyFor(1));
  ExpectHit(fp_, KeyFor(12), P(12));
  ExpectHit(fp_, KeyFor(13), P(13));
}

TEST_F(GlobalStoreEvictionTest, PinnedBytesLeavingNoRoomRejectThePut) {
  options_.capacity_bytes = 2 * kEntryBytes;
  Open();
  PutN(1);
  PutN(2);
  ASSERT_TRUE(store_->Pin(fp_, KeyFor(1)).ok());
  ASSERT_TRUE(store_->Pin(fp_, KeyFor(2)).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(store_->Put(fp_, KeyFor(3), P(3))));
  ExpectMiss(fp_, KeyFor(3));
  ASSERT_TRUE(store_->Unpin(fp_, KeyFor(2)).ok());
  PutN(3);
  ExpectMiss(fp_, KeyFor(2));
}

// Bounded work: a put evicts at most max_evictions_per_put entries; the store catches up over
// later puts instead of stalling one.
TEST_F(GlobalStoreEvictionTest, EvictionWorkPerPutIsBounded) {
  options_.capacity_bytes = 100 * kEntryBytes;
  options_.max_evictions_per_put = 4;
  Open();
  for (uint64_t i = 0; i < 100; ++i) PutN(i);
  const std::string big = PayloadFor(9, 1000, 20 * kEntryBytes);
  ASSERT_TRUE(store_->Put(fp_, KeyFor(1000), big).ok());
  EXPECT_EQ(tier_.evicted_capacity->Value(), 4);
  EXPECT_GT(store_->Stats().bytes, options_.capacity_bytes);  // transiently over
  for (uint64_t i = 2000; i < 2010; ++i) PutN(i);
  EXPECT_LE(store_->Stats().bytes, options_.capacity_bytes);
}

}  // namespace
}  // namespace flashserve::cache
