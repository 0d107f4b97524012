// SparseAttnParams::out_rope on the CPU body: the output's inverse RoPE fused into SparseAttnCpu
// equals SparseAttnCpu followed by RopeCpu(inverse = true) on its output, bit for bit, over strided
// layouts, a pool and rope widths up to head_dim; only the last rd dims move; and the validation
// of the new fields.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::kernels {
namespace {

using testing::AttnCase;

RopeTable MakeTable(int64_t rd) {
  RopeSpec spec;
  spec.rope_dims = rd;
  spec.theta = 160000.0;
  spec.original_seq_len = 65536;
  spec.factor = 16.0;
  return RopeTable::Create(spec, 0).value();
}

// Runs SparseAttnCpu on `c` with and without the fused output RoPE; `separate` gets the unfused
// output rotated by RopeCpu afterwards, `plain` the unrotated output.
void RunWithAndWithout(const AttnCase& c, const RopeTable& table,
                       const std::vector<int64_t>& positions, ThreadPool* pool,
                       std::vector<uint16_t>* fused, std::vector<uint16_t>* separate,
                       std::vector<uint16_t>* plain) {
  std::vector<uint8_t> ws;
  SparseAttnParams p = testing::MakeParams(c, pool, plain, &ws);
  ASSERT_TRUE(SparseAttnCpu(p, pool).ok());
  *separate = *plain;
  RopeParams r;
  r.table = &table;
  r.tokens = c.tokens;
  r.heads = c.heads;
  r.head_dim = c.head_dim;
  r.positions = positions.data();
  r.x = separate->data();
  r.x_stride = c.heads * c.head_dim;
  r.x_head_stride = c.head_dim;
  r.out = separate->data();
  r.out_stride = r.x_stride;
  r.out_head_stride = c.head_dim;
  r.inverse = true;
  ASSERT_TRUE(RopeCpu(r, nullptr).ok());
  p = testing::MakeParams(c, pool, fused, &ws);
  p.out_rope = &table;
  p.out_rope_positions = positions.data();
  ASSERT_TRUE(SparseAttnCpu(p, pool).ok());
}

TEST(SparseAttnOutRope, EqualsTheSeparateInverseRope) {
  ThreadPool pool(3);
  for (const int64_t rd : {64, 128, 16}) {
    const AttnCase c =
        testing::RandomCase(5, 9, 128, 300, 200, 0.1, 77 + static_cast<uint32_t>(rd));
    const RopeTable table = MakeTable(rd);
    const std::vector<int64_t> positions = {0, 1, 4095, 65535, 1000003};
    std::vector<uint16_t> fused, separate, plain;
    RunWithAndWithout(c, table, positions, &pool, &fused, &separate, &plain);
    EXPECT_EQ(testing::CountBitDiffs(fused, separate), 0) << "rd " << rd;
    // Only the last rd dims of each head move, and they do move (position 0 aside).
    int64_t moved_rope = 0, moved_nope = 0;
    for (size_t i = 0; i < fused.size(); ++i) {
      const bool rope_dim = static_cast<int64_t>(i % c.head_dim) >= c.head_dim - rd;
      if (fused[i] != plain[i]) ++(rope_dim ? moved_rope : moved_nope);
    }
    EXPECT_EQ(moved_nope, 0) << "rd " << rd;
    EXPECT_GT(moved_rope, c.heads * rd) << "rd " << rd;
  }
}

TEST(SparseAttnOutRope, ValidatesItsFields) {
  const AttnCase c = testing::RandomCase(2, 3, 32, 40, 30, 0.0, 5);
  const RopeTable table = MakeTable(16);
  const RopeTable wide = MakeTable(64);
  const std::vector<int64_t> positions = {3, 9};
  const std::vector<int64_t> negative = {3, -1};
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  auto check = [&](const RopeTable* t, const int64_t* pos, const char* field) {
    SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &ws);
    p.out_rope = t;
    p.out_rope_positions = pos;
    const absl::Status st = SparseAttnCpu(p, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  check(&table, nullptr, "out_rope_positions");
  check(nullptr, positions.data(), "out_rope_positions");
  check(&table, negative.data(), "out_rope_positions");
  check(&wide, positions.data(), "out_rope");  // rd 64 > head_dim 32
  SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &ws);
  p.out_rope = &table;
  p.out_rope_positions = positions.data();
  EXPECT_TRUE(SparseAttnCpu(p, nullptr).ok());
}

}  // namespace
}  // namespace flashserve::kernels
