// Operating a live `flashserve cache`: corruption on disk found by `flashctl cache verify` and
// served as a miss, the admin token, /metrics over HTTP, and flashctl's cache commands (--json).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cache_test_util.h"

namespace flashserve::testing {
namespace {

using cache::ReadStatus;
using ::testing::HasSubstr;

constexpr std::string_view kMarker = "<<FLASHSERVE-IT-CORRUPTION-TARGET-51c2>>";

constexpr std::string_view kWireHint =
    "bin/flashctl has no `cache` commands: wire tools/flashctl/commands/cache_*.cc into "
    "tools/flashctl/main.cc and CMakeLists.txt";

// Whether bin/flashctl has the `cache` commands (tools/flashctl/main.cc wires them).
bool FlashctlHasCacheCommands() {
  static const bool has = [] {
    auto r = RunCommand({BinaryPath("flashctl"), "cache", "--help"}, absl::Seconds(60));
    return r.ok() && r->exit_code == 0 && r->out.find("verify") != std::string::npos;
  }();
  return has;
}

// Runs `flashctl cache ARGS --address=...` against `server`; fails the test if it does not
// finish.
CommandResult Flashctl(const CacheServerProcess& server, std::vector<std::string> args,
                       const std::vector<std::string>& env = {}) {
  EXPECT_TRUE(FlashctlHasCacheCommands()) << kWireHint;
  std::vector<std::string> argv = {BinaryPath("flashctl"), "cache"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--address=" + server.address());
  auto r = RunCommand(argv, absl::Seconds(60), env, {"FLASHSERVE_ADMIN_TOKEN"});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  return *r;
}

nlohmann::json Json(const CommandResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.out << "\nstderr: " << r.err;
  return j;
}

void FlipByte(const std::string& file, size_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << file;
}

// Flips one byte of the marker in every .sst file and value-log segment (vlog/*.vseg) under `dir`
// that holds it; returns how many.
int CorruptMarkerInSsts(const std::string& dir) {
  int flipped = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().string();
    if (!name.ends_with(".sst") && !name.ends_with(".vseg")) continue;
    std::ifstream in(name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const size_t at = bytes.find(kMarker);
    if (at == std::string::npos) continue;
    FlipByte(name, at + kMarker.size() / 2);
    ++flipped;
  }
  return flipped;
}

class CacheOpsTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags = {}, std::string token = "") {
    auto s = CacheServerProcess::Start(dir_.path() + "/db", flags);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    auto c = server_->Client(std::move(token));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(c).value();
  }
  void Stop() {
    client_.reset();
    auto code = server_->Stop();
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << server_->Log();
  }

  ScratchDir dir_;
  std::unique_ptr<CacheServerProcess> server_;
  std::unique_ptr<cache::CacheClient> client_;
  const cache::ModelFingerprint fp_ = TestFingerprint("ops-model");
};

TEST_F(CacheOpsTest, BytesCorruptedOnDiskAreFoundByVerifyAndServedAsAMiss) {
  ASSERT_TRUE(FlashctlHasCacheCommands()) << kWireHint;
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<cache::TokenId> tokens = TestTokens(3 * 64, 11);
  BlockChain chain = MakeChain(tokens, fp_, "", 8192);  // > RocksDB's 4 KiB data blocks
  chain.payloads[1].replace(4000, kMarker.size(), kMarker);
  chain.puts[1].payload = chain.payloads[1];
  ASSERT_TRUE(client_->PutBlocks(fp_, chain.puts).ok());
  ASSERT_NO_FATAL_FAILURE(Stop());  // closing flushes the memtables into .sst files
  ASSERT_EQ(CorruptMarkerInSsts(dir_.path() + "/db"), 1);

  ASSERT_NO_FATAL_FAILURE(Start());
  // verify reads every block: one corrupt, reported by key, exit code 3; kept (no --evict).
  CommandResult r = Flashctl(*server_, {"verify", "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  nlohmann::json v = Json(r);
  EXPECT_EQ(v["checked"], 3);
  EXPECT_EQ(v["corrupt"], 1);
  EXPECT_EQ(v["complete"], true);
  ASSERT_EQ(v["corrupt_keys"].size(), 1u);
  EXPECT_EQ(v["corrupt_keys"][0], chain.keys[1].ToHex());
  r = Flashctl(*server_, {"verify"});  // the table form names it too
  EXPECT_THAT(r.out, HasSubstr("1 corrupt"));
  EXPECT_THAT(r.out, HasSubstr(chain.keys[1].ToHex()));

  // The data path never serves it: a miss (reported as corrupt), the neighbours intact.
  auto got = client_->GetBlocks(fp_, chain.keys);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].status, ReadStatus::kOk);
  EXPECT_TRUE((*got)[0].payload == chain.payloads[0]);
  EXPECT_EQ((*got)[1].status, ReadStatus::kCorrupt);
  EXPECT_TRUE((*got)[1].payload.empty());
  EXPECT_EQ((*got)[2].status, ReadStatus::kOk);
  // ... and drops it: the prefix now ends before it, and a second read is a plain miss.
  auto hit = client_->Lookup(fp_, tokens);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_tokens, 64u);
  got = client_->GetBlocks(fp_, std::span(chain.keys).subspan(1, 1));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].status, ReadStatus::kNotFound);

  auto metrics = HttpGet(server_->http_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  // Found by each of the two verify runs and by the read that dropped it.
  EXPECT_EQ(
      MetricValue(metrics->body, "fs_cache_checksum_failures_total", "tier=\"ssd\"").value_or(-1),
      3);
  EXPECT_EQ(
      MetricValue(metrics->body, "fs_cache_evictions_total", "tier=\"ssd\",reason=\"corrupt\"")
          .value_or(-1),
      1);
  EXPECT_THAT(server_->Log(), HasSubstr(chain.keys[1].ToHex()));  // logged with its key
  r = Flashctl(*server_, {"verify", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json(r)["checked"], 2);
  ASSERT_NO_FATAL_FAILURE(Stop());
}

TEST_F(CacheOpsTest, AdminTokenIsEnforcedWhenConfigured) {
  ASSERT_TRUE(FlashctlHasCacheCommands()) << kWireHint;
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.admin_token=s3cret"}));
  auto stats = client_->Stats();  // no token
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnauthenticated) << stats.status();
  auto wrong = server_->Client("not-it");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ((*wrong)->Stats().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*wrong)->Flush({}, true).status().code(), absl::StatusCode::kUnauthenticated);
  auto right = server_->Client("s3cret");
  ASSERT_TRUE(right.ok());
  EXPECT_TRUE((*right)->Stats().ok());
  // Health and the data path need no admin token.
  EXPECT_TRUE(client_->AdminHealth().ok());
  EXPECT_TRUE(client_->Lookup(fp_, TestTokens(64, 1)).ok());

  CommandResult r = Flashctl(*server_, {"stats", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("admin token required"));
  r = Flashctl(*server_, {"stats", "--json", "--token=s3cret"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Flashctl(*server_, {"stats", "--json"}, {"FLASHSERVE_ADMIN_TOKEN=s3cret"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json(r)["tiers"].size(), 2u);
  ASSERT_NO_FATAL_FAILURE(Stop());
}

TEST_F(CacheOpsTest, MetricsOverHttpShowEveryTier) {
  // Room for 4 blocks of 8 KiB: the fifth put evicts one for capacity.
  ASSERT_NO_FATAL_FAILURE(Start({"--cache.capacity=34000B"}));
  const std::vector<cache::TokenId> tokens = TestTokens(5 * 64 + 3, 21);
  BlockChain chain = MakeChain(tokens, fp_, "", 8000);
  ASSERT_TRUE(client_->PutBlocks(fp_, std::span(chain.puts).first(4)).ok());
  auto got = client_->GetBlocks(fp_, std::span(chain.keys).first(2));  // 2 hits
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(client_->PutBlocks(fp_, std::span(chain.puts).subspan(4)).ok());  // evicts 1
  cache::SwaToPut swa;
  swa.key = cache::SwaKeyForPrefix(tokens, fp_, "");
  swa.last_block = chain.keys[4];
  swa.tail.assign(tokens.end() - 3, tokens.end());
  swa.prefix_tokens = tokens.size();
  const std::string snapshot(5000, 's');
  swa.snapshot = snapshot;
  ASSERT_EQ(client_->PutSwa(fp_, swa)->outcome, cache::PutOutcome::kStored);
  ASSERT_EQ(client_->GetSwa(fp_, swa.key)->status, ReadStatus::kOk);                // dram hit
  ASSERT_EQ(client_->GetSwa(fp_, cache::SwaKey{})->status, ReadStatus::kNotFound);  // dram miss
  ASSERT_TRUE(client_->Lookup(fp_, tokens).ok());

  auto reply = HttpGet(server_->http_port(), "/metrics");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
  EXPECT_THAT(reply->headers, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  const std::string& m = reply->body;
  auto value = [&](std::string_view name, std::string_view labels) {
    auto v = MetricValue(m, name, labels);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.value_or(-1);
  };
  // The evicted block is one of the two least recently used (0 and 1 were read since).
  EXPECT_EQ(value("fs_cache_hits_total", "tier=\"ssd\""), 2);
  EXPECT_EQ(value("fs_cache_read_bytes_total", "tier=\"ssd\""), 2 * 8000);
  EXPECT_EQ(value("fs_cache_written_bytes_total", "tier=\"ssd\""), 5 * 8000);
  EXPECT_EQ(value("fs_cache_evictions_total", "tier=\"ssd\",reason=\"capacity\""), 1);
  EXPECT_EQ(value("fs_cache_evictions_total", "tier=\"ssd\",reason=\"ttl\""), 0);
  EXPECT_EQ(value("fs_cache_checksum_failures_total", "tier=\"ssd\""), 0);
  EXPECT_EQ(value("fs_cache_entries", "tier=\"ssd\""), 4);
  EXPECT_EQ(value("fs_cache_hits_total", "tier=\"dram\""), 1);
  EXPECT_EQ(value("fs_cache_misses_total", "tier=\"dram\""), 1);
  EXPECT_EQ(value("fs_cache_read_bytes_total", "tier=\"dram\""), 5000 + 8);  // + prefix trailer
  EXPECT_EQ(value("fs_cache_entries", "tier=\"dram\""), 1);
  EXPECT_EQ(value("fs_cache_get_seconds_count", "tier=\"ssd\""), 1);
  EXPECT_EQ(value("fs_cache_put_seconds_count", "tier=\"dram\""), 1);
  EXPECT_THAT(m, HasSubstr("fs_cache_get_seconds_bucket{tier=\"ssd\",le=\""));
  EXPECT_EQ(value("fs_cache_rpc_seconds_count", "service=\"CacheService\",method=\"PutBlocks\""),
            2);
  EXPECT_EQ(value("fs_cache_rpcs_total", "service=\"CacheService\",method=\"GetSwa\",code=\"OK\""),
            2);
  EXPECT_EQ(value("fs_cache_lookups_total", ""), 1);
  // Blocks 0-1 were read after the put; one of 2-3 was evicted, so the prefix holds 2 or 3.
  const double hit_tokens = value("fs_cache_lookup_tokens_total", "result=\"hit\"");
  EXPECT_TRUE(hit_tokens == 128 || hit_tokens == 192) << hit_tokens;
  EXPECT_EQ(value("fs_cache_lookup_tokens_total", "result=\"miss\""), tokens.size() - hit_tokens);

  // A flush is counted by reason too.
  ASSERT_EQ(client_->Flush({}, true)->entries, 5u);  // 4 blocks + 1 snapshot
  reply = HttpGet(server_->http_port(), "/metrics");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(MetricValue(reply->body, "fs_cache_evictions_total", "tier=\"ssd\",reason=\"flush\"")
                .value_or(-1),
            4);

  auto health = HttpGet(server_->http_port(), "/health");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
  EXPECT_THAT(health->body, HasSubstr("\"status\":\"SERVING\""));
  auto missing = HttpGet(server_->http_port(), "/nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  ASSERT_NO_FATAL_FAILURE(Stop());
}

TEST_F(CacheOpsTest, FlashctlAgainstALiveServer) {
  ASSERT_TRUE(FlashctlHasCacheCommands()) << kWireHint;
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<cache::TokenId> tokens = TestTokens(3 * 64 + 5, 31);
  BlockChain chain = MakeChain(tokens, fp_, "", 3000);
  ASSERT_TRUE(client_->PutBlocks(fp_, chain.puts).ok());
  cache::SwaToPut swa;
  swa.key = cache::SwaKeyForPrefix(tokens, fp_, "");
  swa.last_block = chain.keys[2];
  swa.tail.assign(tokens.end() - 5, tokens.end());
  swa.prefix_tokens = tokens.size();
  swa.snapshot = "snapshot";
  ASSERT_EQ(client_->PutSwa(fp_, swa)->outcome, cache::PutOutcome::kStored);
  const std::string fp_hex = fp_.ToHex();

  CommandResult r = Flashctl(*server_, {"stats", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json stats = Json(r);
  ASSERT_EQ(stats["tiers"].size(), 2u);
  EXPECT_EQ(stats["tiers"][1]["tier"], "ssd");
  EXPECT_EQ(stats["tiers"][1]["entries"], 3);
  EXPECT_EQ(stats["tiers"][1]["bytes_used"], 3 * (3000 + 120));
  EXPECT_EQ(stats["tiers"][0]["tier"], "host");
  EXPECT_EQ(stats["tiers"][0]["entries"], 1);
  ASSERT_EQ(stats["models"].size(), 1u);
  EXPECT_EQ(stats["models"][0]["fingerprint"], fp_hex);
  EXPECT_EQ(stats["models"][0]["blocks"], 3);
  EXPECT_EQ(stats["models"][0]["swa_snapshots"], 1);

  r = Flashctl(*server_, {"ls", "--json", "--limit=2", "--all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json ls = Json(r);
  ASSERT_EQ(ls["entries"].size(), 4u);
  std::vector<std::string> listed;
  for (const auto& e : ls["entries"]) listed.push_back(e["key"]);
  std::vector<std::string> block_keys;
  for (const auto& k : chain.keys) block_keys.push_back(k.ToHex());
  std::sort(block_keys.begin(), block_keys.end());  // blocks in key order, then the snapshot
  EXPECT_EQ(std::vector<std::string>(listed.begin(), listed.begin() + 3), block_keys);
  EXPECT_EQ(listed[3], swa.key.ToHex());
  EXPECT_EQ(ls["entries"][3]["kind"], "swa");
  EXPECT_EQ(ls["entries"][3]["tier"], "host");
  EXPECT_EQ(ls["next_page_token"], "");

  r = Flashctl(*server_, {"lookup", "--json", "--fingerprint", fp_hex, "--tokens",
                          absl::StrJoin(tokens, ",")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json lookup = Json(r);
  EXPECT_EQ(lookup["tokens"], tokens.size());
  EXPECT_EQ(lookup["hit_tokens"], 192);
  EXPECT_EQ(lookup["miss_tokens"], 5);
  ASSERT_EQ(lookup["blocks"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lookup["blocks"][i]["key"], chain.keys[i].ToHex());
    EXPECT_EQ(lookup["blocks"][i]["tier"], "ssd");
    EXPECT_EQ(lookup["blocks"][i]["size_bytes"], 3120);
    EXPECT_GT(lookup["blocks"][i]["ttl_remaining_ms"].get<int64_t>(), 71 * 3600 * 1000LL);
  }
  EXPECT_EQ(lookup["swa_snapshot"]["prefix_tokens"], tokens.size());
  EXPECT_EQ(lookup["swa_snapshot"]["size_bytes"], 8);
  r = Flashctl(*server_,
               {"lookup", "--fingerprint", fp_hex, "--tokens",
                absl::StrJoin(std::vector<cache::TokenId>(tokens.begin(), tokens.end() - 1), " ")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bounded replay"));  // no snapshot for that prefix end

  r = Flashctl(*server_,
               {"lookup", "--fingerprint", fp_hex, "--tokens", absl::StrJoin(tokens, ",")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(chain.keys[2].ToHex().substr(0, 16)));
  EXPECT_THAT(r.out, HasSubstr("resumes exactly"));

  // --text: the same tokenizer flashctl uses turns a prompt into the ids whose blocks we put.
  std::string text;
  for (int i = 0; i < 12; ++i) text += absl::StrCat("The quick brown fox jumps over dog ", i, ". ");
  auto ids = RunCommand({BinaryPath("flashctl"), "tokenize", "--tokenizer",
                         "tests/conformance/data/tokenizer", "--text", text, "--json"},
                        absl::Seconds(60));
  ASSERT_TRUE(ids.ok() && ids->exit_code == 0) << (ids.ok() ? ids->err : ids.status().ToString());
  const std::vector<cache::TokenId> text_tokens = Json(*ids)["ids"];
  ASSERT_GE(text_tokens.size(), 128u);
  BlockChain text_chain = MakeChain(text_tokens, fp_, "", 100);
  ASSERT_TRUE(client_->PutBlocks(fp_, std::span(text_chain.puts).first(2)).ok());
  r = Flashctl(*server_, {"lookup", "--json", "--fingerprint", fp_hex, "--text", text,
                          "--tokenizer", "tests/conformance/data/tokenizer"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json(r)["tokens"], text_tokens.size());
  EXPECT_EQ(Json(r)["hit_tokens"], 128);

  // Inspect, pin, evict and flush through flashctl.
  const std::string key1 = chain.keys[1].ToHex();
  r = Flashctl(*server_, {"inspect", key1, "--verify", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json inspect = Json(r);
  EXPECT_EQ(inspect["checksum_ok"], true);
  EXPECT_EQ(inspect["layout_version"], 1);
  EXPECT_EQ(inspect["fingerprint"], fp_hex);
  EXPECT_EQ(inspect["size_bytes"], 3120);
  EXPECT_EQ(inspect["checksum"].get<std::string>().size(), 32u);
  r = Flashctl(*server_, {"pin", key1, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json(r)["changed"], 1);
  r = Flashctl(*server_, {"evict", key1, "--json"});
  EXPECT_EQ(Json(r)["skipped_pinned"], 1);
  r = Flashctl(*server_, {"ls", "--json", "--pinned=yes"});
  ASSERT_EQ(Json(r)["entries"].size(), 1u);
  r = Flashctl(*server_, {"flush", "--fingerprint", fp_hex, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json(r)["entries"], 5);  // 2 + 2 unpinned blocks + the snapshot; the pinned one stays
  auto left = client_->Lookup(fp_, tokens);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->hit_tokens, 0u);  // block 0 is gone, so the prefix is empty
  r = Flashctl(*server_, {"unpin", key1, "--json"});
  EXPECT_EQ(Json(r)["changed"], 1);
  r = Flashctl(*server_, {"evict", key1, "--json"});
  EXPECT_EQ(Json(r)["evicted"], 1);
  r = Flashctl(*server_, {"inspect", key1});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no cached block"));
  r = Flashctl(*server_, {"inspect", "nothex"});
  EXPECT_EQ(r.exit_code, 2);
  ASSERT_NO_FATAL_FAILURE(Stop());
}

}  // namespace
}  // namespace flashserve::testing
