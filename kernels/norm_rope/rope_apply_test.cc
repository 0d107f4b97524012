// Applying the text RoPE (interleaved pairs on the last rd dims) against double-precision
// references, the exact fp32 recipe, hand-checked values, the pair layout, the
// inverse rotation, positions (chunks, decode batches, compressor groups), threads, validation.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/norm_rope_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using testing::Bf16Ulp;
using testing::RandomBf16;

// A [tokens, heads, head_dim] bf16 tensor, packed, with its positions.
struct Heads {
  int64_t tokens;
  int64_t heads;
  int64_t head_dim;
  std::vector<uint16_t> x;
  std::vector<int64_t> positions;
};

Heads MakeHeads(int64_t tokens, int64_t heads, int64_t head_dim, int64_t first_pos, uint32_t seed) {
  Heads h{tokens, heads, head_dim, RandomBf16(tokens * heads * head_dim, 2.0f, seed), {}};
  h.positions.resize(static_cast<size_t>(tokens));
  std::iota(h.positions.begin(), h.positions.end(), first_pos);
  return h;
}

RopeParams MakeParams(const RopeTable& table, const Heads& h, uint16_t* out, bool inverse) {
  RopeParams p;
  p.table = &table;
  p.tokens = h.tokens;
  p.heads = h.heads;
  p.head_dim = h.head_dim;
  p.positions = h.positions.data();
  p.x = h.x.data();
  p.x_stride = h.heads * h.head_dim;
  p.x_head_stride = h.head_dim;
  p.out = out;
  p.out_stride = p.x_stride;
  p.out_head_stride = h.head_dim;
  p.inverse = inverse;
  return p;
}

std::vector<uint16_t> Apply(const RopeTable& table, const Heads& h, bool inverse,
                            ThreadPool* pool = nullptr) {
  std::vector<uint16_t> out(h.x.size(), 0);
  const absl::Status s = RopeCpu(MakeParams(table, h, out.data(), inverse), pool);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

RopeTable Table(const RopeSpec& spec, int64_t cached) {
  absl::StatusOr<RopeTable> t = RopeTable::Create(spec, cached);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

const RopeSpec kTinyYarn{32, 160000.0, 64, 4.0, 32.0, 1.0};
const RopeSpec kFullYarn{64, 160000.0, 65536, 16.0, 32.0, 1.0};
const RopeSpec kFullPlain{64, 10000.0, 0, 16.0, 32.0, 1.0};

struct Shape {
  const RopeSpec* spec;
  int64_t tokens, heads, head_dim, first_pos;
};

// Tiny q [4 heads x 128, rd 32] and kv; released q [64 x 512], index q [32 x 128], kv [1 x 512],
// at early and late positions.
const Shape kShapes[] = {
    {&kTinyYarn, 9, 4, 128, 0},      {&kTinyYarn, 5, 1, 128, 200},
    {&kFullYarn, 2, 64, 512, 1000},  {&kFullYarn, 3, 32, 128, 1 << 20},
    {&kFullPlain, 4, 1, 512, 70000}, {&kFullPlain, 2, 2, 64, 5},
};

TEST(RopeApplyTest, MatchesDoubleReferenceAndExactRecipe) {
  uint32_t seed = 10;
  for (const Shape& sh : kShapes) {
    const RopeTable table = Table(*sh.spec, 64);
    const Heads h = MakeHeads(sh.tokens, sh.heads, sh.head_dim, sh.first_pos, seed++);
    const int64_t rd = sh.spec->rope_dims, nope = sh.head_dim - rd;
    for (bool inverse : {false, true}) {
      const std::vector<uint16_t> out = Apply(table, h, inverse);
      std::vector<float> c(rd / 2), s(rd / 2);
      for (int64_t t = 0; t < h.tokens; ++t) {
        RopeCosSin(table.frequencies(), h.positions[t], c.data(), s.data());
        for (int64_t hd = 0; hd < h.heads; ++hd) {
          const int64_t base = (t * h.heads + hd) * h.head_dim;
          for (int64_t i = 0; i < nope; ++i) ASSERT_EQ(out[base + i], h.x[base + i]);
          for (int64_t k = 0; k < rd / 2; ++k) {
            const int64_t i = base + nope + 2 * k;
            const float a = Bf16BitsToFloat(h.x[i]), b = Bf16BitsToFloat(h.x[i + 1]);
            const float sn = inverse ? -s[k] : s[k];
            // Exact recipe: two fp32 products, one fp32 sum, one bf16 rounding.
            ASSERT_EQ(out[i], FloatToBf16Bits(a * c[k] - b * sn)) << t << " " << hd << " " << k;
            ASSERT_EQ(out[i + 1], FloatToBf16Bits(a * sn + b * c[k])) << t << " " << hd << " " << k;
            // Double reference on the same cos/sin: half a bf16 ulp plus fp32 noise.
            const double re = static_cast<double>(a) * c[k] - static_cast<double>(b) * sn;
            const double im = static_cast<double>(a) * sn + static_cast<double>(b) * c[k];
            const double noise = 4e-7 * (std::fabs(a) + std::fabs(b));
            EXPECT_LE(std::fabs(Bf16BitsToFloat(out[i]) - re), 0.5 * Bf16Ulp(re) + noise);
            EXPECT_LE(std::fabs(Bf16BitsToFloat(out[i + 1]) - im), 0.5 * Bf16Ulp(im) + noise);
          }
        }
      }
    }
  }
}

TEST(RopeApplyTest, HandCheckedRotation) {
  // rd = 2: one pair whose frequency is theta^0 = 1, so the angle is the position.
  const RopeTable table = Table({2, 10000.0, 0, 1.0, 32.0, 1.0}, 0);
  Heads h{2, 1, 2, {FloatToBf16Bits(1.0f), 0, 0, FloatToBf16Bits(1.0f)}, {1, 2}};
  const std::vector<uint16_t> out = Apply(table, h, false);
  // (1, 0) at angle 1: (cos 1, sin 1) = (0.5403023, 0.8414710) -> bf16 0.5390625, 0.83984375.
  EXPECT_EQ(Bf16BitsToFloat(out[0]), 0.5390625f);
  EXPECT_EQ(Bf16BitsToFloat(out[1]), 0.83984375f);
  // (0, 1) at angle 2: (-sin 2, cos 2) = (-0.9092974, -0.4161468) -> -0.91015625, -0.416015625.
  EXPECT_EQ(Bf16BitsToFloat(out[2]), -0.91015625f);
  EXPECT_EQ(Bf16BitsToFloat(out[3]), -0.416015625f);
  // The inverse turns the other way: (1, 0) at angle 1 -> (cos 1, -sin 1).
  const std::vector<uint16_t> inv = Apply(table, h, true);
  EXPECT_EQ(Bf16BitsToFloat(inv[0]), 0.5390625f);
  EXPECT_EQ(Bf16BitsToFloat(inv[1]), -0.83984375f);
}

TEST(RopeApplyTest, PairsAreAdjacentInTheLastRopeDims) {
  // head_dim 128, rd 32: the rotated tail is dims 96..127 and pair k is (96 + 2k, 97 + 2k).
  const RopeTable table = Table(kTinyYarn, 0);
  for (int64_t dim : {96, 97, 100, 127}) {
    Heads h{1, 1, 128, std::vector<uint16_t>(128, 0), {5}};
    h.x[dim] = FloatToBf16Bits(1.0f);
    const std::vector<uint16_t> out = Apply(table, h, false);
    const int64_t even = dim - (dim - 96) % 2, k = (even - 96) / 2;
    float c[16], s[16];
    table.CosSin(5, c, s);
    for (int64_t i = 0; i < 128; ++i) {
      float want = 0.0f;
      if (dim == even) {  // real part set: (1, 0) -> (cos, sin)
        want = i == even ? c[k] : i == even + 1 ? s[k] : 0.0f;
      } else {  // imaginary part set: (0, 1) -> (-sin, cos)
        want = i == even ? -s[k] : i == even + 1 ? c[k] : 0.0f;
      }
      EXPECT_EQ(Bf16BitsToFloat(out[i]), formats::RoundToBf16(want)) << "dim " << dim << " " << i;
    }
  }
}

TEST(RopeApplyTest, InverseUndoesTheRotationWithinBf16Rounding) {
  const RopeTable table = Table(kFullYarn, 0);
  Heads h = MakeHeads(6, 8, 512, 65530, 77);
  const std::vector<uint16_t> rotated = Apply(table, h, false);
  Heads back = h;
  back.x = rotated;
  const std::vector<uint16_t> restored = Apply(table, back, true);
  int64_t changed = 0;
  for (size_t i = 0; i < h.x.size(); i += 2) {
    if (i % 512 < 448) continue;  // the unrotated head dims are checked elsewhere
    const double a = Bf16BitsToFloat(h.x[i]), b = Bf16BitsToFloat(h.x[i + 1]);
    const double rho = std::hypot(a, b);
    // Two roundings of half a bf16 ulp each, carried through a rotation: < 2^-7 * |pair|.
    EXPECT_LE(std::fabs(Bf16BitsToFloat(restored[i]) - a), std::ldexp(rho, -7));
    EXPECT_LE(std::fabs(Bf16BitsToFloat(restored[i + 1]) - b), std::ldexp(rho, -7));
    changed += rotated[i] != h.x[i];
  }
  EXPECT_GT(changed, 6 * 8 * 32 / 2);  // the rotation moved most pairs
}

TEST(RopeApplyTest, PositionsDriveEachToken) {
  const RopeTable table = Table(kTinyYarn, 16);
  const Heads whole = MakeHeads(24, 4, 128, 0, 5);
  const std::vector<uint16_t> want = Apply(table, whole, false);
  const int64_t row = 4 * 128;
  // A prefill chunk [10, 24) with positions 10.. equals the same rows of the whole prompt.
  Heads chunk{14, 4, 128, {whole.x.begin() + 10 * row, whole.x.end()}, {}};
  for (int64_t t = 10; t < 24; ++t) chunk.positions.push_back(t);
  const std::vector<uint16_t> got = Apply(table, chunk, false);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[10 * row + i]);
  // A decode batch / compressor groups: arbitrary positions per token (j * ratio here).
  Heads groups{3, 4, 128, {}, {0, 8, 22}};
  for (int64_t t : groups.positions) {
    groups.x.insert(groups.x.end(), whole.x.begin() + t * row, whole.x.begin() + (t + 1) * row);
  }
  const std::vector<uint16_t> g = Apply(table, groups, false);
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t i = 0; i < row; ++i) {
      ASSERT_EQ(g[j * row + i], want[groups.positions[j] * row + i]);
    }
  }
}

TEST(RopeApplyTest, InPlaceStridedAndThreadedGiveTheSameBits) {
  const RopeTable table = Table(kFullYarn, 0);
  const Heads h = MakeHeads(13, 8, 128, 300, 9);
  const std::vector<uint16_t> want = Apply(table, h, false);
  // Heads 130 apart, tokens 8 * 130 + 7 apart, rotated in place on a pool.
  const int64_t hs = 130, ts = 8 * hs + 7;
  std::vector<uint16_t> buf(static_cast<size_t>(13 * ts), 0xABCD);
  for (int64_t t = 0; t < 13; ++t) {
    for (int64_t hd = 0; hd < 8; ++hd) {
      for (int64_t i = 0; i < 128; ++i) buf[t * ts + hd * hs + i] = h.x[(t * 8 + hd) * 128 + i];
    }
  }
  RopeParams p = MakeParams(table, h, buf.data(), false);
  p.x = buf.data();
  p.x_stride = p.out_stride = ts;
  p.x_head_stride = p.out_head_stride = hs;
  ThreadPool pool(3);
  ASSERT_TRUE(RopeCpu(p, &pool).ok());
  for (int64_t t = 0; t < 13; ++t) {
    for (int64_t hd = 0; hd < 8; ++hd) {
      for (int64_t i = 0; i < 128; ++i) {
        ASSERT_EQ(buf[t * ts + hd * hs + i], want[(t * 8 + hd) * 128 + i]);
      }
      for (int64_t i = 128; i < hs && hd * hs + i < ts; ++i) {
        ASSERT_EQ(buf[t * ts + hd * hs + i], 0xABCD);  // gaps untouched
      }
    }
  }
}

// RopeCosSinCpu: (cos, sin) interleaved per pair, the values RopeTable::CosSin gives (cached or
// computed), for positions inside and past the cache; the checks name their field.
TEST(RopeApplyTest, CosSinTableHoldsTheTablesValues) {
  const RopeTable table = Table(kFullYarn, 1000);
  const std::vector<int64_t> positions = {0, 7, 999, 1000, 65535, 1000003, int64_t{1} << 40};
  const int64_t pairs = table.rope_dims() / 2;
  std::vector<float> out(positions.size() * 2 * pairs, -1.0f);
  RopeCosSinParams p;
  p.table = &table;
  p.tokens = static_cast<int64_t>(positions.size());
  p.positions = positions.data();
  p.out = out.data();
  ASSERT_TRUE(RopeCosSinCpu(p).ok());
  std::vector<float> cos(pairs), sin(pairs);
  for (size_t t = 0; t < positions.size(); ++t) {
    table.CosSin(positions[t], cos.data(), sin.data());
    for (int64_t k = 0; k < pairs; ++k) {
      EXPECT_EQ(out[(t * pairs + k) * 2], cos[k]) << t << " " << k;
      EXPECT_EQ(out[(t * pairs + k) * 2 + 1], sin[k]) << t << " " << k;
    }
  }
  EXPECT_EQ(out[0], 1.0f);  // position 0: cos 1, sin 0
  EXPECT_EQ(out[1], 0.0f);
  auto invalid = [](RopeCosSinParams q, const char* what) {
    const absl::Status s = RopeCosSinCpu(q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), absl::string_view::npos) << s.message();
  };
  RopeCosSinParams bad = p;
  bad.table = nullptr;
  invalid(bad, "table");
  bad = p;
  bad.positions = nullptr;
  invalid(bad, "positions");
  bad = p;
  bad.out = nullptr;
  invalid(bad, "out");
  bad = p;
  bad.tokens = -1;
  invalid(bad, "tokens");
  const std::vector<int64_t> negative = {3, -2};
  bad = p;
  bad.tokens = 2;
  bad.positions = negative.data();
  invalid(bad, "positions[1]");
  bad.tokens = 0;  // nothing to read
  EXPECT_TRUE(RopeCosSinCpu(bad).ok());
}

TEST(RopeApplyTest, RejectsBadParams) {
  const RopeTable table = Table(kTinyYarn, 0);
  Heads h = MakeHeads(2, 2, 128, 0, 1);
  std::vector<uint16_t> out(h.x.size());
  auto invalid = [](const RopeParams& p, const char* what) {
    const absl::Status s = RopeCpu(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), absl::string_view::npos) << s.message();
  };
  RopeParams p = MakeParams(table, h, out.data(), false);
  ASSERT_TRUE(RopeCpu(p, nullptr).ok());
  p.head_dim = 16;
  invalid(p, "head_dim");
  p = MakeParams(table, h, out.data(), false);
  p.table = nullptr;
  invalid(p, "table");
  p = MakeParams(table, h, out.data(), false);
  h.positions[1] = -3;
  invalid(p, "positions[1]");
  h.positions[1] = 1;
  p.out = const_cast<uint16_t*>(h.x.data()) + 2;
  invalid(p, "overlaps");
  p = MakeParams(table, h, out.data(), false);
  p.x_head_stride = 100;
  invalid(p, "stride");
  p = MakeParams(table, h, out.data(), false);
  p.positions = nullptr;
  invalid(p, "positions");
}

// RmsNormRopeCpu (the fused op's CPU body, the GPU tests' reference): RmsNormCpu, then RopeCpu on
// its output's rows, one head of cols dims — the unrotated dims are the norm's, the tail rotated
// from the norm's bf16 values; padded out rows keep their padding; in place and 2 threads give
// the same bits; a negative position fails before anything is written.
TEST(RopeApplyTest, FusedNormRopeCpuIsNormThenRope) {
  const RopeTable table = Table(kTinyYarn, 0);
  constexpr int64_t kRows = 5, kCols = 128, kOutStride = 136;
  constexpr uint16_t kPad = 0xA5A5;
  const std::vector<uint16_t> x = RandomBf16(kRows * kCols, 1.5f, 77);
  const std::vector<uint16_t> w = RandomBf16(kCols, 1.0f, 78);
  std::vector<int64_t> pos = {0, 3, 17, 250, 1 << 20};
  // The composition, written out: RmsNormCpu, then RopeCpu in place (inverse).
  std::vector<uint16_t> normed(x.size());
  ASSERT_TRUE(
      RmsNormCpu({kRows, kCols, x.data(), kCols, w.data(), nullptr, 1e-20f, normed.data(), kCols},
                 nullptr)
          .ok());
  std::vector<uint16_t> want = normed;
  RopeParams rope;
  rope.table = &table;
  rope.tokens = kRows;
  rope.heads = 1;
  rope.head_dim = kCols;
  rope.positions = pos.data();
  rope.x = rope.out = want.data();
  rope.x_stride = rope.out_stride = rope.x_head_stride = rope.out_head_stride = kCols;
  rope.inverse = true;
  ASSERT_TRUE(RopeCpu(rope, nullptr).ok());

  std::vector<uint16_t> out(kRows * kOutStride, kPad);
  RmsNormRopeParams p;
  p.norm = {kRows, kCols, x.data(), kCols, w.data(), nullptr, 1e-20f, out.data(), kOutStride};
  p.table = &table;
  p.positions = pos.data();
  p.inverse = true;
  ThreadPool pool(2);
  ASSERT_TRUE(RmsNormRopeCpu(p, &pool).ok());
  const int64_t nope = kCols - table.rope_dims();
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kOutStride; ++c) {
      const uint16_t got = out[r * kOutStride + c];
      if (c >= kCols) {
        EXPECT_EQ(got, kPad) << "padding of row " << r;
      } else {
        EXPECT_EQ(got, want[r * kCols + c]) << "row " << r << " col " << c;
        if (c < nope) {
          EXPECT_EQ(got, normed[r * kCols + c]) << "unrotated dim " << c;
        }
      }
    }
  }
  // The tail is rotated: at position 0 it equals the norm's values, elsewhere (mostly) not.
  int64_t moved = 0;
  for (int64_t c = nope; c < kCols; ++c) {
    EXPECT_EQ(out[c], normed[c]) << "position 0, col " << c;
    moved += out[3 * kOutStride + c] != normed[3 * kCols + c];
  }
  EXPECT_GT(moved, table.rope_dims() / 2);

  // In place over a copy of x: the same bits.
  std::vector<uint16_t> in_place = x;
  RmsNormRopeParams q = p;
  q.norm.x = q.norm.out = in_place.data();
  q.norm.out_stride = kCols;
  ASSERT_TRUE(RmsNormRopeCpu(q, nullptr).ok());
  EXPECT_EQ(in_place, want);

  // A negative position: InvalidArgument naming it, nothing written.
  pos[2] = -1;
  std::vector<uint16_t> untouched(kRows * kOutStride, kPad);
  p.norm.out = untouched.data();
  const absl::Status s = RmsNormRopeCpu(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("positions[2]"), absl::string_view::npos) << s.message();
  EXPECT_EQ(untouched, std::vector<uint16_t>(kRows * kOutStride, kPad));
  p.table = nullptr;
  EXPECT_EQ(RmsNormRopeCpu(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::kernels
