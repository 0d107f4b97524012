// GPU launchers against the CPU bodies: LaunchRmsNorm vs RmsNormCpu, LaunchRope vs RopeCpu,
// LaunchRopeCosSin vs RopeCosSinCpu and LaunchRmsNormRope vs RmsNormRopeCpu, over the
// released shapes (rows 1..4096, cols 512 / 1024 / 1280 / 5120; q 64 x 512, index 32 x 128, kv 1 x
// 512 with rd 64; positions up to 2^20), odd widths, padded / unaligned strides (the scalar paths)
// and in place. Outputs start poisoned, so a value the kernel fails to write (or writes into the
// padding) is a mismatch.
//
// Expected: identical bits. Tolerated (README.md "CUDA"): values within one bf16 ulp on at most
// 1e-5 of the elements — the double sin/cos or sum rounding to a different fp32 at an fp32 tie,
// which should never be seen; each comparison prints its count.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/norm_rope_test_util.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using testing::RandomBf16;
using testing::RandomFloats;

constexpr uint16_t kPoison = 0xA5A5;

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  DeviceBuffer buf(host.size() * sizeof(T));
  buf.CopyFromHost(host.data(), host.size() * sizeof(T));
  return buf;
}

// Signed position of a bf16 bit pattern on the number line (±0 both 0), for ulp distances.
int32_t Ordered(uint16_t b) {
  return (b & 0x8000u) != 0 ? -static_cast<int32_t>(b & 0x7FFFu) : static_cast<int32_t>(b);
}

// Compares whole buffers (padding included): "" when every value is identical, or within one
// bf16 ulp on at most max(1e-5 * n, 1) values; otherwise a description of the first bad value.
std::string CompareBf16(const char* what, const std::vector<uint16_t>& got,
                        const std::vector<uint16_t>& want) {
  if (got.size() != want.size()) return "size differs";
  int64_t off_by_one = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    const int32_t d = std::abs(Ordered(got[i]) - Ordered(want[i]));
    if (d > 1 || got[i] == kPoison || want[i] == kPoison) {
      return absl::StrFormat("%s: element %d is 0x%04x, want 0x%04x", what, i, got[i], want[i]);
    }
    ++off_by_one;
  }
  const int64_t n = static_cast<int64_t>(got.size());
  std::printf("  %s: %ld values, %ld identical, %ld one bf16 ulp apart\n", what,
              static_cast<long>(n), static_cast<long>(n - off_by_one),
              static_cast<long>(off_by_one));
  if (off_by_one > std::max<int64_t>(n / 100000, 1)) {
    return absl::StrFormat("%s: %d values one ulp apart (more than 1e-5 of %d)", what, off_by_one,
                           n);
  }
  return "";
}

// ---- RMSNorm --------------------------------------------------------------------------------

struct NormCase {
  int64_t rows, cols;
  bool bf16_weight;
  int64_t x_pad, out_pad;  // stride = cols + pad (odd pads take the scalar path)
};

// rows x cols (x and out padded as given), CPU vs GPU, out of place and in place.
void CheckNorm(const NormCase& c, uint32_t seed) {
  SCOPED_TRACE(absl::StrFormat("rows %d cols %d %s pads %d/%d", c.rows, c.cols,
                               c.bf16_weight ? "bf16" : "fp32", c.x_pad, c.out_pad));
  const int64_t xs = c.cols + c.x_pad, os = c.cols + c.out_pad;
  std::vector<uint16_t> x = RandomBf16(c.rows * xs, 1.5f, seed);
  // A spread of row scales (1/64 .. 64) so that r covers many binades.
  for (int64_t r = 0; r < c.rows; ++r) {
    const int shift = static_cast<int>(r % 13) - 6;
    for (int64_t i = 0; i < xs; ++i) {
      uint16_t& v = x[r * xs + i];
      const int exp = static_cast<int>((v >> 7) & 0xFF);
      if (exp > 10 && exp < 240) v = static_cast<uint16_t>(static_cast<int>(v) + shift * 128);
    }
  }
  const std::vector<uint16_t> w16 = RandomBf16(c.cols, 1.0f, seed + 1);
  const std::vector<float> w32 = RandomFloats(c.cols, -2.0f, 2.0f, seed + 2);
  RmsNormParams p;
  p.rows = c.rows;
  p.cols = c.cols;
  p.x_stride = xs;
  p.out_stride = os;
  p.eps = c.bf16_weight ? 1e-20f : 1e-6f;

  std::vector<uint16_t> want(static_cast<size_t>(c.rows * os), kPoison);
  RmsNormParams cpu = p;
  cpu.x = x.data();
  cpu.out = want.data();
  if (c.bf16_weight) {
    cpu.weight_bf16 = w16.data();
  } else {
    cpu.weight_f32 = w32.data();
  }
  ASSERT_TRUE(RmsNormCpu(cpu, nullptr).ok());

  DeviceBuffer dx = ToDevice(x), dw16 = ToDevice(w16), dw32 = ToDevice(w32);
  DeviceBuffer dout = ToDevice(std::vector<uint16_t>(want.size(), kPoison));
  RmsNormParams gpu = p;
  gpu.x = dx.get<uint16_t>();
  gpu.out = dout.get<uint16_t>();
  if (c.bf16_weight) {
    gpu.weight_bf16 = dw16.get<uint16_t>();
  } else {
    gpu.weight_f32 = dw32.get<float>();
  }
  ASSERT_TRUE(LaunchRmsNorm(gpu, nullptr).ok());
  EXPECT_EQ(CompareBf16("rms_norm", ToHost<uint16_t>(dout, want.size()), want), "");

  // With the QDQ'd second output (RmsNormParams::out_qdq; cols % 32 == 0, its stride padded as
  // out's): out unchanged, and out_qdq exactly QdqCpu of the GPU's own out (the raw paths write it
  // in their pass 2, the rest by the QDQ pass after the norm; odd pads take the latter).
  if (c.cols % 32 == 0) {
    const std::vector<uint16_t> got = ToHost<uint16_t>(dout, want.size());
    DeviceBuffer dq = ToDevice(std::vector<uint16_t>(want.size(), kPoison));
    DeviceBuffer dout2 = ToDevice(std::vector<uint16_t>(want.size(), kPoison));
    RmsNormParams gq = gpu;
    gq.out = dout2.get<uint16_t>();
    gq.out_qdq = dq.get<uint16_t>();
    gq.out_qdq_stride = os;
    ASSERT_TRUE(LaunchRmsNorm(gq, nullptr).ok());
    EXPECT_EQ(ToHost<uint16_t>(dout2, want.size()), got) << "out with out_qdq";
    std::vector<uint16_t> want_q(want.size(), kPoison);
    ASSERT_TRUE(quant::QdqCpu({quant::BlockFormat::kFp8E4m3Ue8m0B32, c.rows, c.cols, got.data(), os,
                               want_q.data(), os})
                    .ok());
    const std::vector<uint16_t> got_q = ToHost<uint16_t>(dq, want.size());
    int64_t bad = 0;
    for (size_t i = 0; i < got_q.size(); ++i) bad += got_q[i] != want_q[i];
    EXPECT_EQ(bad, 0) << "out_qdq values unlike QdqCpu of out";
  }

  // In place over x (x's stride): the CPU body in place on a host copy.
  std::vector<uint16_t> in_place = x;
  cpu.x = cpu.out = in_place.data();
  cpu.out_stride = xs;
  ASSERT_TRUE(RmsNormCpu(cpu, nullptr).ok());
  gpu.x = gpu.out = dx.get<uint16_t>();
  gpu.out_stride = xs;
  ASSERT_TRUE(LaunchRmsNorm(gpu, nullptr).ok());
  EXPECT_EQ(CompareBf16("rms_norm in place", ToHost<uint16_t>(dx, x.size()), in_place), "");
}

TEST(NormRopeGpuTest, RmsNormMatchesCpuOnReleasedShapes) {
  FS_SKIP_WITHOUT_GPU();
  uint32_t seed = 100;
  for (int64_t rows : {1, 7, 64, 4096}) {
    for (int64_t cols : {512, 1024, 1280, 5120}) {
      CheckNorm({rows, cols, true, 0, 0}, seed++);
    }
  }
  // ViT norms (fp32 weight, eps 1e-6) and a decode batch of the largest width.
  CheckNorm({577, 1024, false, 0, 0}, seed++);
  CheckNorm({33, 7168, true, 0, 0}, seed++);
  // Rows kept in registers between the passes up to 4 chunks of 8 per thread (8192 columns on the
  // block path): the limit itself, and one chunk past it (two passes over memory).
  CheckNorm({3, 8192, true, 0, 0}, seed++);
  CheckNorm({3, 8200, false, 0, 0}, seed++);
  // Many rows of 257..2048 columns keep their raw 16-byte words in registers (kNormCacheRaw, a
  // warp per row, 2 / 4 / 8 slots per lane): each slot count at its limit and ragged (264: 33
  // chunks; 520: 65; 1544: 193), one chunk past the upper limit (the wide rows below), and the
  // lower limit (two passes on a warp).
  CheckNorm({300, 264, false, 0, 0}, seed++);
  CheckNorm({300, 512, false, 0, 0}, seed++);
  CheckNorm({257, 520, true, 0, 0}, seed++);
  CheckNorm({300, 1024, true, 0, 0}, seed++);
  CheckNorm({300, 1544, false, 0, 0}, seed++);
  CheckNorm({1000, 2048, true, 0, 0}, seed++);
  CheckNorm({300, 2056, true, 0, 0}, seed++);
  CheckNorm({300, 256, true, 0, 0}, seed++);
  // Wide rows of many-row launches (a block per row as raw words, the next row's words loaded
  // during the current row's passes, one wave of resident blocks): 2, 3, 4 and 8 slots per thread,
  // ragged (2056: 257 chunks), more rows than resident blocks (several rows per block) and fewer;
  // one chunk past the widest (two passes on the block path).
  CheckNorm({2500, 2056, false, 0, 0}, seed++);
  CheckNorm({3000, 5120, true, 0, 0}, seed++);
  CheckNorm({1500, 8192, true, 0, 0}, seed++);
  CheckNorm({1200, 16384, false, 0, 0}, seed++);
  CheckNorm({300, 16392, true, 0, 0}, seed++);
  // Narrow rows of many-row launches: several rows per warp (groups of 4 / 8 / 16 lanes), row
  // counts that leave a warp's last groups without a row, ragged chunk counts.
  CheckNorm({301, 128, true, 0, 0}, seed++);
  CheckNorm({4099, 128, false, 0, 0}, seed++);
  CheckNorm({303, 136, true, 0, 0}, seed++);
  CheckNorm({299, 64, true, 0, 0}, seed++);
  CheckNorm({300, 72, false, 0, 0}, seed++);
  CheckNorm({257, 32, true, 0, 0}, seed++);
  CheckNorm({1001, 200, true, 0, 0}, seed++);
}

TEST(NormRopeGpuTest, RmsNormScalarPathsAndOddWidths) {
  FS_SKIP_WITHOUT_GPU();
  uint32_t seed = 200;
  // Odd pads misalign rows (scalar path); odd and tiny widths; both weight types; both row modes.
  for (const NormCase& c : std::vector<NormCase>{{5, 512, true, 3, 1},
                                                 {5, 5120, false, 1, 8},
                                                 {9, 1, true, 0, 0},
                                                 {9, 7, false, 2, 0},
                                                 {300, 1000, true, 0, 5},
                                                 {3, 1030, false, 0, 0},
                                                 {2, 4099, true, 1, 1}}) {
    CheckNorm(c, seed++);
  }
}

// ---- RoPE -----------------------------------------------------------------------------------

const RopeSpec kFullYarn{64, 160000.0, 65536, 16.0, 32.0, 1.0};
const RopeSpec kFullPlain{64, 10000.0, 0, 16.0, 32.0, 1.0};
const RopeSpec kTinyYarn{32, 160000.0, 64, 4.0, 32.0, 1.0};
// More pairs (64) than a warp's lanes: the fused kernel's second pair per lane.
const RopeSpec kWidePlain{128, 10000.0, 0, 16.0, 32.0, 1.0};

RopeTable Table(const RopeSpec& spec) {
  absl::StatusOr<RopeTable> t = RopeTable::Create(spec, 0);
  CHECK_OK(t.status());
  return *std::move(t);
}

// Positions: a prefill run from `first` for half the tokens, then random ones up to 2^20.
std::vector<int64_t> Positions(int64_t tokens, int64_t first, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> any(0, int64_t{1} << 20);
  std::vector<int64_t> pos(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) pos[t] = t < tokens / 2 ? first + t : any(rng);
  if (tokens > 2) pos[tokens - 1] = int64_t{1} << 20;
  return pos;
}

struct RopeCase {
  const RopeSpec* spec;
  int64_t tokens, heads, head_dim;
  int64_t head_pad, token_pad;  // head stride = head_dim + head_pad; token stride adds token_pad
};

void CheckRope(const RopeCase& c, bool inverse, uint32_t seed) {
  SCOPED_TRACE(absl::StrFormat("tokens %d heads %d head_dim %d rd %d pads %d/%d%s", c.tokens,
                               c.heads, c.head_dim, c.spec->rope_dims, c.head_pad, c.token_pad,
                               inverse ? " inverse" : ""));
  const RopeTable table = Table(*c.spec);
  const int64_t hs = c.head_dim + c.head_pad, ts = c.heads * hs + c.token_pad;
  const std::vector<uint16_t> x = RandomBf16(c.tokens * ts, 2.0f, seed);
  const std::vector<int64_t> pos = Positions(c.tokens, 3 * seed, seed + 1);
  RopeParams p;
  p.table = &table;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.x_stride = p.out_stride = ts;
  p.x_head_stride = p.out_head_stride = hs;
  p.inverse = inverse;

  std::vector<uint16_t> want(x.size(), kPoison);
  RopeParams cpu = p;
  cpu.positions = pos.data();
  cpu.x = x.data();
  cpu.out = want.data();
  ASSERT_TRUE(RopeCpu(cpu, nullptr).ok());
  DeviceBuffer dx = ToDevice(x), dpos = ToDevice(pos);
  DeviceBuffer dout = ToDevice(std::vector<uint16_t>(x.size(), kPoison));
  RopeParams gpu = p;
  gpu.positions = dpos.get<int64_t>();
  gpu.x = dx.get<uint16_t>();
  gpu.out = dout.get<uint16_t>();
  ASSERT_TRUE(LaunchRope(gpu, nullptr).ok());
  EXPECT_EQ(CompareBf16("rope", ToHost<uint16_t>(dout, x.size()), want), "");

  std::vector<uint16_t> in_place = x;
  cpu.x = cpu.out = in_place.data();
  ASSERT_TRUE(RopeCpu(cpu, nullptr).ok());
  gpu.x = gpu.out = dx.get<uint16_t>();
  ASSERT_TRUE(LaunchRope(gpu, nullptr).ok());
  EXPECT_EQ(CompareBf16("rope in place", ToHost<uint16_t>(dx, x.size()), in_place), "");
}

TEST(NormRopeGpuTest, RopeMatchesCpuOnReleasedShapes) {
  FS_SKIP_WITHOUT_GPU();
  uint32_t seed = 300;
  // Released q [64 x 512], index q [32 x 128], kv [1 x 512], rd 64, YaRN and plain; tiny q.
  for (const RopeCase& c : std::vector<RopeCase>{{&kFullYarn, 1, 64, 512, 0, 0},
                                                 {&kFullYarn, 300, 64, 512, 0, 0},
                                                 {&kFullYarn, 4096, 1, 512, 0, 0},
                                                 {&kFullPlain, 257, 32, 128, 0, 0},
                                                 {&kFullPlain, 2048, 1, 512, 0, 0},
                                                 {&kTinyYarn, 33, 4, 128, 0, 0}}) {
    for (bool inverse : {false, true}) CheckRope(c, inverse, seed++);
  }
  // 4 units per thread from 512 units per token (q in place is one block per token): 65 heads
  // leave the token's last block 8 units in place and 64 out of place; padded strides.
  for (const RopeCase& c :
       std::vector<RopeCase>{{&kFullYarn, 7, 65, 512, 0, 0}, {&kFullPlain, 33, 64, 512, 8, 16}}) {
    for (bool inverse : {false, true}) CheckRope(c, inverse, seed++);
  }
}

TEST(NormRopeGpuTest, RopeScalarPathsAndPaddedStrides) {
  FS_SKIP_WITHOUT_GPU();
  uint32_t seed = 400;
  // Even pads keep the 32-bit pair path with gaps; odd pads force the 16-bit path; rd == head_dim.
  // The 16-byte kernel (4 pairs per thread, a token over several blocks) with gaps: head pad 8,
  // token pad 16; decode token counts; 3 heads of 72 (8 unrotated dims, one block per token).
  for (const RopeCase& c : std::vector<RopeCase>{{&kFullYarn, 8, 64, 512, 8, 16},
                                                 {&kFullYarn, 2, 64, 512, 0, 0},
                                                 {&kFullPlain, 3, 3, 72, 0, 8},
                                                 {&kWidePlain, 5, 16, 128, 0, 0}}) {
    for (bool inverse : {false, true}) CheckRope(c, inverse, seed++);
  }
  for (const RopeCase& c : std::vector<RopeCase>{{&kFullYarn, 17, 8, 512, 8, 6},
                                                 {&kFullYarn, 17, 8, 512, 1, 3},
                                                 {&kFullPlain, 9, 3, 64, 0, 1},
                                                 {&kFullPlain, 9, 5, 65, 0, 0},
                                                 {&kTinyYarn, 5, 2, 32, 0, 0}}) {
    CheckRope(c, false, seed++);
  }
}

// ---- Fused RMSNorm + RoPE --------------------------------------------------------------------

void CheckNormRope(int64_t rows, int64_t cols, const RopeSpec& spec, bool inverse, uint32_t seed) {
  SCOPED_TRACE(absl::StrFormat("rows %d cols %d rd %d%s", rows, cols, spec.rope_dims,
                               inverse ? " inverse" : ""));
  const RopeTable table = Table(spec);
  const std::vector<uint16_t> x = RandomBf16(rows * cols, 0.7f, seed);
  const std::vector<uint16_t> w = RandomBf16(cols, 1.0f, seed + 1);
  const std::vector<int64_t> pos = Positions(rows, 11, seed + 2);
  // Reference: RmsNormCpu, then RopeCpu in place on its output (one head of cols dims).
  std::vector<uint16_t> want(x.size(), kPoison);
  RmsNormRopeParams cpu;
  cpu.norm = {rows, cols, x.data(), cols, w.data(), nullptr, 1e-20f, want.data(), cols};
  cpu.table = &table;
  cpu.positions = pos.data();
  cpu.inverse = inverse;
  ASSERT_TRUE(RmsNormRopeCpu(cpu, nullptr).ok());

  DeviceBuffer dx = ToDevice(x), dw = ToDevice(w), dpos = ToDevice(pos);
  DeviceBuffer dout = ToDevice(std::vector<uint16_t>(x.size(), kPoison));
  RmsNormRopeParams p;
  p.norm = {rows,    cols,   dx.get<uint16_t>(),   cols, dw.get<uint16_t>(),
            nullptr, 1e-20f, dout.get<uint16_t>(), cols};
  p.table = &table;
  p.positions = dpos.get<int64_t>();
  p.inverse = inverse;
  ASSERT_TRUE(LaunchRmsNormRope(p, nullptr).ok());
  EXPECT_EQ(CompareBf16("rms_norm_rope", ToHost<uint16_t>(dout, x.size()), want), "");
  p.norm.out = dx.get<uint16_t>();
  ASSERT_TRUE(LaunchRmsNormRope(p, nullptr).ok());
  EXPECT_EQ(CompareBf16("rms_norm_rope in place", ToHost<uint16_t>(dx, x.size()), want), "");
}

TEST(NormRopeGpuTest, FusedNormRopeMatchesCpuPair) {
  FS_SKIP_WITHOUT_GPU();
  // kv [512] with rd 64 (warp-per-row, vectorised); tiny kv [128] rd 32; a wide row (block path);
  // an odd width (scalar path).
  CheckNormRope(1, 512, kFullYarn, false, 500);
  CheckNormRope(2048, 512, kFullYarn, false, 501);
  CheckNormRope(2048, 512, kFullPlain, true, 502);
  CheckNormRope(65, 128, kTinyYarn, false, 503);
  CheckNormRope(9, 2048, kFullYarn, false, 504);
  CheckNormRope(9, 517, kFullPlain, false, 505);
  // Decode batches; 64 pairs on a warp row (two pairs per lane); 64 pairs on the block path.
  CheckNormRope(8, 512, kFullYarn, true, 506);
  CheckNormRope(7, 512, kWidePlain, false, 507);
  CheckNormRope(3, 2048, kWidePlain, true, 508);
  // Many rows with raw words in registers and the rope tail: 64 and 128 dims rotated (the 2048-row
  // cases above take 2 slots per lane).
  CheckNormRope(600, 1280, kFullYarn, false, 509);
  CheckNormRope(300, 2048, kWidePlain, true, 510);
  CheckNormRope(300, 1024, kWidePlain, false, 511);
  // Narrow rows of many-row launches (the indexer's k [128] with rd 64, the tiny kv [128] with rd
  // 32, a 256-wide row with 64 pairs): several rows per warp, a pair loop of several pairs per
  // lane.
  CheckNormRope(301, 128, kFullYarn, false, 512);
  CheckNormRope(4099, 128, kFullYarn, true, 513);
  CheckNormRope(300, 128, kTinyYarn, false, 514);
  CheckNormRope(303, 256, kWidePlain, true, 515);
  // Four lanes per row (64 columns, 16 pairs: the tail is the rows' second chunk of each lane);
  // wide rows of many-row launches with the rope tail (a block per row, the pair loop).
  CheckNormRope(517, 64, kTinyYarn, true, 516);
  CheckNormRope(300, 4096, kFullYarn, false, 517);
  CheckNormRope(263, 3072, kWidePlain, true, 518);
}

// ---- Non-finite and extreme values ------------------------------------------------------------

// Rows with NaN (several payloads, both signs), ±inf, values whose fp32 squares overflow or
// underflow, and weights with NaN / inf at some columns: the bf16 stores take one cvt per pair
// only where no value of the 8 is NaN (F32x8ToBf16x8), so these rows exercise the other branch.
// The GPU's arithmetic makes canonical NaNs where the CPU's keeps payloads and signs, so a NaN
// matches any NaN; every other value must be identical.
std::string CompareSpecial(const char* what, const std::vector<uint16_t>& got,
                           const std::vector<uint16_t>& want) {
  auto is_nan = [](uint16_t b) { return (b & 0x7FFFu) > 0x7F80u; };
  int64_t nans = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (is_nan(got[i]) && is_nan(want[i]) && got[i] != kPoison) {
      ++nans;
      continue;
    }
    if (got[i] != want[i]) {
      return absl::StrFormat("%s: element %d is 0x%04x, want 0x%04x", what, i, got[i], want[i]);
    }
  }
  std::printf("  %s: %zu values, %ld NaN in both\n", what, got.size(), static_cast<long>(nans));
  return "";
}

// x rows by r % 6: random; one NaN; one inf; values of 1e38 (squares overflow to inf); only
// subnormal and tiny values (squares underflow); random with the largest finite bf16 once.
std::vector<uint16_t> SpecialRows(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<uint16_t> x = RandomBf16(rows * cols, 1.0f, seed);
  const uint16_t nans[] = {0x7FC0, 0xFFC1, 0x7F81, 0xFFFF};
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = x.data() + r * cols;
    const int64_t at = (r * 37) % cols;
    switch (r % 6) {
      case 1:
        row[at] = nans[r % 4];
        break;
      case 2:
        row[at] = (r & 8) != 0 ? 0xFF80 : 0x7F80;
        break;
      case 3:
        for (int64_t c = 0; c < cols; c += 3) row[c] = (c & 4) != 0 ? 0x7E96 : 0xFE96;  // ±1e38
        break;
      case 4:
        for (int64_t c = 0; c < cols; ++c)
          row[c] = static_cast<uint16_t>((c * 7 + r) % 3 + (c & 1) * 0x8000);
        row[at] = 0x0A00;  // ~6e-33: squares underflow to 0 or subnormal
        break;
      case 5:
        row[at] = 0x7F7F;
        break;  // 3.39e38
      default:
        break;
    }
  }
  return x;
}

void CheckSpecial(int64_t rows, int64_t cols, const RopeSpec* spec, bool weight_specials,
                  uint32_t seed) {
  SCOPED_TRACE(absl::StrFormat("rows %d cols %d%s%s", rows, cols, spec ? " rope" : "",
                               weight_specials ? " weight specials" : ""));
  const std::vector<uint16_t> x = SpecialRows(rows, cols, seed);
  std::vector<uint16_t> w = RandomBf16(cols, 1.0f, seed + 1);
  if (weight_specials) {
    w[cols / 3] = 0x7FC0;
    w[cols - 1] = 0xFF80;
    w[cols / 2] = 0x7F7F;
  }
  std::vector<uint16_t> want(x.size(), kPoison);
  RmsNormParams cpu{rows, cols, x.data(), cols, w.data(), nullptr, 1e-20f, want.data(), cols};
  std::optional<RopeTable> table;
  const std::vector<int64_t> pos = Positions(rows, 5, seed + 2);
  if (spec != nullptr) {
    table.emplace(Table(*spec));
    ASSERT_TRUE(RmsNormRopeCpu({cpu, &*table, pos.data(), false}, nullptr).ok());
  } else {
    ASSERT_TRUE(RmsNormCpu(cpu, nullptr).ok());
  }
  DeviceBuffer dx = ToDevice(x), dw = ToDevice(w), dpos = ToDevice(pos);
  DeviceBuffer dout = ToDevice(std::vector<uint16_t>(x.size(), kPoison));
  RmsNormParams gpu{rows,    cols,   dx.get<uint16_t>(),   cols, dw.get<uint16_t>(),
                    nullptr, 1e-20f, dout.get<uint16_t>(), cols};
  if (spec != nullptr) {
    RmsNormRopeParams p;
    p.norm = gpu;
    p.table = &*table;
    p.positions = dpos.get<int64_t>();
    ASSERT_TRUE(LaunchRmsNormRope(p, nullptr).ok());
  } else {
    ASSERT_TRUE(LaunchRmsNorm(gpu, nullptr).ok());
  }
  EXPECT_EQ(CompareSpecial("special rows", ToHost<uint16_t>(dout, x.size()), want), "");
}

TEST(NormRopeGpuTest, NonFiniteAndExtremeValuesMatchCpu) {
  FS_SKIP_WITHOUT_GPU();
  uint32_t seed = 600;
  // Each launch mode: register-cached decode rows, raw words on 8 lanes / a warp, wide rows with
  // the prefetch, two passes, the scalar path (odd width).
  using Shape = std::array<int64_t, 2>;  // rows, cols
  for (const Shape& s : std::vector<Shape>{
           {12, 512}, {300, 128}, {300, 512}, {300, 1280}, {300, 5120}, {12, 8200}, {12, 517}}) {
    for (bool weight_specials : {false, true}) {
      CheckSpecial(s[0], s[1], nullptr, weight_specials, seed++);
    }
  }
  for (const Shape& s :
       std::vector<Shape>{{12, 512}, {300, 128}, {300, 512}, {300, 4096}, {12, 517}}) {
    for (bool weight_specials : {false, true}) {
      CheckSpecial(s[0], s[1], &kFullYarn, weight_specials, seed++);
    }
  }
}

// ---- Validation (no device needed: the launchers fail before any CUDA call) --------------------

// LaunchRopeCosSin against RopeCosSinCpu, bit for bit: the released tables (YaRN and plain, rd
// 64) and the tiny one, positions 0 .. 2^20 at random plus 1000003, and one long batch that takes
// a grid-stride loop.
TEST(NormRopeGpuTest, RopeCosSinMatchesCpu) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(77);
  for (const RopeSpec* spec : {&kFullYarn, &kFullPlain, &kTinyYarn}) {
    const RopeTable table = Table(*spec);
    for (int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{257}, int64_t{40000}}) {
      std::vector<int64_t> pos(static_cast<size_t>(tokens));
      for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int64_t>(rng() % (1u << 20));
      pos[0] = 0;
      if (tokens > 2) pos[1] = 1000003;
      const int64_t n = tokens * table.rope_dims();
      std::vector<float> want(static_cast<size_t>(n));
      RopeCosSinParams p;
      p.table = &table;
      p.tokens = tokens;
      p.positions = pos.data();
      p.out = want.data();
      ASSERT_TRUE(RopeCosSinCpu(p).ok());
      DeviceBuffer dpos = ToDevice(pos);
      DeviceBuffer dout = ToDevice(std::vector<float>(static_cast<size_t>(n), -7.0f));
      p.positions = dpos.get<int64_t>();
      p.out = dout.get<float>();
      ASSERT_TRUE(LaunchRopeCosSin(p, nullptr).ok());
      const std::vector<float> got = ToHost<float>(dout, static_cast<size_t>(n));
      int64_t diffs = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && diffs++ < 3) {
          std::printf("  cos/sin %ld of %ld tokens: gpu %.9g cpu %.9g\n", long(i), long(tokens),
                      got[i], want[i]);
        }
      }
      EXPECT_EQ(diffs, 0) << "rd " << table.rope_dims() << ", " << tokens << " tokens";
    }
  }
  const RopeTable table = Table(kTinyYarn);
  RopeCosSinParams bad;
  bad.table = &table;
  bad.tokens = 1;
  float out[64];
  bad.out = out;
  EXPECT_EQ(LaunchRopeCosSin(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NormRopeGpuTest, LaunchersRejectBadParamsBeforeLaunching) {
  uint16_t buf[64] = {};
  const uint16_t w[8] = {};
  RmsNormParams n{2, 8, buf, 8, w, nullptr, 1e-20f, buf + 32, 8};
  n.weight_f32 = reinterpret_cast<const float*>(w);  // both weights set
  EXPECT_EQ(LaunchRmsNorm(n, nullptr).code(), absl::StatusCode::kInvalidArgument);

  const RopeTable table = Table(kTinyYarn);
  RopeParams r;
  r.table = &table;
  r.tokens = 1;
  r.heads = 1;
  r.head_dim = 32;
  r.x = buf;
  r.out = buf + 32;
  r.x_stride = r.out_stride = r.x_head_stride = r.out_head_stride = 32;
  EXPECT_EQ(LaunchRope(r, nullptr).code(), absl::StatusCode::kInvalidArgument);  // no positions
  const int64_t pos = 0;
  r.positions = &pos;
  r.head_dim = 16;  // < rd
  EXPECT_EQ(LaunchRope(r, nullptr).code(), absl::StatusCode::kInvalidArgument);

  RmsNormRopeParams f;
  f.norm = {1, 16, buf, 16, w, nullptr, 1e-20f, buf + 32, 16};
  f.table = &table;
  f.positions = &pos;
  EXPECT_EQ(LaunchRmsNormRope(f, nullptr).code(), absl::StatusCode::kInvalidArgument);  // 16 < 32
  f.norm.cols = f.norm.x_stride = f.norm.out_stride = 32;
  f.positions = nullptr;
  EXPECT_EQ(LaunchRmsNormRope(f, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::kernels
