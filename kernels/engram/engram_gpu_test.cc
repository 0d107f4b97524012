// LaunchEngramGather against EngramGatherCpu, bit for bit: every (code, scale byte) pair through
// the kernel, the released dims (24 ids × 256, a 1M-row table in both layouts, the first and last
// rows), m = 1, padded and unaligned strides (the scalar path), a row-sharded table, foreign ids
// (negative, one past the end, INT64_MIN / INT64_MAX: +0 rows, counted on the device), the
// launcher's validation and m = 0. Outputs start poisoned, so a value the kernel fails to write
// is a mismatch.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/engram/engram.h"
#include "kernels/engram/engram_test_util.h"

namespace flashserve::kernels {
namespace {

using engram_test::PackedRows;
using engram_test::RandomIds;
using engram_test::RandomTable;
using engram_test::Table;

constexpr uint16_t kPoison = 0x7FC1;  // a NaN the gather never produces

ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(4);
  return *pool;
}

// The table of a case on both sides, in one layout.
struct HostTable {
  std::vector<uint8_t> codes, scales;  // scales empty: packed rows (scales inside `codes`)
  int64_t codes_stride = 0, scales_stride = 0, scales_offset = 0;
};

HostTable Layout(const Table& t, bool packed) {
  HostTable h;
  if (packed) {
    h.codes = PackedRows(t);
    h.codes_stride = h.scales_stride = t.dim + t.dim / kEngramScaleBlock;
    h.scales_offset = t.dim;
  } else {
    h.codes = t.codes;
    h.scales = t.scales;
    h.codes_stride = t.dim;
    h.scales_stride = t.dim / kEngramScaleBlock;
  }
  return h;
}

struct Case {
  int64_t tokens = 0, cols = 0, ids_stride = 0, out_pad = 0, out_offset = 0;
  int64_t row_begin = 0;
};

// Runs one case on both sides and compares every output element (padding included) and the
// foreign-id counts; returns the number of mismatching elements.
int64_t Compare(const Table& t, const HostTable& h, const std::vector<int64_t>& ids,
                const Case& c) {
  const int64_t width = c.cols * t.dim, os = width + c.out_pad;
  const size_t out_elems = static_cast<size_t>(c.tokens * os + c.out_offset);
  EngramGatherParams p;
  p.tokens = c.tokens;
  p.ids_per_token = c.cols;
  p.dim = t.dim;
  p.ids_stride = c.ids_stride;
  p.codes_stride = h.codes_stride;
  p.scales_stride = h.scales_stride;
  p.row_begin = c.row_begin;
  p.rows = t.rows;
  p.out_stride = os;

  std::vector<uint16_t> want(out_elems, kPoison);
  uint64_t want_foreign = 0;
  EngramGatherParams cpu = p;
  cpu.ids = ids.data();
  cpu.codes = h.codes.data();
  cpu.scales = h.scales.empty() ? h.codes.data() + h.scales_offset : h.scales.data();
  cpu.out = want.data() + c.out_offset;
  cpu.foreign_ids = &want_foreign;
  EXPECT_TRUE(EngramGatherCpu(cpu, &Pool()).ok());

  DeviceBuffer dids = ToDevice(ids), dcodes = ToDevice(h.codes), dscales = ToDevice(h.scales);
  DeviceBuffer dout = ToDevice(std::vector<uint16_t>(out_elems, kPoison));
  DeviceBuffer dforeign = ToDevice(std::vector<uint64_t>{0});
  EngramGatherParams gpu = p;
  gpu.ids = dids.get<int64_t>();
  gpu.codes = dcodes.get<uint8_t>();
  gpu.scales = h.scales.empty() ? dcodes.get<uint8_t>() + h.scales_offset : dscales.get<uint8_t>();
  gpu.out = dout.get<uint16_t>() + c.out_offset;
  gpu.foreign_ids = dforeign.get<uint64_t>();
  EXPECT_TRUE(LaunchEngramGather(gpu, nullptr).ok());
  const std::vector<uint16_t> got = ToHost<uint16_t>(dout, out_elems);
  const uint64_t got_foreign = ToHost<uint64_t>(dforeign, 1)[0];
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) {
      ADD_FAILURE() << absl::StrFormat("first mismatch at element %d: 0x%04x, want 0x%04x", i,
                                       got[i], want[i]);
    }
  }
  EXPECT_EQ(got_foreign, want_foreign);
  std::printf(
      "  %ld tokens x %ld ids x %ld (rows %ld, begin %ld, pad %ld, offset %ld): %ld "
      "mismatches, %lu foreign\n",
      static_cast<long>(c.tokens), static_cast<long>(c.cols), static_cast<long>(t.dim),
      static_cast<long>(t.rows), static_cast<long>(c.row_begin), static_cast<long>(c.out_pad),
      static_cast<long>(c.out_offset), static_cast<long>(bad),
      static_cast<unsigned long>(got_foreign));
  return bad;
}

// 2048 rows: row 8s + k holds every code (rotated by 32k) under scale byte s in all 8 blocks, so
// every (code, scale) pair is dequantised by the kernel once; ids walk all rows.
TEST(EngramGatherGpu, EveryCodeAndScalePair) {
  FS_SKIP_WITHOUT_GPU();
  Table t;
  t.rows = 2048;
  t.dim = 256;
  t.codes.resize(2048 * 256);
  t.scales.resize(2048 * 8);
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t e = 0; e < 256; ++e) t.codes[r * 256 + e] = static_cast<uint8_t>(e + 32 * (r % 8));
    for (int64_t b = 0; b < 8; ++b) t.scales[r * 8 + b] = static_cast<uint8_t>(r / 8);
  }
  std::vector<int64_t> ids(2048);
  for (int64_t i = 0; i < 2048; ++i) ids[i] = (i * 7) % 2048;  // a permutation
  Case c{.tokens = 128, .cols = 16, .ids_stride = 16};
  EXPECT_EQ(Compare(t, Layout(t, false), ids, c), 0);
  EXPECT_EQ(Compare(t, Layout(t, true), ids, c), 0);
}

// The released dims over a 1M-row table (264 MB packed), both layouts.
TEST(EngramGatherGpu, ReleasedDimsOneMillionRows) {
  FS_SKIP_WITHOUT_GPU();
  const Table t = RandomTable(int64_t{1} << 20, 256, 42, /*finite=*/false);
  for (bool packed : {true, false}) {
    const HostTable h = Layout(t, packed);
    for (int64_t tokens : {1, 7, 64, 257}) {
      SCOPED_TRACE(absl::StrFormat("packed %d tokens %d", packed, tokens));
      const std::vector<int64_t> ids = RandomIds(tokens, 24, 0, t.rows, 100 + tokens);
      EXPECT_EQ(Compare(t, h, ids, Case{.tokens = tokens, .cols = 24, .ids_stride = 24}), 0);
    }
  }
}

// Padded id rows and output rows; an output offset of one element and an odd code stride (the
// scalar path); other dims.
TEST(EngramGatherGpu, StridesAndTheScalarPath) {
  FS_SKIP_WITHOUT_GPU();
  const Table t = RandomTable(5000, 256, 7, /*finite=*/false);
  const std::vector<int64_t> ids30 = RandomIds(33, 30, 0, t.rows, 3);
  EXPECT_EQ(Compare(t, Layout(t, true), ids30,
                    Case{.tokens = 33, .cols = 24, .ids_stride = 30, .out_pad = 8}),
            0);
  EXPECT_EQ(
      Compare(t, Layout(t, false), ids30,
              Case{.tokens = 33, .cols = 24, .ids_stride = 30, .out_pad = 3, .out_offset = 1}),
      0);
  // Odd code stride: rows of 256 codes 1 byte apart beyond a 257-byte stride.
  HostTable odd;
  odd.codes.assign(static_cast<size_t>(t.rows * 257), 0);
  for (int64_t r = 0; r < t.rows; ++r) {
    std::copy_n(t.codes.begin() + r * 256, 256, odd.codes.begin() + r * 257);
  }
  odd.scales = t.scales;
  odd.codes_stride = 257;
  odd.scales_stride = 8;
  const std::vector<int64_t> ids = RandomIds(9, 24, 0, t.rows, 4);
  EXPECT_EQ(Compare(t, odd, ids, Case{.tokens = 9, .cols = 24, .ids_stride = 24}), 0);
  for (int64_t dim : {32, 96, 512}) {
    const Table u = RandomTable(300, dim, static_cast<uint64_t>(dim), /*finite=*/false);
    const std::vector<int64_t> uids = RandomIds(11, 5, 0, u.rows, 5);
    EXPECT_EQ(Compare(u, Layout(u, false), uids, Case{.tokens = 11, .cols = 5, .ids_stride = 5}),
              0);
  }
}

// A shard holding global rows [1000, 1000 + 4096) and ids over the whole 10000-row table plus
// out-of-range values: foreign ids give +0 rows and are counted, on both sides alike.
TEST(EngramGatherGpu, ShardAndForeignIds) {
  FS_SKIP_WITHOUT_GPU();
  const Table shard = RandomTable(4096, 256, 9);
  std::vector<int64_t> ids = RandomIds(50, 24, 0, 10000, 6);
  ids[0] = 1000;         // first held row
  ids[1] = 1000 + 4095;  // last held row
  ids[2] = 999;
  ids[3] = 1000 + 4096;
  ids[4] = -1;
  ids[5] = INT64_MIN;
  ids[6] = INT64_MAX;
  EXPECT_EQ(Compare(shard, Layout(shard, true), ids,
                    Case{.tokens = 50, .cols = 24, .ids_stride = 24, .row_begin = 1000}),
            0);
  // Whole table: ids at the last row and one past it.
  const Table t = RandomTable(777, 256, 10);
  const std::vector<int64_t> edge = {776, 0, 777, 776};
  EXPECT_EQ(Compare(t, Layout(t, false), edge, Case{.tokens = 1, .cols = 4, .ids_stride = 4}), 0);
}

TEST(EngramGatherGpu, LauncherValidatesAndEmptyIsANoOp) {
  FS_SKIP_WITHOUT_GPU();
  const Table t = RandomTable(4, 256, 1);
  DeviceBuffer dcodes = ToDevice(t.codes), dscales = ToDevice(t.scales);
  DeviceBuffer dids = ToDevice(std::vector<int64_t>{0, 1}), dout(2 * 256 * 2);
  EngramGatherParams p =
      engram_test::DenseParams(t, 1, 2, dids.get<int64_t>(), dcodes.get<uint8_t>(),
                               dscales.get<uint8_t>(), dout.get<uint16_t>());
  p.out_stride = 511;
  const absl::Status s = LaunchEngramGather(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "out_stride")) << s;
  p.out_stride = 512;
  p.dim = 200;
  EXPECT_FALSE(LaunchEngramGather(p, nullptr).ok());
  p.dim = 256;
  p.tokens = 0;
  p.ids = nullptr;
  p.out = nullptr;
  EXPECT_TRUE(LaunchEngramGather(p, nullptr).ok());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels
