// Malformed and unsupported tokenizer files fail to load with errors that name the file and key.
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_test_util.h"

namespace flashserve::tokenizer {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json StandInJson() {
  static const json* const j =
      new json(json::parse(testing::ReadFileOrDie(testing::FixtureDir() + "/tokenizer.json")));
  return *j;
}

// Loads `j` and returns the error message (empty when it loads).
std::string LoadError(const json& j, const std::string& config = "") {
  auto tok = Tokenizer::FromJson(j.dump(), config, "tok/tokenizer.json");
  if (tok.ok()) return "";
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(tok.status().message());
}

TEST(MalformedTokenizer, StandInLoads) { EXPECT_EQ(LoadError(StandInJson()), ""); }

TEST(MalformedTokenizer, MissingVocab) {
  json j = StandInJson();
  j["model"].erase("vocab");
  EXPECT_THAT(LoadError(j), HasSubstr("tok/tokenizer.json: model.vocab: missing"));
}

TEST(MalformedTokenizer, BadMergeEntries) {
  json j = StandInJson();
  j["model"]["merges"][5] = json::array({1, 2});
  EXPECT_THAT(LoadError(j),
              HasSubstr("tok/tokenizer.json: model.merges[5]: expected a [left, right]"));
  j = StandInJson();
  j["model"]["merges"][7] = "ĠĠĠĠ";
  EXPECT_THAT(LoadError(j), HasSubstr("model.merges[7]: expected \"left right\""));
  j = StandInJson();
  j["model"]["merges"][3] = json::array({"Ġ", "not-a-token"});
  EXPECT_THAT(LoadError(j), HasSubstr("model.merges[3]: \"not-a-token\" is not in model.vocab"));
  j = StandInJson();
  j["model"]["merges"][0] = json::array({"a", "Ġ"});
  EXPECT_THAT(LoadError(j),
              HasSubstr("model.merges[0]: merged token \"aĠ\" is not in model.vocab"));
}

TEST(MalformedTokenizer, VocabAndAddedTokenConflicts) {
  json j = StandInJson();
  j["model"]["vocab"]["Ġ"] = 224;  // same id as another entry
  EXPECT_THAT(LoadError(j), HasSubstr("model.vocab: id 224 is used by both"));
  j = StandInJson();
  j["model"]["vocab"].erase("Ġ");
  EXPECT_THAT(LoadError(j), HasSubstr("model.vocab: no entry for the byte-level character \"Ġ\""));
  j = StandInJson();
  j["added_tokens"][3]["id"] = 5;
  EXPECT_THAT(LoadError(j), HasSubstr("added_tokens[3]: id 5 is the vocabulary entry"));
  j = StandInJson();
  j["model"]["vocab"]["x"] = "seven";
  EXPECT_THAT(LoadError(j), HasSubstr("model.vocab[\"x\"]: expected a non-negative integer id"));
}

TEST(MalformedTokenizer, UnsupportedFlagsAreRejected) {
  for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
    json j = StandInJson();
    j["added_tokens"][4][flag] = true;
    EXPECT_THAT(LoadError(j),
                HasSubstr(std::string("added_tokens[4].") + flag + ": true is not supported"));
  }
  json j = StandInJson();
  j["normalizer"] = json{{"type", "NFC"}};
  EXPECT_THAT(LoadError(j), HasSubstr("normalizer: only null or an empty Sequence"));
  j = StandInJson();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_THAT(LoadError(j), HasSubstr("pre_tokenizer.pretokenizers[0].behavior"));
  j = StandInJson();
  j["pre_tokenizer"]["pretokenizers"][1]["pattern"] = json{{"String", " "}};
  EXPECT_THAT(LoadError(j), HasSubstr("pre_tokenizer.pretokenizers[1].pattern"));
  j = StandInJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\d+";
  EXPECT_THAT(LoadError(j), HasSubstr("pre_tokenizer: regex: unsupported escape \\d"));
  j = StandInJson();
  j["pre_tokenizer"]["pretokenizers"][3]["add_prefix_space"] = true;
  EXPECT_THAT(LoadError(j), HasSubstr("pretokenizers[3].add_prefix_space: true is not supported"));
  j = StandInJson();
  j["model"]["byte_fallback"] = true;
  EXPECT_THAT(LoadError(j), HasSubstr("model.byte_fallback"));
  j = StandInJson();
  j["decoder"] = nullptr;
  EXPECT_THAT(LoadError(j), HasSubstr("decoder: only ByteLevel"));
}

TEST(MalformedTokenizer, BadJsonAndConfig) {
  auto bad = Tokenizer::FromJson("{\"model\": ", "", "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("x.json: (document): invalid JSON"));
  EXPECT_THAT(LoadError(StandInJson(), R"({"bos_token": "<nope>"})"),
              HasSubstr("tokenizer_config.json: bos_token: \"<nope>\" is not a token"));
  EXPECT_THAT(LoadError(StandInJson(), R"({"eos_token": 7})"),
              HasSubstr("tokenizer_config.json: eos_token: expected a string"));
}

TEST(MalformedTokenizer, LoadNamesTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fs_tokenizer_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  json j = StandInJson();
  j["model"]["merges"][2] = 42;
  std::ofstream(dir / "tokenizer.json") << j.dump();
  auto tok = Tokenizer::Load(dir.string());
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(std::string(tok.status().message()),
              HasSubstr((dir / "tokenizer.json").string() + ": model.merges[2]"));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(Tokenizer::Load(dir.string()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace flashserve::tokenizer
