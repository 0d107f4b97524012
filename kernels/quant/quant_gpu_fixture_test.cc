// The reference's own bytes (tests/conformance/data/v41-tiny/quant_vectors.safetensors, 64 rows
// of 256 values; see that folder's README.md) reproduced by the GPU path: codes, scale bytes,
// dequantised values, QDQ and the serving rows.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_gpu_util.h"
#include "kernels/quant/quant_test_data.h"

namespace flashserve::kernels::quant {
namespace {

namespace st = ::flashserve::safetensors;
using testing::DescribeMismatches;
using testing::Poisoned;
using testing::ToDevice;

constexpr int64_t kRows = 64;
constexpr int64_t kCols = 256;

std::string FixturePath() {
  const char* root = std::getenv("FS_SOURCE_DIR");
  return absl::StrCat(root != nullptr ? root : ".",
                      "/tests/conformance/data/v41-tiny/quant_vectors.safetensors");
}

// The reference output of one quantiser, as stored in the fixture.
struct Reference {
  std::string prefix;  // "quant.<format>."
  BlockFormat format;
  KvRowKind kind;
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
  std::vector<uint16_t> dequant;
};

class QuantGpuFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FS_SKIP_WITHOUT_GPU();
    auto file = st::SafetensorsFile::Open(FixturePath());
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(file).value();
    Load("quant.input", st::DType::kBF16, {kRows, kCols}, &input_);
  }

  // Copies tensor `name` after checking dtype and shape (a copy: no alignment assumptions).
  template <typename T>
  void Load(const std::string& name, st::DType dtype, std::vector<int64_t> shape,
            std::vector<T>* out) {
    absl::StatusOr<st::TensorView> view = file_->Get(name);
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_EQ(view->dtype, dtype) << name;
    ASSERT_EQ(view->shape, shape) << name;
    out->resize(view->nbytes / sizeof(T));
    std::memcpy(out->data(), view->data, view->nbytes);
  }

  void LoadReference(Reference* ref) {
    const int64_t cb = CodeBytes(ref->format, kCols), sb = ScaleBytes(ref->format, kCols);
    const bool fp8 = ref->format == BlockFormat::kFp8E4m3Ue8m0B32;
    Load(ref->prefix + (fp8 ? "codes" : "packed"), st::DType::kU8, {kRows, cb}, &ref->codes);
    Load(ref->prefix + "scale_bytes", st::DType::kU8, {kRows, sb}, &ref->scales);
    Load(ref->prefix + "dequant", st::DType::kBF16, {kRows, kCols}, &ref->dequant);
  }

  std::unique_ptr<st::SafetensorsFile> file_;
  std::vector<uint16_t> input_;
};

TEST_F(QuantGpuFixtureTest, GpuReproducesTheReferenceBytes) {
  FS_SKIP_WITHOUT_GPU();
  std::vector<Reference> refs = {
      {"quant.fp8_e4m3_ue8m0_b32.", BlockFormat::kFp8E4m3Ue8m0B32, KvRowKind::kSwaKv, {}, {}, {}},
      {"quant.fp4_e2m1_e4m3_b16.", BlockFormat::kFp4E2m1E4m3B16, KvRowKind::kMainKv, {}, {}, {}},
      {"quant.fp4_e2m1_ue8m0_b32.", BlockFormat::kFp4E2m1Ue8m0B32, KvRowKind::kIndexK, {}, {}, {}}};
  DeviceBuffer dx = ToDevice(input_);
  for (Reference& ref : refs) {
    SCOPED_TRACE(ref.prefix);
    LoadReference(&ref);
    if (HasFatalFailure()) return;
    const BlockFormat f = ref.format;
    const int64_t cb = CodeBytes(f, kCols), sb = ScaleBytes(f, kCols);

    DeviceBuffer dc = Poisoned(kRows * cb), ds = Poisoned(kRows * sb);
    ASSERT_TRUE(LaunchQuantize({f, kRows, kCols, dx.get<uint16_t>(), kCols, dc.get<uint8_t>(), cb,
                                ds.get<uint8_t>(), sb},
                               nullptr)
                    .ok());
    EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(dc, kRows * cb), ref.codes, cb, false), "")
        << "codes";
    EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(ds, kRows * sb), ref.scales, sb, false), "")
        << "scales";

    DeviceBuffer dout = Poisoned(kRows * kCols * 2);
    ASSERT_TRUE(LaunchDequantize({f, kRows, kCols, dc.get<uint8_t>(), cb, ds.get<uint8_t>(), sb,
                                  dout.get<uint16_t>(), kCols},
                                 nullptr)
                    .ok());
    EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(dout, kRows * kCols), ref.dequant, kCols, false),
              "")
        << "dequant";

    DeviceBuffer dqdq = Poisoned(kRows * kCols * 2);
    ASSERT_TRUE(LaunchQdq({f, kRows, kCols, dx.get<uint16_t>(), kCols, dqdq.get<uint16_t>(), kCols},
                          nullptr)
                    .ok());
    EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(dqdq, kRows * kCols), ref.dequant, kCols, false),
              "")
        << "qdq";

    // Serving rows: each row's reference codes, then its reference scales.
    const int64_t row_bytes = KvRowBytes(ref.kind, kCols);
    ASSERT_EQ(row_bytes, cb + sb);
    std::vector<uint8_t> want_rows;
    for (int64_t r = 0; r < kRows; ++r) {
      want_rows.insert(want_rows.end(), ref.codes.begin() + r * cb,
                       ref.codes.begin() + (r + 1) * cb);
      want_rows.insert(want_rows.end(), ref.scales.begin() + r * sb,
                       ref.scales.begin() + (r + 1) * sb);
    }
    DeviceBuffer drows = Poisoned(kRows * row_bytes);
    ASSERT_TRUE(LaunchEncodeRows({ref.kind, kRows, kCols, dx.get<uint16_t>(), kCols,
                                  drows.get<uint8_t>(), row_bytes},
                                 nullptr)
                    .ok());
    EXPECT_EQ(
        DescribeMismatches(ToHost<uint8_t>(drows, kRows * row_bytes), want_rows, row_bytes, false),
        "")
        << "rows";
    DeviceBuffer ddec = Poisoned(kRows * kCols * 2);
    ASSERT_TRUE(LaunchDecodeRows({ref.kind, kRows, kCols, drows.get<uint8_t>(), row_bytes,
                                  ddec.get<uint16_t>(), kCols},
                                 nullptr)
                    .ok());
    EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(ddec, kRows * kCols), ref.dequant, kCols, false),
              "")
        << "decoded rows";
  }
}

}  // namespace
}  // namespace flashserve::kernels::quant
