// Access to the v41-tiny golden fixture for the mHC tests (tests/conformance/data/v41-tiny; its
// README.md describes every tensor): the two files opened once per test suite, and copies of
// tensors checked for dtype and shape.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/formats/bf16.h"
#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"

namespace flashserve::kernels::mhc_test {

// Tiny model dims and the prompt-a run's sizes.
inline constexpr int64_t kTinyDim = 256, kTinyVocab = 2048, kTinyLayers = 8;
inline constexpr int64_t kPromptATokens = 201, kPromptASteps = 13;  // steps: prefill + 12 decode

class TinyFixtureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* root = std::getenv("FS_SOURCE_DIR");
    const std::string dir =
        absl::StrCat(root != nullptr ? root : ".", "/tests/conformance/data/v41-tiny/");
    auto golden = safetensors::SafetensorsFile::Open(dir + "golden.safetensors");
    auto model = safetensors::SafetensorsFile::Open(dir + "model.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status();
    ASSERT_TRUE(model.ok()) << model.status();
    golden_ = std::move(golden).value();
    model_ = std::move(model).value();
  }
  static void TearDownTestSuite() {
    golden_.reset();
    model_.reset();
  }

  // A copy of tensor `name` (no alignment assumption) after checking dtype and shape; empty (and
  // a test failure) when that fails.
  template <typename T>
  static std::vector<T> Load(const safetensors::SafetensorsFile& file, const std::string& name,
                             safetensors::DType dtype, std::initializer_list<int64_t> shape) {
    auto view = file.GetChecked(name, dtype, shape);
    EXPECT_TRUE(view.ok()) << view.status();
    if (!view.ok()) return {};
    std::vector<T> out(view->nbytes / sizeof(T));
    std::memcpy(out.data(), view->data, view->nbytes);
    return out;
  }
  static std::vector<uint16_t> Bf16(const safetensors::SafetensorsFile& f, const std::string& name,
                                    std::initializer_list<int64_t> shape) {
    return Load<uint16_t>(f, name, safetensors::DType::kBF16, shape);
  }
  static std::vector<float> F32(const safetensors::SafetensorsFile& f, const std::string& name,
                                std::initializer_list<int64_t> shape) {
    return Load<float>(f, name, safetensors::DType::kF32, shape);
  }

  // The golden file widens bf16 values to fp32 exactly; back to bf16 bits, checking exactness.
  static std::vector<uint16_t> ExactBf16(const float* v, int64_t n) {
    std::vector<uint16_t> out(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      out[k] = formats::FloatToBf16Bits(v[k]);
      EXPECT_EQ(formats::Bf16BitsToFloat(out[k]), v[k]) << "not a bf16 value at " << k;
    }
    return out;
  }

  static inline std::unique_ptr<safetensors::SafetensorsFile> golden_;
  static inline std::unique_ptr<safetensors::SafetensorsFile> model_;
};

}  // namespace flashserve::kernels::mhc_test
