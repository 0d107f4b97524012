// AdminService through a real gRPC server in-process: auth, stats, paged listing with filters,
// inspect, evict, pin, flush, verify, compact.
#include <set>

#include "cache_service/server/server_test_util.h"
#include "gmock/gmock.h"

namespace flashserve::cache {
namespace {

using ::testing::HasSubstr;
using testing::ServerTest;

class AdminServiceTest : public ServerTest {
 protected:
  // Two models: 3 blocks + 1 snapshot for fp_, 2 blocks for other_.
  void Populate() {
    tokens_ = Tokens(3 * 64 + 5, 10);
    chain_ = MakeChain(tokens_, 500);
    ASSERT_TRUE(client_->PutBlocks(fp_, chain_.puts).ok());
    SwaToPut s;
    s.key = SwaKeyForPrefix(tokens_, fp_, "");
    s.last_block = chain_.keys[2];
    s.tail.assign(tokens_.end() - 5, tokens_.end());
    s.prefix_tokens = tokens_.size();
    s.snapshot = "snapshot-bytes";
    ASSERT_EQ(client_->PutSwa(fp_, s)->outcome, PutOutcome::kStored);
    swa_key_ = s.key;
    const std::vector<TokenId> other_tokens = Tokens(2 * 64, 11);
    std::vector<BlockKey> other_keys = ChainKeys(other_tokens, other_, "");
    std::vector<BlockToPut> puts(2);
    for (int i = 0; i < 2; ++i) {
      puts[i].key = other_keys[i];
      puts[i].parent = i == 0 ? BlockKey::Root() : other_keys[0];
      puts[i].tokens.assign(other_tokens.begin() + 64 * i, other_tokens.begin() + 64 * (i + 1));
      puts[i].payload = "other";
    }
    ASSERT_TRUE(client_->PutBlocks(other_, puts).ok());
  }

  std::vector<TokenId> tokens_;
  Chain chain_;
  SwaKey swa_key_;
  const ModelFingerprint other_ =
      ComputeModelFingerprint(ModelIdentity{"config2", "weights2", "tokenizer2", 1});
};

TEST_F(AdminServiceTest, TokenRequiredWhenConfigured) {
  token_ = "";
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.admin_token=hunter2"}));
  auto st = client_->Stats();
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("admin token required"));
  EXPECT_EQ(NewClient("hunter3")->List({}).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(NewClient("hunter22")->Compact().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(NewClient("hunter2")->Stats().ok());
  EXPECT_TRUE(client_->AdminHealth().ok());  // Health needs no token
}

TEST_F(AdminServiceTest, StatsPerTierAndModel) {
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.capacity=1MiB"}));
  ASSERT_NO_FATAL_FAILURE(Populate());
  ASSERT_TRUE(client_->GetBlocks(fp_, chain_.keys).ok());  // 3 hits
  ASSERT_TRUE(client_->Lookup(fp_, tokens_).ok());
  auto st = client_->Stats();
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->tiers.size(), 2u);
  const TierStatsInfo& host = st->tiers[0];
  const TierStatsInfo& ssd = st->tiers[1];
  EXPECT_EQ(host.tier, CacheTier::kHost);
  EXPECT_EQ(host.entries, 1u);
  EXPECT_EQ(host.bytes_capacity, 64u << 20);
  EXPECT_EQ(ssd.tier, CacheTier::kSsd);
  EXPECT_EQ(ssd.entries, 5u);
  EXPECT_EQ(ssd.bytes_used, 3 * EncodedBlockValueBytes(500) + 2 * EncodedBlockValueBytes(5));
  EXPECT_EQ(ssd.bytes_capacity, 1u << 20);
  EXPECT_EQ(ssd.hits, 3u);
  EXPECT_EQ(ssd.bytes_read, 1500u);
  EXPECT_EQ(ssd.bytes_written, 1510u);
  EXPECT_EQ(st->lookups, 1u);
  EXPECT_EQ(st->lookup_hit_tokens, 192u);
  EXPECT_EQ(st->lookup_miss_tokens, 5u);
  ASSERT_EQ(st->models.size(), 2u);
  for (const ModelUsageInfo& m : st->models) {
    if (m.fingerprint == fp_.digest) {
      EXPECT_EQ(m.blocks, 3u);
      EXPECT_EQ(m.swa_snapshots, 1u);
    } else {
      EXPECT_EQ(m.fingerprint, other_.digest);
      EXPECT_EQ(m.blocks, 2u);
      EXPECT_EQ(m.swa_snapshots, 0u);
    }
  }
}

TEST_F(AdminServiceTest, ListPagesThroughBothTiersWithFilters) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(Populate());
  std::vector<EntryDetails> all;
  std::string token;
  int pages = 0;
  do {
    auto page = client_->List({}, 2, token);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->entries.size(), 2u);
    for (auto& e : page->entries) all.push_back(e);
    token = page->next_page_token;
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  ASSERT_EQ(all.size(), 6u);  // 5 blocks, then the snapshot
  std::set<std::string> seen;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].ref.is_block, i < 5) << i;
    seen.insert(DigestToHex(all[i].ref.key));
    if (i > 0 && i < 5) {
      // Key order: fingerprint digest, then block key.
      const auto a = std::make_pair(all[i - 1].fingerprint, all[i - 1].ref.key);
      const auto b = std::make_pair(all[i].fingerprint, all[i].ref.key);
      EXPECT_LT(a, b);
    }
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(all[5].ref.key, swa_key_.bytes);
  EXPECT_EQ(all[5].tier, CacheTier::kHost);
  EXPECT_EQ(all[5].size_bytes, 14u);

  EntryFilterSpec only_fp;
  only_fp.fingerprint = fp_.digest;
  only_fp.swa = false;
  auto page = client_->List(only_fp, 100);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->entries.size(), 3u);
  EXPECT_TRUE(page->next_page_token.empty());
  EntryFilterSpec host;
  host.tier = CacheTier::kHost;
  page = client_->List(host);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_FALSE(page->entries[0].ref.is_block);

  ASSERT_EQ(client_->Pin(std::vector<EntryRef>{EntryRef::Block(chain_.keys[1])})->changed, 1u);
  EntryFilterSpec pinned;
  pinned.pinned = true;
  page = client_->List(pinned);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].ref.key, chain_.keys[1].bytes);
  EXPECT_FALSE(page->entries[0].expires.has_value());

  EXPECT_EQ(client_->List({}, 10, "b:zz").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->List({}, 10, "q:").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(AdminServiceTest, InspectEvictPinUnpin) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(Populate());
  auto info = client_->Inspect(EntryRef::Block(chain_.keys[0]), /*verify=*/true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->entry.fingerprint, fp_.digest);
  EXPECT_EQ(info->entry.layout_version, 1u);
  EXPECT_EQ(info->entry.size_bytes, EncodedBlockValueBytes(500));
  EXPECT_EQ(info->header_bytes, 104u);
  EXPECT_EQ(info->checksum_algorithm, "xxh3-128");
  EXPECT_EQ(info->checksum.size(), 16u);
  EXPECT_EQ(info->checksum_ok, std::optional<bool>(true));
  EXPECT_EQ(info->entry.created, clock_.Now());
  info = client_->Inspect(EntryRef::Block(chain_.keys[0]), /*verify=*/false);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->checksum_ok.has_value());
  info = client_->Inspect(EntryRef::Swa(swa_key_), true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->entry.tier, CacheTier::kHost);
  EXPECT_EQ(info->checksum_ok, std::optional<bool>(true));
  EXPECT_EQ(client_->Inspect(EntryRef::Block(BlockKey{})).status().code(),
            absl::StatusCode::kNotFound);

  const std::vector<EntryRef> first = {EntryRef::Block(chain_.keys[0])};
  EXPECT_EQ(client_->Pin(first)->changed, 1u);
  EXPECT_EQ(client_->Pin(first)->changed, 0u);  // already pinned
  auto evicted = client_->Evict(first);
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(evicted->skipped_pinned, 1u);
  auto swa_evicted = client_->Evict(std::vector<EntryRef>{EntryRef::Swa(swa_key_)});
  ASSERT_TRUE(swa_evicted.ok());
  EXPECT_EQ(swa_evicted->evicted, 1u);
  EXPECT_EQ(client_->GetSwa(fp_, swa_key_)->status, ReadStatus::kNotFound);
  clock_.Advance(absl::Hours(100));  // pinned: does not expire
  EXPECT_EQ(client_->Unpin(first)->changed, 1u);
  // Unpinning restarts the TTL: the block is live with a full TTL, not expired at once.
  auto after = client_->Lookup(fp_, tokens_, "", /*touch=*/false);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->blocks.size(), 1u);  // blocks 1 and 2 expired meanwhile
  EXPECT_EQ(after->blocks[0].ttl_remaining, absl::Hours(72));
  evicted = client_->Evict(std::vector<EntryRef>{
      EntryRef::Block(chain_.keys[0]), EntryRef::Swa(swa_key_), EntryRef::Block(BlockKey{})});
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(evicted->evicted, 1u);
  EXPECT_EQ(evicted->not_found, 2u);  // the evicted snapshot and BlockKey{}
  EXPECT_EQ(client_->Lookup(fp_, tokens_)->hit_tokens, 0u);
  auto swa_pin = client_->Pin(std::vector<EntryRef>{EntryRef::Swa(swa_key_)});
  EXPECT_EQ(swa_pin.status().code(), absl::StatusCode::kInvalidArgument);
  auto not_found = client_->Unpin(std::vector<EntryRef>{EntryRef::Block(BlockKey{})});
  ASSERT_TRUE(not_found.ok());
  EXPECT_EQ(not_found->not_found, 1u);
}

TEST_F(AdminServiceTest, FlushByModelKindAndPins) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(Populate());
  ASSERT_EQ(client_->Pin(std::vector<EntryRef>{EntryRef::Block(chain_.keys[2])})->changed, 1u);
  EntryFilterSpec fp_only;
  fp_only.fingerprint = fp_.digest;
  auto dry = client_->Flush(fp_only, false, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->entries, 3u);                        // 2 unpinned blocks + the snapshot
  EXPECT_EQ(client_->Stats()->tiers[1].entries, 5u);  // nothing removed
  auto done = client_->Flush(fp_only);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->entries, 3u);
  EXPECT_EQ(done->bytes, 2 * EncodedBlockValueBytes(500) + 14 + 8);
  auto left = client_->List({});
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->entries.size(), 3u);  // the pinned block and the other model's two
  auto all = client_->Flush({}, /*include_pinned=*/true);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->entries, 3u);
  EXPECT_TRUE(client_->List({})->entries.empty());
}

TEST_F(AdminServiceTest, VerifyPagesAndCompact) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(Populate());
  uint64_t checked = 0;
  std::string token;
  int calls = 0;
  do {
    auto page = client_->Verify({}, 2, token);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->checked, 2u);
    EXPECT_EQ(page->corrupt, 0u);
    checked += page->checked;
    token = page->next_page_token;
    ASSERT_LT(++calls, 10);
  } while (!token.empty());
  EXPECT_EQ(checked, 5u);
  EXPECT_EQ(calls, 3);
  EntryFilterSpec other;
  other.fingerprint = other_.digest;
  EXPECT_EQ(client_->Verify(other)->checked, 2u);

  ASSERT_TRUE(client_->Flush(other).ok());
  auto compact = client_->Compact();
  ASSERT_TRUE(compact.ok()) << compact.status();
  EXPECT_GT(compact->bytes_after, 0u);  // fp_'s three blocks remain on disk
  auto got = client_->GetBlocks(fp_, chain_.keys);
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE((*got)[i].payload == chain_.payloads[i]);
}

}  // namespace
}  // namespace flashserve::cache
