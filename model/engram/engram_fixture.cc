#include "model/engram/engram_fixture.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/base/check.h"
#include "common/safetensors/safetensors.h"
#include "model/config/config_parser.h"

namespace flashserve::model::engram::testing {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("FS_SOURCE_DIR");
  return dir != nullptr ? std::string(dir) : std::string(".");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK(in.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

std::string FixtureDir() { return SourceDir() + "/tests/conformance/data/v41-tiny"; }

const nlohmann::json& GoldenJson() {
  static const nlohmann::json* json =
      new nlohmann::json(nlohmann::json::parse(ReadFile(FixtureDir() + "/golden.json")));
  return *json;
}

const nlohmann::json& GoldenEngram() { return GoldenJson().at("engram"); }

ModelConfig TinyConfig() {
  auto config = LoadModelConfig(FixtureDir() + "/config.json");
  CHECK_OK(config.status());
  return *config;
}

ModelConfig FullConfig() {
  auto config = LoadModelConfig(SourceDir() + "/configs/deepseek-v41-flash/inference_config.json");
  CHECK_OK(config.status());
  return *config;
}

CompressedTokenMap GoldenTokenMap() {
  CompressedTokenMap map;
  map.class_of = GoldenEngram().at("token_map").get<std::vector<int32_t>>();
  map.num_classes = GoldenEngram().at("compressed_vocab_size").get<int32_t>();
  return map;
}

EngramLayout GoldenLayout() {
  const ModelConfig config = TinyConfig();
  EngramLayout layout;
  layout.layer_ids = config.engram_layer_ids;
  layout.max_ngram_size = config.engram_max_ngram_size;
  layout.n_heads = config.engram_n_heads;
  for (const auto& layer : GoldenEngram().at("primes")) {
    for (const auto& per_n : layer) {
      for (const auto& p : per_n) layout.primes.push_back(p.get<int64_t>());
    }
  }
  for (const auto& layer : GoldenEngram().at("offsets")) {
    for (const auto& o : layer) layout.offsets.push_back(o.get<int64_t>());
  }
  layout.table_rows = GoldenEngram().at("table_rows").get<std::vector<int64_t>>();
  return layout;
}

std::vector<int64_t> GoldenMultipliers() {
  std::vector<int64_t> out;
  for (const auto& layer : GoldenEngram().at("multipliers")) {
    for (const auto& m : layer) out.push_back(m.get<int64_t>());
  }
  return out;
}

GoldenSequence LoadGoldenSequence(const std::string& prompt) {
  const nlohmann::json& p = GoldenJson().at("prompts").at(prompt);
  GoldenSequence seq;
  seq.n_prompt = p.at("n_prompt").get<int>();
  seq.ids = p.at("ids").get<std::vector<int32_t>>();
  CHECK_EQ(seq.ids.size(), static_cast<size_t>(seq.n_prompt));
  const auto greedy = p.at("greedy_tokens").get<std::vector<int32_t>>();
  CHECK_EQ(greedy.size(), 13u);
  seq.ids.insert(seq.ids.end(), greedy.begin(), greedy.begin() + 12);
  seq.dead.assign(seq.ids.size(), 0);
  if (p.contains("image")) {
    const auto types = p.at("image").at("token_types").get<std::vector<int>>();
    CHECK_EQ(types.size(), static_cast<size_t>(seq.n_prompt));
    for (size_t i = 0; i < types.size(); ++i) seq.dead[i] = types[i] >= 0 ? 1 : 0;
  }
  auto file = safetensors::SafetensorsFile::Open(FixtureDir() + "/golden.safetensors");
  CHECK_OK(file.status());
  const int64_t rows = static_cast<int64_t>(seq.ids.size());
  auto view =
      (*file)->GetChecked(prompt + ".engram_hash_ids", safetensors::DType::kI64, {rows, 2, 12});
  CHECK_OK(view.status());
  const auto values = view->as<int64_t>();
  seq.hash_ids.assign(values.begin(), values.end());
  return seq;
}

}  // namespace flashserve::model::engram::testing
