// Test-only access to the v41-tiny fixture's Engram data (golden.json, golden.safetensors) and the
// released config. Loaders abort (CHECK) when a fixture file is missing or malformed: a test cannot
// run without them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/engram/prime_layout.h"
#include "model/engram/token_map.h"
#include "nlohmann/json.hpp"

namespace flashserve::model::engram::testing {

// tests/conformance/data/v41-tiny under FS_SOURCE_DIR (or the working directory).
std::string FixtureDir();
const nlohmann::json& GoldenJson();
// golden.json "engram" section.
const nlohmann::json& GoldenEngram();

ModelConfig TinyConfig();  // the fixture's config.json
ModelConfig FullConfig();  // configs/deepseek-v41-flash/inference_config.json

CompressedTokenMap GoldenTokenMap();
EngramLayout GoldenLayout();               // primes/offsets/table_rows as golden.json lists them
std::vector<int64_t> GoldenMultipliers();  // flattened [layer][slot]

// One golden prompt: the prompt ids followed by the 12 decode-step inputs (greedy_tokens[0..11]),
// the image-span flags (token_types >= 0) and the golden hash ids [n+12][2][12].
struct GoldenSequence {
  int n_prompt = 0;
  std::vector<int32_t> ids;
  std::vector<uint8_t> dead;
  std::vector<int64_t> hash_ids;
};
GoldenSequence LoadGoldenSequence(const std::string& prompt);

}  // namespace flashserve::model::engram::testing
