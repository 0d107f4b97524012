// The prefix-caching path end to end, with real parts: the CPU runtime prefills prompt a of the
// v41-tiny model, its global KV blocks go to a real `flashserve cache` process on 127.0.0.1
// (RocksDB in a temporary directory) under the hash-chain keys, a new session is rebuilt from a
// Lookup + GetBlocks and a bounded replay, and it continues exactly like a session rebuilt from
// the same blocks without the service — nothing is lost or altered on the way through gRPC,
// RocksDB and the checksummed block values. A different model fingerprint finds nothing.
#include <string>
#include <vector>

#include "cache_service/client/cache_client.h"
#include "cache_service/global_store/block_key.h"
#include "gtest/gtest.h"
#include "model/runtime/kv_block.h"
#include "model/runtime/runtime_fixture.h"
#include "tests/integration/cache_test_util.h"

namespace flashserve::testing {
namespace {

TEST(PrefixCacheIntegrationTest, RuntimeBlocksRoundTripThroughTheCacheService) {
  ScratchDir dir;
  auto server = CacheServerProcess::Start(dir.path() + "/db");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = (*server)->Client();
  ASSERT_TRUE(client.ok()) << client.status();

  auto model = model::testing::MakeTinyModel(kernels::LinearMode::kExact);
  const model::LayerSchedule& schedule = model->schedule();
  const std::vector<int32_t> prompt = model::testing::LoadPrompt("a").ids;
  const cache::ModelFingerprint fp = cache::ComputeModelFingerprint(
      {.config_text = "v41-tiny config", .weights_identity = "v41-tiny weights",
       .tokenizer_identity = "v41-tiny tokenizer", .layout_version = 1});
  const std::string salt = "tenant-a";

  // Prefill and store every full block.
  auto original = model->NewSession(256);
  ASSERT_TRUE(original.ok());
  model::ForwardOutput out;
  ASSERT_TRUE(model->Forward(*original, {.tokens = prompt}, &out).ok());
  const std::vector<cache::BlockKey> keys = cache::ChainKeys(prompt, fp, salt);
  ASSERT_EQ(keys.size(), 3u);
  const int64_t bytes = model::GlobalKvBlockBytes(*original, schedule);
  std::vector<std::string> payloads(keys.size(), std::string(size_t(bytes), '\0'));
  std::vector<cache::BlockToPut> puts;
  for (size_t b = 0; b < keys.size(); ++b) {
    ASSERT_TRUE(model::ExportGlobalKvBlock(
                    *original, schedule, int64_t(b),
                    {reinterpret_cast<uint8_t*>(payloads[b].data()), payloads[b].size()})
                    .ok());
    cache::BlockToPut put{.key = keys[b], .parent = b == 0 ? cache::BlockKey::Root() : keys[b - 1],
                          .payload = payloads[b]};
    put.tokens.assign(prompt.begin() + b * 64, prompt.begin() + (b + 1) * 64);
    puts.push_back(std::move(put));
  }
  auto stored = (*client)->PutBlocks(fp, puts, salt);
  ASSERT_TRUE(stored.ok()) << stored.status();
  for (const cache::PutOutcome o : *stored) ASSERT_EQ(o, cache::PutOutcome::kStored);

  // A new request with the same prompt: the longest cached prefix, its blocks, a replay.
  auto hit = (*client)->Lookup(fp, prompt, salt);
  ASSERT_TRUE(hit.ok()) << hit.status();
  ASSERT_EQ(hit->hit_tokens, 192u);
  auto got = (*client)->GetBlocks(fp, keys);
  ASSERT_TRUE(got.ok()) << got.status();
  auto served = model->NewSession(256);
  ASSERT_TRUE(served.ok());
  for (size_t b = 0; b < got->size(); ++b) {
    ASSERT_EQ((*got)[b].status, cache::ReadStatus::kOk) << "block " << b;
    const std::string& p = (*got)[b].payload;
    ASSERT_TRUE(model::ImportGlobalKvBlock(
                    *served, schedule, int64_t(b),
                    {reinterpret_cast<const uint8_t*>(p.data()), p.size()})
                    .ok());
  }
  const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + 192);
  const std::span<const int32_t> rest = std::span(prompt).subspan(192);
  model::ForwardOutput from_service, local;
  ASSERT_TRUE(model->Replay(*served, prefix, &from_service).ok());
  ASSERT_TRUE(model->Forward(*served, {.tokens = rest}, &from_service).ok());

  // The same blocks without the service.
  auto direct = model->NewSession(256);
  ASSERT_TRUE(direct.ok());
  for (size_t b = 0; b < payloads.size(); ++b) {
    ASSERT_TRUE(model::ImportGlobalKvBlock(
                    *direct, schedule, int64_t(b),
                    {reinterpret_cast<const uint8_t*>(payloads[b].data()), payloads[b].size()})
                    .ok());
  }
  ASSERT_TRUE(model->Replay(*direct, prefix, &local).ok());
  ASSERT_TRUE(model->Forward(*direct, {.tokens = rest}, &local).ok());
  EXPECT_EQ(from_service.logits, local.logits);

  // Another checkpoint (fingerprint) or tenant sees nothing.
  const cache::ModelFingerprint other = cache::ComputeModelFingerprint(
      {.config_text = "v41-tiny config", .weights_identity = "other weights",
       .tokenizer_identity = "v41-tiny tokenizer", .layout_version = 1});
  auto miss = (*client)->Lookup(other, prompt, salt);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->hit_tokens, 0u);
  auto other_tenant = (*client)->Lookup(fp, prompt, "tenant-b");
  ASSERT_TRUE(other_tenant.ok());
  EXPECT_EQ(other_tenant->hit_tokens, 0u);
  client->reset();
  auto code = (*server)->Stop();
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace flashserve::testing
