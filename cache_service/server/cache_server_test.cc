// CacheService through a real gRPC server in-process (FakeClock): lookup metadata, TTLs, pins,
// SWA snapshots, reply limits, shutdown.
#include "cache_service/server/server_test_util.h"
#include "gmock/gmock.h"

namespace flashserve::cache {
namespace {

using ::testing::HasSubstr;
using testing::ServerTest;

class CacheServiceTest : public ServerTest {};

TEST_F(CacheServiceTest, LookupReportsAgeTtlPinsAndExpiry) {
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.ttl=72h"}));
  const std::vector<TokenId> tokens = Tokens(2 * 64 + 7, 1);
  Chain chain = MakeChain(tokens, 1000);
  auto put = client_->PutBlocks(fp_, chain.puts);
  ASSERT_TRUE(put.ok()) << put.status();

  clock_.Advance(absl::Minutes(30));
  auto hit = client_->Lookup(fp_, tokens, "", /*touch=*/false);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_tokens, 128u);
  ASSERT_EQ(hit->blocks.size(), 2u);
  EXPECT_EQ(hit->blocks[0].age, absl::Minutes(30));
  EXPECT_EQ(hit->blocks[0].ttl_remaining, absl::Hours(72) - absl::Minutes(30));
  EXPECT_EQ(hit->blocks[1].size_bytes, EncodedBlockValueBytes(1000));

  // A touching lookup restarts the TTL (counted from the last access); age keeps counting.
  ASSERT_TRUE(client_->Lookup(fp_, tokens, "", /*touch=*/true).ok());
  clock_.Advance(absl::Minutes(10));
  hit = client_->Lookup(fp_, tokens, "", false);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->blocks[1].age, absl::Minutes(40));
  EXPECT_EQ(hit->blocks[1].ttl_remaining, absl::Hours(72) - absl::Minutes(10));

  // Pin block 0: no TTL; block 1 expires.
  auto pinned = client_->Pin(std::vector<EntryRef>{EntryRef::Block(chain.keys[0])});
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->changed, 1u);
  clock_.Advance(absl::Hours(73));
  hit = client_->Lookup(fp_, tokens, "", false);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_tokens, 64u);
  ASSERT_EQ(hit->blocks.size(), 1u);
  EXPECT_TRUE(hit->blocks[0].pinned);
  EXPECT_EQ(hit->blocks[0].ttl_remaining, absl::ZeroDuration());
  auto got = client_->GetBlocks(fp_, chain.keys);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].status, ReadStatus::kOk);
  EXPECT_EQ((*got)[1].status, ReadStatus::kNotFound);
}

TEST_F(CacheServiceTest, PerRequestTtlsThroughTheService) {
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.ttl=72h", "--cache.max_ttl=240h", "--cache.swa.ttl=10m",
                                 "--cache.swa.max_ttl=1h"}));
  const std::vector<TokenId> tokens = Tokens(2 * 64 + 7, 3);
  Chain chain = MakeChain(tokens, 500);
  // Beyond cache.max_ttl: INVALID_ARGUMENT, nothing stored.
  auto too_long = client_->PutBlocks(fp_, chain.puts, "", false, 241 * 3600);
  EXPECT_TRUE(absl::IsInvalidArgument(too_long.status())) << too_long.status();
  auto miss = client_->Lookup(fp_, tokens, "", false);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->hit_tokens, 0u);
  // Block 0 with 2 h, block 1 with the default.
  ASSERT_TRUE(client_->PutBlocks(fp_, std::span(chain.puts).first(1), "", false, 7200).ok());
  ASSERT_TRUE(client_->PutBlocks(fp_, std::span(chain.puts).subspan(1)).ok());
  auto hit = client_->Lookup(fp_, tokens, "", false);
  ASSERT_TRUE(hit.ok());
  ASSERT_EQ(hit->blocks.size(), 2u);
  EXPECT_EQ(hit->blocks[0].ttl_remaining, absl::Hours(2));
  EXPECT_EQ(hit->blocks[1].ttl_remaining, absl::Hours(72));
  clock_.Advance(absl::Hours(3));
  hit = client_->Lookup(fp_, tokens, "", false);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_tokens, 0u);  // block 0 expired: the chain breaks there

  // SWA: a 2-minute snapshot; the reply's expiry says so; beyond swa.max_ttl is rejected.
  SwaToPut put;
  put.last_block = chain.keys[0];
  put.tail = std::vector<TokenId>(tokens.begin() + 64, tokens.begin() + 100);
  put.prefix_tokens = 100;
  put.key = SwaKeyForPrefix(std::span(tokens).first(100), fp_, "");
  const std::string snapshot(4096, 's');
  put.snapshot = snapshot;
  put.ttl_s = 7200;
  EXPECT_TRUE(absl::IsInvalidArgument(client_->PutSwa(fp_, put).status()));
  put.ttl_s = 120;
  auto swa = client_->PutSwa(fp_, put);
  ASSERT_TRUE(swa.ok()) << swa.status();
  EXPECT_EQ(swa->outcome, PutOutcome::kStored);
  EXPECT_EQ(swa->expires - clock_.Now(), absl::Minutes(2));
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(client_->GetSwa(fp_, put.key)->status, ReadStatus::kOk);
  clock_.Advance(absl::Minutes(2) + absl::Seconds(1));
  EXPECT_EQ(client_->GetSwa(fp_, put.key)->status, ReadStatus::kNotFound);
}

TEST_F(CacheServiceTest, SnapshotFoundForTheLongestPrefixEnd) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<TokenId> tokens = Tokens(3 * 64 + 40, 2);
  Chain chain = MakeChain(tokens, 64);
  ASSERT_TRUE(client_->PutBlocks(fp_, std::span(chain.puts).first(2)).ok());  // 128 tokens hit
  // Snapshots ending at 150 and 170 (in [128, 192), after the hit), at 100 (inside the hit) and
  // at 200 (beyond the next block).
  auto put_snapshot = [&](size_t end, std::string bytes) {
    SwaToPut s;
    const std::span<const TokenId> prefix(tokens.data(), end);
    s.key = SwaKeyForPrefix(prefix, fp_, "");
    s.last_block = chain.keys[end / 64 - 1];
    s.tail.assign(tokens.begin() + static_cast<long>(end / 64 * 64),
                  tokens.begin() + static_cast<long>(end));
    s.prefix_tokens = end;
    s.snapshot = bytes;
    auto r = client_->PutSwa(fp_, s);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->outcome, PutOutcome::kStored);
    EXPECT_EQ(r->expires, clock_.Now() + absl::Minutes(10));
    return s.key;
  };
  put_snapshot(100, "at-100");
  put_snapshot(150, "at-150");
  const SwaKey at170 = put_snapshot(170, "at-170");
  put_snapshot(200, "at-200");

  auto hit = client_->Lookup(fp_, tokens);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_tokens, 128u);
  ASSERT_TRUE(hit->swa.has_value());
  EXPECT_EQ(hit->swa->prefix_tokens, 170u);  // the longest end in [hit, hit + 64)
  EXPECT_EQ(hit->swa->key, at170);
  EXPECT_EQ(hit->swa->size_bytes, 6u);
  // A request that stops at token 160 only sees the snapshot at 150.
  hit = client_->Lookup(fp_, std::span(tokens).first(160));
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit->swa.has_value());
  EXPECT_EQ(hit->swa->prefix_tokens, 150u);
  // With only block 0 matching (another block 1), the window is [64, 128): the one at 100.
  std::vector<TokenId> other = tokens;
  other[64] ^= 1;
  hit = client_->Lookup(fp_, std::span(other).first(120));
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_tokens, 64u);
  EXPECT_FALSE(hit->swa.has_value());  // token 64 differs, so the prefix ending at 100 differs
  hit = client_->Lookup(fp_, std::span(tokens).first(120));
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_tokens, 64u);  // only one full block in 120 tokens
  ASSERT_TRUE(hit->swa.has_value());
  EXPECT_EQ(hit->swa->prefix_tokens, 100u);

  auto got = client_->GetSwa(fp_, at170);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->status, ReadStatus::kOk);
  EXPECT_EQ(got->snapshot, "at-170");
  EXPECT_EQ(got->prefix_tokens, 170u);
  clock_.Advance(absl::Minutes(11));  // past the SWA TTL
  hit = client_->Lookup(fp_, tokens);
  ASSERT_TRUE(hit.ok());
  EXPECT_FALSE(hit->swa.has_value());
  EXPECT_EQ(client_->GetSwa(fp_, at170)->status, ReadStatus::kNotFound);
}

TEST_F(CacheServiceTest, SnapshotPrefixMustMatchItsKeyParts) {
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.swa.capacity=1MiB"}));
  const std::vector<TokenId> tokens = Tokens(70, 3);
  SwaToPut s;
  s.key = SwaKeyForPrefix(tokens, fp_, "");
  s.last_block = ChainKeys(tokens, fp_, "")[0];
  s.tail.assign(tokens.begin() + 64, tokens.end());
  s.snapshot = "x";
  s.prefix_tokens = 71;  // not 64 + 6
  auto r = client_->PutSwa(fp_, s);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("prefix_tokens 71 is inconsistent"));
  s.prefix_tokens = 70;
  s.last_block = BlockKey::Root();  // 70 tokens need a last full block
  EXPECT_EQ(client_->PutSwa(fp_, s).status().code(), absl::StatusCode::kInvalidArgument);
  s.last_block = ChainKeys(tokens, fp_, "")[0];
  EXPECT_EQ(client_->PutSwa(fp_, s)->outcome, PutOutcome::kStored);
  // Snapshot larger than the pool: rejected as full, nothing evicted.
  const std::string huge(2 << 20, 'h');
  s.snapshot = huge;
  EXPECT_EQ(client_->PutSwa(fp_, s)->outcome, PutOutcome::kRejectedFull);
}

TEST_F(CacheServiceTest, RepliesStayUnderTheMessageLimit) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--cache.max_message_size=1MiB", "--cache.max_payload_size=512KiB"}));
  const std::vector<TokenId> tokens = Tokens(4 * 64, 4);
  Chain chain = MakeChain(tokens, 300 << 10);
  auto small_pages = NewClient("", /*keys_per_call=*/2);
  ASSERT_TRUE(small_pages->PutBlocks(fp_, chain.puts).ok());
  auto got = client_->GetBlocks(fp_, chain.keys);  // 4 x 300 KiB in one reply
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("ask for fewer keys"));
  got = small_pages->GetBlocks(fp_, chain.keys);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE((*got)[i].payload == chain.payloads[i]) << i;
}

TEST_F(CacheServiceTest, PinnedPutsAndFullStore) {
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.capacity=4000B"}));
  const std::vector<TokenId> tokens = Tokens(3 * 64, 5);
  Chain chain = MakeChain(tokens, 1500);  // 1620 encoded bytes each: two fit
  auto put = client_->PutBlocks(fp_, std::span(chain.puts).first(2), "", /*pin=*/true);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ((*put)[0], PutOutcome::kStored);
  auto hit = client_->Lookup(fp_, tokens, "", false);
  ASSERT_TRUE(hit.ok());
  ASSERT_EQ(hit->blocks.size(), 2u);
  EXPECT_TRUE(hit->blocks[0].pinned && hit->blocks[1].pinned);
  put = client_->PutBlocks(fp_, std::span(chain.puts).subspan(2));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ((*put)[0], PutOutcome::kRejectedFull);  // only pinned bytes: nothing evictable
}

TEST_F(CacheServiceTest, HealthThenShutdownClosesTheStore) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, ServingStatus::kServing);
  EXPECT_EQ(health->role, "cache");
  const std::vector<TokenId> tokens = Tokens(64, 6);
  Chain chain = MakeChain(tokens, 100);
  ASSERT_TRUE(client_->PutBlocks(fp_, chain.puts).ok());
  ASSERT_TRUE(server_->Shutdown().ok());
  EXPECT_EQ(client_->Health().status().code(), absl::StatusCode::kUnavailable);
  // The store was closed cleanly: a new server on the same directory serves the block.
  server_.reset();
  client_.reset();
  ASSERT_NO_FATAL_FAILURE(Start());
  auto got = client_->GetBlocks(fp_, chain.keys);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE((*got)[0].payload == chain.payloads[0]);
}

}  // namespace
}  // namespace flashserve::cache
