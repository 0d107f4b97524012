// EngramGatherCpu against model/runtime/engram_forward.cc's dequant (every code × scale byte, and
// its gather loop over random tables), both table layouts, padded strides, a row-sharded table,
// foreign ids, the pool, and the validation messages.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "gtest/gtest.h"
#include "kernels/engram/engram.h"
#include "kernels/engram/engram_test_util.h"

namespace flashserve::kernels {
namespace {

using engram_test::DenseParams;
using engram_test::ForwardGather;
using engram_test::PackedRows;
using engram_test::RandomIds;
using engram_test::RandomTable;
using engram_test::Table;

bool IsNanBf16(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// engram_forward.cc's expression for every (code, scale byte) pair. Equal bits everywhere except
// where both operands are NaN (code 0x7F / 0xFF with scale 255): the product's NaN is then the
// compiler's pick of operand order, and the explicit rule takes the code's.
TEST(EngramDequant, EveryCodeAndScaleMatchesEngramForward) {
  int64_t nan_pairs = 0;
  for (int s = 0; s < 256; ++s) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c), scale = static_cast<uint8_t>(s);
      const uint16_t want =
          formats::FloatToBf16Bits(formats::E4m3ToFloat(code) * formats::Ue8m0ToFloat(scale));
      const uint16_t got = EngramDequantValue(code, scale);
      const bool both_nan = (c & 0x7F) == 0x7F && s == 255;
      if (both_nan) {
        ++nan_pairs;
        EXPECT_TRUE(IsNanBf16(got) && IsNanBf16(want));
        EXPECT_EQ(got, formats::FloatToBf16Bits(formats::E4m3ToFloat(code)));
      } else {
        ASSERT_EQ(got, want) << "code " << c << " scale " << s;
      }
    }
  }
  EXPECT_EQ(nan_pairs, 2);
}

TEST(EngramDequant, HandValues) {
  EXPECT_EQ(EngramDequantValue(0x38, 127), 0x3F80);  // 1.0 · 2^0
  EXPECT_EQ(EngramDequantValue(0xB8, 128), 0xC000);  // -1.0 · 2^1
  EXPECT_EQ(EngramDequantValue(0x7E, 127), 0x43E0);  // 448
  EXPECT_EQ(EngramDequantValue(0x01, 127), 0x3B00);  // 2^-9 (E4M3 subnormal)
  EXPECT_EQ(EngramDequantValue(0x00, 200), 0x0000);
  EXPECT_EQ(EngramDequantValue(0x80, 100), 0x8000);  // -0 stays -0
  EXPECT_EQ(EngramDequantValue(0x7E, 254), 0x7F80);  // 448 · 2^127 overflows to +inf
  EXPECT_EQ(EngramDequantValue(0x38, 0), 0x0040);    // 2^-127: an fp32 and bf16 subnormal, kept
  EXPECT_EQ(EngramDequantValue(0x38, 255), 0x7FC0);  // NaN scale
}

TEST(EngramGatherCpu, MatchesEngramForwardLoop) {
  for (const auto& [rows, dim, tokens, cols] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1000, 256, 5, 24}, {1, 256, 3, 24}, {4096, 32, 17, 3}, {300, 96, 1, 1}}) {
    SCOPED_TRACE(testing::Message()
                 << rows << " rows, dim " << dim << ", " << tokens << "x" << cols);
    const Table t = RandomTable(rows, dim, static_cast<uint64_t>(rows + dim));
    const std::vector<int64_t> ids = RandomIds(tokens, cols, 0, rows, 7);
    const std::vector<uint16_t> want = ForwardGather(t, ids, tokens, cols);
    std::vector<uint16_t> got(want.size(), 0x7FC1);
    uint64_t foreign = 0;
    EngramGatherParams p =
        DenseParams(t, tokens, cols, ids.data(), t.codes.data(), t.scales.data(), got.data());
    p.foreign_ids = &foreign;
    ASSERT_TRUE(EngramGatherCpu(p, nullptr).ok());
    EXPECT_EQ(got, want);
    EXPECT_EQ(foreign, 0u);
  }
}

TEST(EngramGatherCpu, PackedRowsAndPaddedStridesGiveTheSameRows) {
  const Table t = RandomTable(500, 256, 3, /*finite=*/false);
  const int64_t tokens = 9, cols = 24;
  const std::vector<int64_t> ids = RandomIds(tokens, cols, 0, t.rows, 11);
  std::vector<uint16_t> dense(static_cast<size_t>(tokens * cols * 256));
  ASSERT_TRUE(EngramGatherCpu(DenseParams(t, tokens, cols, ids.data(), t.codes.data(),
                                          t.scales.data(), dense.data()),
                              nullptr)
                  .ok());
  // 264-byte rows; ids with a stride of 30, output rows padded by 5.
  const std::vector<uint8_t> packed = PackedRows(t);
  std::vector<int64_t> ids30(static_cast<size_t>(tokens * 30), -5);
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t c = 0; c < cols; ++c) ids30[i * 30 + c] = ids[i * cols + c];
  }
  const int64_t os = cols * 256 + 5;
  std::vector<uint16_t> padded(static_cast<size_t>(tokens * os), 0x1234);
  EngramGatherParams p =
      DenseParams(t, tokens, cols, ids30.data(), packed.data(), packed.data() + 256, padded.data());
  p.ids_stride = 30;
  p.codes_stride = 264;
  p.scales_stride = 264;
  p.out_stride = os;
  ThreadPool pool(3);
  ASSERT_TRUE(EngramGatherCpu(p, &pool).ok());
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t e = 0; e < os; ++e) {
      const uint16_t want = e < cols * 256 ? dense[i * cols * 256 + e] : uint16_t{0x1234};
      ASSERT_EQ(padded[i * os + e], want) << "token " << i << " element " << e;
    }
  }
}

// A shard holding global rows [400, 700): its ids give the full table's rows, the others +0.
TEST(EngramGatherCpu, ShardedTableZeroesAndCountsForeignIds) {
  const Table full = RandomTable(1000, 64, 5);
  Table shard;
  shard.rows = 300;
  shard.dim = 64;
  shard.codes.assign(full.codes.begin() + 400 * 64, full.codes.begin() + 700 * 64);
  shard.scales.assign(full.scales.begin() + 400 * 2, full.scales.begin() + 700 * 2);
  const int64_t tokens = 40, cols = 6;
  const std::vector<int64_t> ids = RandomIds(tokens, cols, 0, 1000, 13);
  const std::vector<uint16_t> want = ForwardGather(full, ids, tokens, cols);
  std::vector<uint16_t> got(want.size(), 0x7FC1);
  uint64_t foreign = 3;  // added to
  EngramGatherParams p = DenseParams(shard, tokens, cols, ids.data(), shard.codes.data(),
                                     shard.scales.data(), got.data());
  p.row_begin = 400;
  p.foreign_ids = &foreign;
  ThreadPool pool(2);
  ASSERT_TRUE(EngramGatherCpu(p, &pool).ok());
  uint64_t expected_foreign = 3;
  for (int64_t i = 0; i < tokens * cols; ++i) {
    const bool held = ids[i] >= 400 && ids[i] < 700;
    expected_foreign += held ? 0 : 1;
    for (int64_t e = 0; e < 64; ++e) {
      ASSERT_EQ(got[i * 64 + e], held ? want[i * 64 + e] : uint16_t{0}) << "id " << ids[i];
    }
  }
  EXPECT_EQ(foreign, expected_foreign);
  EXPECT_FALSE(CheckEngramIds(p).ok());
}

TEST(EngramGatherCpu, OutOfRangeIdsWriteZerosAndAreRejectedByTheHostCheck) {
  const Table t = RandomTable(10, 32, 1);
  const std::vector<int64_t> ids = {0, 9, -1, 10, INT64_MAX, INT64_MIN};
  std::vector<uint16_t> got(ids.size() * 32, 0x7FC1);
  uint64_t foreign = 0;
  EngramGatherParams p =
      DenseParams(t, 1, 6, ids.data(), t.codes.data(), t.scales.data(), got.data());
  p.foreign_ids = &foreign;
  ASSERT_TRUE(EngramGatherCpu(p, nullptr).ok());
  EXPECT_EQ(foreign, 4u);
  const std::vector<uint16_t> want = ForwardGather(t, {0, 9}, 1, 2);
  for (size_t e = 0; e < got.size(); ++e) {
    EXPECT_EQ(got[e], e < 64 ? want[e] : uint16_t{0}) << e;
  }
  const absl::Status s = CheckEngramIds(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "ids[0, 2] = -1")) << s;
  p.tokens = 1;
  p.ids_per_token = 2;
  EXPECT_TRUE(CheckEngramIds(p).ok());
}

TEST(EngramGatherCpu, ValidationNamesTheField) {
  const Table t = RandomTable(4, 64, 2);
  const std::vector<int64_t> ids = {0, 1};
  std::vector<uint16_t> out(128);
  const EngramGatherParams good =
      DenseParams(t, 1, 2, ids.data(), t.codes.data(), t.scales.data(), out.data());
  ASSERT_TRUE(ValidateEngramGather(good).ok());
  auto expect_bad = [&](EngramGatherParams p, const char* field) {
    const absl::Status s = EngramGatherCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(absl::StrContains(s.message(), field)) << s;
  };
  EngramGatherParams p = good;
  p.dim = 48;
  expect_bad(p, "dim");
  p = good;
  p.ids_per_token = 0;
  expect_bad(p, "ids_per_token");
  p = good;
  p.rows = 0;
  expect_bad(p, "rows");
  p = good;
  p.row_begin = -1;
  expect_bad(p, "row_begin");
  p = good;
  p.codes = nullptr;
  expect_bad(p, "codes");
  p = good;
  p.codes_stride = 63;
  expect_bad(p, "codes_stride");
  p = good;
  p.scales_stride = 1;
  expect_bad(p, "scales_stride");
  p = good;
  p.ids = nullptr;
  expect_bad(p, "ids");
  p = good;
  p.ids_stride = 1;
  expect_bad(p, "ids_stride");
  p = good;
  p.out_stride = 127;
  expect_bad(p, "out_stride");
  p = good;
  p.out = nullptr;
  expect_bad(p, "out");
  p = good;
  p.tokens = -1;
  expect_bad(p, "tokens");
  // tokens == 0 needs neither ids nor out.
  p = good;
  p.tokens = 0;
  p.ids = nullptr;
  p.out = nullptr;
  EXPECT_TRUE(EngramGatherCpu(p, nullptr).ok());
}

}  // namespace
}  // namespace flashserve::kernels
