// GlobalStore on a real RocksDB in a temp directory: put/get, batches, lookup, restart, pins,
// delete, flush by fingerprint, and concurrent clients.
#include <atomic>
#include <thread>

#include "cache_service/global_store/store_test_util.h"

namespace flashserve::cache {
namespace {

using testing::KeyFor;
using testing::PayloadFor;
using testing::TestFingerprint;

constexpr size_t kFullBlockPayload = 160 * 356;  // 56,960 B: one block of the full model

class GlobalStoreTest : public testing::StoreTest {};

TEST_F(GlobalStoreTest, PutThenGetReturnsTheExactBytes) {
  Open();
  const std::string payload = PayloadFor(1, 1, kFullBlockPayload);
  ASSERT_TRUE(store_->Put(fp_, KeyFor(1), payload).ok());
  ExpectHit(fp_, KeyFor(1), payload);
  ExpectMiss(fp_, KeyFor(2));
  EXPECT_EQ(tier_.hits->Value(), 1);
  EXPECT_EQ(tier_.misses->Value(), 1);
  EXPECT_EQ(tier_.read_bytes->Value(), kFullBlockPayload);
  EXPECT_EQ(tier_.written_bytes->Value(), kFullBlockPayload);
  const GlobalStoreStats st = store_->Stats();
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, EncodedBlockValueBytes(kFullBlockPayload));
  EXPECT_EQ(tier_.get_seconds->Read().cumulative.back(), 2u);
  EXPECT_EQ(tier_.put_seconds->Read().cumulative.back(), 1u);
}

TEST_F(GlobalStoreTest, BatchPutAndMultiGet) {
  Open();
  std::vector<std::string> payloads;
  std::vector<BlockWrite> writes;
  for (uint64_t i = 0; i < 16; ++i) payloads.push_back(PayloadFor(2, i, 1000 + 97 * i));
  for (uint64_t i = 0; i < 16; ++i) writes.push_back({KeyFor(i), payloads[i]});
  ASSERT_TRUE(store_->PutBatch(fp_, writes).ok());
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 20; i += 1) keys.push_back(KeyFor(i * 2 % 20 + (i >= 10)));
  const auto got = store_->MultiGet(fp_, keys);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t j = 0; j < keys.size(); ++j) {
    const uint64_t i = keys[j].bytes[0];
    if (i < 16) {
      ASSERT_TRUE(got[j].ok()) << j << ": " << got[j].status();
      EXPECT_TRUE(*got[j] == payloads[i]) << j;
    } else {
      EXPECT_TRUE(absl::IsNotFound(got[j].status())) << j;
    }
  }
}

// MultiGet's reads split over 1, 2 and 5 threads (chunks of one key and of several, more threads
// than keys), from the memtable and from SST files: every result lands at its own key's position.
TEST_F(GlobalStoreTest, MultiGetOverReadThreadsKeepsEachResultInPlace) {
  Open();
  std::vector<std::string> payloads;
  std::vector<BlockWrite> writes;
  for (uint64_t i = 0; i < 24; ++i) payloads.push_back(PayloadFor(3, i, 500 + 131 * i));
  for (uint64_t i = 0; i < 24; i += 2) writes.push_back({KeyFor(i), payloads[i]});  // even ids
  ASSERT_TRUE(store_->PutBatch(fp_, writes).ok());
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 24; ++i) keys.push_back(KeyFor((i * 7) % 24));  // odd ids miss
  for (bool flushed : {false, true}) {
    for (int threads : {1, 2, 5}) {
      options_.read_threads = threads;
      Open();
      if (flushed) {
        ASSERT_TRUE(store_->FlushMemtables().ok());
      }
      for (size_t n : {size_t{1}, size_t{3}, keys.size()}) {
        const auto got = store_->MultiGet(fp_, std::span(keys).first(n));
        ASSERT_EQ(got.size(), n);
        for (size_t j = 0; j < n; ++j) {
          const uint64_t id = keys[j].bytes[0];
          SCOPED_TRACE(::testing::Message() << "threads " << threads << " flushed " << flushed
                                            << " n " << n << " position " << j << " id " << id);
          if (id % 2 == 0) {
            ASSERT_TRUE(got[j].ok()) << got[j].status();
            EXPECT_TRUE(*got[j] == payloads[id]);
          } else {
            EXPECT_TRUE(absl::IsNotFound(got[j].status())) << got[j].status();
          }
        }
      }
    }
  }
}

TEST_F(GlobalStoreTest, LongestPrefixStopsAtTheFirstMiss) {
  Open();
  const std::vector<TokenId> tokens = testing::Tokens(64 * 6 + 5, 17);
  const std::vector<BlockKey> chain = ChainKeys(tokens, fp_, "");
  ASSERT_EQ(chain.size(), 6u);
  for (size_t i : {0, 1, 2, 4, 5})
    ASSERT_TRUE(store_->Put(fp_, chain[i], "kv" + std::to_string(i)).ok());
  for (LookupMode mode : {LookupMode::kIndexOnly, LookupMode::kVerified}) {
    absl::StatusOr<size_t> n = store_->LongestPrefix(fp_, chain, mode);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 3u);
    EXPECT_EQ(*store_->LongestPrefix(fp_, std::span(chain).subspan(4), mode), 2u);
    EXPECT_EQ(*store_->LongestPrefix(fp_, std::span(chain).subspan(3), mode), 0u);
    EXPECT_EQ(*store_->LongestPrefix(TestFingerprint("model-b"), chain, mode), 0u);
  }
}

TEST_F(GlobalStoreTest, RestartKeepsBlocksAndPins) {
  Open();
  for (uint64_t i = 0; i < 50; ++i) {
    ASSERT_TRUE(store_->Put(fp_, KeyFor(i), PayloadFor(3, i, 5000 + i)).ok());
  }
  ASSERT_TRUE(store_->Pin(fp_, KeyFor(7)).ok());
  const GlobalStoreStats before = store_->Stats();
  Reopen();
  const GlobalStoreStats after = store_->Stats();
  EXPECT_EQ(after.entries, 50u);
  EXPECT_EQ(after.bytes, before.bytes);
  EXPECT_EQ(after.pinned_entries, 1u);
  for (uint64_t i = 0; i < 50; ++i) ExpectHit(fp_, KeyFor(i), PayloadFor(3, i, 5000 + i));
  // A second restart, now from SST files rather than the WAL.
  ASSERT_TRUE(store_->FlushMemtables().ok());
  Reopen();
  EXPECT_EQ(store_->Stats().entries, 50u);
  ExpectHit(fp_, KeyFor(49), PayloadFor(3, 49, 5049));
}

TEST_F(GlobalStoreTest, PutOfAPresentKeyKeepsTheStoredValue) {
  Open();
  ASSERT_TRUE(store_->Put(fp_, KeyFor(1), "first").ok());
  ASSERT_TRUE(store_->Put(fp_, KeyFor(1), "second").ok());
  ExpectHit(fp_, KeyFor(1), "first");
  EXPECT_EQ(tier_.written_bytes->Value(), 5);
  // Duplicates inside one batch are written once.
  const std::vector<BlockWrite> dup = {{KeyFor(2), "a"}, {KeyFor(2), "b"}};
  ASSERT_TRUE(store_->PutBatch(fp_, dup).ok());
  ExpectHit(fp_, KeyFor(2), "a");
  EXPECT_EQ(store_->Stats().entries, 2u);
}

TEST_F(GlobalStoreTest, DeleteAndPinErrors) {
  Open();
  ASSERT_TRUE(store_->Put(fp_, KeyFor(1), "x").ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Pin(fp_, KeyFor(2))));
  EXPECT_TRUE(absl::IsNotFound(store_->Unpin(fp_, KeyFor(2))));
  EXPECT_TRUE(absl::IsNotFound(store_->Delete(fp_, KeyFor(2))));
  ASSERT_TRUE(store_->Delete(fp_, KeyFor(1)).ok());
  ExpectMiss(fp_, KeyFor(1));
  Reopen();
  ExpectMiss(fp_, KeyFor(1));
  EXPECT_EQ(store_->Stats().entries, 0u);
}

TEST_F(GlobalStoreTest, OversizedPayloadIsRejected) {
  options_.max_payload_bytes = 100;
  Open();
  EXPECT_TRUE(absl::IsInvalidArgument(store_->Put(fp_, KeyFor(1), std::string(101, 'x'))));
  EXPECT_TRUE(store_->Put(fp_, KeyFor(1), std::string(100, 'x')).ok());
}

TEST_F(GlobalStoreTest, FingerprintsAreIsolatedAndFlushedSeparately) {
  Open();
  const ModelFingerprint other = TestFingerprint("model-b");
  for (uint64_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(store_->Put(fp_, KeyFor(i), "a" + std::to_string(i)).ok());
    ASSERT_TRUE(store_->Put(other, KeyFor(i), "b" + std::to_string(i)).ok());
  }
  ASSERT_TRUE(store_->Pin(fp_, KeyFor(3)).ok());
  ExpectHit(other, KeyFor(4), "b4");  // same block key, other model: its own value
  absl::StatusOr<size_t> flushed = store_->Flush(fp_.digest);
  ASSERT_TRUE(flushed.ok()) << flushed.status();
  EXPECT_EQ(*flushed, 10u);  // pinned included
  EXPECT_EQ(tier_.evicted_flush->Value(), 10);
  for (uint64_t i = 0; i < 10; ++i) {
    ExpectMiss(fp_, KeyFor(i));
    ExpectHit(other, KeyFor(i), "b" + std::to_string(i));
  }
  Reopen();
  EXPECT_EQ(store_->Stats().entries, 10u);
  ExpectMiss(fp_, KeyFor(0));
  ExpectHit(other, KeyFor(9), "b9");
}

TEST_F(GlobalStoreTest, ALayoutVersionMismatchIsAMissThatKeepsTheEntry) {
  Open();
  ASSERT_TRUE(store_->Put(fp_, KeyFor(1), "v1").ok());
  ModelFingerprint wrong = fp_;
  wrong.layout_version += 1;  // an inconsistent fingerprint: same digest, other layout
  ExpectMiss(wrong, KeyFor(1));
  EXPECT_EQ(tier_.checksum_failures->Value(), 0);
  ExpectHit(fp_, KeyFor(1), "v1");
}

TEST_F(GlobalStoreTest, InvalidOptionsAreRejected) {
  GlobalStoreOptions o = options_;
  o.capacity_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalStore::Open(o).status()));
  o = options_;
  o.ttl = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalStore::Open(o).status()));
  o = options_;
  o.path = "";
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalStore::Open(o).status()));
  o = options_;
  o.read_threads = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalStore::Open(o).status()));
}

// Eight clients putting and reading overlapping keys: every hit returns exactly the bytes that
// belong to its key, and every acknowledged put is readable afterwards.
TEST_F(GlobalStoreTest, ConcurrentClientsSeeOnlyCorrectBytes) {
  options_.sync_writes = false;  // the machine has few cores and a slow fsync; logic is the same
  Open();
  constexpr int kThreads = 8;
  constexpr uint64_t kKeysPerThread = 60;
  std::atomic<int> wrong{0}, errors{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<BlockWrite> batch;
      std::vector<std::string> payloads;
      for (uint64_t n = 0; n < kKeysPerThread; ++n) {
        // Keys overlap between neighbouring threads: same key, same bytes (content addressed).
        const uint64_t i = t * kKeysPerThread / 2 + n;
        const std::string payload = PayloadFor(5, i, 2000 + i % 777);
        if (!store_->Put(fp_, KeyFor(i), payload).ok()) ++errors;
        const uint64_t probe = rng() % (kThreads * kKeysPerThread);
        auto got = store_->Get(fp_, KeyFor(probe));
        if (got.ok()) {
          ++hits;
          if (*got != PayloadFor(5, probe, 2000 + probe % 777)) ++wrong;
        } else if (!absl::IsNotFound(got.status())) {
          ++errors;
        }
        if (n % 10 == 0) (void)store_->LongestPrefix(fp_, std::vector<BlockKey>{KeyFor(probe)});
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  const uint64_t distinct = (kThreads - 1) * kKeysPerThread / 2 + kKeysPerThread;
  EXPECT_EQ(store_->Stats().entries, distinct);
  std::vector<BlockKey> all;
  for (uint64_t i = 0; i < distinct; ++i) all.push_back(KeyFor(i));
  const auto got = store_->MultiGet(fp_, all);
  for (uint64_t i = 0; i < distinct; ++i) {
    ASSERT_TRUE(got[i].ok()) << i;
    EXPECT_TRUE(*got[i] == PayloadFor(5, i, 2000 + i % 777)) << i;
  }
  EXPECT_GT(hits.load(), 0);
}

// The same under constant capacity and TTL eviction: evictions race with puts and reads of the
// same keys. Races may cost misses, never wrong bytes, errors or a store over capacity.
TEST_F(GlobalStoreTest, ConcurrentClientsUnderEvictionSeeOnlyCorrectBytes) {
  options_.sync_writes = false;
  options_.capacity_bytes = 30 * EncodedBlockValueBytes(3000);
  options_.ttl = absl::Seconds(50);
  Open();
  std::atomic<int> wrong{0}, errors{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      for (int n = 0; n < 300; ++n) {
        const uint64_t i = rng() % 200;
        const std::string want = PayloadFor(6, i, 2000 + i % 1000);
        switch (rng() % 4) {
          case 0: {
            std::vector<BlockWrite> batch = {{KeyFor(i), want}};
            const std::string next = PayloadFor(6, i + 1, 2000 + (i + 1) % 1000);
            batch.push_back({KeyFor(i + 1), next});
            if (!store_->PutBatch(fp_, batch).ok()) ++errors;
            break;
          }
          case 1:
            if (!store_->Put(fp_, KeyFor(i), want).ok()) ++errors;
            break;
          default: {
            auto got = store_->Get(fp_, KeyFor(i));
            if (got.ok()) {
              ++hits;
              if (*got != want) ++wrong;
            } else if (!absl::IsNotFound(got.status())) {
              ++errors;
            }
          }
        }
        if (t == 0 && n % 50 == 0) clock_.Advance(absl::Seconds(20));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_LE(store_->Stats().bytes, options_.capacity_bytes);
  EXPECT_GT(tier_.evicted_capacity->Value(), 0);
  EXPECT_EQ(tier_.checksum_failures->Value(), 0);
  // After a restart, whatever is present is exact.
  Reopen();
  for (uint64_t i = 0; i <= 200; ++i) {
    auto got = store_->Get(fp_, KeyFor(i));
    if (got.ok()) {
      EXPECT_TRUE(*got == PayloadFor(6, i, 2000 + i % 1000)) << i;
    } else {
      EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
    }
  }
}

}  // namespace
}  // namespace flashserve::cache
