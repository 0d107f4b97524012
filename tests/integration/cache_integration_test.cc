// The cache service end to end: real `flashserve cache` processes on 127.0.0.1 (port 0) with
// RocksDB in a temporary directory, driven through cache_service/client. Data path: round trip,
// restart, on-disk corruption, poisoned puts, concurrency, request validation.
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cache_test_util.h"

namespace flashserve::testing {
namespace {

using cache::BlockRead;
using cache::PutOutcome;
using cache::ReadStatus;

class CacheIntegrationTest : public ::testing::Test {
 protected:
  void StartServer(const std::vector<std::string>& flags = {}) {
    auto s = CacheServerProcess::Start(dir_.path() + "/db", flags);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    auto c = server_->Client();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(c).value();
  }
  void StopServer() {
    client_.reset();
    absl::StatusOr<int> code = server_->Stop();
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "server log:\n" << server_->Log();
  }

  ScratchDir dir_;
  std::unique_ptr<CacheServerProcess> server_;
  std::unique_ptr<cache::CacheClient> client_;
  const cache::ModelFingerprint fp_ = TestFingerprint("it-model");
};

TEST_F(CacheIntegrationTest, PutLookupGetRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::vector<cache::TokenId> tokens = TestTokens(3 * 64 + 10, 1);
  BlockChain chain = MakeChain(tokens, fp_, "", 4096);
  auto put = client_->PutBlocks(fp_, chain.puts);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(*put, std::vector<PutOutcome>(3, PutOutcome::kStored));
  // Content-addressed: putting the same blocks again stores nothing new.
  put = client_->PutBlocks(fp_, chain.puts);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(*put, std::vector<PutOutcome>(3, PutOutcome::kAlreadyPresent));

  auto hit = client_->Lookup(fp_, tokens);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_tokens, 192u);
  ASSERT_EQ(hit->blocks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(hit->blocks[i].key, chain.keys[i]);
    EXPECT_EQ(hit->blocks[i].residency, cache::CacheTier::kSsd);
    EXPECT_EQ(hit->blocks[i].size_bytes, 104u + 4096u + 16u);  // header + payload + checksum
    EXPECT_GT(hit->blocks[i].ttl_remaining, absl::Hours(71));
    EXPECT_FALSE(hit->blocks[i].pinned);
  }
  EXPECT_FALSE(hit->swa.has_value());

  // Another model, or another tenant salt, sees nothing.
  auto other = client_->Lookup(TestFingerprint("other"), tokens);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->hit_tokens, 0u);
  auto salted = client_->Lookup(fp_, tokens, "tenant-b");
  ASSERT_TRUE(salted.ok());
  EXPECT_EQ(salted->hit_tokens, 0u);

  std::vector<cache::BlockKey> keys = chain.keys;
  keys.push_back(cache::ChainKeys(TestTokens(64, 99), fp_, "")[0]);  // never stored
  auto got = client_->GetBlocks(fp_, keys);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*got)[i].status, ReadStatus::kOk);
    EXPECT_TRUE((*got)[i].payload == chain.payloads[i]) << "block " << i << " bytes differ";
  }
  EXPECT_EQ((*got)[3].status, ReadStatus::kNotFound);

  // An SWA snapshot for the exact prompt end (3 blocks + 10 tail tokens).
  const std::string snapshot = TestPayload(chain.keys[0], 100000);
  cache::SwaToPut swa;
  swa.key = cache::SwaKeyForPrefix(tokens, fp_, "");
  swa.last_block = chain.keys[2];
  swa.tail.assign(tokens.begin() + 192, tokens.end());
  swa.prefix_tokens = tokens.size();
  swa.snapshot = snapshot;
  auto put_swa = client_->PutSwa(fp_, swa);
  ASSERT_TRUE(put_swa.ok()) << put_swa.status();
  EXPECT_EQ(put_swa->outcome, PutOutcome::kStored);
  EXPECT_GT(put_swa->expires, absl::Now() + absl::Minutes(9));

  // The next turn (the prompt plus new tokens) finds the blocks and the snapshot.
  std::vector<cache::TokenId> next_turn = tokens;
  for (cache::TokenId t : TestTokens(100, 7)) next_turn.push_back(t);
  hit = client_->Lookup(fp_, next_turn);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_tokens, 192u);
  ASSERT_TRUE(hit->swa.has_value());
  EXPECT_EQ(hit->swa->key, swa.key);
  EXPECT_EQ(hit->swa->prefix_tokens, tokens.size());
  EXPECT_EQ(hit->swa->size_bytes, snapshot.size());

  auto got_swa = client_->GetSwa(fp_, swa.key, /*take=*/true);
  ASSERT_TRUE(got_swa.ok()) << got_swa.status();
  EXPECT_EQ(got_swa->status, ReadStatus::kOk);
  EXPECT_EQ(got_swa->prefix_tokens, tokens.size());
  EXPECT_TRUE(got_swa->snapshot == snapshot);
  got_swa = client_->GetSwa(fp_, swa.key);  // taken
  ASSERT_TRUE(got_swa.ok());
  EXPECT_EQ(got_swa->status, ReadStatus::kNotFound);
  ASSERT_NO_FATAL_FAILURE(StopServer());
}

TEST_F(CacheIntegrationTest, RestartKeepsGlobalKvAndDropsSnapshots) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::vector<cache::TokenId> tokens = TestTokens(4 * 64, 2);
  BlockChain chain = MakeChain(tokens, fp_, "salt-1", 8192);
  ASSERT_TRUE(client_->PutBlocks(fp_, chain.puts, "salt-1").ok());
  cache::SwaToPut swa;
  swa.key = cache::SwaKeyForPrefix(tokens, fp_, "salt-1");
  swa.last_block = chain.keys.back();
  swa.prefix_tokens = tokens.size();
  swa.snapshot = "snapshot bytes";
  ASSERT_EQ(client_->PutSwa(fp_, swa, "salt-1")->outcome, PutOutcome::kStored);
  ASSERT_NO_FATAL_FAILURE(StopServer());  // SIGTERM: drains, closes the store, exits 0
  EXPECT_NE(server_->Log().find("cache received SIGTERM"), std::string::npos) << server_->Log();

  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto hit = client_->Lookup(fp_, tokens, "salt-1");
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_tokens, 256u);
  EXPECT_FALSE(hit->swa.has_value());  // DRAM only, by design
  auto got = client_->GetBlocks(fp_, chain.keys);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    ASSERT_EQ((*got)[i].status, ReadStatus::kOk) << i;
    EXPECT_TRUE((*got)[i].payload == chain.payloads[i]) << "block " << i;
  }
  ASSERT_NO_FATAL_FAILURE(StopServer());
}

TEST_F(CacheIntegrationTest, PoisonedPutIsRejectedAndNothingIsStored) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::vector<cache::TokenId> tokens = TestTokens(2 * 64, 3);
  BlockChain chain = MakeChain(tokens, fp_, "", 1024);
  // Block 1 claims the key of other tokens: a client trying to plant KV under a key it does not
  // own. Block 0 is honest and is stored.
  chain.puts[1].tokens[5] ^= 1;
  auto put = client_->PutBlocks(fp_, chain.puts);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ((*put)[0], PutOutcome::kStored);
  EXPECT_EQ((*put)[1], PutOutcome::kRejectedInvalid);
  auto got = client_->GetBlocks(fp_, chain.keys);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].status, ReadStatus::kOk);
  EXPECT_EQ((*got)[1].status, ReadStatus::kNotFound);
  // Right tokens, wrong parent: also rejected.
  BlockChain again = MakeChain(tokens, fp_, "", 1024);
  again.puts[1].parent = cache::BlockKey::Root();
  put = client_->PutBlocks(fp_, std::span(again.puts).subspan(1));
  ASSERT_TRUE(put.ok());
  EXPECT_EQ((*put)[0], PutOutcome::kRejectedInvalid);
  // A salt the keys were not made with.
  put = client_->PutBlocks(fp_, std::span(again.puts).first(1), "tenant-x");
  ASSERT_TRUE(put.ok());
  EXPECT_EQ((*put)[0], PutOutcome::kRejectedInvalid);
  // A poisoned SWA snapshot: key of another prefix.
  cache::SwaToPut swa;
  swa.key = cache::SwaKeyForPrefix(TestTokens(70, 9), fp_, "");
  swa.last_block = chain.keys[0];
  swa.tail.assign(tokens.begin() + 64, tokens.begin() + 70);
  swa.prefix_tokens = 70;
  swa.snapshot = "x";
  auto put_swa = client_->PutSwa(fp_, swa);
  ASSERT_TRUE(put_swa.ok()) << put_swa.status();
  EXPECT_EQ(put_swa->outcome, PutOutcome::kRejectedInvalid);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const auto& t : stats->tiers) {
    EXPECT_EQ(t.entries, t.tier == cache::CacheTier::kSsd ? 1u : 0u);
  }
  ASSERT_NO_FATAL_FAILURE(StopServer());
}

TEST_F(CacheIntegrationTest, ManyConcurrentClients) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  constexpr int kThreads = 16, kOps = 50;
  // Every thread's sequence starts with the same block, so that puts of one key race.
  const std::vector<cache::TokenId> shared = TestTokens(64, 1000);
  std::atomic<int> failures{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto fail = [&](const std::string& what) {
        if (failures.fetch_add(1) < 5) errors[t] += what + "\n";
      };
      auto client = server_->Client();
      if (!client.ok()) return fail(std::string(client.status().message()));
      std::vector<cache::TokenId> tokens = shared;
      for (cache::TokenId x : TestTokens(10 * 64, 2000 + t)) tokens.push_back(x);
      BlockChain chain = MakeChain(tokens, fp_, "", 2048);
      size_t stored = 0;
      for (int op = 0; op < kOps; ++op) {
        if (op % 5 == 0 && stored < chain.puts.size()) {
          auto r = (*client)->PutBlocks(fp_, std::span(chain.puts).subspan(stored, 1));
          if (!r.ok() || (*r)[0] == PutOutcome::kRejectedInvalid) return fail("put failed");
          ++stored;
        } else if (op % 5 == 1) {
          auto r = (*client)->Lookup(fp_, tokens);
          if (!r.ok() || r->hit_tokens != stored * 64) {
            return fail(absl::StrCat("lookup: ", r.ok() ? r->hit_tokens : 0, " vs ", stored * 64));
          }
        } else if (stored > 0) {
          const size_t i = static_cast<size_t>(op * 7 + t) % stored;
          auto r = (*client)->GetBlocks(fp_, std::span(chain.keys).subspan(i, 1));
          if (!r.ok() || (*r)[0].status != ReadStatus::kOk ||
              (*r)[0].payload != chain.payloads[i]) {
            return fail(absl::StrCat("get of block ", i, " failed"));
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::string all;
  for (const std::string& e : errors) all += e;
  EXPECT_EQ(failures.load(), 0) << all;
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  for (const auto& t : stats->tiers) {
    // 1 shared block + 9 more per thread (10 puts each: ops 0, 5, ..., 45).
    if (t.tier == cache::CacheTier::kSsd) {
      EXPECT_EQ(t.entries, 1u + kThreads * 9u);
    }
  }
  ASSERT_NO_FATAL_FAILURE(StopServer());
}

}  // namespace
}  // namespace flashserve::testing
