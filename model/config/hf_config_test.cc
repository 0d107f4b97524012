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

class HfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hf_ = ReadJson(RepoPath(testing::kReleasedHf));
    auto flat = LoadModelConfig(RepoPath(testing::kReleasedFlat));
    ASSERT_TRUE(flat.ok()) << flat.status();
    flat_ = *flat;
  }

  void ExpectError(const json& j, const std::string& needle) {
    auto config = ParseHfConfig(j.dump());
    ASSERT_FALSE(config.ok()) << "expected an error naming " << needle;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(needle));
  }

  json hf_;
  ModelConfig flat_;
};

TEST_F(HfConfigTest, UnknownKeysAreNamedWithTheirPath) {
  json j = hf_;
  j["text_config"]["foo"] = 1;
  ExpectError(j, "'text_config.foo'");
  j = hf_;
  j["bar"] = true;
  ExpectError(j, "'bar'");
  j = hf_;
  j["text_config"]["dim"] = 5120;  // the inference name is not an HF key
  ExpectError(j, "'text_config.dim'");
  j = hf_;
  j["text_config"]["rope_scaling"]["mscale"] = 1.0;
  ExpectError(j, "'text_config.rope_scaling.mscale'");
  j = hf_;
  j["vision_config"]["window"] = 3;
  ExpectError(j, "'vision_config.window'");
  j = hf_;
  j["quantization_config"]["fmt"] = "e4m3";
  ExpectError(j, "'quantization_config.fmt'");
}

TEST_F(HfConfigTest, MissingKeysAreNamedWithTheirPath) {
  json j = hf_;
  j["text_config"].erase("hidden_size");
  ExpectError(j, "'text_config.hidden_size'");
  j = hf_;
  j["text_config"]["rope_scaling"].erase("factor");
  ExpectError(j, "'text_config.rope_scaling.factor'");
  j = hf_;
  j["vision_config"].erase("max_image_tokens");
  ExpectError(j, "'vision_config.max_image_tokens'");
  j = hf_;
  j.erase("vision_config");
  ExpectError(j, "'vision_config'");
  j = hf_;
  j["quantization_config"].erase("quant_method");
  ExpectError(j, "'quantization_config.quant_method'");
}

TEST_F(HfConfigTest, WrongTypesAreNamed) {
  json j = hf_;
  j["text_config"]["sliding_window"] = "128";
  ExpectError(j, "'text_config.sliding_window'");
  j = hf_;
  j["text_config"] = 3;
  ExpectError(j, "'text_config'");
  j = hf_;
  j["vision_config"]["max_wh_ratio"] = "wide";
  ExpectError(j, "'vision_config.max_wh_ratio'");
}

TEST_F(HfConfigTest, ArchitecturePinsAreChecked) {
  json j = hf_;
  j["text_config"]["num_key_value_heads"] = 8;
  ExpectError(j, "'text_config.num_key_value_heads'");
  j = hf_;
  j["text_config"]["rope_scaling"]["rope_type"] = "linear";
  ExpectError(j, "'text_config.rope_scaling.rope_type'");
  j = hf_;
  j["quantization_config"]["weight_block_size"] = {128, 128};
  ExpectError(j, "'quantization_config.weight_block_size'");
  j = hf_;
  j["quantization_config"]["quant_method"] = "gptq";
  ExpectError(j, "'quantization_config.quant_method'");
  j = hf_;
  j["model_type"] = "deepseek_v4";
  ExpectError(j, "'model_type'");
}

TEST_F(HfConfigTest, HfOnlyKeysAreTolerated) {
  json j = hf_;
  j["transformers_version"] = "5.17.0";
  j["torch_dtype"] = "bfloat16";
  j["text_config"]["attention_dropout"] = 0.0;
  j["text_config"]["initializer_range"] = 0.02;
  j["text_config"]["use_cache"] = true;
  j["text_config"]["rope_scaling"]["type"] = "yarn";
  j["vision_config"]["hidden_act"] = "gelu";
  auto config = ParseHfConfig(j.dump());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(*config, flat_);
}

TEST_F(HfConfigTest, UnquantisedCheckpointIsBf16) {
  json j = hf_;
  j.erase("quantization_config");
  auto config = ParseHfConfig(j.dump());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->dtype, WeightDtype::kBf16);
  EXPECT_EQ(config->expert_dtype, ExpertDtype::kSameAsDtype);
}

TEST_F(HfConfigTest, TextKeysAtTopLevelWithoutTextConfig) {
  json j = hf_;
  json text = j["text_config"];
  j.erase("text_config");
  text.erase("model_type");
  for (auto& [key, value] : text.items()) j[key] = value;
  auto config = ParseHfConfig(j.dump());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(*config, flat_);
  j["foo"] = 1;
  ExpectError(j, "'foo'");
}

TEST_F(HfConfigTest, ImageTokenIdMayLiveInTextConfig) {
  json j = hf_;
  j.erase("image_token_id");
  j["text_config"]["image_token_id"] = 129264;
  auto config = ParseHfConfig(j.dump());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(*config, flat_);
  j["image_token_id"] = 7;
  ExpectError(j, "image_token_id");
}

TEST_F(HfConfigTest, ValidationRunsOnHfConfigs) {
  json j = hf_;
  j["text_config"]["compress_ratios"][5] = 1;  // layer 5 would read layer 2's ratio-2 KV
  ExpectError(j, "'compress_ratios'");
  j = hf_;
  j["text_config"]["sliding_window"] = 0;
  ExpectError(j,
              "config key 'window_size': must be > 0, got 0 (HF key 'text_config.sliding_window')");
}

}  // namespace
}  // namespace flashserve::model
