// SparseAttnParams::rope on the CPU body: rope_q equals SparseAttnCpu on q rotated by RopeCpu
// first, rope_out equals SparseAttnCpu followed by RopeCpu(inverse = true) on its output, both
// together compose, bit for bit, over rope widths up to head_dim, positions 0 to ~10^6 and a pool;
// the output's RoPE moves only the last rd dims; and the validation of the new fields.
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

// RopeCpu over packed [tokens, heads, head_dim] values in place.
void Rotate(const AttnCase& c, const RopeTable& table, const std::vector<int64_t>& positions,
            bool inverse, std::vector<uint16_t>* x) {
  RopeParams r;
  r.table = &table;
  r.tokens = c.tokens;
  r.heads = c.heads;
  r.head_dim = c.head_dim;
  r.positions = positions.data();
  r.x = x->data();
  r.x_stride = c.heads * c.head_dim;
  r.x_head_stride = c.head_dim;
  r.out = x->data();
  r.out_stride = r.x_stride;
  r.out_head_stride = c.head_dim;
  r.inverse = inverse;
  CHECK_OK(RopeCpu(r, nullptr));
}

// SparseAttnCpu on `c` with the given RoPE flags.
std::vector<uint16_t> Attend(const AttnCase& c, const RopeTable* table,
                             const std::vector<int64_t>& positions, bool rope_q, bool rope_out,
                             ThreadPool* pool) {
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  SparseAttnParams p = testing::MakeParams(c, pool, &out, &ws);
  if (rope_q || rope_out) {
    p.rope = table;
    p.rope_positions = positions.data();
    p.rope_q = rope_q;
    p.rope_out = rope_out;
  }
  CHECK_OK(SparseAttnCpu(p, pool));
  return out;
}

TEST(SparseAttnRope, EqualsTheSeparateRopeCalls) {
  ThreadPool pool(3);
  const std::vector<int64_t> positions = {0, 1, 4095, 65535, 1000003};
  for (const int64_t rd : {64, 128, 16}) {
    const AttnCase c =
        testing::RandomCase(5, 9, 128, 300, 200, 0.1, 77 + static_cast<uint32_t>(rd));
    const RopeTable table = testing::TextRopeTable(rd);
    const std::vector<uint16_t> plain = Attend(c, nullptr, positions, false, false, &pool);
    // rope_q: the attention of the rotated q.
    AttnCase rotated = c;
    Rotate(c, table, positions, false, &rotated.q);
    const std::vector<uint16_t> q_after = Attend(rotated, nullptr, positions, false, false, &pool);
    EXPECT_EQ(testing::CountBitDiffs(Attend(c, &table, positions, true, false, &pool), q_after), 0)
        << "rope_q, rd " << rd;
    EXPECT_GT(testing::CountBitDiffs(q_after, plain), c.tokens * c.heads) << "rd " << rd;
    // rope_out: the inverse rotation of the output afterwards; only the last rd dims move.
    std::vector<uint16_t> out_after = plain;
    Rotate(c, table, positions, true, &out_after);
    const std::vector<uint16_t> fused_out = Attend(c, &table, positions, false, true, &pool);
    EXPECT_EQ(testing::CountBitDiffs(fused_out, out_after), 0) << "rope_out, rd " << rd;
    int64_t moved_rope = 0, moved_nope = 0;
    for (size_t i = 0; i < fused_out.size(); ++i) {
      const bool rope_dim = static_cast<int64_t>(i % c.head_dim) >= c.head_dim - rd;
      if (fused_out[i] != plain[i]) ++(rope_dim ? moved_rope : moved_nope);
    }
    EXPECT_EQ(moved_nope, 0) << "rd " << rd;
    EXPECT_GT(moved_rope, c.heads * rd) << "rd " << rd;
    // Both.
    std::vector<uint16_t> both_after = q_after;
    Rotate(c, table, positions, true, &both_after);
    EXPECT_EQ(testing::CountBitDiffs(Attend(c, &table, positions, true, true, &pool), both_after),
              0)
        << "both, rd " << rd;
  }
}

TEST(SparseAttnRope, ValidatesItsFields) {
  const AttnCase c = testing::RandomCase(2, 3, 32, 40, 30, 0.0, 5);
  const RopeTable table = testing::TextRopeTable(16);
  const RopeTable wide = testing::TextRopeTable(64);
  const std::vector<int64_t> positions = {3, 9};
  const std::vector<int64_t> negative = {3, -1};
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  auto check = [&](const RopeTable* t, const int64_t* pos, bool q, bool o, const char* field) {
    SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &ws);
    p.rope = t;
    p.rope_positions = pos;
    p.rope_q = q;
    p.rope_out = o;
    const absl::Status st = SparseAttnCpu(p, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  check(&table, nullptr, true, true, "rope_positions");
  check(nullptr, positions.data(), true, false, "rope");
  check(nullptr, nullptr, false, true, "rope");
  check(&table, positions.data(), false, false, "rope");  // a table without a flag
  check(&table, negative.data(), false, true, "rope_positions");
  check(&wide, positions.data(), true, false, "rope");  // rd 64 > head_dim 32
  SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &ws);
  p.rope = &table;
  p.rope_positions = positions.data();
  p.rope_q = p.rope_out = true;
  EXPECT_TRUE(SparseAttnCpu(p, nullptr).ok());
  // The caller's cos/sin table: only with rope, 8-byte aligned; the CPU body ignores its values.
  alignas(8) float cos_sin[2 * 8 * 2 + 1] = {};
  p.rope_cos_sin = cos_sin;
  EXPECT_TRUE(SparseAttnCpu(p, nullptr).ok());
  p.rope_cos_sin = cos_sin + 1;
  absl::Status st = SparseAttnCpu(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rope_cos_sin"), std::string::npos) << st.message();
  p = testing::MakeParams(c, nullptr, &out, &ws);
  p.rope_cos_sin = cos_sin;
  st = SparseAttnCpu(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rope_cos_sin"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace flashserve::kernels
