// Access to the v41-tiny golden fixture for the indexer tests (tests/conformance/data/v41-tiny;
// its README describes each tensor): prompt a, index sources L2 (r = 2), L4 (r = 1, candidate
// source) and L6 (r = 1, candidate consumer); prefill (201 rows at positions 0..200, offset 201)
// and decode steps 1..12 (one row at position 200 + step, offset 16 = the window ring).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/formats/bf16.h"
#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace flashserve::kernels::indexer_test {

inline constexpr int64_t kPromptTokens = 201, kDecodeSteps = 12, kWindow = 16, kIndexTopk = 16;
inline constexpr int64_t kBlockSize = 8, kTopkBlocks = 4;

// One selection problem: golden scores [rows, width] as bf16 bits, rows at start_pos...
struct Problem {
  int64_t rows = 0, width = 0, start_pos = 0, ratio = 1, offset = 0;
  std::vector<uint16_t> scores;
};

class IndexerFixtureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* root = std::getenv("FS_SOURCE_DIR");
    dir_ = absl::StrCat(root != nullptr ? root : ".", "/tests/conformance/data/v41-tiny/");
    auto golden = safetensors::SafetensorsFile::Open(dir_ + "golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = std::move(golden).value();
  }
  static void TearDownTestSuite() { golden_.reset(); }

  template <typename T>
  static std::vector<T> Load(const std::string& name, safetensors::DType dtype) {
    auto view = golden_->Get(name);
    EXPECT_TRUE(view.ok()) << view.status();
    if (!view.ok() || view->dtype != dtype) {
      ADD_FAILURE() << name << ": missing or wrong dtype";
      return {};
    }
    std::vector<T> out(view->nbytes / sizeof(T));
    std::memcpy(out.data(), view->data, view->nbytes);
    return out;
  }

  // Golden fp32 scores, exact bf16 values widened, back to bf16 bits.
  static std::vector<uint16_t> ScoresBits(const std::string& name) {
    const std::vector<float> v = Load<float>(name, safetensors::DType::kF32);
    std::vector<uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      out[i] = formats::FloatToBf16Bits(v[i]);
      EXPECT_EQ(formats::Bf16BitsToFloat(out[i]), v[i]) << name << " entry " << i;
    }
    return out;
  }

  static Problem Prefill(int layer, int64_t ratio) {
    Problem p;
    p.rows = kPromptTokens;
    p.ratio = ratio;
    p.width = kPromptTokens / ratio;
    p.offset = kPromptTokens;
    p.scores = ScoresBits(absl::StrCat("a.topk_input.L", layer, ".index.prefill"));
    EXPECT_EQ(static_cast<int64_t>(p.scores.size()), p.rows * p.width);
    return p;
  }
  static Problem Decode(int layer, int64_t ratio, int step) {
    Problem p;
    p.rows = 1;
    p.ratio = ratio;
    p.start_pos = kPromptTokens + step - 1;
    p.width = (p.start_pos + 1) / ratio;
    p.offset = kWindow;
    p.scores = ScoresBits(absl::StrCat("a.topk_input.L", layer, ".index.decode.", step));
    EXPECT_EQ(static_cast<int64_t>(p.scores.size()), p.width);
    return p;
  }

  // golden.json topk_boundary_ties_prompt_a[key][field].
  static int64_t GoldenTieRows(const std::string& key, const std::string& field) {
    std::ifstream in(dir_ + "golden.json");
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "golden.json does not parse";
    if (j.is_discarded()) return -1;
    return j["topk_boundary_ties_prompt_a"][key][field].get<int64_t>();
  }

  static inline std::string dir_;
  static inline std::unique_ptr<safetensors::SafetensorsFile> golden_;
};

}  // namespace flashserve::kernels::indexer_test
