// The CPU body's params handling: strides, padding left alone, serving rows, in-place QDQ, and
// every validation error (with nothing written on error).
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/formats/block_quant.h"
#include "common/formats/kv_row.h"
#include "gtest/gtest.h"
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_test_data.h"

namespace flashserve::kernels::quant {
namespace {

namespace f = ::flashserve::formats;
using testing::DescribeMismatches;
using testing::MakeMatrix;

constexpr uint8_t kPoison = 0xA5;
constexpr BlockFormat kFormats[] = {BlockFormat::kFp8E4m3Ue8m0B32, BlockFormat::kFp4E2m1E4m3B16,
                                    BlockFormat::kFp4E2m1Ue8m0B32};

// Runs the formats quantiser of `format` on one row.
absl::Status FormatsQuantize(BlockFormat format, std::span<const uint16_t> x,
                             std::span<uint8_t> codes, std::span<uint8_t> scales) {
  switch (format) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return f::QuantizeFp8Ue8m0B32(x, codes, scales);
    case BlockFormat::kFp4E2m1E4m3B16:
      return f::QuantizeFp4E4m3B16(x, codes, scales);
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return f::QuantizeFp4Ue8m0B32(x, codes, scales);
  }
  return absl::InternalError("format");
}

TEST(QuantSizesTest, MatchFormats) {
  EXPECT_EQ(BlockSize(BlockFormat::kFp8E4m3Ue8m0B32), 32);
  EXPECT_EQ(BlockSize(BlockFormat::kFp4E2m1E4m3B16), 16);
  EXPECT_EQ(BlockSize(BlockFormat::kFp4E2m1Ue8m0B32), 32);
  EXPECT_EQ(CodeBytes(BlockFormat::kFp8E4m3Ue8m0B32, 512), 512);
  EXPECT_EQ(CodeBytes(BlockFormat::kFp4E2m1E4m3B16, 512), 256);
  EXPECT_EQ(ScaleBytes(BlockFormat::kFp4E2m1E4m3B16, 512), 32);
  EXPECT_EQ(ScaleBytes(BlockFormat::kFp4E2m1Ue8m0B32, 128), 4);
  EXPECT_EQ(KvRowBytes(KvRowKind::kSwaKv, 512), 528);
  EXPECT_EQ(KvRowBytes(KvRowKind::kMainKv, 512), 288);
  EXPECT_EQ(KvRowBytes(KvRowKind::kIndexK, 128), 68);
  EXPECT_EQ(KvRowScaleOffset(KvRowKind::kSwaKv, 512), 512);
  EXPECT_EQ(KvRowScaleOffset(KvRowKind::kMainKv, 512), 256);
  EXPECT_EQ(KvRowScaleOffset(KvRowKind::kIndexK, 128), 64);
  EXPECT_EQ(KvRowFormat(KvRowKind::kMainKv), BlockFormat::kFp4E2m1E4m3B16);
}

// Strided quantise/dequantise/QDQ equal formats row by row, and padding bytes stay untouched.
TEST(QuantCpuTest, StridedRowsMatchFormatsAndLeavePaddingAlone) {
  constexpr int64_t kRows = 9, kCols = 96, kXStride = 101;
  const std::vector<uint16_t> x = MakeMatrix(kRows, kCols, kXStride, 7);
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(BlockFormatName(format));
    const int64_t code_bytes = CodeBytes(format, kCols), scale_bytes = ScaleBytes(format, kCols);
    const int64_t cs = code_bytes + 5, ss = scale_bytes + 3;
    std::vector<uint8_t> codes(kRows * cs, kPoison), scales(kRows * ss, kPoison);
    std::vector<uint8_t> want_codes = codes, want_scales = scales;
    for (int64_t r = 0; r < kRows; ++r) {
      ASSERT_TRUE(FormatsQuantize(format, std::span(x).subspan(r * kXStride, kCols),
                                  std::span(want_codes).subspan(r * cs, code_bytes),
                                  std::span(want_scales).subspan(r * ss, scale_bytes))
                      .ok());
    }
    ASSERT_TRUE(
        QuantizeCpu({format, kRows, kCols, x.data(), kXStride, codes.data(), cs, scales.data(), ss})
            .ok());
    EXPECT_EQ(DescribeMismatches(codes, want_codes, cs), "");
    EXPECT_EQ(DescribeMismatches(scales, want_scales, ss), "");

    // Dequantise into a strided output, then QDQ (out of place and in place) must agree with it.
    constexpr int64_t kOutStride = 100;
    std::vector<uint16_t> deq(kRows * kOutStride, 0xA5A5);
    ASSERT_TRUE(DequantizeCpu({format, kRows, kCols, codes.data(), cs, scales.data(), ss,
                               deq.data(), kOutStride})
                    .ok());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t i = kCols; i < kOutStride; ++i) ASSERT_EQ(deq[r * kOutStride + i], 0xA5A5);
    }
    std::vector<uint16_t> qdq(kRows * kOutStride, 0xA5A5);
    ASSERT_TRUE(QdqCpu({format, kRows, kCols, x.data(), kXStride, qdq.data(), kOutStride}).ok());
    EXPECT_EQ(DescribeMismatches(qdq, deq, kOutStride), "");

    std::vector<uint16_t> in_place = x;
    ASSERT_TRUE(
        QdqCpu({format, kRows, kCols, in_place.data(), kXStride, in_place.data(), kXStride}).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t i = 0; i < kXStride; ++i) {
        const uint16_t want = i < kCols ? deq[r * kOutStride + i] : x[r * kXStride + i];
        ASSERT_EQ(in_place[r * kXStride + i], want) << "row " << r << " col " << i;
      }
    }
  }
}

// Serving rows carry exactly what formats' Encode*Row writes; padding between rows untouched.
TEST(QuantCpuTest, EncodeAndDecodeRowsMatchKvRowFunctions) {
  struct Case {
    KvRowKind kind;
    int64_t channels;
    absl::Status (*encode)(std::span<const uint16_t>, std::span<uint8_t>);
    absl::Status (*decode)(std::span<const uint8_t>, std::span<uint16_t>);
  };
  const Case cases[] = {{KvRowKind::kSwaKv, 512, f::EncodeSwaKvRow, f::DecodeSwaKvRow},
                        {KvRowKind::kMainKv, 512, f::EncodeMainKvRow, f::DecodeMainKvRow},
                        {KvRowKind::kIndexK, 128, f::EncodeIndexKRow, f::DecodeIndexKRow}};
  constexpr int64_t kRows = 11;
  for (const Case& c : cases) {
    const int64_t row_bytes = KvRowBytes(c.kind, c.channels);
    for (int64_t stride : {row_bytes, row_bytes + 7}) {
      SCOPED_TRACE(testing::RowKindName(testing::KindOfRow(0)) + " stride " +
                   std::to_string(stride) + " kind " + std::to_string(static_cast<int>(c.kind)));
      const std::vector<uint16_t> x = MakeMatrix(kRows, c.channels, c.channels, 3);
      std::vector<uint8_t> rows(kRows * stride, kPoison), want = rows;
      for (int64_t r = 0; r < kRows; ++r) {
        ASSERT_TRUE(c.encode(std::span(x).subspan(r * c.channels, c.channels),
                             std::span(want).subspan(r * stride, row_bytes))
                        .ok());
      }
      ASSERT_TRUE(
          EncodeRowsCpu({c.kind, kRows, c.channels, x.data(), c.channels, rows.data(), stride})
              .ok());
      EXPECT_EQ(DescribeMismatches(rows, want, stride), "");

      std::vector<uint16_t> out(kRows * c.channels), want_out(kRows * c.channels);
      for (int64_t r = 0; r < kRows; ++r) {
        ASSERT_TRUE(c.decode(std::span(want).subspan(r * stride, row_bytes),
                             std::span(want_out).subspan(r * c.channels, c.channels))
                        .ok());
      }
      ASSERT_TRUE(
          DecodeRowsCpu({c.kind, kRows, c.channels, rows.data(), stride, out.data(), c.channels})
              .ok());
      EXPECT_EQ(DescribeMismatches(out, want_out, c.channels), "");
    }
  }
}

// The optional bf16 mirror (QuantizeParams::qdq_out, EncodeRowsParams::decoded_out): the decode
// of the codes written, bit for bit — QdqCpu of x for every format, DecodeRowsCpu of the rows —
// its padding untouched, in place too; and the mirror's own checks.
TEST(QuantCpuTest, QuantizeWritesTheDecodedMirror) {
  constexpr int64_t kRows = 9, kCols = 128, kPad = 3;
  const std::vector<uint16_t> x = MakeMatrix(kRows, kCols, kCols, 17);
  for (BlockFormat f : {BlockFormat::kFp8E4m3Ue8m0B32, BlockFormat::kFp4E2m1E4m3B16,
                        BlockFormat::kFp4E2m1Ue8m0B32}) {
    SCOPED_TRACE(BlockFormatName(f));
    const int64_t cb = CodeBytes(f, kCols), sb = ScaleBytes(f, kCols);
    std::vector<uint8_t> codes(kRows * cb, kPoison), scales(kRows * sb, kPoison);
    std::vector<uint16_t> mirror(kRows * (kCols + kPad), 0xA5A5), want(kRows * kCols, 0xA5A5);
    ASSERT_TRUE(QuantizeCpu({f, kRows, kCols, x.data(), kCols, codes.data(), cb, scales.data(), sb,
                             mirror.data(), kCols + kPad})
                    .ok());
    ASSERT_TRUE(QdqCpu({f, kRows, kCols, x.data(), kCols, want.data(), kCols}).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols + kPad; ++c) {
        const uint16_t got = mirror[r * (kCols + kPad) + c];
        ASSERT_EQ(got, c < kCols ? want[r * kCols + c] : 0xA5A5) << "row " << r << " col " << c;
      }
    }
    std::vector<uint16_t> in_place = x;
    ASSERT_TRUE(QuantizeCpu({f, kRows, kCols, in_place.data(), kCols, codes.data(), cb,
                             scales.data(), sb, in_place.data(), kCols})
                    .ok());
    EXPECT_EQ(in_place, want);
  }
  for (KvRowKind kind : {KvRowKind::kSwaKv, KvRowKind::kMainKv, KvRowKind::kIndexK}) {
    SCOPED_TRACE(static_cast<int>(kind));
    const int64_t stride = KvRowBytes(kind, kCols) + 5;
    std::vector<uint8_t> rows(kRows * stride, kPoison), plain = rows;
    std::vector<uint16_t> decoded(kRows * kCols, 0xA5A5), want(kRows * kCols, 0xA5A5);
    ASSERT_TRUE(EncodeRowsCpu({kind, kRows, kCols, x.data(), kCols, rows.data(), stride,
                               decoded.data(), kCols})
                    .ok());
    ASSERT_TRUE(EncodeRowsCpu({kind, kRows, kCols, x.data(), kCols, plain.data(), stride}).ok());
    EXPECT_EQ(rows, plain);
    ASSERT_TRUE(DecodeRowsCpu({kind, kRows, kCols, rows.data(), stride, want.data(), kCols}).ok());
    EXPECT_EQ(decoded, want);
  }
  // Rejected: a short mirror stride, a mirror over the codes, in place with another stride.
  std::vector<uint8_t> codes(kRows * kCols, kPoison), scales(kRows * 4, kPoison);
  std::vector<uint16_t> mirror(kRows * kCols);
  const QuantizeParams good{BlockFormat::kFp8E4m3Ue8m0B32,
                            kRows,
                            kCols,
                            x.data(),
                            kCols,
                            codes.data(),
                            kCols,
                            scales.data(),
                            4,
                            mirror.data(),
                            kCols};
  ASSERT_TRUE(Validate(good).ok());
  QuantizeParams p = good;
  p.qdq_stride = kCols - 1;
  EXPECT_EQ(QuantizeCpu(p).code(), absl::StatusCode::kInvalidArgument);
  p = good, p.qdq_out = reinterpret_cast<uint16_t*>(codes.data());
  EXPECT_EQ(QuantizeCpu(p).code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint16_t> xx = x;
  p = good, p.x = xx.data(), p.qdq_out = xx.data(), p.qdq_stride = kCols + 1;
  EXPECT_EQ(QuantizeCpu(p).code(), absl::StatusCode::kInvalidArgument);
  for (uint8_t b : codes) ASSERT_EQ(b, kPoison);
}

// The FP8 E4M3 × UE8M0/32 QDQ (the Linears' activation pass) applied to its own output changes
// nothing for every block whose amax is a finite bf16 below 0x7F78 (~3.3e38): its amax never
// rounds into a larger scale, and where it rounds into a smaller one the values stay exact. So a
// kernel that writes x already QDQ'd (e.g. a norm before a Linear) lets the Linear skip its pass
// with the same bits. From 0x7F78 up the first QDQ overflows to ±Inf (the scale saturates at
// 2^127), and QDQ of Inf is NaN. Every finite amax, each with 4 random blocks of magnitudes up to
// it; then blocks holding a NaN.
TEST(QuantCpuTest, Fp8QdqIsIdempotentBelowOverflow) {
  uint64_t r = 11;
  auto next = [&r] {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    return r >> 33;
  };
  constexpr int64_t kCols = 32;
  int64_t blocks = 0, overflowed = 0;
  for (uint32_t amax = 1; amax < 0x7F80u; ++amax) {
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<uint16_t> x(kCols), once(kCols), twice(kCols);
      x[next() % kCols] = static_cast<uint16_t>(amax | ((next() & 1) << 15));
      for (uint16_t& v : x) {
        if (v == 0) v = static_cast<uint16_t>((next() % (amax + 1)) | ((next() & 1) << 15));
      }
      const BlockFormat fp8 = BlockFormat::kFp8E4m3Ue8m0B32;
      ASSERT_TRUE(QdqCpu({fp8, 1, kCols, x.data(), kCols, once.data(), kCols}).ok());
      ASSERT_TRUE(QdqCpu({fp8, 1, kCols, once.data(), kCols, twice.data(), kCols}).ok());
      if (amax >= 0x7F78u) {
        bool inf = false;
        for (uint16_t v : once) inf |= (v & 0x7FFFu) == 0x7F80u;
        EXPECT_TRUE(inf) << std::hex << "amax " << amax;
        ++overflowed;
        continue;
      }
      ASSERT_EQ(once, twice) << std::hex << "amax " << amax << " rep " << rep;
      ++blocks;
    }
  }
  EXPECT_EQ(blocks, 4 * (0x7F78 - 1));
  EXPECT_EQ(overflowed, 4 * 8);
  // A NaN leaves the rest of its block as it would be without it, twice over.
  for (int rep = 0; rep < 4096; ++rep) {
    std::vector<uint16_t> x(kCols), once(kCols), twice(kCols);
    const auto amax = static_cast<uint32_t>(1 + next() % 0x7F77u);
    for (uint16_t& v : x) v = static_cast<uint16_t>((next() % (amax + 1)) | ((next() & 1) << 15));
    x[next() % kCols] = static_cast<uint16_t>(0x7FC0u | (next() & 0x3Fu));
    const BlockFormat fp8 = BlockFormat::kFp8E4m3Ue8m0B32;
    ASSERT_TRUE(QdqCpu({fp8, 1, kCols, x.data(), kCols, once.data(), kCols}).ok());
    ASSERT_TRUE(QdqCpu({fp8, 1, kCols, once.data(), kCols, twice.data(), kCols}).ok());
    ASSERT_EQ(once, twice) << std::hex << "NaN block, amax " << amax << " rep " << rep;
  }
}

TEST(QuantCpuTest, EmptyShapesAreNoOpsEvenWithNullPointers) {
  EXPECT_TRUE(
      QuantizeCpu({BlockFormat::kFp8E4m3Ue8m0B32, 0, 64, nullptr, 0, nullptr, 0, nullptr, 0}).ok());
  EXPECT_TRUE(
      DequantizeCpu({BlockFormat::kFp4E2m1E4m3B16, 5, 0, nullptr, 0, nullptr, 0, nullptr, 0}).ok());
  EXPECT_TRUE(QdqCpu({BlockFormat::kFp4E2m1Ue8m0B32, 0, 0, nullptr, 0, nullptr, 0}).ok());
  EXPECT_TRUE(EncodeRowsCpu({KvRowKind::kIndexK, 0, 128, nullptr, 0, nullptr, 0}).ok());
}

// Every rejected params struct: InvalidArgument, and not one byte written.
TEST(QuantCpuTest, RejectsBadParamsWithoutWriting) {
  std::vector<uint16_t> x(4 * 64, 0x3F80);
  std::vector<uint8_t> codes(4 * 64, kPoison), scales(4 * 4, kPoison);
  std::vector<uint16_t> out(4 * 64, 0xA5A5);
  const QuantizeParams good{
      BlockFormat::kFp8E4m3Ue8m0B32, 4, 64, x.data(), 64, codes.data(), 64, scales.data(), 2};
  ASSERT_TRUE(Validate(good).ok());

  auto expect_bad = [&](QuantizeParams p, const char* what) {
    const absl::Status s = QuantizeCpu(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
  };
  QuantizeParams p = good;
  p.cols = 48;  // not a multiple of 32 (but of 16)
  expect_bad(p, "cols");
  p = good, p.rows = -1;
  expect_bad(p, "negative rows");
  p = good, p.x = nullptr;
  expect_bad(p, "null x");
  p = good, p.scales = nullptr;
  expect_bad(p, "null scales");
  p = good, p.x_stride = 63;
  expect_bad(p, "x stride");
  p = good, p.codes_stride = 63;
  expect_bad(p, "codes stride");
  p = good, p.scales_stride = 1;
  expect_bad(p, "scales stride");
  p = good, p.format = static_cast<BlockFormat>(7);
  expect_bad(p, "format");
  p = good, p.codes = reinterpret_cast<uint8_t*>(x.data()) + 100;
  expect_bad(p, "codes overlap x");
  p = good, p.x_stride = int64_t{1} << 62;
  expect_bad(p, "extent overflow");
  for (uint8_t b : codes) ASSERT_EQ(b, kPoison);
  for (uint8_t b : scales) ASSERT_EQ(b, kPoison);

  // QDQ: partial overlap, and in place with different strides, are rejected.
  EXPECT_EQ(QdqCpu({BlockFormat::kFp8E4m3Ue8m0B32, 2, 64, x.data(), 64, x.data() + 1, 64}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QdqCpu({BlockFormat::kFp8E4m3Ue8m0B32, 2, 32, x.data(), 64, x.data(), 96}).code(),
            absl::StatusCode::kInvalidArgument);
  for (uint16_t v : x) ASSERT_EQ(v, 0x3F80);

  // Dequantise: out overlapping the codes.
  EXPECT_EQ(DequantizeCpu({BlockFormat::kFp8E4m3Ue8m0B32, 1, 64, codes.data(), 64, scales.data(), 2,
                           reinterpret_cast<uint16_t*>(codes.data()), 64})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeCpu({BlockFormat::kFp4E2m1E4m3B16, 4, 64, codes.data(), 31, scales.data(), 4,
                           out.data(), 64})
                .code(),
            absl::StatusCode::kInvalidArgument);  // codes stride < 32

  // Serving rows: stride below the row size, channels off the block, bad kind, x overlapping.
  std::vector<uint8_t> rows(4 * 528, kPoison);
  EXPECT_EQ(EncodeRowsCpu({KvRowKind::kSwaKv, 2, 64, x.data(), 64, rows.data(), 65}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeRowsCpu({KvRowKind::kMainKv, 2, 40, x.data(), 64, rows.data(), 64}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeRowsCpu({static_cast<KvRowKind>(9), 2, 64, x.data(), 64, rows.data(), 66}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeRowsCpu({KvRowKind::kIndexK, 2, 64, x.data(), 64,
                           reinterpret_cast<uint8_t*>(x.data()) + 8, 36})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeRowsCpu({KvRowKind::kIndexK, 2, 64, rows.data(), 33, out.data(), 64}).code(),
            absl::StatusCode::kInvalidArgument);
  for (uint8_t b : rows) ASSERT_EQ(b, kPoison);
  for (uint16_t v : out) ASSERT_EQ(v, 0xA5A5);
}

}  // namespace
}  // namespace flashserve::kernels::quant
