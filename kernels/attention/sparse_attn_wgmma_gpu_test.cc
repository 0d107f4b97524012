// The wgmma path's primitives in one CTA (cuda/wgmma_check.h) against exact CPU products: bf16
// inputs are small integers, so every fp32 sum is exact whatever the tensor cores' order, and the
// comparison is bit for bit. S = Q·K^T (64 × 64 × 512, K-major swizzled A and B from shared
// memory) and O = P·V (64 × 512 × 64, P from registers, V = the same tile read MN-major). A
// failure here points at the descriptors / swizzle / fragment layouts rather than the softmax.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/attention/cuda/wgmma_check.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using attention_internal::RunWgmmaPrimitiveCheck;
using attention_internal::WgmmaPvLeadingOffset;
using attention_internal::WgmmaPvStrideOffset;

constexpr int kRows = 64;
constexpr int kDim = 512;

struct Inputs {
  std::vector<uint16_t> q, kv, p;  // bf16 [64][512], [64][512], [64][64]
  std::vector<float> qf, kvf, pf;  // the same values as float
};

// Integers in [-range, range] (exact in bf16); `kind` 1 makes P the identity (O row h = V row h)
// and 2 makes K the identity on dims 0..63 (S[h][e] = q[h][e]), which shows permutations.
Inputs MakeInputs(uint32_t seed, int range, int kind) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(-range, range);
  Inputs in;
  auto fill = [&](std::vector<uint16_t>* bits, std::vector<float>* vals, size_t n) {
    bits->resize(n);
    vals->resize(n);
    for (size_t i = 0; i < n; ++i) {
      (*vals)[i] = static_cast<float>(pick(rng));
      (*bits)[i] = formats::FloatToBf16Bits((*vals)[i]);
    }
  };
  fill(&in.q, &in.qf, kRows * kDim);
  fill(&in.kv, &in.kvf, kRows * kDim);
  fill(&in.p, &in.pf, kRows * kRows);
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kRows; ++c) {
      if (kind == 1) in.pf[r * kRows + c] = r == c ? 1.0f : 0.0f;
      if (kind == 2) in.kvf[r * kDim + c] = r == c ? 1.0f : 0.0f;
    }
    if (kind == 2) {
      for (int c = kRows; c < kDim; ++c) in.kvf[r * kDim + c] = 0.0f;
    }
  }
  for (size_t i = 0; i < in.p.size(); ++i) in.p[i] = formats::FloatToBf16Bits(in.pf[i]);
  for (size_t i = 0; i < in.kv.size(); ++i) in.kv[i] = formats::FloatToBf16Bits(in.kvf[i]);
  return in;
}

struct Outputs {
  std::vector<float> s;        // [64][64]
  std::vector<float> o;        // [64][512]
  std::vector<float> s_split;  // [64][64], the split-K S (RunCpu: a copy of s)
};

Outputs RunGpu(const Inputs& in, uint32_t lbo, uint32_t sbo) {
  DeviceBuffer dq(in.q.size() * 2), dkv(in.kv.size() * 2), dp(in.p.size() * 2),
      ds(kRows * kRows * 4), dout(kRows * kDim * 4), dsk(kRows * kRows * 4);
  dq.CopyFromHost(in.q.data(), in.q.size() * 2);
  dkv.CopyFromHost(in.kv.data(), in.kv.size() * 2);
  dp.CopyFromHost(in.p.data(), in.p.size() * 2);
  CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));  // NaN: an unwritten element mismatches
  CUDA_CHECK(cudaMemset(dout.get(), 0xFF, dout.bytes()));
  CUDA_CHECK(cudaMemset(dsk.get(), 0xFF, dsk.bytes()));
  RunWgmmaPrimitiveCheck(dq.get<uint16_t>(), dkv.get<uint16_t>(), dp.get<uint16_t>(),
                         ds.get<float>(), dout.get<float>(), dsk.get<float>(), lbo, sbo);
  Outputs out;
  out.s.resize(kRows * kRows);
  out.o.resize(kRows * kDim);
  out.s_split.resize(kRows * kRows);
  ds.CopyToHost(out.s.data(), ds.bytes());
  dout.CopyToHost(out.o.data(), dout.bytes());
  dsk.CopyToHost(out.s_split.data(), dsk.bytes());
  return out;
}

Outputs RunCpu(const Inputs& in) {
  Outputs out;
  out.s.assign(kRows * kRows, 0.0f);
  out.o.assign(kRows * kDim, 0.0f);
  for (int h = 0; h < kRows; ++h) {
    for (int e = 0; e < kRows; ++e) {
      double acc = 0;
      for (int i = 0; i < kDim; ++i) acc += double(in.qf[h * kDim + i]) * in.kvf[e * kDim + i];
      out.s[h * kRows + e] = static_cast<float>(acc);
    }
    for (int i = 0; i < kDim; ++i) {
      double acc = 0;
      for (int e = 0; e < kRows; ++e) acc += double(in.pf[h * kRows + e]) * in.kvf[e * kDim + i];
      out.o[h * kDim + i] = static_cast<float>(acc);
    }
  }
  out.s_split = out.s;
  return out;
}

// Counts bit mismatches of a [rows][cols] matrix and prints the first few with their position,
// plus the mismatch count per 8 × 8 tile row / column band (a misplaced atom shows as bands).
int64_t CountMismatches(const std::vector<float>& got, const std::vector<float>& want, int cols,
                        const char* label) {
  int64_t bad = 0;
  std::vector<int64_t> by_row8(kRows / 8, 0), by_col8(cols / 8, 0);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) == 0) continue;
    const int r = static_cast<int>(i) / cols, c = static_cast<int>(i) % cols;
    if (bad < 8) {
      std::printf("  %s mismatch at [%d][%d]: gpu %g want %g\n", label, r, c, got[i], want[i]);
    }
    ++bad;
    ++by_row8[r / 8];
    ++by_col8[c / 8];
  }
  std::printf("%s: %ld of %zu elements differ", label, static_cast<long>(bad), got.size());
  if (bad > 0) {
    std::printf("; per 8-row band:");
    for (int64_t n : by_row8) std::printf(" %ld", static_cast<long>(n));
    std::printf("; per 8-column band:");
    for (int64_t n : by_col8) std::printf(" %ld", static_cast<long>(n));
  }
  std::printf("\n");
  return bad;
}

TEST(WgmmaPrimitivesTest, QkAndPvExactOnIntegers) {
  FS_SKIP_WITHOUT_GPU();
  for (int kind : {0, 1, 2}) {
    const Inputs in = MakeInputs(40 + kind, 3, kind);
    const Outputs want = RunCpu(in);
    const Outputs got = RunGpu(in, WgmmaPvLeadingOffset(), WgmmaPvStrideOffset());
    std::printf("case %d (%s):\n", kind,
                kind == 0   ? "random"
                : kind == 1 ? "P = identity"
                            : "K = identity on dims 0..63");
    EXPECT_EQ(CountMismatches(got.s, want.s, kRows, "S = Q.K^T (wgmma m64n32k16 SS)"), 0);
    EXPECT_EQ(CountMismatches(got.s_split, want.s_split, kRows,
                              "S = Q.K^T split-K (wgmma m64n64k16 SS + exchange)"),
              0);
    const int64_t pv_bad =
        CountMismatches(got.o, want.o, kDim, "O = P.V (wgmma m64n256k16 RS, trans-b)");
    EXPECT_EQ(pv_bad, 0);
    if (pv_bad > 0) {
      // Diagnosis for the integrator's first run: the other reading of the MN-major offsets.
      const Outputs alt = RunGpu(in, WgmmaPvStrideOffset(), WgmmaPvLeadingOffset());
      std::printf("  with LBO %u / SBO %u swapped: ", WgmmaPvStrideOffset(),
                  WgmmaPvLeadingOffset());
      CountMismatches(alt.o, want.o, kDim, "O = P.V (swapped offsets)");
    }
  }
}

// Larger integers: S sums reach ±512·8·8 = ±32768 and P·V ±64·8·8, still exact in fp32.
TEST(WgmmaPrimitivesTest, ExactOnWiderIntegers) {
  FS_SKIP_WITHOUT_GPU();
  const Inputs in = MakeInputs(99, 8, 0);
  const Outputs want = RunCpu(in);
  const Outputs got = RunGpu(in, WgmmaPvLeadingOffset(), WgmmaPvStrideOffset());
  EXPECT_EQ(CountMismatches(got.s, want.s, kRows, "S (range 8)"), 0);
  EXPECT_EQ(CountMismatches(got.s_split, want.s_split, kRows, "S split-K (range 8)"), 0);
  EXPECT_EQ(CountMismatches(got.o, want.o, kDim, "O (range 8)"), 0);
}

// The row form's decoders (kernels/attention/README.md "FP4 table decode") give quant's decoded
// bits for every code pattern and scale byte: FP4 compressed rows and FP8 window rows.
TEST(WgmmaPrimitivesTest, RowDecodersEqualQuantDecoders) {
  FS_SKIP_WITHOUT_GPU();
  EXPECT_EQ(attention_internal::CountRowDecodeMismatches(false), 0) << "FP4 + E4M3 per 16";
  EXPECT_EQ(attention_internal::CountRowDecodeMismatches(true), 0) << "FP8 + UE8M0 per 32";
}

}  // namespace
}  // namespace flashserve::kernels
