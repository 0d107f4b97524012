// Exhaustive GPU checks over the whole reachable domain of each quantiser: for every scale byte
// the block rule can produce, every bf16 x that a block with that scale can hold (|x| <= amax,
// both signs, NaNs); every code under every scale byte for the dequantisers; blocks holding ±Inf.
// Compared byte for byte with the CPU body (common/formats).
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp4_e2m1.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_gpu_util.h"
#include "kernels/quant/quant_test_data.h"

namespace flashserve::kernels::quant {
namespace {

namespace f = ::flashserve::formats;
using testing::DescribeMismatches;
using testing::Poisoned;
using testing::PoisonedHost;
using testing::ToDevice;

constexpr int64_t kCols = 1024;
constexpr BlockFormat kFormats[] = {BlockFormat::kFp8E4m3Ue8m0B32, BlockFormat::kFp4E2m1E4m3B16,
                                    BlockFormat::kFp4E2m1Ue8m0B32};

uint8_t ScaleByteOf(BlockFormat format, uint16_t amax_bits) {
  const float amax = f::Bf16BitsToFloat(amax_bits);
  switch (format) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return f::Fp8Ue8m0ScaleByte(amax);
    case BlockFormat::kFp4E2m1E4m3B16:
      return f::Fp4E4m3ScaleByte(amax);
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return f::Fp4Ue8m0ScaleByte(amax);
  }
  return 0;
}

// Appends blocks that start with ±lead and carry `values` after it, padding the last with +0.
void AppendBlocks(int64_t block, uint16_t lead, const std::vector<uint16_t>& values,
                  std::vector<uint16_t>* out) {
  size_t next = 0;
  bool negative = false;
  while (next < values.size()) {
    out->push_back(negative ? lead | 0x8000 : lead);
    negative = !negative;
    for (int64_t i = 1; i < block; ++i) out->push_back(next < values.size() ? values[next++] : 0);
  }
}

// For each scale byte the rule produces, the largest finite bf16 amax giving it, followed by
// every bf16 x with |x| <= that amax (both signs) and a few NaNs. Rows of kCols values.
std::vector<uint16_t> ReachableDomain(BlockFormat format) {
  std::vector<uint16_t> largest(256, 0xFFFF);
  for (uint16_t a = 0; a <= 0x7F7F; ++a) largest[ScaleByteOf(format, a)] = a;
  std::vector<uint16_t> out;
  for (uint16_t amax : largest) {
    if (amax == 0xFFFF) continue;
    std::vector<uint16_t> values;
    for (uint16_t x = 0; x <= amax; ++x) {
      values.push_back(x);
      values.push_back(x | 0x8000);
    }
    for (uint16_t nan : {0x7FC0, 0xFFC0, 0x7F81, 0xFFFF}) values.push_back(nan);
    AppendBlocks(BlockSize(format), amax, values, &out);
  }
  out.resize((out.size() + kCols - 1) / kCols * kCols, 0);
  return out;
}

// Quantises `x` ([rows, kCols], packed) on both bodies and compares codes and scales; with
// `check_qdq` also compares the GPU QDQ with the CPU dequantisation of the CPU codes.
void CheckQuantize(BlockFormat format, const std::vector<uint16_t>& x, bool check_qdq) {
  const int64_t rows = static_cast<int64_t>(x.size()) / kCols;
  const int64_t cb = CodeBytes(format, kCols), sb = ScaleBytes(format, kCols);
  std::vector<uint8_t> codes = PoisonedHost<uint8_t>(rows * cb);
  std::vector<uint8_t> scales = PoisonedHost<uint8_t>(rows * sb);
  ASSERT_TRUE(
      QuantizeCpu({format, rows, kCols, x.data(), kCols, codes.data(), cb, scales.data(), sb})
          .ok());
  DeviceBuffer dx = ToDevice(x), dc = Poisoned(rows * cb), ds = Poisoned(rows * sb);
  ASSERT_TRUE(LaunchQuantize({format, rows, kCols, dx.get<uint16_t>(), kCols, dc.get<uint8_t>(), cb,
                              ds.get<uint8_t>(), sb},
                             nullptr)
                  .ok());
  EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(dc, rows * cb), codes, cb), "") << "codes";
  EXPECT_EQ(DescribeMismatches(ToHost<uint8_t>(ds, rows * sb), scales, sb), "") << "scales";
  if (!check_qdq) return;
  std::vector<uint16_t> deq(rows * kCols);
  ASSERT_TRUE(
      DequantizeCpu({format, rows, kCols, codes.data(), cb, scales.data(), sb, deq.data(), kCols})
          .ok());
  DeviceBuffer dout = Poisoned(rows * kCols * 2);
  ASSERT_TRUE(
      LaunchQdq({format, rows, kCols, dx.get<uint16_t>(), kCols, dout.get<uint16_t>(), kCols},
                nullptr)
          .ok());
  EXPECT_EQ(DescribeMismatches(ToHost<uint16_t>(dout, rows * kCols), deq, kCols), "") << "qdq";
}

TEST(QuantGpuExhaustiveTest, EveryReachableValueUnderEveryScale) {
  FS_SKIP_WITHOUT_GPU();
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(BlockFormatName(format));
    const std::vector<uint16_t> x = ReachableDomain(format);
    CheckQuantize(format, x, /*check_qdq=*/true);
  }
}

// A ±Inf in a block: the UE8M0 scale becomes NaN (byte 255) and the E4M3 scale saturates.
// FP8 QDQ is left out: dequantising a NaN code under a NaN scale is unspecified on the CPU.
TEST(QuantGpuExhaustiveTest, BlocksHoldingInfinity) {
  FS_SKIP_WITHOUT_GPU();
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(BlockFormatName(format));
    std::vector<uint16_t> values;
    for (uint32_t x = 0; x < 0x10000; x += 7) values.push_back(static_cast<uint16_t>(x));
    std::vector<uint16_t> x;
    AppendBlocks(BlockSize(format), 0x7F80, values, &x);
    x.resize((x.size() + kCols - 1) / kCols * kCols, 0);
    CheckQuantize(format, x, /*check_qdq=*/format != BlockFormat::kFp8E4m3Ue8m0B32);
  }
}

// Every code under every scale byte. Row r uses scale byte r for all its blocks.
TEST(QuantGpuExhaustiveTest, DequantizeEveryCodeUnderEveryScaleByte) {
  FS_SKIP_WITHOUT_GPU();
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(BlockFormatName(format));
    const bool fp8 = format == BlockFormat::kFp8E4m3Ue8m0B32;
    const int64_t cols = fp8 ? 256 : 32, rows = 256;
    const int64_t cb = CodeBytes(format, cols), sb = ScaleBytes(format, cols);
    std::vector<uint8_t> codes(rows * cb), scales(rows * sb);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < cb; ++i) {
        codes[r * cb + i] = fp8 ? static_cast<uint8_t>(i) : f::PackE2m1(i * 2 % 16, i * 2 % 16 + 1);
      }
      for (int64_t i = 0; i < sb; ++i) scales[r * sb + i] = static_cast<uint8_t>(r);
    }
    std::vector<uint16_t> want(rows * cols);
    ASSERT_TRUE(
        DequantizeCpu({format, rows, cols, codes.data(), cb, scales.data(), sb, want.data(), cols})
            .ok());
    DeviceBuffer dc = ToDevice(codes), ds = ToDevice(scales), dout = Poisoned(rows * cols * 2);
    ASSERT_TRUE(LaunchDequantize({format, rows, cols, dc.get<uint8_t>(), cb, ds.get<uint8_t>(), sb,
                                  dout.get<uint16_t>(), cols},
                                 nullptr)
                    .ok());
    std::vector<uint16_t> got = ToHost<uint16_t>(dout, rows * cols);
    if (fp8) {
      // NaN code (0x7F, 0xFF) under the NaN scale (byte 255): unspecified; both must be NaN.
      for (int64_t i : {255 * 256 + 0x7F, 255 * 256 + 0xFF}) {
        EXPECT_GT(got[i] & 0x7FFF, 0x7F80) << i;
        got[i] = want[i];
      }
    }
    EXPECT_EQ(DescribeMismatches(got, want, cols), "");
  }
}

}  // namespace
}  // namespace flashserve::kernels::quant
