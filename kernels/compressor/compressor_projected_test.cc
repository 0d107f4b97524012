// CompressProjectedCpu (the post-GEMM half of CompressCpu, shared with the GPU launcher):
// ExpRn is the correctly rounded fp32 exp; the projected path equals CompressCpu on its own
// GEMMs; chunked == one-shot from projections for several ratios; validation; the device state
// helper (host-side checks only).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/compressor_test_util.h"
#include "kernels/compressor/exp_rn.h"

namespace flashserve::kernels {
namespace {

using compressor_math::BitsToF32;
using compressor_math::ExpRn;
using compressor_math::F32ToBits;
using compressor_test::Layer;
using compressor_test::Projections;
using compressor_test::RandomBf16;
using compressor_test::RandomLayer;
using compressor_test::RandomProjections;
using compressor_test::Rows;
using compressor_test::RunChunks;
using compressor_test::RunProjectedChunks;

// The x87 expl value rounded once to fp32 is the correctly rounded exp: its error (~2^-63
// relative) is far below the distance to the nearest fp32 midpoint of every fp32 x (>= 2^-52.6,
// the closest case of the exhaustive scan in exp_rn.h).
float ReferenceExp(float x) { return static_cast<float>(expl(static_cast<long double>(x))); }

TEST(ExpRn, CorrectlyRoundedOnAStrideOverAllFloats) {
  int64_t checked = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 997) {
    const float x = BitsToF32(static_cast<uint32_t>(u));
    const float got = ExpRn(x);
    if (std::isnan(x)) {
      EXPECT_EQ(F32ToBits(got), static_cast<uint32_t>(u) | 0x00400000u);
      continue;
    }
    ASSERT_EQ(F32ToBits(got), F32ToBits(ReferenceExp(x))) << "x = " << x;
    ++checked;
  }
  EXPECT_GT(checked, 4000000);
}

// The 25 x of exp_rn.h's table (the exhaustive scan's output, repeated here): each is served from
// the table with the correctly rounded value, and each is a genuinely hard case (the double exp
// lies within 2^-48 of an fp32 midpoint).
TEST(ExpRn, HardCasesAndSpecialValues) {
  constexpr uint32_t kHard[] = {0x33800000u, 0x343FFFFFu, 0x34DFFFFDu, 0x356FFFF9u, 0x35F7FFF1u,
                                0x367BFFE1u, 0x36FDFFC1u, 0x377EFF81u, 0x383A3EF1u, 0x38E69CC1u,
                                0x39C6BE5Bu, 0x39E5BB1Du, 0x3D1A274Eu, 0x3FE67199u, 0x4001B249u,
                                0x40315B33u, 0x41CBF87Bu, 0x4288942Bu, 0xB3000000u, 0xBAE0E25Cu,
                                0xBBB70EE8u, 0xBBF0EDF1u, 0xBC2A461Au, 0xC13D6631u, 0xC16912CDu};
  for (uint32_t u : kHard) {
    uint32_t y = 0;
    const float x = BitsToF32(u);
    ASSERT_TRUE(compressor_math::ExpHardCase(u, &y)) << "x = " << x;
    EXPECT_EQ(y, F32ToBits(ReferenceExp(x))) << "x = " << x;
    EXPECT_EQ(F32ToBits(ExpRn(x)), y) << "x = " << x;
    const double d = std::exp(static_cast<double>(x));
    const double lo = std::nextafter(static_cast<float>(d), 0.0f);
    const double hi = std::nextafter(static_cast<float>(d), INFINITY);
    const double mid = d >= static_cast<float>(d) ? (static_cast<float>(d) + hi) / 2
                                                  : (static_cast<float>(d) + lo) / 2;
    EXPECT_LE(std::fabs(d - mid), std::ldexp(d, -48)) << "x = " << x;
  }
  EXPECT_EQ(sizeof(kHard) / sizeof(kHard[0]), 25u);
  EXPECT_EQ(ExpRn(0.0f), 1.0f);
  EXPECT_EQ(ExpRn(-0.0f), 1.0f);
  EXPECT_EQ(ExpRn(-INFINITY), 0.0f);
  EXPECT_EQ(ExpRn(INFINITY), INFINITY);
  EXPECT_EQ(ExpRn(-200.0f), 0.0f);
  EXPECT_EQ(ExpRn(100.0f), INFINITY);
  EXPECT_EQ(F32ToBits(ExpRn(-103.0f)), F32ToBits(ReferenceExp(-103.0f)));  // subnormal result
  EXPECT_GT(ExpRn(-103.0f), 0.0f);
}

// CompressCpu == its GEMMs (LinearCpu, as the layer runs them) + CompressProjectedCpu.
TEST(CompressProjected, EqualsCompressCpuOnItsOwnGemms) {
  struct Shape {
    int64_t r, c, d, n;
  };
  for (const Shape& s : {Shape{2, 128, 256, 201}, Shape{4, 32, 64, 17}, Shape{1, 128, 256, 33},
                         Shape{2, 512, 1024, 6}, Shape{3, 48, 40, 10}}) {
    SCOPED_TRACE(::testing::Message() << "r " << s.r << " C " << s.c << " D " << s.d);
    std::unique_ptr<Layer> l = RandomLayer(s.r, s.c, s.d, 5);
    std::mt19937 rng(9);
    const std::vector<uint16_t> x = RandomBf16(s.n * s.d, -2.0f, 2.0f, rng);
    const Rows want = RunChunks(*l, x.data(), s.d, s.n, {s.n});
    const Projections pr = compressor_test::Project(*l, x.data(), s.d, s.n);
    const Rows got = RunProjectedChunks(pr, l->norm.data(), {s.n});
    EXPECT_EQ(got.index, want.index);
    EXPECT_EQ(got.latent, want.latent);
    if (s.r == 1) {
      const Rows got_bf16 = RunProjectedChunks(pr, l->norm.data(), {s.n}, /*bf16=*/true);
      EXPECT_EQ(got_bf16.latent, want.latent);
    }
  }
}

TEST(CompressProjected, ChunkedEqualsOneShotForEveryRatio) {
  std::mt19937 rng(1);
  for (int64_t ratio : {1, 2, 3, 4, 16}) {
    const int64_t n = 61, c = 64;
    const Projections pr = RandomProjections(ratio, c, n, static_cast<uint32_t>(ratio));
    const std::vector<uint16_t> norm = RandomBf16(c, 0.5f, 1.5f, rng);
    const Rows one = RunProjectedChunks(pr, norm.data(), {n});
    ASSERT_EQ(static_cast<int64_t>(one.index.size()), n / ratio);
    for (const std::vector<int64_t>& split :
         {std::vector<int64_t>(61, 1), std::vector<int64_t>{3, 5, 7, 11, 13, 22},
          std::vector<int64_t>{60, 1}, std::vector<int64_t>{1, 60}}) {
      SCOPED_TRACE(::testing::Message() << "ratio " << ratio << " chunks " << split.size());
      const Rows chunked = RunProjectedChunks(pr, norm.data(), split);
      EXPECT_EQ(chunked.index, one.index);
      EXPECT_EQ(chunked.latent, one.latent);
    }
    // Starting at a later group boundary shifts the indices only.
    const Rows later = RunProjectedChunks(pr, norm.data(), {n}, false, 10 * ratio);
    EXPECT_EQ(later.latent, one.latent);
    ASSERT_FALSE(later.index.empty());
    EXPECT_EQ(later.index[0], 10);
  }
}

TEST(CompressProjected, StateHoldsTheOpenGroupsRows) {
  const int64_t c = 16;
  const Projections pr = RandomProjections(4, c, 7, 3);
  const std::vector<uint16_t> norm(c, 0x3F80);
  CompressorState st = MakeCompressorState(4, c).value();
  const Rows rows = RunProjectedChunks(pr, norm.data(), {7}, false, 0, &st);
  EXPECT_EQ(rows.index, std::vector<int64_t>({0}));
  ASSERT_EQ(st.pending, 3);
  EXPECT_EQ(st.next_pos, 7);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_EQ(st.kv[i * c + ch], pr.kv[(4 + i) * c + ch]);
      EXPECT_EQ(st.score[i * c + ch], pr.score[(4 + i) * c + ch]);
    }
  }
}

TEST(CompressProjected, ValidationNamesTheField) {
  const int64_t c = 32;
  const Projections pr = RandomProjections(2, c, 4, 3);
  const std::vector<uint16_t> norm(c, 0x3F80);
  std::vector<uint16_t> lat(2 * c);
  std::vector<int64_t> idx(2);
  int64_t emitted = 0;
  CompressProjectedParams good;
  good.ratio = 2;
  good.channels = c;
  good.tokens = 4;
  good.kv = pr.kv.data();
  good.kv_stride = c;
  good.score = pr.score.data();
  good.score_stride = c;
  good.norm_weight = norm.data();
  good.latent = lat.data();
  good.latent_stride = c;
  good.latent_capacity = 2;
  good.group_index = idx.data();
  good.groups_emitted = &emitted;
  auto expect = [&](const CompressProjectedParams& p, absl::StatusCode code, const char* text) {
    CompressorState st = MakeCompressorState(2, c).value();
    const absl::Status s = CompressProjectedCpu(p, &st, nullptr);
    EXPECT_EQ(s.code(), code) << text;
    EXPECT_TRUE(absl::StrContains(s.message(), text)) << s;
    EXPECT_EQ(st.pending, 0);
  };
  CompressProjectedParams p = good;
  p.kv_bf16 = norm.data();
  expect(p, absl::StatusCode::kInvalidArgument, "kv_bf16");
  p = good;
  p.score = nullptr;
  expect(p, absl::StatusCode::kInvalidArgument, "score");
  p = good;
  p.kv_stride = c - 1;
  expect(p, absl::StatusCode::kInvalidArgument, "kv_stride");
  p = good;
  p.latent_capacity = 1;
  expect(p, absl::StatusCode::kInvalidArgument, "latent_capacity");
  p = good;
  p.channels = 16;
  expect(p, absl::StatusCode::kInvalidArgument, "state");
  p = good;
  p.norm_eps = 0.0f;
  expect(p, absl::StatusCode::kInvalidArgument, "norm_eps");
  p = good;
  p.start_pos = 3;
  expect(p, absl::StatusCode::kFailedPrecondition, "does not follow");
  // Ratio 1: exactly one of kv / kv_bf16, no score.
  CompressorState st1 = MakeCompressorState(1, c).value();
  p = good;
  p.ratio = 1;
  p.latent_capacity = 4;
  std::vector<uint16_t> lat4(4 * c);
  std::vector<int64_t> idx4(4);
  p.latent = lat4.data();
  p.group_index = idx4.data();
  EXPECT_TRUE(absl::StrContains(CompressProjectedCpu(p, &st1, nullptr).message(), "score"));
  p.score = nullptr;
  p.kv_bf16 = norm.data();
  EXPECT_TRUE(absl::StrContains(CompressProjectedCpu(p, &st1, nullptr).message(), "exactly one"));
  p.kv_bf16 = nullptr;
  EXPECT_TRUE(CompressProjectedCpu(p, &st1, nullptr).ok());
  EXPECT_EQ(emitted, 4);
  EXPECT_EQ(st1.next_pos, 4);
}

TEST(CompressorDeviceState, MakeChecksItsArguments) {
  alignas(16) static float memory[2 * 512];
  auto s = MakeCompressorDeviceState(2, 512, memory, sizeof(memory));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kv, memory);
  EXPECT_EQ(s->score, memory + 512);
  EXPECT_EQ(s->pending, 0);
  EXPECT_EQ(CompressorDeviceStateBytes(2, 512), 4096);
  EXPECT_FALSE(MakeCompressorDeviceState(2, 512, memory, 4095).ok());
  EXPECT_FALSE(MakeCompressorDeviceState(2, 512, nullptr, 4096).ok());
  EXPECT_FALSE(MakeCompressorDeviceState(2, 512, reinterpret_cast<char*>(memory) + 4, 4096).ok());
  EXPECT_FALSE(MakeCompressorDeviceState(0, 512, memory, 4096).ok());
  EXPECT_TRUE(MakeCompressorDeviceState(1, 512, nullptr, 0).ok());
}

}  // namespace
}  // namespace flashserve::kernels
