// Conformance: the three block quantisers against the reference's own output bytes in
// tests/conformance/data/v41-tiny/quant_vectors.safetensors (README.md there, section
// `quant_vectors.safetensors`). Every code byte, scale byte, fp32 scale and dequantised bf16 value
// must match bit for bit.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/kv_row.h"
#include "common/formats/ue8m0.h"
#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"

namespace flashserve::formats {
namespace {

namespace st = ::flashserve::safetensors;

constexpr int64_t kRows = 64;
constexpr int64_t kCols = 256;

std::string FixturePath() {
  const char* root = std::getenv("FS_SOURCE_DIR");
  return absl::StrCat(root != nullptr ? root : ".",
                      "/tests/conformance/data/v41-tiny/quant_vectors.safetensors");
}

// Copies tensor `name` out of the file after checking its dtype and shape (a copy, so nothing
// depends on the alignment of the data section).
template <typename T>
absl::StatusOr<std::vector<T>> Load(const st::SafetensorsFile& file, const std::string& name,
                                    st::DType dtype, std::vector<int64_t> shape) {
  absl::StatusOr<st::TensorView> view = file.Get(name);
  if (!view.ok()) return view.status();
  if (view->dtype != dtype || view->shape != shape) {
    return absl::FailedPreconditionError(absl::StrCat(name, ": unexpected dtype or shape"));
  }
  std::vector<T> out(view->nbytes / sizeof(T));
  if (out.size() * sizeof(T) != view->nbytes) {
    return absl::FailedPreconditionError(absl::StrCat(name, ": size is not whole elements"));
  }
  std::memcpy(out.data(), view->data, view->nbytes);
  return out;
}

// Describes the mismatches between `got` and `want` (row-major [rows, cols]); empty if equal.
template <typename T>
std::string Mismatches(std::span<const T> got, std::span<const T> want, int64_t cols) {
  if (got.size() != want.size()) return "size differs";
  int64_t count = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++count <= 5) {
      absl::StrAppendFormat(&first, " [row %d, col %d] got 0x%x want 0x%x;", i / cols, i % cols,
                            static_cast<uint64_t>(got[i]), static_cast<uint64_t>(want[i]));
    }
  }
  return count == 0 ? std::string() : absl::StrCat(count, " mismatches:", first);
}

class QuantVectorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = st::SafetensorsFile::Open(FixturePath());
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(file).value();
    auto input = Load<uint16_t>(*file_, "quant.input", st::DType::kBF16, {kRows, kCols});
    ASSERT_TRUE(input.ok()) << input.status();
    input_ = std::move(input).value();
  }

  // Loads `quant.<format>.<field>` as T and fails the test on error.
  template <typename T>
  std::vector<T> Expected(const std::string& format, const std::string& field, st::DType dtype,
                          int64_t cols) {
    auto t = Load<T>(*file_, absl::StrCat("quant.", format, ".", field), dtype, {kRows, cols});
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(t).value() : std::vector<T>();
  }

  // Checks scale_f32 against the decoded scale bytes and `dequant` against our dequantisation.
  template <typename DecodeScale>
  void CheckScalesAndDequant(const std::string& format, std::span<const uint8_t> scale_bytes,
                             std::span<const uint16_t> dequant, DecodeScale decode_scale) {
    const int64_t scale_cols = static_cast<int64_t>(scale_bytes.size()) / kRows;
    const auto want_f32 = Expected<float>(format, "scale_f32", st::DType::kF32, scale_cols);
    std::vector<uint32_t> got_bits(scale_bytes.size()), want_bits(want_f32.size());
    for (size_t i = 0; i < scale_bytes.size(); ++i) {
      got_bits[i] = std::bit_cast<uint32_t>(decode_scale(scale_bytes[i]));
    }
    for (size_t i = 0; i < want_f32.size(); ++i)
      want_bits[i] = std::bit_cast<uint32_t>(want_f32[i]);
    EXPECT_EQ(Mismatches<uint32_t>(got_bits, want_bits, scale_cols), "") << format << " scale_f32";

    const auto want_dq = Expected<uint16_t>(format, "dequant", st::DType::kBF16, kCols);
    EXPECT_EQ(Mismatches<uint16_t>(dequant, want_dq, kCols), "") << format << " dequant";
  }

  std::unique_ptr<st::SafetensorsFile> file_;
  std::vector<uint16_t> input_;
};

TEST_F(QuantVectorsTest, Fp8E4m3Ue8m0B32) {
  const std::string format = "fp8_e4m3_ue8m0_b32";
  std::vector<uint8_t> codes(kRows * kCols), scales(kRows * kCols / 32);
  ASSERT_TRUE(QuantizeFp8Ue8m0B32(input_, codes, scales).ok());
  EXPECT_EQ(
      Mismatches<uint8_t>(codes, Expected<uint8_t>(format, "codes", st::DType::kU8, kCols), kCols),
      "");
  EXPECT_EQ(
      Mismatches<uint8_t>(scales, Expected<uint8_t>(format, "scale_bytes", st::DType::kU8, 8), 8),
      "");
  std::vector<uint16_t> dequant(kRows * kCols);
  ASSERT_TRUE(DequantizeFp8Ue8m0B32(codes, scales, dequant).ok());
  CheckScalesAndDequant(format, scales, dequant, Ue8m0ToFloat);

  std::vector<uint16_t> qdq = input_;
  ASSERT_TRUE(QdqFp8Ue8m0B32(qdq, qdq).ok());
  EXPECT_EQ(qdq, dequant);
}

TEST_F(QuantVectorsTest, Fp4E2m1E4m3B16) {
  const std::string format = "fp4_e2m1_e4m3_b16";
  std::vector<uint8_t> packed(kRows * kCols / 2), scales(kRows * kCols / 16);
  ASSERT_TRUE(QuantizeFp4E4m3B16(input_, packed, scales).ok());
  EXPECT_EQ(Mismatches<uint8_t>(
                packed, Expected<uint8_t>(format, "packed", st::DType::kU8, kCols / 2), kCols / 2),
            "");
  EXPECT_EQ(
      Mismatches<uint8_t>(scales, Expected<uint8_t>(format, "scale_bytes", st::DType::kU8, 16), 16),
      "");
  std::vector<uint16_t> dequant(kRows * kCols);
  ASSERT_TRUE(DequantizeFp4E4m3B16(packed, scales, dequant).ok());
  CheckScalesAndDequant(format, scales, dequant, E4m3ToFloat);

  std::vector<uint16_t> qdq(kRows * kCols);
  ASSERT_TRUE(QdqFp4E4m3B16(input_, qdq).ok());
  EXPECT_EQ(qdq, dequant);
}

TEST_F(QuantVectorsTest, Fp4E2m1Ue8m0B32) {
  const std::string format = "fp4_e2m1_ue8m0_b32";
  std::vector<uint8_t> packed(kRows * kCols / 2), scales(kRows * kCols / 32);
  ASSERT_TRUE(QuantizeFp4Ue8m0B32(input_, packed, scales).ok());
  EXPECT_EQ(Mismatches<uint8_t>(
                packed, Expected<uint8_t>(format, "packed", st::DType::kU8, kCols / 2), kCols / 2),
            "");
  EXPECT_EQ(
      Mismatches<uint8_t>(scales, Expected<uint8_t>(format, "scale_bytes", st::DType::kU8, 8), 8),
      "");
  std::vector<uint16_t> dequant(kRows * kCols);
  ASSERT_TRUE(DequantizeFp4Ue8m0B32(packed, scales, dequant).ok());
  CheckScalesAndDequant(format, scales, dequant, Ue8m0ToFloat);

  std::vector<uint16_t> qdq(kRows * kCols);
  ASSERT_TRUE(QdqFp4Ue8m0B32(input_, qdq).ok());
  EXPECT_EQ(qdq, dequant);
}

// The serving rows hold the same bytes: codes of a row, then its scales.
TEST_F(QuantVectorsTest, ServingRowsCarryTheReferenceBytes) {
  const auto swa_codes = Expected<uint8_t>("fp8_e4m3_ue8m0_b32", "codes", st::DType::kU8, kCols);
  const auto swa_scales = Expected<uint8_t>("fp8_e4m3_ue8m0_b32", "scale_bytes", st::DType::kU8, 8);
  const auto main_packed =
      Expected<uint8_t>("fp4_e2m1_e4m3_b16", "packed", st::DType::kU8, kCols / 2);
  const auto main_scales =
      Expected<uint8_t>("fp4_e2m1_e4m3_b16", "scale_bytes", st::DType::kU8, 16);
  const auto dq = Expected<uint16_t>("fp4_e2m1_e4m3_b16", "dequant", st::DType::kBF16, kCols);
  ASSERT_FALSE(swa_codes.empty() || main_packed.empty() || dq.empty());

  std::vector<uint8_t> swa(SwaKvRowBytes(kCols)), main_kv(MainKvRowBytes(kCols));
  std::vector<uint16_t> decoded(kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    const auto x = std::span(input_).subspan(r * kCols, kCols);
    ASSERT_TRUE(EncodeSwaKvRow(x, swa).ok());
    std::vector<uint8_t> want(swa_codes.begin() + r * kCols, swa_codes.begin() + (r + 1) * kCols);
    want.insert(want.end(), swa_scales.begin() + r * 8, swa_scales.begin() + (r + 1) * 8);
    EXPECT_EQ(swa, want) << "SWA row " << r;

    ASSERT_TRUE(EncodeMainKvRow(x, main_kv).ok());
    want.assign(main_packed.begin() + r * kCols / 2, main_packed.begin() + (r + 1) * kCols / 2);
    want.insert(want.end(), main_scales.begin() + r * 16, main_scales.begin() + (r + 1) * 16);
    EXPECT_EQ(main_kv, want) << "main KV row " << r;
    ASSERT_TRUE(DecodeMainKvRow(main_kv, decoded).ok());
    EXPECT_TRUE(std::equal(decoded.begin(), decoded.end(), dq.begin() + r * kCols))
        << "main KV row " << r;
  }
}

}  // namespace
}  // namespace flashserve::formats
