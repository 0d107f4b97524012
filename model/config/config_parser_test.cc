#include "model/config/config_parser.h"

#include <openssl/sha.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/config/config_test_util.h"

namespace flashserve::model {
namespace {

using ::testing::HasSubstr;
using testing::ReadJson;
using testing::ReadText;
using testing::RepoPath;
using json = nlohmann::json;

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  std::string hex;
  char buf[3];
  for (unsigned char b : digest) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    hex += buf;
  }
  return hex;
}

TEST(ConfigParserTest, TinyFixtureParses) {
  auto config = LoadModelConfig(RepoPath(testing::kTinyConfig));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vocab_size, 2048);
  EXPECT_EQ(config->dim, 256);
  EXPECT_EQ(config->n_layers, 8);
  EXPECT_EQ(config->n_mtp_layers, 3);
  EXPECT_EQ(config->head_dim, 128);
  EXPECT_EQ(config->rope_head_dim, 32);
  EXPECT_EQ(config->window_size, 16);
  EXPECT_EQ(config->compress_ratios, (std::vector<int>{0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(config->kv_source_layers, (std::vector<int>{2, 4}));
  EXPECT_EQ(config->index_source_layers, (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(config->candidate_source_layer, 4);
  EXPECT_EQ(config->engram_num_embeddings, (std::vector<int64_t>{12458, 13416}));
  EXPECT_EQ(config->score_func, ScoreFunc::kSqrtSoftplus);
  EXPECT_EQ(config->dtype, WeightDtype::kFp8);
  EXPECT_EQ(config->expert_dtype, ExpertDtype::kFp4);
  EXPECT_EQ(config->norm_eps, 1e-20);
  EXPECT_FALSE(config->vision_max_wh_ratio.has_value());
  // Absent keys take the ModelArgs defaults.
  EXPECT_EQ(config->max_batch_size, 4);
  EXPECT_EQ(config->max_seq_len, 4096);
  EXPECT_EQ(config->temperature, 1.0);
  EXPECT_EQ(config->gate_temp, 1.0);
  EXPECT_TRUE(config->norm_topk_prob);
}

TEST(ConfigParserTest, LoadsFromCheckpointDirectory) {
  auto from_dir = LoadModelConfig(RepoPath(testing::kTinyDir));
  auto from_file = LoadModelConfig(RepoPath(testing::kTinyConfig));
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(*from_dir, *from_file);
}

TEST(ConfigParserTest, ReleasedFlatConfigIsTheOfficialFile) {
  // Spec §1 pins inference/config.json at SHA-256 2e84f45c…a809.
  const std::string sha = Sha256Hex(ReadText(RepoPath(testing::kReleasedFlat)));
  EXPECT_EQ(sha.substr(0, 8), "2e84f45c");
  EXPECT_EQ(sha.substr(sha.size() - 4), "a809");
}

TEST(ConfigParserTest, ReleasedFlatAndHfConfigsAreEqual) {
  auto flat = LoadModelConfig(RepoPath(testing::kReleasedFlat));
  auto hf = LoadModelConfig(RepoPath(testing::kReleasedDir));  // directory -> config.json (HF)
  ASSERT_TRUE(flat.ok()) << flat.status();
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(ToFlatConfigJson(*flat), ToFlatConfigJson(*hf));
  EXPECT_EQ(*flat, *hf);
  EXPECT_EQ(flat->dim, 5120);
  EXPECT_EQ(flat->n_activated_experts, 6);
  EXPECT_EQ(flat->rope_factor, 16.0);
  EXPECT_EQ(flat->original_seq_len, 65536);
  EXPECT_EQ(flat->engram_pad_id, 2);
  EXPECT_EQ(flat->dspark_n_activated_experts, 3);
  EXPECT_EQ(flat->vision_max_n_token, 1024);
  EXPECT_EQ(flat->image_token_id, 129264);
  EXPECT_EQ(flat->compress_ratios.size(), 43u);
}

TEST(ConfigParserTest, DetectsFormat) {
  EXPECT_EQ(*DetectConfigFormat(ReadText(RepoPath(testing::kReleasedHf))), ConfigFormat::kHf);
  EXPECT_EQ(*DetectConfigFormat(ReadText(RepoPath(testing::kReleasedFlat))), ConfigFormat::kFlat);
  EXPECT_EQ(*DetectConfigFormat(R"({"model_type": "deepseek_v41"})"), ConfigFormat::kHf);
  EXPECT_FALSE(DetectConfigFormat("[1, 2]").ok());
  EXPECT_FALSE(DetectConfigFormat("{").ok());
}

TEST(ConfigParserTest, ToFlatConfigJsonRoundTrips) {
  for (const char* path : {testing::kReleasedFlat, testing::kTinyConfig}) {
    auto config = LoadModelConfig(RepoPath(path));
    ASSERT_TRUE(config.ok()) << config.status();
    config->max_seq_len = 256;  // a non-default optional field survives too
    config->vision_max_wh_ratio = 4;
    auto again = ParseFlatConfig(ToFlatConfigJson(*config));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *config) << path;
    EXPECT_EQ(json::parse(ToFlatConfigJson(*config)).size(), 69u);  // every ModelArgs field
  }
}

TEST(ConfigParserTest, OptionalKeysOverrideDefaults) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  j["max_batch_size"] = 1;
  j["max_seq_len"] = 256;
  j["temperature"] = 0;
  j["gate_temp"] = 2.5;
  j["norm_topk_prob"] = false;
  auto config = ParseFlatConfig(j.dump());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_batch_size, 1);
  EXPECT_EQ(config->max_seq_len, 256);
  EXPECT_EQ(config->temperature, 0.0);
  EXPECT_EQ(config->gate_temp, 2.5);
  EXPECT_FALSE(config->norm_topk_prob);
}

TEST(ConfigParserTest, MissingFileIsNotFound) {
  auto config = LoadModelConfig(RepoPath("no/such/dir"));
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
}

// ---- flat config errors: each names the key ----

void ExpectFlatError(const json& j, const std::string& needle) {
  auto config = ParseFlatConfig(j.dump());
  ASSERT_FALSE(config.ok()) << "expected an error naming " << needle;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(needle));
}

TEST(FlatConfigErrorTest, MissingKey) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  j.erase("window_size");
  ExpectFlatError(j, "'window_size'");
}

TEST(FlatConfigErrorTest, UnknownKey) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  j["num_key_value_heads"] = 1;  // an HF key is not a ModelArgs field
  ExpectFlatError(j, "'num_key_value_heads'");
}

TEST(FlatConfigErrorTest, WrongTypes) {
  const json base = ReadJson(RepoPath(testing::kTinyConfig));
  const std::pair<const char*, json> cases[] = {
      {"dim", "256"},
      {"n_layers", 8.0},
      {"norm_topk_prob", 1},
      {"norm_eps", "1e-20"},
      {"compress_ratios", 2},
      {"kv_source_layers", {2, "4"}},
      {"score_func", "relu"},
      {"dtype", "fp16"},
      {"expert_dtype", "fp8"},
      {"vision_max_wh_ratio", 2.5},
      {"head_dim", 4294967296LL},
  };
  for (const auto& [key, value] : cases) {
    json j = base;
    j[key] = value;
    ExpectFlatError(j, std::string("'") + key);
  }
}

TEST(FlatConfigErrorTest, ExpectedTypeIsNamed) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  j["dim"] = "256";
  auto config = ParseFlatConfig(j.dump());
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("expected a 32-bit integer"));
}

TEST(FlatConfigErrorTest, DuplicateKeyAndSyntax) {
  EXPECT_THAT(std::string(ParseFlatConfig(R"({"dim": 1, "dim": 2})").status().message()),
              HasSubstr("'dim' appears twice"));
  EXPECT_FALSE(ParseFlatConfig("{\"dim\": ").ok());
  EXPECT_FALSE(ParseFlatConfig("[]").ok());
}

}  // namespace
}  // namespace flashserve::model
