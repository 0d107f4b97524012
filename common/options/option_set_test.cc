#include "common/options/option_set.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/options/test_util.h"
#include "common/options/validators.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::options {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct AllTypes {
  bool verbose = false;
  int64_t ttl_hours = 0;
  double ratio = 0;
  std::string listen;
  absl::Duration sweep;
  ByteSize capacity;
  std::vector<std::string> tiers;
  std::vector<int64_t> layers;
};

void Register(OptionSet& set, AllTypes& o) {
  set.Add("verbose", &o.verbose, false, "Log more.");
  set.Add("cache.ttl_hours", &o.ttl_hours, 72, "Hours a block lives.", AtLeast<int64_t>(1));
  set.Add("cache.ratio", &o.ratio, 0.5, "Fraction kept.", InRange(0.0, 1.0));
  set.Add("server.listen", &o.listen, "0.0.0.0:8000", "HTTP address.", NonEmpty());
  set.Add("cache.sweep", &o.sweep, absl::Minutes(10), "Sweep period.");
  set.Add("cache.capacity", &o.capacity, ByteSize::GiB(10), "SSD budget.");
  set.Add("cache.tiers", &o.tiers, {"dram", "ssd"}, "Tiers in order.");
  set.Add("model.layers", &o.layers, {2, 8, 14, 20}, "Global KV layers.");
}

class OptionSetTest : public ::testing::Test {
 protected:
  OptionSetTest() { Register(set_, o_); }
  testing_util::TempConfigDir dir_;
  AllTypes o_;
  OptionSet set_;
};

TEST_F(OptionSetTest, AddStoresDefaults) {
  EXPECT_FALSE(o_.verbose);
  EXPECT_EQ(o_.ttl_hours, 72);
  EXPECT_EQ(o_.ratio, 0.5);
  EXPECT_EQ(o_.listen, "0.0.0.0:8000");
  EXPECT_EQ(o_.sweep, absl::Minutes(10));
  EXPECT_EQ(o_.capacity, ByteSize::GiB(10));
  EXPECT_THAT(o_.tiers, ElementsAre("dram", "ssd"));
  EXPECT_THAT(o_.layers, ElementsAre(2, 8, 14, 20));
  EXPECT_EQ(set_.SourceOf("cache.ttl_hours"), "default");
  EXPECT_TRUE(set_.Validate().ok());
}

TEST_F(OptionSetTest, LoadsEveryTypeFromNestedYaml) {
  const std::string path = dir_.Write("c.yaml", R"(
verbose: yes
cache:
  ttl_hours: 48
  ratio: 0.25
  sweep: 1h30m
  capacity: 1.5GB
  tiers: [ssd]
  ttl_hours_unused_comment: ~
server:
  listen: "[::]:9000"
model.layers: [20]
)");
  absl::Status status = set_.LoadFile(path);
  ASSERT_FALSE(status.ok());  // the ~ key is unknown: strict even for nulls
  EXPECT_THAT(status.message(), HasSubstr("unknown option 'cache.ttl_hours_unused_comment'"));

  const std::string good = dir_.Write("good.yaml", R"(
verbose: yes
cache:
  ttl_hours: 48
  ratio: 0.25
  sweep: 1h30m
  capacity: 1.5GB
  tiers: [ssd]
server:
  listen: "[::]:9000"
model.layers: [20]
)");
  ASSERT_TRUE(set_.LoadFile(good).ok()) << set_.LoadFile(good);
  EXPECT_TRUE(o_.verbose);
  EXPECT_EQ(o_.ttl_hours, 48);
  EXPECT_EQ(o_.ratio, 0.25);
  EXPECT_EQ(o_.sweep, absl::Minutes(90));
  EXPECT_EQ(o_.capacity.bytes, 1500000000u);
  EXPECT_THAT(o_.tiers, ElementsAre("ssd"));
  EXPECT_EQ(o_.listen, "[::]:9000");
  EXPECT_THAT(o_.layers, ElementsAre(20));
  EXPECT_EQ(set_.SourceOf("cache.ttl_hours"), good + ":4:14");
}

TEST_F(OptionSetTest, LoadsEveryTypeFromJson) {
  const std::string path = dir_.Write("c.json", R"({
    "verbose": true,
    "cache": {"ttl_hours": 24, "ratio": 1, "sweep": "500ms", "capacity": "512MiB",
              "tiers": []},
    "server": {"listen": "127.0.0.1:1"},
    "model": {"layers": [2, 8]}
  })");
  ASSERT_TRUE(set_.LoadFile(path).ok()) << set_.LoadFile(path);
  EXPECT_TRUE(o_.verbose);
  EXPECT_EQ(o_.ttl_hours, 24);
  EXPECT_EQ(o_.ratio, 1.0);
  EXPECT_EQ(o_.sweep, absl::Milliseconds(500));
  EXPECT_EQ(o_.capacity, ByteSize::MiB(512));
  EXPECT_TRUE(o_.tiers.empty());
  EXPECT_EQ(o_.listen, "127.0.0.1:1");
  EXPECT_THAT(o_.layers, ElementsAre(2, 8));
  // A JSON integer is a byte count.
  ASSERT_TRUE(set_.LoadFile(dir_.Write("n.json", R"({"cache": {"capacity": 4096}})")).ok());
  EXPECT_EQ(o_.capacity.bytes, 4096u);
}

// Each case: file contents, then text the error must contain. The field must stay unchanged.
struct BadValueCase {
  const char* name;
  const char* contents;
  const char* message;
};

TEST_F(OptionSetTest, WrongTypesNameKeyTypeAndValue) {
  const BadValueCase cases[] = {
      {"a.yaml", "cache:\n  ttl_hours: abc\n",
       "option 'cache.ttl_hours' (int64) in %s:2:14: expected an integer, got 'abc'"},
      {"b.yaml", "cache:\n  ttl_hours: 1.5\n", "expected an integer, got '1.5'"},
      {"c.yaml", "cache:\n  ttl_hours: \"48\"\n", "expected an integer, got a string '48'"},
      {"d.json", R"({"cache": {"ttl_hours": "48"}})", "expected an integer, got a string '48'"},
      {"e.json", R"({"cache": {"ttl_hours": 4.0}})", "(int64) in %s: expected an integer"},
      {"f.yaml", "verbose: maybe\n", "option 'verbose' (bool)"},
      {"g.json", R"({"verbose": "true"})", "expected a boolean (true/false), got a string"},
      {"h.yaml", "cache:\n  sweep: 10\n", "option 'cache.sweep' (duration)"},
      {"i.yaml", "cache:\n  sweep: 10 minutes\n", "a duration such as 500ms"},
      {"j.yaml", "cache:\n  sweep: 1.5.5h\n", "'cache.sweep' (duration)"},
      {"k.yaml", "cache:\n  capacity: 10XB\n", "option 'cache.capacity' (bytes)"},
      {"l.yaml", "cache:\n  capacity: -1GiB\n", "invalid byte size '-1GiB'"},
      {"m.json", R"({"cache": {"capacity": 1.5}})", "(bytes) in %s: expected a byte size"},
      {"n.yaml", "cache:\n  ratio: [1]\n", "expected a finite number, got a list"},
      {"o.yaml", "cache:\n  ratio: inf\n", "expected a finite number, got 'inf'"},
      {"p.yaml", "cache:\n  tiers: ssd,dram\n", "(list<string>) in %s:2:10: expected a list"},
      {"q.yaml", "model:\n  layers: [1, x]\n",
       "(list<int64>) in %s:2:11: item 1: expected an "
       "integer, got 'x'"},
      {"r.json", R"({"server": {"listen": 8000}})", "expected a string, got an integer '8000'"},
      {"s.yaml", "server:\n  listen:\n", "expected a string, got no value (null)"},
      {"t.yaml", "server:\n  listen: {port: 1}\n", "unknown option 'server.listen.port'"},
      {"u.yaml", "cache: 5\n", "'cache' in %s:1:8 is a group of options"},
  };
  for (const BadValueCase& c : cases) {
    const AllTypes before = o_;
    const std::string path = dir_.Write(c.name, c.contents);
    absl::Status status = set_.LoadFile(path);
    ASSERT_FALSE(status.ok()) << c.name;
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    std::string expected = c.message;
    if (size_t at = expected.find("%s"); at != std::string::npos) expected.replace(at, 2, path);
    EXPECT_THAT(status.message(), HasSubstr(expected)) << c.name;
    EXPECT_EQ(o_.ttl_hours, before.ttl_hours) << c.name;
    EXPECT_EQ(o_.listen, before.listen) << c.name;
    EXPECT_EQ(o_.capacity, before.capacity) << c.name;
  }
}

TEST_F(OptionSetTest, UnknownKeyInFileIsNamedWithSuggestion) {
  const std::string path = dir_.Write("u.yaml", "cache:\n  ttl_hour: 5\n");
  absl::Status status = set_.LoadFile(path);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "unknown option 'cache.ttl_hour' in " + path +
                                  ":2:13 (did you mean 'cache.ttl_hours'?)");
  const std::string far = dir_.Write("far.json", R"({"completely": {"different": 1}})");
  status = set_.LoadFile(far);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "unknown option 'completely.different' in " + far);
}

TEST_F(OptionSetTest, EmptyKnownGroupIsAllowed) {
  ASSERT_TRUE(set_.LoadFile(dir_.Write("g.yaml", "cache:\nserver: {}\n")).ok());
  EXPECT_FALSE(set_.LoadFile(dir_.Write("h.yaml", "nope: {}\n")).ok());
}

TEST_F(OptionSetTest, KeySetTwiceInOneFileIsAnError) {
  const std::string path = dir_.Write("twice.yaml", "cache.ttl_hours: 1\ncache:\n  ttl_hours: 2\n");
  absl::Status status = set_.LoadFile(path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("'cache.ttl_hours' is set twice in " + path + ":3:14"));
  const std::string json = dir_.Write("twice.json", R"({"verbose": true, "verbose": false})");
  EXPECT_THAT(set_.LoadFile(json).message(), HasSubstr("'verbose' is set twice"));
}

TEST_F(OptionSetTest, MissingAndMalformedFiles) {
  absl::Status missing = set_.LoadFile(dir_.Path("nope.yaml"));
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr(dir_.Path("nope.yaml")));

  const std::string yaml = dir_.Write("bad.yaml", "cache:\n  ttl_hours: [1\n");
  absl::Status bad_yaml = set_.LoadFile(yaml);
  EXPECT_EQ(bad_yaml.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_yaml.message(), HasSubstr("malformed YAML in " + yaml));

  const std::string json = dir_.Write("bad.json", R"({"cache": {"ttl_hours": 1,}})");
  absl::Status bad_json = set_.LoadFile(json);
  EXPECT_EQ(bad_json.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_json.message(), HasSubstr("malformed JSON in " + json));
  EXPECT_EQ(o_.ttl_hours, 72);
}

TEST_F(OptionSetTest, ValidatorRejectionNamesKeyValueAndSource) {
  const std::string path = dir_.Write("v.yaml", "cache:\n  ttl_hours: 0\n  ratio: 1.5\n");
  ASSERT_TRUE(set_.LoadFile(path).ok());  // LoadFile converts; Validate judges
  absl::Status status = set_.Validate();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "option 'cache.ratio' = 1.5 (from " + path + ":3:10): must be in [0, 1]; " +
                "option 'cache.ttl_hours' = 0 (from " + path + ":2:14): must be at least 1");
}

TEST_F(OptionSetTest, DumpRoundTrip) {
  ASSERT_TRUE(set_.Set("server.listen", "a \"quoted\" value: with # and 'x'").ok());
  ASSERT_TRUE(set_.Set("cache.tiers", "true,,~,x y").ok());
  ASSERT_TRUE(set_.Set("cache.ratio", "0.1").ok());
  ASSERT_TRUE(set_.Set("cache.capacity", "1000001").ok());
  ASSERT_TRUE(set_.Set("cache.sweep", "1h0m0.5s").ok());
  ASSERT_TRUE(set_.Set("model.layers", "").ok());
  ASSERT_TRUE(set_.Set("verbose", "on").ok());
  const std::string dump = set_.Dump();
  EXPECT_EQ(dump,
            "cache:\n"
            "  capacity: \"1000001B\"\n"
            "  ratio: 0.1\n"
            "  sweep: \"1h0.5s\"\n"
            "  tiers: [\"true\", \"\", \"~\", \"x y\"]\n"
            "  ttl_hours: 72\n"
            "model:\n"
            "  layers: []\n"
            "server:\n"
            "  listen: \"a \\\"quoted\\\" value: with # and 'x'\"\n"
            "verbose: true\n");

  AllTypes reloaded;
  OptionSet other;
  Register(other, reloaded);
  ASSERT_TRUE(other.LoadFile(dir_.Write("dump.yaml", dump)).ok())
      << other.LoadFile(dir_.Path("dump.yaml"));
  EXPECT_EQ(reloaded.verbose, o_.verbose);
  EXPECT_EQ(reloaded.ttl_hours, o_.ttl_hours);
  EXPECT_EQ(reloaded.ratio, o_.ratio);
  EXPECT_EQ(reloaded.listen, o_.listen);
  EXPECT_EQ(reloaded.sweep, o_.sweep);
  EXPECT_EQ(reloaded.capacity, o_.capacity);
  EXPECT_EQ(reloaded.tiers, o_.tiers);
  EXPECT_EQ(reloaded.layers, o_.layers);
  EXPECT_EQ(other.Dump(), dump);
}

TEST_F(OptionSetTest, HelpListsKeysTypesDefaultsAndHelp) {
  o_.ttl_hours = 5;  // Help shows defaults, not current values
  const std::string help = set_.Help();
  EXPECT_THAT(help,
              HasSubstr("  --cache.ttl_hours (int64, default: 72)\n      Hours a block lives.\n"));
  EXPECT_THAT(help, HasSubstr("  --cache.capacity (bytes, default: \"10GiB\")\n"));
  EXPECT_THAT(help, HasSubstr("  --cache.tiers (list<string>, default: [\"dram\", \"ssd\"])\n"));
  EXPECT_THAT(help, HasSubstr("  --model.layers (list<int64>, default: [2, 8, 14, 20])\n"));
  EXPECT_THAT(help, HasSubstr("  --cache.sweep (duration, default: \"10m\")\n"));
  EXPECT_LT(help.find("--cache.capacity"), help.find("--verbose"));  // sorted
}

TEST(OptionSetDeathTest, RegistrationMistakesAbort) {
  int64_t a = 0, b = 0;
  EXPECT_DEATH(
      {
        OptionSet set;
        set.Add("Bad-Key", &a, 1, "");
      },
      "invalid option key");
  EXPECT_DEATH(
      {
        OptionSet set;
        set.Add("x", &a, 1, "");
        set.Add("x", &b, 1, "");
      },
      "registered twice");
  EXPECT_DEATH(
      {
        OptionSet set;
        set.Add("x.y", &a, 1, "");
        set.Add("x", &b, 1, "");
      },
      "is also the group of");
  EXPECT_DEATH(
      {
        OptionSet set;
        set.Add("x", &a, 0, "", AtLeast<int64_t>(1));
      },
      "fails its validator");
}

}  // namespace
}  // namespace flashserve::options
