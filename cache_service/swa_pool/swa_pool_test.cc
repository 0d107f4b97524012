#include "cache_service/swa_pool/swa_pool.h"

#include <unistd.h>

#include <atomic>
#include <thread>

#include "cache_service/global_store/test_util.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

using testing::PayloadFor;
using testing::TestFingerprint;

SwaKey K(uint64_t i) {
  return SwaKeyForPrefix(testing::Tokens(i % 200 + 1, i), TestFingerprint("m"), "");
}
std::string Snap(uint64_t i, size_t size = 1000) { return PayloadFor(21, i, size); }

class SwaPoolTest : public ::testing::Test {
 protected:
  SwaPoolTest() {
    auto m = CacheMetrics::Create(&registry_);
    CHECK_OK(m.status());
    metrics_ = std::move(m).value();
    tier_ = metrics_->ForTier("dram");
    options_.clock = &clock_;
    options_.metrics = metrics_.get();
    options_.capacity_bytes = 1 << 20;
  }
  void Create() {
    auto p = SwaPool::Create(options_);
    ASSERT_TRUE(p.ok()) << p.status();
    pool_ = std::move(p).value();
  }
  void ExpectHit(const SwaKey& k, const std::string& want, const ModelFingerprint* fp = nullptr) {
    absl::StatusOr<std::string> got = pool_->Get(fp ? *fp : fp_, k);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == want);
  }
  void ExpectMiss(const SwaKey& k, const ModelFingerprint* fp = nullptr) {
    EXPECT_TRUE(absl::IsNotFound(pool_->Get(fp ? *fp : fp_, k).status()));
  }

  FakeClock clock_;
  metrics::Registry registry_;
  std::unique_ptr<CacheMetrics> metrics_;
  TierMetrics tier_;
  SwaPoolOptions options_;
  std::unique_ptr<SwaPool> pool_;
  const ModelFingerprint fp_ = TestFingerprint("m");
};

TEST_F(SwaPoolTest, PutGetReplaceAndMetrics) {
  Create();
  ASSERT_TRUE(pool_->Put(fp_, K(1), Snap(1)).ok());
  ExpectHit(K(1), Snap(1));
  ExpectMiss(K(2));
  ASSERT_TRUE(pool_->Put(fp_, K(1), Snap(2, 500)).ok());  // replaced
  ExpectHit(K(1), Snap(2, 500));
  EXPECT_EQ(pool_->Stats().entries, 1u);
  EXPECT_EQ(pool_->Stats().bytes, 500u);
  EXPECT_EQ(tier_.hits->Value(), 2);
  EXPECT_EQ(tier_.misses->Value(), 1);
  EXPECT_EQ(tier_.read_bytes->Value(), 1500);
  EXPECT_EQ(tier_.written_bytes->Value(), 1500);
  EXPECT_EQ(tier_.bytes->Value(), 500);
  EXPECT_TRUE(pool_->Erase(fp_, K(1)));
  EXPECT_FALSE(pool_->Erase(fp_, K(1)));
  ExpectMiss(K(1));
}

TEST_F(SwaPoolTest, FingerprintsAreIsolatedAndFlushedSeparately) {
  Create();
  const ModelFingerprint other = TestFingerprint("other");
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(pool_->Put(fp_, K(i), Snap(i)).ok());
    ASSERT_TRUE(pool_->Put(other, K(i), Snap(100 + i)).ok());
  }
  ExpectHit(K(3), Snap(103), &other);
  EXPECT_EQ(pool_->Flush(fp_.digest), 5u);
  EXPECT_EQ(tier_.evicted_flush->Value(), 5);
  ExpectMiss(K(3));
  ExpectHit(K(3), Snap(103), &other);
  EXPECT_EQ(pool_->Stats().entries, 5u);
}

TEST_F(SwaPoolTest, TtlIsTenMinutesFromTheLastAccessByDefault) {
  options_.ttl = SwaPoolOptions().ttl;
  ASSERT_EQ(options_.ttl, absl::Minutes(10));
  Create();
  ASSERT_TRUE(pool_->Put(fp_, K(1), Snap(1)).ok());
  ASSERT_TRUE(pool_->Put(fp_, K(2), Snap(2)).ok());
  clock_.Advance(absl::Minutes(9));
  ExpectHit(K(1), Snap(1));
  clock_.Advance(absl::Minutes(1));
  ExpectMiss(K(2));
  EXPECT_EQ(tier_.evicted_ttl->Value(), 1);
  clock_.Advance(absl::Minutes(8));  // 9 minutes since block 1's last access
  ExpectHit(K(1), Snap(1));
  clock_.Advance(absl::Minutes(10));
  EXPECT_EQ(pool_->SweepExpired(), 1u);
  EXPECT_EQ(pool_->Stats().entries, 0u);
}

// Per-request TTLs (PutSwa's ttl_s): each snapshot expires after its own TTL; a full pool
// evicts an expired snapshot anywhere before a live least-recently-used one; max_ttl bounds them.
TEST_F(SwaPoolTest, PerRequestTtlsAndExpiredSnapshotsGoFirst) {
  options_.ttl = absl::Minutes(10);
  options_.max_ttl = absl::Hours(1);
  options_.capacity_bytes = 3000;
  Create();
  ASSERT_TRUE(pool_->Put(fp_, K(1), Snap(1), absl::Minutes(50)).ok());  // LRU tail, long TTL
  ASSERT_TRUE(pool_->Put(fp_, K(2), Snap(2), absl::Minutes(2)).ok());   // short TTL
  ASSERT_TRUE(pool_->Put(fp_, K(3), Snap(3)).ok());                     // default 10 min
  EXPECT_EQ(pool_->Describe(fp_, K(2))->expires_unix_micros - absl::ToUnixMicros(clock_.Now()),
            absl::ToInt64Microseconds(absl::Minutes(2)));
  clock_.Advance(absl::Minutes(3));
  EXPECT_FALSE(pool_->Describe(fp_, K(2)).has_value());  // expired
  // Full: the expired snapshot 2 (middle of the LRU order) goes, not the tail (1, still live).
  ASSERT_TRUE(pool_->Put(fp_, K(4), Snap(4)).ok());
  EXPECT_EQ(tier_.evicted_ttl->Value(), 1);
  EXPECT_EQ(tier_.evicted_capacity->Value(), 0);
  ExpectHit(K(1), Snap(1));
  ExpectMiss(K(2));
  clock_.Advance(absl::Minutes(20));  // 3 and 4 (10 min) expire; 1 (50 min, read 20 min ago) not
  EXPECT_EQ(pool_->SweepExpired(), 2u);
  ExpectHit(K(1), Snap(1));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->Put(fp_, K(5), Snap(5), absl::Minutes(61))));
  EXPECT_TRUE(absl::IsInvalidArgument(pool_->Put(fp_, K(5), Snap(5), -absl::Seconds(1))));
  ExpectMiss(K(5));
  options_.max_ttl = absl::Minutes(5);
  EXPECT_TRUE(absl::IsInvalidArgument(SwaPool::Create(options_).status()));
}

TEST_F(SwaPoolTest, CapacityEvictsTheLeastRecentlyUsed) {
  options_.capacity_bytes = 3000;
  Create();
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(pool_->Put(fp_, K(i), Snap(i)).ok());
  ExpectHit(K(1), Snap(1));                          // 2 is now the LRU
  ASSERT_TRUE(pool_->Put(fp_, K(4), Snap(4)).ok());  // evicts 2
  ExpectMiss(K(2));
  ASSERT_TRUE(pool_->Put(fp_, K(5), Snap(5, 2000)).ok());  // needs 2 slots: evicts 3 and 1
  ExpectMiss(K(3));
  ExpectMiss(K(1));
  ExpectHit(K(4), Snap(4));
  ExpectHit(K(5), Snap(5, 2000));
  EXPECT_EQ(tier_.evicted_capacity->Value(), 3);
  EXPECT_LE(pool_->Stats().bytes, 3000u);
  EXPECT_TRUE(absl::IsResourceExhausted(pool_->Put(fp_, K(6), Snap(6, 3001))));
  ExpectHit(K(4), Snap(4));  // a rejected put evicts nothing
}

TEST_F(SwaPoolTest, ACorruptedSnapshotIsAMissAndIsDropped) {
  Create();
  ASSERT_TRUE(pool_->Put(fp_, K(1), Snap(1)).ok());
  ASSERT_TRUE(pool_->Put(fp_, K(2), Snap(2)).ok());
  ASSERT_TRUE(pool_->CorruptForTesting(fp_, K(1), 517));
  ExpectMiss(K(1));
  EXPECT_EQ(tier_.checksum_failures->Value(), 1);
  EXPECT_EQ(tier_.evicted_corrupt->Value(), 1);
  EXPECT_EQ(pool_->Stats().entries, 1u);
  ExpectMiss(K(1));  // gone: a plain miss now
  EXPECT_EQ(tier_.checksum_failures->Value(), 1);
  ExpectHit(K(2), Snap(2));
  EXPECT_FALSE(pool_->CorruptForTesting(fp_, K(2), 1000));  // out of range
}

TEST_F(SwaPoolTest, DefaultCapacityIsATenthOfMemory) {
  const uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  const uint64_t c = DefaultSwaCapacityBytes();
  EXPECT_LE(c, phys / 10);
  EXPECT_GT(c, 0u);
  options_.capacity_bytes = 0;
  Create();
  EXPECT_EQ(pool_->Stats().capacity_bytes, c);
  options_.ttl = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(SwaPool::Create(options_).status()));
}

TEST_F(SwaPoolTest, ConcurrentClientsSeeOnlyCorrectBytes) {
  options_.capacity_bytes = 40 * 1000;  // ~40 of 400 snapshots fit: constant eviction
  Create();
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int n = 0; n < 2000; ++n) {
        const uint64_t i = rng() % 400;
        if (rng() % 2) {
          if (!pool_->Put(fp_, K(i), Snap(i, 500 + i)).ok()) ++wrong;
        } else if (auto got = pool_->Get(fp_, K(i)); got.ok()) {
          ++hits;
          if (*got != Snap(i, 500 + i)) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), 0);
  const SwaPoolStats s = pool_->Stats();
  EXPECT_LE(s.bytes, options_.capacity_bytes);
  EXPECT_EQ(tier_.checksum_failures->Value(), 0);
  EXPECT_EQ(tier_.entries->Value(), s.entries);
}

}  // namespace
}  // namespace flashserve::cache
