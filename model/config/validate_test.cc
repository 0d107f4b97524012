#include "model/config/validate.h"

#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/config/config_test_util.h"

namespace flashserve::model {
namespace {

using ::testing::HasSubstr;
using testing::ReadJson;
using testing::RepoPath;
using json = nlohmann::json;

TEST(ValidateTest, ShippedConfigsAreValid) {
  for (const char* path : {testing::kTinyConfig, testing::kReleasedFlat, testing::kReleasedHf}) {
    auto config = LoadModelConfig(RepoPath(path));
    ASSERT_TRUE(config.ok()) << path << ": " << config.status();
    EXPECT_TRUE(Validate(*config).ok()) << path;
  }
}

struct BadCase {
  const char* name;
  std::function<void(json&)> mutate;  // applied to the tiny fixture config
  const char* key;                    // must appear in the message as 'key'
};

// Tiny schedule: ratios [0,0,2,2,1,1,1,1 | 0,0,0], kv [2,4], index [2,4,6], candidates at 4.
const BadCase kBadCases[] = {
    {"ReuseBeforeAnySource", [](json& j) { j["compress_ratios"][1] = 2; }, "kv_source_layers"},
    {"RatioThreeDoesNotDivide64",
     [](json& j) {
       for (int i : {2, 3}) j["compress_ratios"][i] = 3;
     },
     "compress_ratios"},
    {"RatioNegative", [](json& j) { j["compress_ratios"][0] = -1; }, "compress_ratios"},
    {"ReuseOfOtherRatio", [](json& j) { j["compress_ratios"][3] = 1; }, "compress_ratios"},
    {"CompressRatiosTooShort", [](json& j) { j["compress_ratios"].erase(10); }, "compress_ratios"},
    {"CompressRatiosTooLong", [](json& j) { j["compress_ratios"].push_back(0); },
     "compress_ratios"},
    {"DSparkStageCompressed", [](json& j) { j["compress_ratios"][9] = 1; }, "compress_ratios"},
    {"KvSourceUnsorted",
     [](json& j) {
       j["kv_source_layers"] = {4, 2};
     },
     "kv_source_layers"},
    {"KvSourceRatioZero",
     [](json& j) {
       j["kv_source_layers"] = {1, 2, 4};
     },
     "kv_source_layers"},
    {"KvSourceOutOfRange",
     [](json& j) {
       j["kv_source_layers"] = {2, 4, 8};
     },
     "kv_source_layers"},
    {"IndexSourceOutOfRange",
     [](json& j) {
       j["index_source_layers"] = {2, 4, 6, 9};
     },
     "index_source_layers"},
    {"KvSourceWithoutIndexKeys",
     [](json& j) {
       j["index_source_layers"] = {2, 6};
     },
     "index_source_layers"},
    {"CandidateSourceIsReuseLayer", [](json& j) { j["candidate_source_layer"] = 3; },
     "candidate_source_layer"},
    {"CandidateSourceNotAKvSource", [](json& j) { j["candidate_source_layer"] = 6; },
     "candidate_source_layer"},
    {"CandidateMaskOverOtherKv", [](json& j) { j["candidate_source_layer"] = 2; },
     "candidate_source_layer"},
    {"CandidateSourceBelowMinusOne", [](json& j) { j["candidate_source_layer"] = -2; },
     "candidate_source_layer"},
    {"CandidateBlockSizeDoesNotDivide64", [](json& j) { j["candidate_block_size"] = 3; },
     "candidate_block_size"},
    {"CandidateTopkZero", [](json& j) { j["candidate_topk_blocks"] = 0; }, "candidate_topk_blocks"},
    {"DSparkTargetOutOfRange",
     [](json& j) {
       j["dspark_target_layer_ids"] = {5, 6, 8};
     },
     "dspark_target_layer_ids"},
    {"DSparkTargetDuplicate",
     [](json& j) {
       j["dspark_target_layer_ids"] = {5, 5, 7};
     },
     "dspark_target_layer_ids"},
    {"DSparkNoTargets", [](json& j) { j["dspark_target_layer_ids"] = json::array(); },
     "dspark_target_layer_ids"},
    {"DSparkNoiseTokenOutOfVocab", [](json& j) { j["dspark_noise_token_id"] = 2048; },
     "dspark_noise_token_id"},
    {"RopeHeadDimOdd", [](json& j) { j["rope_head_dim"] = 31; }, "rope_head_dim"},
    {"RopeHeadDimTooLarge", [](json& j) { j["rope_head_dim"] = 160; }, "rope_head_dim"},
    {"HeadsNotDivisibleByGroups", [](json& j) { j["o_groups"] = 3; }, "o_groups"},
    {"HeadDimNotBlocked", [](json& j) { j["head_dim"] = 120; }, "head_dim"},
    {"WindowZero", [](json& j) { j["window_size"] = 0; }, "window_size"},
    {"DimNegative", [](json& j) { j["dim"] = -256; }, "dim"},
    {"NormEpsZero", [](json& j) { j["norm_eps"] = 0; }, "norm_eps"},
    {"TooManyActivatedExperts", [](json& j) { j["n_activated_experts"] = 9; },
     "n_activated_experts"},
    {"TwoSharedExperts", [](json& j) { j["n_shared_experts"] = 2; }, "n_shared_experts"},
    {"EngramLayerOutOfRange",
     [](json& j) {
       j["engram_layer_ids"] = {1, 8};
     },
     "engram_layer_ids"},
    {"EngramTableCountMismatch", [](json& j) { j["engram_num_embeddings"] = {12458}; },
     "engram_num_embeddings"},
    {"EngramHeadDimNotBlocked", [](json& j) { j["engram_head_dim"] = 24; }, "engram_head_dim"},
    {"EngramNgramTooSmall", [](json& j) { j["engram_max_ngram_size"] = 1; },
     "engram_max_ngram_size"},
    {"ImageTokenOutOfVocab", [](json& j) { j["image_token_id"] = 4096; }, "image_token_id"},
    {"VisionHeadsDoNotDivide", [](json& j) { j["vision_n_heads"] = 5; }, "vision_n_heads"},
    {"VisionWhRatioZero", [](json& j) { j["vision_max_wh_ratio"] = 0; }, "vision_max_wh_ratio"},
    {"MaxSeqLenZero", [](json& j) { j["max_seq_len"] = 0; }, "max_seq_len"},
};

class ValidateFailureTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ValidateFailureTest, NamesTheKey) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  GetParam().mutate(j);
  auto config = ParseFlatConfig(j.dump());
  ASSERT_FALSE(config.ok()) << GetParam().name << " was accepted";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr(std::string("config key '") + GetParam().key + "'"));
}

INSTANTIATE_TEST_SUITE_P(All, ValidateFailureTest, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ValidateTest, CandidatesOffNeedNoCandidateSizes) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  j["candidate_source_layer"] = -1;
  j["candidate_topk_blocks"] = 0;
  j["candidate_block_size"] = 0;
  auto config = ParseFlatConfig(j.dump());
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST(ValidateTest, DSparkOffNeedsNoTargets) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  j["dspark_block_size"] = 0;
  j["dspark_target_layer_ids"] = json::array();
  auto config = ParseFlatConfig(j.dump());
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST(ValidateTest, EngramOffNeedsNoTables) {
  json j = ReadJson(RepoPath(testing::kTinyConfig));
  j["engram_layer_ids"] = json::array();
  j["engram_num_embeddings"] = json::array();
  j["engram_max_ngram_size"] = 1;
  auto config = ParseFlatConfig(j.dump());
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST(ValidateTest, ValidatesConfigsBuiltInCode) {
  auto config = LoadModelConfig(RepoPath(testing::kReleasedFlat));
  ASSERT_TRUE(config.ok()) << config.status();
  ModelConfig c = *config;
  c.kv_source_layers = {2, 8, 14};  // layer 20 (ratio 1) would read layer 14's ratio-2 KV
  EXPECT_THAT(std::string(Validate(c).message()), HasSubstr("config key 'compress_ratios'"));
  c = *config;
  c.index_source_layers = {2, 8, 14, 20, 24, 28, 32, 36, 40};
  EXPECT_THAT(std::string(Validate(c).message()), HasSubstr("config key 'index_source_layers'"));
}

}  // namespace
}  // namespace flashserve::model
