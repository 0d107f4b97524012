#include "cache_service/server/server_options.h"

#include <stdlib.h>

#include "common/options/option_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

using ::testing::HasSubstr;

TEST(ParseHostPort, Forms) {
  auto hp = ParseHostPort("127.0.0.1:0", 8100);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 0);
  hp = ParseHostPort("10.1.2.3", 8100);
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->port, 8100);
  EXPECT_EQ(hp->ToString(), "10.1.2.3:8100");
  hp = ParseHostPort("[::1]:9000", 8100);
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 9000);
  EXPECT_EQ(hp->ToString(), "[::1]:9000");
  hp = ParseHostPort("::1", 8100);  // a bare IPv6 host keeps the default port
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 8100);
  for (const char* bad :
       {"", ":80", "host:", "host:65536", "host:-1", "host:x", "[::1", "[::1]x"}) {
    EXPECT_FALSE(ParseHostPort(bad, 8100).ok()) << bad;
  }
}

TEST(IsLoopbackHost, OnlyLoopback) {
  for (const char* h : {"localhost", "127.0.0.1", "127.255.0.9", "::1"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "10.0.0.1", "::", "example.com", "128.0.0.1", "::2"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

class CacheServerOptionsTest : public ::testing::Test {
 protected:
  CacheServerOptionsTest() {
    unsetenv("FLASHSERVE_ADMIN_TOKEN");
    RegisterCacheServerOptions(&set_, &o_);
  }
  absl::Status Load(std::vector<std::string> args) {
    absl::StatusOr<options::CommandLine> cl = set_.LoadCommandLine(args);
    if (!cl.ok()) return cl.status();
    return CheckCacheServerOptions(&o_);
  }
  options::OptionSet set_;
  CacheServerOptions o_;
};

TEST_F(CacheServerOptionsTest, DefaultsAreLoopbackOnTheDocumentedPorts) {
  ASSERT_TRUE(Load({}).ok());
  EXPECT_EQ(o_.listen, "127.0.0.1:8100");
  EXPECT_EQ(o_.http_listen, "127.0.0.1:8101");
  EXPECT_EQ(o_.capacity, options::ByteSize::GiB(64));
  EXPECT_EQ(o_.ttl, absl::Hours(72));
  EXPECT_EQ(o_.swa_ttl, absl::Minutes(10));
  EXPECT_EQ(o_.max_keys_per_request, 1024);
  EXPECT_TRUE(o_.admin_token.empty());
}

TEST_F(CacheServerOptionsTest, NonLoopbackNeedsAToken) {
  absl::Status st = Load({"--cache.listen=0.0.0.0:8100"});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("set cache.admin_token"));
  EXPECT_TRUE(Load({"--cache.listen=0.0.0.0:8100", "--cache.admin_token=t"}).ok());
}

TEST_F(CacheServerOptionsTest, TokenFromTheEnvironment) {
  setenv("FLASHSERVE_ADMIN_TOKEN", "from-env", 1);
  EXPECT_TRUE(Load({"--cache.listen=10.0.0.1"}).ok());
  EXPECT_EQ(o_.admin_token, "from-env");
  unsetenv("FLASHSERVE_ADMIN_TOKEN");
}

TEST_F(CacheServerOptionsTest, BadValuesAreErrors) {
  EXPECT_FALSE(Load({"--cache.listen=host:99999"}).ok());
  EXPECT_FALSE(Load({"--cache.max_keys_per_request=0"}).ok());
  EXPECT_FALSE(Load({"--cache.ttl=0s"}).ok());
  EXPECT_FALSE(Load({"--cache.unknown=1"}).ok());
  // A payload limit that leaves no room in a message.
  EXPECT_FALSE(Load({"--cache.max_message_size=1MiB", "--cache.max_payload_size=1MiB"}).ok());
}

}  // namespace
}  // namespace flashserve::cache
