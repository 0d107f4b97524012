// The cache server rejects malformed and oversized requests with the right status and a clear
// message, through the client and through a raw gRPC stub (for what the client cannot express),
// and refuses to start on a non-loopback address without an admin token.
#include <chrono>
#include <filesystem>
#include <functional>

#include "flashserve/v1/cache.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/integration/cache_test_util.h"

namespace flashserve::testing {
namespace {

using ::testing::HasSubstr;

class CacheValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = CacheServerProcess::Start(
        dir_.path() + "/db", {"--cache.max_keys_per_request=8", "--cache.max_lookup_tokens=256",
                              "--cache.max_message_size=1MiB", "--cache.max_payload_size=512KiB"});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    // The client pages by 100 keys, above the server's limit of 8, and sends up to 64 MiB.
    auto c = server_->Client("", 100);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(c).value();
  }

  // A raw PutBlocks request holding one valid block (key, tokens, inline payload).
  v1::PutBlocksRequest ValidPut() {
    v1::PutBlocksRequest req;
    req.mutable_fingerprint()->set_digest(fp_.digest.data(), 32);
    req.mutable_fingerprint()->set_layout_version(1);
    const auto tokens = TestTokens(64, 5);
    const cache::BlockKey key = cache::ChainKeys(tokens, fp_, "")[0];
    v1::BlockPut* b = req.add_blocks();
    b->mutable_key()->set_sha256(key.bytes.data(), 32);
    for (cache::TokenId t : tokens) b->add_token_ids(static_cast<uint32_t>(t));
    b->mutable_source()->set_backend(v1::TRANSFER_BACKEND_INLINE);
    b->mutable_source()->set_inline_data("payload");
    return req;
  }
  grpc::Status RawPut(const v1::PutBlocksRequest& req, v1::PutBlocksResponse* resp) {
    auto stub = v1::CacheService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub->PutBlocks(&ctx, req, resp);
  }

  ScratchDir dir_;
  std::unique_ptr<CacheServerProcess> server_;
  std::unique_ptr<cache::CacheClient> client_;
  const cache::ModelFingerprint fp_ = TestFingerprint("validation");
};

TEST_F(CacheValidationTest, MalformedAndOversizedRequestsAreRejected) {
  // The valid request passes, so the rejections below are about what was changed.
  v1::PutBlocksResponse resp;
  grpc::Status st = RawPut(ValidPut(), &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.statuses_size(), 1);
  EXPECT_EQ(resp.statuses(0), v1::PUT_STATUS_STORED);

  struct Case {
    const char* name;
    std::function<void(v1::PutBlocksRequest*)> mutate;
    grpc::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"short key", [](auto* r) { r->mutable_blocks(0)->mutable_key()->set_sha256("short"); },
       grpc::StatusCode::INVALID_ARGUMENT, "blocks[0].key must be 32 bytes"},
      {"long parent",
       [](auto* r) { r->mutable_blocks(0)->mutable_parent()->set_sha256(std::string(33, 'p')); },
       grpc::StatusCode::INVALID_ARGUMENT, "blocks[0].parent must be 32 bytes"},
      {"63 tokens", [](auto* r) { r->mutable_blocks(0)->mutable_token_ids()->RemoveLast(); },
       grpc::StatusCode::INVALID_ARGUMENT, "has 63 tokens; a block has exactly 64"},
      {"token id >= 2^31", [](auto* r) { r->mutable_blocks(0)->set_token_ids(3, 0x80000000u); },
       grpc::StatusCode::INVALID_ARGUMENT, "is not a token id"},
      {"no fingerprint", [](auto* r) { r->clear_fingerprint(); },
       grpc::StatusCode::INVALID_ARGUMENT, "fingerprint.digest must be 32 bytes"},
      {"UCX source",
       [](auto* r) {
         r->mutable_blocks(0)->mutable_source()->set_backend(v1::TRANSFER_BACKEND_UCX);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "only TRANSFER_BACKEND_INLINE"},
      {"9 blocks",
       [](auto* r) {
         for (int i = 0; i < 8; ++i) *r->add_blocks() = r->blocks(0);
       },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "exceeds the limit 8 (cache.max_keys_per_request)"},
      {"600 KiB payload",
       [](auto* r) {
         r->mutable_blocks(0)->mutable_source()->set_inline_data(std::string(600 << 10, 'x'));
       },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "exceeds cache.max_payload_size"},
  };
  for (const Case& c : cases) {
    v1::PutBlocksRequest req = ValidPut();
    c.mutate(&req);
    v1::PutBlocksResponse r;
    grpc::Status s = RawPut(req, &r);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.name;
  }

  // Through the client: more keys than the server takes per call, a message over the gRPC limit,
  // a lookup over the token limit, a block of the wrong size.
  std::vector<cache::BlockKey> keys(9, cache::BlockKey::Root());
  auto got = client_->GetBlocks(fp_, keys);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("cache.max_keys_per_request"));

  const auto tokens = TestTokens(64, 6);
  BlockChain chain = MakeChain(tokens, fp_, "", 2 << 20);  // 2 MiB > 1 MiB message limit
  auto put = client_->PutBlocks(fp_, chain.puts);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kResourceExhausted) << put.status();

  auto lookup = client_->Lookup(fp_, TestTokens(257, 7));
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kResourceExhausted) << lookup.status();
  EXPECT_THAT(std::string(lookup.status().message()), HasSubstr("cache.max_lookup_tokens"));

  BlockChain short_block = MakeChain(tokens, fp_, "", 16);
  short_block.puts[0].tokens.pop_back();
  put = client_->PutBlocks(fp_, short_block.puts);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument) << put.status();

  cache::SwaToPut swa;
  swa.key = cache::SwaKeyForPrefix(tokens, fp_, "");
  swa.tail.assign(tokens.begin(), tokens.end());  // 64 tail tokens: a full block is not a tail
  swa.prefix_tokens = 64;
  swa.snapshot = "s";
  auto put_swa = client_->PutSwa(fp_, swa);
  EXPECT_EQ(put_swa.status().code(), absl::StatusCode::kInvalidArgument) << put_swa.status();

  // The server is still healthy and holds exactly the one valid block.
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, cache::ServingStatus::kServing);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const auto& t : stats->tiers) {
    if (t.tier == cache::CacheTier::kSsd) {
      EXPECT_EQ(t.entries, 1u);
    }
  }
}

TEST(CacheStartup, RefusesNonLoopbackWithoutAdminToken) {
  ScratchDir dir;
  auto r = RunCommand({BinaryPath("flashserve"), "cache", "--cache.listen=0.0.0.0:0",
                       "--cache.http_listen=127.0.0.1:0", "--cache.data_dir=" + dir.path() + "/db"},
                      absl::Seconds(30), {}, {"FLASHSERVE_ADMIN_TOKEN"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->err;
  EXPECT_THAT(r->err, HasSubstr("not a loopback address: set cache.admin_token"));
  EXPECT_EQ(r->out, "");                                      // never said it was listening
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/db"));  // refused before opening the store

  // Unknown options are errors too.
  r = RunCommand({BinaryPath("flashserve"), "cache", "--cache.capacty=1GiB"}, absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("cache.capacity"));  // the suggestion
}

}  // namespace
}  // namespace flashserve::testing
