// The row form (attention.h SparseAttnKvRows) on the CPU body: window FP8 rows and compressed FP4
// rows give, bit for bit, the output of the bf16 form on their exact decode (the pool holding the
// decoded window rows, then the decoded compressed rows), with padded row strides and -1 entries;
// and the validation of the row fields, each error naming its field.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_test_util.h"

namespace flashserve::kernels {
namespace {

using testing::AttnCase;
using testing::KvRowPools;

// Runs the bf16 form on c (already decoded by EncodeKvRows) and the row form on `pools`; expects
// the same bits.
void ExpectRowFormEqualsDecodedPool(const AttnCase& c, const KvRowPools& pools, ThreadPool* pool) {
  std::vector<uint16_t> ref;
  ASSERT_TRUE(testing::RunKernel(c, pool, &ref).ok());
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  SparseAttnParams p = testing::MakeParams(c, pool, &out, &ws);
  testing::SetKvRows(pools, pools.window.data(), pools.compressed.data(), &p);
  ASSERT_TRUE(SparseAttnCpu(p, pool).ok());
  EXPECT_EQ(testing::CountBitDiffs(out, ref), 0);
  // The decoded pool is a real reference too: the CPU body within its tolerance of the double
  // softmax (a wrong decode that kept the bits equal on both sides would show here only if the
  // decode were wrong in EncodeKvRows as well, which the quant tests rule out).
  std::vector<double> dref, mass;
  testing::DoubleReference(c, &dref, &mass);
  EXPECT_EQ(testing::CountOutsideTolerance(out, dref, mass, nullptr), 0);
}

// Decode-like lists: `window` entries from [0, window) (the first ones -1 in some rows, as while
// the ring fills), then compressed entries window + j, about 10 % -1.
AttnCase RowCase(int64_t tokens, int64_t heads, int64_t d, int64_t window, int64_t selected,
                 int64_t n_compressed, uint32_t seed) {
  AttnCase c =
      testing::RandomCase(tokens, heads, d, window + n_compressed, window + selected, 0.1, seed);
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t* row = c.indices.data() + t * c.width;
    for (int64_t e = 0; e < window; ++e) {
      row[e] = (t % 2 == 1 && e < 20) ? -1 : static_cast<int32_t>((e + 3 * t) % window);
    }
    for (int64_t e = window; e < c.width; ++e) {
      if (row[e] >= 0) row[e] = static_cast<int32_t>(window + row[e] % n_compressed);
    }
  }
  return c;
}

TEST(SparseAttnRowsTest, EqualsDecodedPool) {
  ThreadPool pool(2);
  for (int64_t pad : {0, 16, 5}) {
    AttnCase c = RowCase(3, 12, 128, 40, 90, 100, 70 + static_cast<uint32_t>(pad));
    const KvRowPools pools = testing::EncodeKvRows(&c, 40, pad);
    ExpectRowFormEqualsDecodedPool(c, pools, &pool);
  }
  AttnCase big = RowCase(2, 8, 512, 128, 200, 300, 77);
  const KvRowPools pools = testing::EncodeKvRows(&big, 128);
  ExpectRowFormEqualsDecodedPool(big, pools, nullptr);
}

TEST(SparseAttnRowsTest, OnePoolOnly) {
  // Window rows only, then compressed rows only (n_window = 0: every index is compressed).
  AttnCase w = testing::RandomCase(2, 8, 64, 50, 70, 0.2, 81);
  const KvRowPools wp = testing::EncodeKvRows(&w, 50);
  ExpectRowFormEqualsDecodedPool(w, wp, nullptr);
  AttnCase m = testing::RandomCase(2, 8, 64, 50, 70, 0.2, 82);
  const KvRowPools mp = testing::EncodeKvRows(&m, 0);
  ExpectRowFormEqualsDecodedPool(m, mp, nullptr);
}

TEST(SparseAttnRowsTest, ValidationNamesTheField) {
  AttnCase c = RowCase(2, 4, 64, 10, 20, 30, 90);
  const KvRowPools pools = testing::EncodeKvRows(&c, 10);
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  const SparseAttnParams bf16 = testing::MakeParams(c, nullptr, &out, &ws);
  SparseAttnParams p = bf16;
  testing::SetKvRows(pools, pools.window.data(), pools.compressed.data(), &p);
  ASSERT_TRUE(ValidateSparseAttn(p, nullptr).ok());

  auto expect_error = [](const SparseAttnParams& bad, const std::string& needle) {
    const absl::Status st = ValidateSparseAttn(bad, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(std::string(st.message()).find(needle), std::string::npos) << st.message();
  };
  SparseAttnParams bad = p;
  bad.kv = bf16.kv;
  expect_error(bad, "kv_rows");
  bad = p;
  bad.n_kv = 5;
  expect_error(bad, "kv_rows");
  bad = p;
  bad.kv_rows.window_stride = 63;
  expect_error(bad, "kv_rows.window_stride");
  bad = p;
  bad.kv_rows.compressed_stride = 35;  // 32 + 4 bytes per row at 64 channels
  expect_error(bad, "kv_rows.compressed_stride");
  bad = p;
  bad.kv_rows.n_compressed = -1;
  expect_error(bad, "kv_rows.n_compressed");
  bad = p;
  bad.kv_rows.compressed = nullptr;  // the window pool keeps the row form on
  expect_error(bad, "kv_rows.compressed");
  bad = p;
  bad.kv_rows.n_compressed = 29;  // an index now reaches n_window + n_compressed
  expect_error(bad, "n_window + n_compressed");
  bad = p;
  bad.out = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(pools.window.data()));
  expect_error(bad, "out overlaps kv_rows");

  // The decode-once scratch (CUDA only; the CPU body ignores it but validates it the same way):
  // room for the decoded rows, 16-byte aligned, overlapping nothing, set only with the row form.
  const size_t need = SparseAttnDecodedBytes(p.kv_rows.n_window, p.kv_rows.n_compressed, 64);
  EXPECT_EQ(need, 40u * 64 * 2);  // 10 window rows + 30 compressed rows of 64 bf16
  alignas(16) static uint16_t scratch[40 * 64 + 16];
  std::fill(std::begin(scratch), std::end(scratch), uint16_t{0xFFC1});  // a NaN
  SparseAttnParams once = p;
  once.kv_rows.decoded = scratch;
  once.kv_rows.decoded_bytes = need;
  ASSERT_TRUE(ValidateSparseAttn(once, nullptr).ok());
  std::vector<uint16_t> cpu_once(out.size());
  once.out = cpu_once.data();
  ASSERT_TRUE(SparseAttnCpu(once, nullptr).ok());
  std::vector<uint16_t> cpu_rows(out.size());
  SparseAttnParams rows = p;
  rows.out = cpu_rows.data();
  ASSERT_TRUE(SparseAttnCpu(rows, nullptr).ok());
  EXPECT_EQ(cpu_once, cpu_rows);  // the CPU body neither reads the scratch ...
  EXPECT_TRUE(std::all_of(std::begin(scratch), std::end(scratch),
                          [](uint16_t v) { return v == 0xFFC1; }));  // ... nor writes it
  once.out = p.out;
  bad = once;
  bad.kv_rows.decoded_bytes = need - 1;
  expect_error(bad, "kv_rows.decoded_bytes");
  bad = once;
  bad.kv_rows.decoded = scratch + 1;  // 2-byte aligned
  bad.kv_rows.decoded_bytes = need;
  expect_error(bad, "kv_rows.decoded is not 16-byte aligned");
  bad = once;
  bad.kv_rows.decoded = bad.out;
  bad.kv_rows.decoded_bytes = need;
  expect_error(bad, "kv_rows.decoded overlaps");
  bad = once;
  bad.workspace = scratch;
  bad.workspace_bytes = ws.size();
  expect_error(bad, "kv_rows.decoded overlaps");
  // The RoPE inputs the attention reads after the decode wrote the scratch.
  const RopeTable table = testing::TextRopeTable(64);
  alignas(16) static int64_t positions[2 + 40 * 64 / 4];  // zeros: valid positions
  std::vector<float> cos_sin(2 * 64);
  bad = once;
  bad.rope = &table;
  bad.rope_out = true;
  bad.rope_positions = positions;
  bad.kv_rows.decoded = reinterpret_cast<uint16_t*>(positions);
  ASSERT_EQ(bad.tokens, 2);
  expect_error(bad, "kv_rows.decoded overlaps");
  bad.kv_rows.decoded = scratch;
  bad.rope_cos_sin = reinterpret_cast<const float*>(scratch + 8);
  expect_error(bad, "kv_rows.decoded overlaps");
  bad.rope_cos_sin = cos_sin.data();
  EXPECT_TRUE(ValidateSparseAttn(bad, nullptr).ok());
  bad = bf16;  // the bf16 form: no rows to decode
  bad.kv_rows.decoded = scratch;
  bad.kv_rows.decoded_bytes = need;
  expect_error(bad, "kv_rows.decoded is set without");
  // head_dim 48 is no multiple of 32 (the FP8 rows' scale block).
  AttnCase odd = testing::RandomCase(1, 2, 48, 4, 4, 0.0, 91);
  std::vector<uint16_t> out48;
  std::vector<uint8_t> ws48;
  SparseAttnParams p48 = testing::MakeParams(odd, nullptr, &out48, &ws48);
  p48.kv = nullptr;
  p48.n_kv = 0;
  p48.kv_rows.window = pools.window.data();
  p48.kv_rows.n_window = 4;
  p48.kv_rows.window_stride = 66;
  expect_error(p48, "head_dim a multiple of 32");
}

}  // namespace
}  // namespace flashserve::kernels
