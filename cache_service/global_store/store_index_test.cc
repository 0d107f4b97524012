#include "cache_service/global_store/store_index.h"

#include <limits>
#include <map>
#include <random>

#include "cache_service/global_store/meta_record.h"
#include "cache_service/global_store/test_util.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

StoreKey K(uint64_t i) { return MakeStoreKey(testing::TestFingerprint("m"), testing::KeyFor(i)); }

TEST(StoreIndexTest, StoreKeyIsFingerprintThenBlockKey) {
  const ModelFingerprint fp = testing::TestFingerprint("m");
  const StoreKey k = MakeStoreKey(fp, testing::KeyFor(9));
  EXPECT_EQ(FingerprintOf(k), fp.digest);
  EXPECT_EQ(BlockKeyOf(k), testing::KeyFor(9));
}

// Random operations against a std::map model: sizes, byte and pin accounting and the slot array
// stay consistent through swap-removals.
TEST(StoreIndexTest, MatchesAReferenceModel) {
  StoreIndex index;
  std::map<uint64_t, EntryState> model;
  std::mt19937_64 rng(3);
  for (int step = 0; step < 20000; ++step) {
    const uint64_t i = rng() % 300;
    switch (rng() % 4) {
      case 0:
      case 1: {
        EntryState s{rng() % 1000 + 1, 1, static_cast<int64_t>(step), false};
        index.Upsert(K(i), s);
        if (auto it = model.find(i); it != model.end()) s.pinned = it->second.pinned;
        model[i] = s;
        break;
      }
      case 2:
        EXPECT_EQ(index.Erase(K(i)).has_value(), model.erase(i) == 1);
        break;
      case 3: {
        const bool pin = rng() % 2 == 0;
        EXPECT_EQ(index.SetPinned(K(i), pin), model.count(i) == 1);
        if (model.count(i)) model[i].pinned = pin;
        break;
      }
    }
  }
  uint64_t bytes = 0, pinned_bytes = 0;
  size_t pinned = 0;
  for (const auto& [i, s] : model) {
    const EntryState* e = index.Find(K(i));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->bytes, s.bytes);
    EXPECT_EQ(e->pinned, s.pinned);
    bytes += s.bytes;
    if (s.pinned) {
      pinned_bytes += s.bytes;
      ++pinned;
    }
  }
  EXPECT_EQ(index.size(), model.size());
  EXPECT_EQ(index.bytes(), bytes);
  EXPECT_EQ(index.pinned_bytes(), pinned_bytes);
  EXPECT_EQ(index.pinned_entries(), pinned);
  // Every entry is reachable through the sweep (the slot array covers the map).
  std::vector<StoreKey> all;
  index.SweepExpired(std::numeric_limits<int64_t>::max(), 0, index.size(), &all);
  EXPECT_EQ(all.size(), model.size() - pinned);
}

TEST(StoreIndexTest, SamplingIsExactLruWhenFewAndSkipsPins) {
  StoreIndex index;
  for (uint64_t i = 0; i < 6; ++i) index.Upsert(K(i), EntryState{10, 0, int64_t(100 - i), false});
  EXPECT_EQ(index.SampleLeastRecent(8), K(5));  // oldest access
  index.SetPinned(K(5), true);
  EXPECT_EQ(index.SampleLeastRecent(8), K(4));
  index.Touch(K(4), 1000);
  EXPECT_EQ(index.SampleLeastRecent(8), K(3));
  for (uint64_t i = 0; i < 6; ++i) index.SetPinned(K(i), true);
  EXPECT_FALSE(index.SampleLeastRecent(8).has_value());
}

TEST(StoreIndexTest, SamplingPrefersOldEntriesWhenMany) {
  StoreIndex index;
  for (uint64_t i = 0; i < 10000; ++i) index.Upsert(K(i), EntryState{1, 0, int64_t(i), false});
  // With 8 samples the chosen entry is the oldest of 8: its expected rank is ~1/9 of the range.
  int64_t total = 0;
  for (int r = 0; r < 500; ++r) {
    const StoreKey k = *index.SampleLeastRecent(8);
    total += index.Find(k)->last_access_unix_micros;
  }
  EXPECT_LT(total / 500, 2000);  // uniform would be ~5000
}

TEST(StoreIndexTest, TouchedEntriesAreTakenOnce) {
  StoreIndex index;
  for (uint64_t i = 0; i < 5; ++i) index.Upsert(K(i), EntryState{1, 0, 0, false});
  index.Touch(K(1), 50);
  index.Touch(K(1), 60);
  index.Touch(K(3), 70);
  index.Erase(K(3));
  std::vector<std::pair<StoreKey, EntryState>> out;
  index.TakeTouched(100, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, K(1));
  EXPECT_EQ(out[0].second.last_access_unix_micros, 60);
  out.clear();
  index.TakeTouched(100, &out);
  EXPECT_TRUE(out.empty());
}

TEST(MetaRecordTest, RoundTripAndCorruption) {
  const EntryState s{57080, 1'700'000'000'000'000, 1'700'000'000'999'999, true};
  const std::string r = EncodeMetaRecord(s);
  ASSERT_EQ(r.size(), kMetaRecordBytes);
  absl::StatusOr<EntryState> d = DecodeMetaRecord(r);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->bytes, s.bytes);
  EXPECT_EQ(d->created_unix_micros, s.created_unix_micros);
  EXPECT_EQ(d->last_access_unix_micros, s.last_access_unix_micros);
  EXPECT_TRUE(d->pinned);
  for (size_t i = 0; i < r.size(); ++i) {
    std::string bad = r;
    bad[i] = static_cast<char>(bad[i] ^ 0x04);
    EXPECT_FALSE(DecodeMetaRecord(bad).ok()) << "byte " << i;
  }
  EXPECT_FALSE(DecodeMetaRecord(r.substr(1)).ok());
}

}  // namespace
}  // namespace flashserve::cache
