// GPU launchers against the CPU body, byte for byte: a grid of shapes (rows 1, 7, 4096; cols 16 to
// 7168) over rows of every kind in quant_test_data.h, packed, padded and misaligned layouts,
// in-place QDQ, serving rows on a stream, and the launchers' errors. Outputs start poisoned, so a
// byte the kernel fails to write (or writes in the padding) shows up as a mismatch.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_gpu_util.h"
#include "kernels/quant/quant_test_data.h"

namespace flashserve::kernels::quant {
namespace {

using testing::DescribeMismatches;
using testing::MakeMatrix;
using testing::Poisoned;
using testing::PoisonedHost;
using testing::ToDevice;

constexpr BlockFormat kFormats[] = {BlockFormat::kFp8E4m3Ue8m0B32, BlockFormat::kFp4E2m1E4m3B16,
                                    BlockFormat::kFp4E2m1Ue8m0B32};

// Where each operand sits in its buffer: an offset (elements of its type) and a row stride.
struct Layout {
  std::string name;
  int64_t x_off = 0, x_stride = 0;  // bf16 input (and in-place QDQ)
  int64_t c_off = 0, c_stride = 0;  // code bytes
  int64_t s_off = 0, s_stride = 0;  // scale bytes
  int64_t o_off = 0, o_stride = 0;  // bf16 output
};

Layout Packed(BlockFormat f, int64_t cols) {
  return {"packed", 0, cols, 0, CodeBytes(f, cols), 0, ScaleBytes(f, cols), 0, cols};
}
Layout Padded(BlockFormat f, int64_t cols) {
  return {"padded", 0,        cols + 8, 0, CodeBytes(f, cols) + 16, 0, ScaleBytes(f, cols) + 3,
          0,        cols + 24};
}
// 4-byte aligned code rows (word path) and odd bf16 offsets and strides (scalar path).
Layout WordCodesScalarBf16(BlockFormat f, int64_t cols) {
  return {"word-codes/scalar-bf16", 1, cols + 3, 4, CodeBytes(f, cols) + 4, 1,
          ScaleBytes(f, cols) + 1,  3, cols + 5};
}
// Odd code offsets and strides (byte path), aligned bf16.
Layout ByteCodes(BlockFormat f, int64_t cols) {
  return {"byte-codes", 0, cols, 1, CodeBytes(f, cols) + 1, 2, ScaleBytes(f, cols) + 5, 0, cols};
}

// Quantise, dequantise, QDQ and in-place QDQ of a [rows, cols] matrix on both bodies; expects
// identical bytes in every output buffer, padding and offsets included.
void CheckAllOps(BlockFormat f, int64_t rows, int64_t cols, const Layout& l, uint64_t seed) {
  SCOPED_TRACE(absl::StrFormat("%s [%d, %d] %s", BlockFormatName(f), rows, cols, l.name));
  const size_t x_n = l.x_off + rows * l.x_stride, c_n = l.c_off + rows * l.c_stride;
  const size_t s_n = l.s_off + rows * l.s_stride, o_n = l.o_off + rows * l.o_stride;
  std::vector<uint16_t> x = MakeMatrix(rows, cols, l.x_stride, seed);
  x.insert(x.begin(), l.x_off, 0x1234);

  // CPU reference.
  std::vector<uint8_t> codes = PoisonedHost<uint8_t>(c_n), scales = PoisonedHost<uint8_t>(s_n);
  ASSERT_TRUE(QuantizeCpu({f, rows, cols, x.data() + l.x_off, l.x_stride, codes.data() + l.c_off,
                           l.c_stride, scales.data() + l.s_off, l.s_stride})
                  .ok());
  std::vector<uint16_t> deq = PoisonedHost<uint16_t>(o_n);
  ASSERT_TRUE(DequantizeCpu({f, rows, cols, codes.data() + l.c_off, l.c_stride,
                             scales.data() + l.s_off, l.s_stride, deq.data() + l.o_off, l.o_stride})
                  .ok());

  // Quantise.
  DeviceBuffer dx = ToDevice(x), dc = Poisoned(c_n), ds = Poisoned(s_n);
  ASSERT_TRUE(LaunchQuantize({f, rows, cols, dx.get<uint16_t>() + l.x_off, l.x_stride,
                              dc.get<uint8_t>() + l.c_off, l.c_stride, ds.get<uint8_t>() + l.s_off,
                              l.s_stride},
                             nullptr)
                  .ok());
  EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(dc, c_n), codes, l.c_stride), "") << "codes";
  EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(ds, s_n), scales, l.s_stride), "") << "scales";

  // Dequantise the reference codes.
  DeviceBuffer dc_ref = ToDevice(codes), ds_ref = ToDevice(scales), dout = Poisoned(o_n * 2);
  ASSERT_TRUE(LaunchDequantize({f, rows, cols, dc_ref.get<uint8_t>() + l.c_off, l.c_stride,
                                ds_ref.get<uint8_t>() + l.s_off, l.s_stride,
                                dout.get<uint16_t>() + l.o_off, l.o_stride},
                               nullptr)
                  .ok());
  EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(dout, o_n), deq, l.o_stride), "") << "dequant";

  // QDQ out of place, then in place over the input itself.
  DeviceBuffer dqdq = Poisoned(o_n * 2);
  ASSERT_TRUE(LaunchQdq({f, rows, cols, dx.get<uint16_t>() + l.x_off, l.x_stride,
                         dqdq.get<uint16_t>() + l.o_off, l.o_stride},
                        nullptr)
                  .ok());
  EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(dqdq, o_n), deq, l.o_stride), "") << "qdq";

  uint16_t* in_place = dx.get<uint16_t>() + l.x_off;
  ASSERT_TRUE(LaunchQdq({f, rows, cols, in_place, l.x_stride, in_place, l.x_stride}, nullptr).ok());
  std::vector<uint16_t> want = x;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      want[l.x_off + r * l.x_stride + i] = deq[l.o_off + r * l.o_stride + i];
    }
  }
  EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(dx, x_n), want, l.x_stride), "") << "in place";
}

struct GridCase {
  BlockFormat format;
  int64_t rows;
  int64_t cols;
};

std::vector<GridCase> GridCases() {
  std::vector<GridCase> cases;
  for (BlockFormat f : kFormats) {
    for (int64_t rows : {1, 7, 4096}) {
      for (int64_t cols : {16, 32, 48, 128, 512, 5120, 7168}) {
        if (cols % BlockSize(f) == 0) cases.push_back({f, rows, cols});
      }
    }
  }
  return cases;
}

class QuantGridTest : public ::testing::TestWithParam<GridCase> {};

TEST_P(QuantGridTest, GpuMatchesCpuByteForByte) {
  FS_SKIP_WITHOUT_GPU();
  const GridCase c = GetParam();
  const uint64_t seed = static_cast<uint64_t>(c.rows * 131 + c.cols);
  CheckAllOps(c.format, c.rows, c.cols, Packed(c.format, c.cols), seed);
  CheckAllOps(c.format, c.rows, c.cols, Padded(c.format, c.cols), seed + 1);
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantGridTest, ::testing::ValuesIn(GridCases()),
                         [](const ::testing::TestParamInfo<GridCase>& info) {
                           return absl::StrFormat("%s_%dx%d", BlockFormatName(info.param.format),
                                                  info.param.rows, info.param.cols);
                         });

TEST(QuantGpuTest, MisalignedOperandsGiveTheSameBytes) {
  FS_SKIP_WITHOUT_GPU();
  for (BlockFormat f : kFormats) {
    for (int64_t rows : {1, 37}) {
      CheckAllOps(f, rows, 160, WordCodesScalarBf16(f, 160), 11 + rows);
      CheckAllOps(f, rows, 160, ByteCodes(f, 160), 13 + rows);
    }
  }
}

// Serving rows on a non-default stream, packed and with a misaligning stride, against the CPU.
TEST(QuantGpuTest, EncodeAndDecodeRowsMatchCpu) {
  FS_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct Case {
    KvRowKind kind;
    int64_t channels;
  };
  for (const Case c : {Case{KvRowKind::kSwaKv, 512}, Case{KvRowKind::kSwaKv, 256},
                       Case{KvRowKind::kMainKv, 512}, Case{KvRowKind::kMainKv, 1024},
                       Case{KvRowKind::kIndexK, 128}, Case{KvRowKind::kIndexK, 64}}) {
    const int64_t row_bytes = KvRowBytes(c.kind, c.channels);
    for (int64_t rows : {1, 7, 4096}) {
      for (int64_t stride : {row_bytes, row_bytes + 4, row_bytes + 1}) {
        SCOPED_TRACE(absl::StrFormat("kind %d C=%d rows=%d stride=%d", static_cast<int>(c.kind),
                                     c.channels, rows, stride));
        const std::vector<uint16_t> x = MakeMatrix(rows, c.channels, c.channels, rows + stride);
        std::vector<uint8_t> want = PoisonedHost<uint8_t>(rows * stride);
        ASSERT_TRUE(
            EncodeRowsCpu({c.kind, rows, c.channels, x.data(), c.channels, want.data(), stride})
                .ok());
        DeviceBuffer dx = ToDevice(x), drows = Poisoned(rows * stride);
        ASSERT_TRUE(LaunchEncodeRows({c.kind, rows, c.channels, dx.get<uint16_t>(), c.channels,
                                      drows.get<uint8_t>(), stride},
                                     stream)
                        .ok());
        CUDA_CHECK(cudaStreamSynchronize(stream));
        EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(drows, rows * stride), want, stride), "");

        std::vector<uint16_t> out = PoisonedHost<uint16_t>(rows * c.channels);
        ASSERT_TRUE(
            DecodeRowsCpu({c.kind, rows, c.channels, want.data(), stride, out.data(), c.channels})
                .ok());
        DeviceBuffer dout = Poisoned(rows * c.channels * 2);
        ASSERT_TRUE(LaunchDecodeRows({c.kind, rows, c.channels, drows.get<uint8_t>(), stride,
                                      dout.get<uint16_t>(), c.channels},
                                     stream)
                        .ok());
        CUDA_CHECK(cudaStreamSynchronize(stream));
        EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(dout, rows * c.channels), out, c.channels),
                  "");
      }
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The decoded mirror written by the encode pass (EncodeRowsParams::decoded_out) against the CPU's
// DecodeRows of the CPU's rows, bit for bit: a 16-byte aligned mirror (vector stores), one
// misaligned by an element (the scalar path), and in place over x; the rows themselves unchanged.
TEST(QuantGpuTest, EncodeRowsWritesTheDecodedMirror) {
  FS_SKIP_WITHOUT_GPU();
  struct Case {
    KvRowKind kind;
    int64_t channels;
  };
  for (const Case c : {Case{KvRowKind::kSwaKv, 512}, Case{KvRowKind::kMainKv, 512},
                       Case{KvRowKind::kIndexK, 128}}) {
    const int64_t stride = KvRowBytes(c.kind, c.channels);
    for (int64_t rows : {1, 7, 1000}) {
      SCOPED_TRACE(absl::StrFormat("kind %d C=%d rows=%d", static_cast<int>(c.kind), c.channels,
                                   rows));
      const std::vector<uint16_t> x = MakeMatrix(rows, c.channels, c.channels, 5 + rows);
      std::vector<uint8_t> want_rows = PoisonedHost<uint8_t>(rows * stride);
      ASSERT_TRUE(
          EncodeRowsCpu({c.kind, rows, c.channels, x.data(), c.channels, want_rows.data(), stride})
              .ok());
      std::vector<uint16_t> want = PoisonedHost<uint16_t>(rows * c.channels);
      ASSERT_TRUE(DecodeRowsCpu(
                      {c.kind, rows, c.channels, want_rows.data(), stride, want.data(), c.channels})
                      .ok());
      for (int64_t shift : {0, 1, -1}) {  // -1: in place over x
        SCOPED_TRACE(absl::StrFormat("mirror shift %d", shift));
        DeviceBuffer dx = ToDevice(x), drows = Poisoned(rows * stride);
        DeviceBuffer dmirror = Poisoned((rows * c.channels + 1) * 2);
        uint16_t* mirror = shift < 0 ? dx.get<uint16_t>() : dmirror.get<uint16_t>() + shift;
        ASSERT_TRUE(LaunchEncodeRows({c.kind, rows, c.channels, dx.get<uint16_t>(), c.channels,
                                      drows.get<uint8_t>(), stride, mirror, c.channels},
                                     nullptr)
                        .ok());
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(drows, rows * stride), want_rows, stride), "");
        std::vector<uint16_t> got(static_cast<size_t>(rows * c.channels));
        CUDA_CHECK(cudaMemcpy(got.data(), mirror, got.size() * 2, cudaMemcpyDeviceToHost));
        EXPECT_EQ(DescribeMismatches(got, want, c.channels), "");
      }
    }
  }
}

// Bad params are rejected before any launch (the fake pointers are never dereferenced).
TEST(QuantGpuTest, LaunchersRejectBadParams) {
  FS_SKIP_WITHOUT_GPU();
  auto* x = reinterpret_cast<uint16_t*>(uintptr_t{1} << 40);
  auto* codes = reinterpret_cast<uint8_t*>(uintptr_t{1} << 44);
  auto* scales = reinterpret_cast<uint8_t*>(uintptr_t{1} << 45);
  const QuantizeParams bad_cols{BlockFormat::kFp8E4m3Ue8m0B32, 4, 48, x, 48, codes, 48, scales, 2};
  EXPECT_EQ(LaunchQuantize(bad_cols, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // rows * cols / 8 == 2^31: one unit too many for the 32-bit index.
  const QuantizeParams too_big{
      BlockFormat::kFp8E4m3Ue8m0B32, int64_t{1} << 26, 256, x, 256, codes, 256, scales, 8};
  ASSERT_TRUE(Validate(too_big).ok());
  EXPECT_EQ(LaunchQuantize(too_big, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchQdq({BlockFormat::kFp4E2m1E4m3B16, 2, 32, x, 32, x + 16, 32}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchEncodeRows({KvRowKind::kSwaKv, 2, 512, x, 512, codes, 527}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      LaunchDecodeRows({KvRowKind::kMainKv, 2, 512, codes, 288, nullptr, 512}, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      LaunchDequantize({BlockFormat::kFp4E2m1Ue8m0B32, 0, 64, nullptr, 0, nullptr, 0, nullptr, 0},
                       nullptr)
          .ok());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels::quant
