// An in-process CacheServer on 127.0.0.1 port 0 with a FakeClock and a temporary store, plus a
// CacheClient and a raw gRPC channel address, for the server's unit tests. Tests only.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache_service/client/cache_client.h"
#include "cache_service/server/cache_server.h"
#include "common/base/check.h"
#include "common/options/option_set.h"
#include "gtest/gtest.h"

namespace flashserve::cache::testing {

class ServerTest : public ::testing::Test {
 protected:
  ServerTest() {
    std::string tmpl = "/tmp/fs_cache_server_XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
  }
  ~ServerTest() override {
    client_.reset();
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Starts the server with the defaults, loopback port 0 and `flags` ("--cache.key=value").
  void Start(std::vector<std::string> flags = {}) {
    options::OptionSet set;
    CacheServerOptions o;
    RegisterCacheServerOptions(&set, &o);
    std::vector<std::string> args = {"--cache.listen=127.0.0.1:0",
                                     "--cache.http_listen=127.0.0.1:0",
                                     "--cache.data_dir=" + dir_ + "/db",
                                     "--cache.swa.capacity=64MiB", "--cache.shutdown_grace=2s"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto cl = set.LoadCommandLine(args);
    ASSERT_TRUE(cl.ok()) << cl.status();
    o.clock = &clock_;
    auto s = CacheServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    client_ = NewClient(token_);
  }

  std::unique_ptr<CacheClient> NewClient(const std::string& token, size_t keys_per_call = 64) {
    CacheClientOptions c;
    c.address = server_->grpc_address().ToString();
    c.admin_token = token;
    c.max_keys_per_call = keys_per_call;
    auto client = CacheClient::Connect(c);
    CHECK(client.ok()) << client.status();
    return std::move(client).value();
  }

  // Blocks of `tokens` (every full block), chained under fp_ and `salt`, payload `size` bytes
  // derived from the block index and `seed`.
  struct Chain {
    std::vector<BlockKey> keys;
    std::vector<std::string> payloads;
    std::vector<BlockToPut> puts;
  };
  Chain MakeChain(const std::vector<TokenId>& tokens, size_t size, std::string_view salt = "",
                  int seed = 0) {
    Chain c;
    c.keys = ChainKeys(tokens, fp_, salt);
    for (size_t i = 0; i < c.keys.size(); ++i) {
      std::string p(size, '\0');
      for (size_t j = 0; j < size; ++j) p[j] = static_cast<char>((i * 131 + j * 7 + seed) & 0xff);
      c.payloads.push_back(std::move(p));
    }
    for (size_t i = 0; i < c.keys.size(); ++i) {
      BlockToPut b;
      b.key = c.keys[i];
      b.parent = i == 0 ? BlockKey::Root() : c.keys[i - 1];
      b.tokens.assign(tokens.begin() + static_cast<long>(i * kBlockTokens),
                      tokens.begin() + static_cast<long>((i + 1) * kBlockTokens));
      b.payload = c.payloads[i];
      c.puts.push_back(std::move(b));
    }
    return c;
  }
  static std::vector<TokenId> Tokens(size_t n, int seed) {
    std::vector<TokenId> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = static_cast<TokenId>((i * 2654435761u + seed) % 129280);
    return t;
  }

  std::string dir_;
  FakeClock clock_;
  std::string token_;
  std::unique_ptr<CacheServer> server_;
  std::unique_ptr<CacheClient> client_;
  const ModelFingerprint fp_ =
      ComputeModelFingerprint(ModelIdentity{"config", "weights", "tokenizer", 1});
};

}  // namespace flashserve::cache::testing
