#include "common/options/config_file.h"

#include <string>
#include <vector>

#include "common/options/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::options::internal {
namespace {

using ::testing::HasSubstr;
using Kind = ConfigValue::Kind;

std::vector<std::string> Keys(const std::vector<ConfigEntry>& entries) {
  std::vector<std::string> keys;
  for (const ConfigEntry& e : entries) keys.push_back(e.key);
  return keys;
}

TEST(ConfigFileTest, YamlFlattensNestedMapsInFileOrder) {
  absl::StatusOr<std::vector<ConfigEntry>> entries = ParseYamlConfig(
      "server:\n  listen: 0.0.0.0:8000\n  tls:\n    enabled: true\ncache.ttl_hours: 48\n"
      "name: \"quoted\"\nlist: [a, 'b']\nempty: {}\nnothing:\n",
      "c.yaml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(Keys(*entries),
              ::testing::ElementsAre("server.listen", "server.tls.enabled", "cache.ttl_hours",
                                     "name", "list", "empty", "nothing"));
  const auto& e = *entries;
  EXPECT_EQ(e[0].value.kind, Kind::kText);
  EXPECT_EQ(e[0].value.text, "0.0.0.0:8000");
  EXPECT_EQ(e[0].value.location, "c.yaml:2:11");
  EXPECT_EQ(e[1].value.text, "true");
  EXPECT_EQ(e[3].value.kind, Kind::kString);  // quoted
  EXPECT_EQ(e[3].value.text, "quoted");
  ASSERT_EQ(e[4].value.kind, Kind::kList);
  ASSERT_EQ(e[4].value.items.size(), 2u);
  EXPECT_EQ(e[4].value.items[0].kind, Kind::kText);
  EXPECT_EQ(e[4].value.items[1].kind, Kind::kString);
  EXPECT_EQ(e[5].value.kind, Kind::kMap);
  EXPECT_EQ(e[6].value.kind, Kind::kNull);
}

TEST(ConfigFileTest, YamlEmptyDocumentHasNoEntries) {
  absl::StatusOr<std::vector<ConfigEntry>> entries =
      ParseYamlConfig("# only a comment\n", "e.yaml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(ConfigFileTest, YamlErrorsNameFileAndLine) {
  absl::StatusOr<std::vector<ConfigEntry>> bad =
      ParseYamlConfig("a: 1\nb: [1, 2\nc: 3\n", "/x/bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("malformed YAML in /x/bad.yaml:"));

  bad = ParseYamlConfig("- a\n- b\n", "top.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("top.yaml: the top level"));

  bad = ParseYamlConfig("a:\n  - [1, 2]\n", "nested.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("nested.yaml:2:5: 'a': list items must be scalars"));
}

TEST(ConfigFileTest, JsonFlattensAndKeepsTypes) {
  absl::StatusOr<std::vector<ConfigEntry>> entries = ParseJsonConfig(
      R"({"cache": {"ttl_hours": 48, "ratio": 0.50, "on": false, "dir": "/d",
                    "big": 18446744073709551615},
          "ids": [1, "x"], "empty": {}, "n": null})",
      "c.json");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(Keys(*entries),
              ::testing::ElementsAre("cache.ttl_hours", "cache.ratio", "cache.on", "cache.dir",
                                     "cache.big", "ids", "empty", "n"));
  const auto& e = *entries;
  EXPECT_EQ(e[0].value.kind, Kind::kInteger);
  EXPECT_EQ(e[1].value.kind, Kind::kNumber);
  EXPECT_EQ(e[1].value.text, "0.50");  // raw text kept
  EXPECT_EQ(e[2].value.kind, Kind::kBool);
  EXPECT_EQ(e[2].value.text, "false");
  EXPECT_EQ(e[3].value.kind, Kind::kString);
  EXPECT_EQ(e[4].value.text, "18446744073709551615");
  ASSERT_EQ(e[5].value.items.size(), 2u);
  EXPECT_EQ(e[5].value.items[0].kind, Kind::kInteger);
  EXPECT_EQ(e[5].value.items[1].kind, Kind::kString);
  EXPECT_EQ(e[6].value.kind, Kind::kMap);
  EXPECT_EQ(e[7].value.kind, Kind::kNull);
  EXPECT_EQ(e[7].value.location, "c.json");
}

TEST(ConfigFileTest, JsonDuplicateKeysAreReported) {
  absl::StatusOr<std::vector<ConfigEntry>> entries =
      ParseJsonConfig(R"({"a": 1, "a": 2})", "d.json");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(Keys(*entries), ::testing::ElementsAre("a", "a"));  // OptionSet rejects the repeat
}

TEST(ConfigFileTest, JsonErrorsNameFileAndPosition) {
  absl::StatusOr<std::vector<ConfigEntry>> bad =
      ParseJsonConfig("{\n  \"a\": 1,\n}", "/y/bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("malformed JSON in /y/bad.json"));
  EXPECT_THAT(bad.status().message(), HasSubstr("line 3"));

  for (const char* text :
       {"[1, 2]", "5", R"({"a": [[1]]})", R"({"a": [{"b": 1}]})", R"({"a": [null]})", ""}) {
    EXPECT_FALSE(ParseJsonConfig(text, "t.json").ok()) << text;
  }
}

TEST(ConfigFileTest, ReadConfigFileChoosesParserByExtension) {
  testing_util::TempConfigDir dir;
  // The same text is valid YAML but not JSON: the extension decides.
  const std::string yaml = dir.Write("a.YML", "a: 1\n");
  const std::string json = dir.Write("a.json", "a: 1\n");
  EXPECT_TRUE(ReadConfigFile(yaml).ok());
  absl::StatusOr<std::vector<ConfigEntry>> as_json = ReadConfigFile(json);
  ASSERT_FALSE(as_json.ok());
  EXPECT_THAT(as_json.status().message(), HasSubstr(json));

  absl::StatusOr<std::vector<ConfigEntry>> other = ReadConfigFile(dir.Write("a.toml", "a = 1"));
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("unsupported extension"));

  absl::StatusOr<std::vector<ConfigEntry>> missing = ReadConfigFile(dir.Path("missing.yaml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.Path("missing.yaml")));
}

}  // namespace
}  // namespace flashserve::options::internal
