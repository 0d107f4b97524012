// A GlobalStore test fixture: a temp directory, a FakeClock and a metrics registry the test can
// read, with close and reopen. Tests only.
#pragma once

#include <memory>
#include <string>

#include "cache_service/global_store/block_value.h"
#include "cache_service/global_store/global_store.h"
#include "cache_service/global_store/test_util.h"
#include "common/base/check.h"
#include "gtest/gtest.h"

namespace flashserve::cache::testing {

class StoreTest : public ::testing::Test {
 protected:
  StoreTest() {
    auto m = CacheMetrics::Create(&registry_);
    CHECK_OK(m.status());
    metrics_ = std::move(m).value();
    tier_ = metrics_->ForTier("ssd");
    options_.path = dir_.Sub("db");
    options_.clock = &clock_;
    options_.metrics = metrics_.get();
  }

  // Opens (or reopens, closing first) the store with options_.
  void Open() {
    store_.reset();
    auto s = GlobalStore::Open(options_);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
  }
  void Reopen() {
    ASSERT_TRUE(store_->Close().ok());
    Open();
  }

  // Expects a hit with exactly `payload`.
  void ExpectHit(const ModelFingerprint& fp, const BlockKey& key, const std::string& payload) {
    absl::StatusOr<std::string> got = store_->Get(fp, key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == payload) << "payload differs (" << got->size() << " vs " << payload.size()
                                 << " bytes)";
  }
  void ExpectMiss(const ModelFingerprint& fp, const BlockKey& key) {
    absl::StatusOr<std::string> got = store_->Get(fp, key);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  }

  TempDir dir_;
  FakeClock clock_;
  metrics::Registry registry_;
  std::unique_ptr<CacheMetrics> metrics_;
  TierMetrics tier_;
  GlobalStoreOptions options_;
  std::unique_ptr<GlobalStore> store_;
  const ModelFingerprint fp_ = TestFingerprint("model-a");
};

}  // namespace flashserve::cache::testing
