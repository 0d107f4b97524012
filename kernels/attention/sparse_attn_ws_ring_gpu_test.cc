// The warp-specialised wgmma kernel's pipeline (cuda/wgmma_ws_check.h: its producer warpgroup and
// mbarrier ring, with consumers that compute only S = Q·K^T per block) against
// exact CPU products: bf16 inputs are small integers, so every fp32 sum is exact and the
// comparison is bit for bit. -1 and out-of-range entries must give the zero-filled row's 0; a
// CTA that runs several units must reload Q and keep the ring's phases. A failure here points at
// the gather mapping, the ring's stage / phase bookkeeping or the proxy fence rather than at the
// softmax.
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/wgmma_ws_check.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using attention_internal::RunWgmmaWsRingCheck;

constexpr int64_t kHeads = 64;
constexpr int64_t kDim = 512;

struct RingCase {
  int64_t tokens = 0;
  int64_t width = 0;
  int64_t n_kv = 0;
  std::vector<int32_t> q;    // [tokens][64][512] small integers
  std::vector<int32_t> kv;   // [n_kv][512]
  std::vector<int32_t> idx;  // [tokens][width]: rows, -1, or (device-side rejected) >= n_kv
};

// Integers in [-3, 3]; about 1/8 of the entries -1 and 1/16 out of range (n_kv + something);
// block 1 of token 1 entirely -1 when it exists.
RingCase MakeRingCase(int64_t tokens, int64_t width, int64_t n_kv, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> val(-3, 3);
  std::uniform_int_distribution<int64_t> row(0, n_kv - 1);
  std::uniform_int_distribution<int> kind(0, 15);
  RingCase c;
  c.tokens = tokens;
  c.width = width;
  c.n_kv = n_kv;
  c.q.resize(static_cast<size_t>(tokens * kHeads * kDim));
  for (auto& x : c.q) x = val(rng);
  c.kv.resize(static_cast<size_t>(n_kv * kDim));
  for (auto& x : c.kv) x = val(rng);
  c.idx.resize(static_cast<size_t>(tokens * width));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < width; ++e) {
      const int k = kind(rng);
      int32_t v = static_cast<int32_t>(row(rng));
      if (k < 2) v = -1;
      if (k == 2) v = static_cast<int32_t>(n_kv + k);
      if (t == 1 && e >= 64 && e < 128) v = -1;
      c.idx[t * width + e] = v;
    }
  }
  return c;
}

std::vector<uint16_t> ToBf16(const std::vector<int32_t>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = formats::FloatToBf16Bits(static_cast<float>(v[i]));
  return out;
}

// S[t][blk][h][e] as RunWgmmaWsRingCheck writes it.
std::vector<float> CpuS(const RingCase& c) {
  const int64_t blocks = (c.width + kSparseAttnBlock - 1) / kSparseAttnBlock;
  std::vector<float> s(static_cast<size_t>(c.tokens * blocks * 64 * 64), 0.0f);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t h = 0; h < 64; ++h) {
        for (int64_t e = 0; e < 64; ++e) {
          const int64_t pos = b * 64 + e;
          const int32_t r = pos < c.width ? c.idx[t * c.width + pos] : -1;
          int64_t sum = 0;
          if (r >= 0 && r < c.n_kv) {
            for (int64_t i = 0; i < kDim; ++i) {
              sum += int64_t{c.q[(t * kHeads + h) * kDim + i]} * c.kv[r * kDim + i];
            }
          }
          s[((t * blocks + b) * 64 + h) * 64 + e] = static_cast<float>(sum);
        }
      }
    }
  }
  return s;
}

void ExpectRing(const RingCase& c, int ctas, const char* label) {
  const std::vector<uint16_t> q = ToBf16(c.q), kv = ToBf16(c.kv);
  DeviceBuffer dq(q.size() * 2), dkv(kv.size() * 2), didx(c.idx.size() * 4);
  dq.CopyFromHost(q.data(), q.size() * 2);
  dkv.CopyFromHost(kv.data(), kv.size() * 2);
  didx.CopyFromHost(c.idx.data(), c.idx.size() * 4);
  const std::vector<float> want = CpuS(c);
  DeviceBuffer ds(want.size() * 4);
  CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));  // NaN: an unwritten element mismatches
  SparseAttnParams p;
  p.tokens = c.tokens;
  p.heads = kHeads;
  p.head_dim = kDim;
  p.q = dq.get<uint16_t>();
  p.q_head_stride = kDim;
  p.q_stride = kHeads * kDim;
  p.kv = dkv.get<uint16_t>();
  p.n_kv = c.n_kv;
  p.kv_stride = kDim;
  p.indices = didx.get<int32_t>();
  p.indices_stride = c.width;
  p.width = c.width;
  RunWgmmaWsRingCheck(p, ctas, ds.get<float>());
  std::vector<float> got(want.size());
  ds.CopyToHost(got.data(), got.size() * 4);
  const int64_t blocks = (c.width + kSparseAttnBlock - 1) / kSparseAttnBlock;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad < 8) {
      const int64_t e = static_cast<int64_t>(i) % 64, h = (static_cast<int64_t>(i) / 64) % 64;
      const int64_t tb = static_cast<int64_t>(i) / (64 * 64);
      std::printf("  %s: token %ld block %ld head %ld entry %ld: gpu %g want %g\n", label,
                  long(tb / blocks), long(tb % blocks), long(h), long(e), got[i], want[i]);
    }
    ++bad;
  }
  std::printf("%-44s %zu S values, %ld mismatches\n", label, want.size(), long(bad));
  EXPECT_EQ(bad, 0) << label;
}

TEST(WgmmaWsRingTest, ExactSOverTheRing) {
  FS_SKIP_WITHOUT_GPU();
  // Width 300: blocks of 64 × 4 + 44 (partial); one CTA per token, then one CTA for all three
  // tokens (15 ring slots: stages and phases wrap, Q reloaded between units).
  const RingCase c = MakeRingCase(3, 300, 700, 1);
  ExpectRing(c, 3, "3 tokens x w300, 3 CTAs");
  ExpectRing(c, 1, "3 tokens x w300, 1 CTA (3 units)");
  // One block per unit: every unit's block lands in the other stage, phases flip per unit.
  const RingCase one = MakeRingCase(5, 64, 200, 2);
  ExpectRing(one, 1, "5 tokens x w64, 1 CTA (5 units)");
  ExpectRing(one, 2, "5 tokens x w64, 2 CTAs");
  // Width 20: one partial block (44 entries past the width read as -1).
  const RingCase tiny = MakeRingCase(2, 20, 50, 3);
  ExpectRing(tiny, 1, "2 tokens x w20, 1 CTA");
}

}  // namespace
}  // namespace flashserve::kernels
