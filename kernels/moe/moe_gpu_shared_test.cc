// The GPU shared expert (moe_shared_cuda.h):
// - the SwiGLU kernel bit for bit against SwiGluCr (MoeSwiGluRow with a correctly rounded exp) on
//   every bf16 gate value, with and without the clamps, and against MoeSwiGluRow itself except
//   where glibc's expf is not correctly rounded (as the routed experts' check);
// - LaunchMoeSharedExpert (both weight forms) against MoeCpu's shared expert (LinearCpu exact
//   mode + MoeSwiGluRow, moe_test::SharedExpertOutput) with the layer tolerances of
//   moe_gpu_layer_test.cc (only the GEMMs' fp32 order differs);
// - MoeCuda with the shared expert on a forked stream (the default) against the same call in
//   order on one stream: the same bytes, also when the call is captured in a CUDA graph and
//   replayed;
// - the SwiGLU's QDQ'd form (MoeSharedSwiGluParams::qdq) against QdqCpu of its plain output, and
//   the shared expert that uses it (w2 skipping its activation pass) against the same launches
//   with the pass, bit for bit;
// - the validation of its params and of MoeCudaParams::shared.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using moe_test::Poisoned;

bool IsNan(uint16_t b) { return std::isnan(Bf16BitsToFloat(b)); }

TEST(MoeGpuSharedTest, SwiGluIsBitExactOnEveryBf16Gate) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 0x10000;  // one row: every bf16 pattern of g
  struct Row {
    float u;  // constant u of the row (NaN: u = g's pattern reversed, varied values)
    float limit;
  };
  const Row rows[] = {{3.f, 10.f},   {-0.7f, 10.f}, {25.f, 10.f}, {-25.f, 10.f}, {1e-3f, 0.f},
                      {-300.f, 0.f}, {NAN, 10.f},   {NAN, 0.f},   {0.f, 10.f}};
  constexpr int64_t kRows = sizeof(rows) / sizeof(rows[0]);
  // One launch per limit value needs rows of one limit together: launch row by row instead,
  // through padded strides (g, u, a rows of kN + 8, kN + 16, kN + 24).
  const int64_t gs = kN + 8, us = kN + 16, as = kN + 24;
  std::vector<uint16_t> g(kRows * gs, 0), u(kRows * us, 0);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < kN; ++i) {
      g[r * gs + i] = static_cast<uint16_t>(i);
      // Varied u: a deterministic bf16 in [-16, 16) that is never NaN.
      const uint16_t varied =
          FloatToBf16Bits(static_cast<float>((i * 2654435761u) % 8192) / 256.f - 16.f);
      u[r * us + i] = std::isnan(rows[r].u) ? varied : FloatToBf16Bits(rows[r].u);
    }
  }
  DeviceBuffer dg = ToDevice(g), du = ToDevice(u);
  DeviceBuffer da = Poisoned<uint16_t>(kRows * as);
  for (int64_t r = 0; r < kRows; ++r) {
    MoeSharedSwiGluParams p;
    p.m = 1;
    p.inter = kN;
    p.swiglu_limit = rows[r].limit;
    p.g = dg.get<uint16_t>() + r * gs;
    p.g_stride = gs;
    p.u = du.get<uint16_t>() + r * us;
    p.u_stride = us;
    p.a = da.get<uint16_t>() + r * as;
    p.a_stride = as;
    ASSERT_TRUE(LaunchMoeSharedSwiGlu(p, nullptr).ok());
  }
  const auto a = ToHost<uint16_t>(da, kRows * as);
  int64_t expf_differ = 0, nan_inputs = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    int64_t bad = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const uint16_t gb = g[r * gs + i], ub = u[r * us + i], got = a[r * as + i];
      if (IsNan(gb)) {
        ++nan_inputs;
        bad += IsNan(got) ? 0 : 1;
        continue;
      }
      const uint16_t cr = moe_test::SwiGluCr(gb, ub, rows[r].limit, nullptr);
      uint16_t cpu;
      MoeSwiGluRow(&gb, &ub, 1, rows[r].limit, nullptr, &cpu);
      const bool both_nan = IsNan(cr) && IsNan(got);  // inf · 0 and the like: NaN either way
      if (got != cr && !both_nan) {
        if (++bad <= 5) {
          ADD_FAILURE() << "row " << r << " g = " << Bf16BitsToFloat(gb)
                        << " u = " << Bf16BitsToFloat(ub) << ": got 0x" << std::hex << got
                        << ", want 0x" << cr;
        }
      }
      if (cpu != cr && !(IsNan(cpu) && IsNan(cr))) {
        ++expf_differ;
        const float gv = Bf16BitsToFloat(gb);
        EXPECT_NE(std::exp(-gv), static_cast<float>(std::exp(-static_cast<double>(gv))))
            << "g = " << gv << ": MoeSwiGluRow differs without an expf rounding difference";
      }
    }
    EXPECT_EQ(bad, 0) << "row " << r;
    for (int64_t i = kN; i < as; ++i) EXPECT_EQ(a[r * as + i], 0xA5A5) << "padding of row " << r;
  }
  EXPECT_GT(nan_inputs, 0);
  EXPECT_LE(expf_differ, 4 * kRows);
  std::printf(
      "SwiGLU: %ld rows x 65536 gate values bit-exact vs the CR reference; %ld outputs "
      "differ from MoeSwiGluRow by glibc expf rounding\n",
      static_cast<long>(kRows), static_cast<long>(expf_differ));
}

// The qdq form writes QdqCpu of the plain form's output, value for value: gates and ups over
// many binades (the clamps on and off, so products up to ~1e30 without them), NaN inputs, zero
// blocks; padded strides.
TEST(MoeGpuSharedTest, SwiGluQdqIsTheQdqOfTheSwiGlu) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kM = 37, kInter = 2304, kGs = kInter + 8, kAs = kInter + 16;
  std::vector<uint16_t> g(kM * kGs, 0), u(kM * kGs, 0);
  uint32_t r = 3;
  auto next = [&r] {
    r = r * 1664525u + 1013904223u;
    return r >> 8;
  };
  for (int64_t i = 0; i < kM * kGs; ++i) {
    g[i] = static_cast<uint16_t>((0x3000 + next() % 0x2000) | (next() & 0x8000));
    u[i] = static_cast<uint16_t>((0x2800 + next() % 0x3000) | (next() & 0x8000));
  }
  g[5 * kGs + 100] = 0x7FC0;                                 // a NaN gate
  u[6 * kGs + 7] = 0xFFC1;                                   // a NaN up
  for (int64_t c = 64; c < 96; ++c) u[7 * kGs + c] = 0;      // a zero block
  for (int64_t c = 0; c < 32; ++c) u[8 * kGs + c] = 0x7A00;  // ~1.6e35 ups
  DeviceBuffer dg = ToDevice(g), du = ToDevice(u);
  for (float limit : {10.f, 0.f}) {
    DeviceBuffer plain = Poisoned<uint16_t>(kM * kAs), fused = Poisoned<uint16_t>(kM * kAs);
    MoeSharedSwiGluParams p;
    p.m = kM;
    p.inter = kInter;
    p.swiglu_limit = limit;
    p.g = dg.get<uint16_t>();
    p.g_stride = kGs;
    p.u = du.get<uint16_t>();
    p.u_stride = kGs;
    p.a = plain.get<uint16_t>();
    p.a_stride = kAs;
    ASSERT_TRUE(LaunchMoeSharedSwiGlu(p, nullptr).ok());
    p.qdq = true;
    p.a = fused.get<uint16_t>();
    ASSERT_TRUE(LaunchMoeSharedSwiGlu(p, nullptr).ok());
    const auto a = ToHost<uint16_t>(plain, kM * kAs);
    std::vector<uint16_t> want(a.size(), 0xA5A5);
    ASSERT_TRUE(quant::QdqCpu({quant::BlockFormat::kFp8E4m3Ue8m0B32, kM, kInter, a.data(), kAs,
                               want.data(), kAs})
                    .ok());
    const auto got = ToHost<uint16_t>(fused, kM * kAs);
    int64_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0) << "limit " << limit;
    EXPECT_NE(got, a);
  }
  MoeSharedSwiGluParams q;
  q.m = 1;
  q.inter = 48;  // not whole blocks
  q.g = q.u = dg.get<uint16_t>();
  q.g_stride = q.u_stride = q.a_stride = 48;
  q.a = du.get<uint16_t>();
  q.qdq = true;
  EXPECT_EQ(Validate(q).code(), absl::StatusCode::kInvalidArgument);
}

// Where w2's plan reads x in place (M >= 128), the shared expert's SwiGLU writes its output
// QDQ'd and w2 skips its pass; the same launches with the plain SwiGLU and w2's own pass give the
// same bytes. Decode-size M keeps the plain form. An x handed over QDQ'd (x_qdq) too.
TEST(MoeGpuSharedTest, QdqSwiGluKeepsTheSharedExpertsBits) {
  FS_SKIP_WITHOUT_GPU();
  for (const bool fused_w13 : {true, false}) {
    for (const int64_t m : {int64_t{4}, int64_t{1024}}) {
      constexpr int64_t kDim = 5120, kInter = 2304;
      const auto shared = moe_test::RandomSharedExpert(kDim, kInter, 77);
      const auto x = moe_test::RealisticActivations(m, kDim, 78);
      const auto dev = moe_test::UploadSharedExpert(shared, fused_w13);
      DeviceBuffer dx = ToDevice(x), dy1 = Poisoned<uint16_t>(m * kDim),
                   dy2 = Poisoned<uint16_t>(m * kDim);
      auto bytes = MoeSharedExpertWorkspaceBytes(dev->view, m);
      ASSERT_TRUE(bytes.ok());
      DeviceBuffer ws(*bytes);
      MoeSharedExpertParams p;
      p.weights = &dev->view;
      p.m = m;
      p.x = dx.get<uint16_t>();
      p.x_stride = kDim;
      p.y = dy1.get<uint16_t>();
      p.y_stride = kDim;
      p.workspace = ws.get();
      p.workspace_bytes = ws.bytes();
      ASSERT_TRUE(LaunchMoeSharedExpert(p, nullptr).ok());
      p.y = dy2.get<uint16_t>();
      moe_cuda_internal::MoeSharedExpertPlan plan;
      ASSERT_TRUE(moe_cuda_internal::PlanMoeSharedExpert(p, &plan).ok());
      EXPECT_EQ(plan.swiglu.qdq, m >= 128) << m;
      EXPECT_EQ(plan.down.x_qdq, plan.swiglu.qdq);
      plan.swiglu.qdq = false;
      plan.down.x_qdq = false;
      for (int i = 0; i < plan.n_up; ++i) ASSERT_TRUE(LaunchLinearFp8(plan.up[i], nullptr).ok());
      ASSERT_TRUE(LaunchMoeSharedSwiGlu(plan.swiglu, nullptr).ok());
      ASSERT_TRUE(LaunchLinearFp8(plan.down, nullptr).ok());
      EXPECT_EQ(ToHost<uint16_t>(dy1, m * kDim), ToHost<uint16_t>(dy2, m * kDim))
          << "m " << m << (fused_w13 ? " w13" : " w1 + w3");
      // x handed over already QDQ'd (MoeSharedExpertParams::x_qdq): the same bytes again.
      std::vector<uint16_t> xq(x.size());
      ASSERT_TRUE(quant::QdqCpu({quant::BlockFormat::kFp8E4m3Ue8m0B32, m, kDim, x.data(), kDim,
                                 xq.data(), kDim})
                      .ok());
      DeviceBuffer dxq = ToDevice(xq), dy3 = Poisoned<uint16_t>(m * kDim);
      p.x = dxq.get<uint16_t>();
      p.y = dy3.get<uint16_t>();
      p.x_qdq = true;
      ASSERT_TRUE(LaunchMoeSharedExpert(p, nullptr).ok());
      EXPECT_EQ(ToHost<uint16_t>(dy3, m * kDim), ToHost<uint16_t>(dy1, m * kDim))
          << "x_qdq, m " << m << (fused_w13 ? " w13" : " w1 + w3");
    }
  }
}

// MoeSharedExpertParams::split_k: each Linear runs with the forced K splits (the plan says so,
// and the call equals its own launches with those splits, bit for bit); the workspace is sized
// with them; a count out of range is refused.
TEST(MoeGpuSharedTest, ForcedSplitsAndCtasRunEveryLinearWithThem) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kDim = 5120, kInter = 2304;
  const auto shared = moe_test::RandomSharedExpert(kDim, kInter, 91);
  for (const bool fused_w13 : {true, false}) {
    const auto dev = moe_test::UploadSharedExpert(shared, fused_w13);
    for (const int64_t m : {int64_t{1}, int64_t{4}}) {
      const auto x = moe_test::RealisticActivations(m, kDim, 92);
      struct Forced {
        int64_t splits, ctas;
      };
      for (const Forced f : {Forced{1, 0}, Forced{3, 0}, Forced{0, 132}, Forced{0, 66}}) {
        const int64_t splits = f.splits;
        SCOPED_TRACE(::testing::Message() << "m " << m << " splits " << splits << " ctas " << f.ctas
                                          << (fused_w13 ? " w13" : " w1 + w3"));
        DeviceBuffer dx = ToDevice(x), dy1 = Poisoned<uint16_t>(m * kDim),
                     dy2 = Poisoned<uint16_t>(m * kDim);
        auto bytes = MoeSharedExpertWorkspaceBytes(dev->view, m, splits, f.ctas);
        ASSERT_TRUE(bytes.ok());
        DeviceBuffer ws(*bytes);
        MoeSharedExpertParams p;
        p.weights = &dev->view;
        p.m = m;
        p.x = dx.get<uint16_t>();
        p.x_stride = kDim;
        p.y = dy1.get<uint16_t>();
        p.y_stride = kDim;
        p.workspace = ws.get();
        p.workspace_bytes = ws.bytes();
        p.split_k = splits;
        p.stream_ctas = f.ctas;
        ASSERT_TRUE(LaunchMoeSharedExpert(p, nullptr).ok());
        moe_cuda_internal::MoeSharedExpertPlan plan;
        p.y = dy2.get<uint16_t>();
        ASSERT_TRUE(moe_cuda_internal::PlanMoeSharedExpert(p, &plan).ok());
        for (int i = 0; i < plan.n_up; ++i) {
          EXPECT_EQ(plan.up[i].split_k, splits);
          EXPECT_EQ(plan.up[i].stream_ctas, f.ctas);
          ASSERT_TRUE(LaunchLinearFp8(plan.up[i], nullptr).ok());
        }
        EXPECT_EQ(plan.down.split_k, splits);
        EXPECT_EQ(plan.down.stream_ctas, f.ctas);
        ASSERT_TRUE(LaunchMoeSharedSwiGlu(plan.swiglu, nullptr).ok());
        ASSERT_TRUE(LaunchLinearFp8(plan.down, nullptr).ok());
        EXPECT_EQ(ToHost<uint16_t>(dy1, m * kDim), ToHost<uint16_t>(dy2, m * kDim));
      }
    }
    MoeSharedExpertParams bad;
    bad.weights = &dev->view;
    bad.m = 1;
    bad.split_k = kLinearCudaMaxSplits + 1;
    const absl::Status s = Validate(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("split_k"), std::string::npos) << s;
    EXPECT_FALSE(MoeSharedExpertWorkspaceBytes(dev->view, 1, -1).ok());
    EXPECT_FALSE(MoeSharedExpertWorkspaceBytes(dev->view, 1, 0, -1).ok());
    bad.split_k = 0;
    bad.stream_ctas = kLinearCudaMaxStreamCtas + 1;
    EXPECT_NE(Validate(bad).message().find("stream_ctas"), std::string::npos) << Validate(bad);
  }
}

struct SharedCase {
  int64_t dim, inter, m;
  bool fused;
  float swiglu_limit;
};

// LaunchMoeSharedExpert on host x; y written with a padded stride (checked untouched).
std::vector<uint16_t> RunShared(const MoeSharedExpertWeights& w, const std::vector<uint16_t>& x,
                                int64_t m, int64_t dim, float limit) {
  const int64_t x_stride = dim + 24, y_stride = dim + 40;
  std::vector<uint16_t> xp(m * x_stride, 0);
  for (int64_t t = 0; t < m; ++t) std::copy_n(x.begin() + t * dim, dim, xp.begin() + t * x_stride);
  DeviceBuffer dx = ToDevice(xp), dy = Poisoned<uint16_t>(m * y_stride);
  auto bytes = MoeSharedExpertWorkspaceBytes(w, m);
  CHECK_OK(bytes.status());
  DeviceBuffer ws(*bytes);
  MoeSharedExpertParams p;
  p.weights = &w;
  p.swiglu_limit = limit;
  p.m = m;
  p.x = dx.get<uint16_t>();
  p.x_stride = x_stride;
  p.y = dy.get<uint16_t>();
  p.y_stride = y_stride;
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  CHECK_OK(LaunchMoeSharedExpert(p, nullptr));
  const auto padded = ToHost<uint16_t>(dy, m * y_stride);
  std::vector<uint16_t> y(m * dim);
  for (int64_t t = 0; t < m; ++t) {
    std::copy_n(padded.begin() + t * y_stride, dim, y.begin() + t * dim);
    for (int64_t c = dim; c < y_stride; ++c) EXPECT_EQ(padded[t * y_stride + c], 0xA5A5) << t;
  }
  return y;
}

TEST(MoeGpuSharedTest, SharedExpertMatchesCpu) {
  FS_SKIP_WITHOUT_GPU();
  const SharedCase cases[] = {
      {256, 128, 1, false, 10.f},   {256, 128, 1, true, 10.f},   {256, 128, 7, true, 0.f},
      {384, 256, 64, false, 10.f},  {256, 384, 300, true, 10.f}, {5120, 2304, 1, true, 10.f},
      {5120, 2304, 1, false, 10.f}, {5120, 2304, 4, true, 10.f}, {5120, 2304, 4, false, 10.f},
  };
  for (const SharedCase& c : cases) {
    const uint64_t seed = static_cast<uint64_t>(c.dim + c.inter + c.m);
    const auto shared = moe_test::RandomSharedExpert(c.dim, c.inter, seed);
    const auto x = moe_test::RealisticActivations(c.m, c.dim, seed + 1);
    const auto want = moe_test::SharedExpertOutput(shared, x, c.m, c.dim, c.swiglu_limit);
    const auto dev = moe_test::UploadSharedExpert(shared, c.fused);
    const auto got = RunShared(dev->view, x, c.m, c.dim, c.swiglu_limit);
    const moe_test::Diff d = moe_test::Compare(got, want);
    std::printf(
        "shared D %ld Is %ld m %ld %s limit %g: rel-RMS %.2e, max abs %.3g (max |y| %.3g), "
        "%.4f %% within 1 ulp, %.4f %% bit-identical\n",
        static_cast<long>(c.dim), static_cast<long>(c.inter), static_cast<long>(c.m),
        c.fused ? "w13" : "w1+w3", c.swiglu_limit, d.rel_rms, d.max_abs, d.max_ref,
        100.0 * d.within_ulp / d.n, 100.0 * d.identical / d.n);
    EXPECT_GT(d.max_ref, 0.0);
    EXPECT_LE(d.rel_rms, 0x1.0p-8);
    EXPECT_LE(d.max_abs, 0x1.0p-5 * d.max_ref);
    EXPECT_GE(d.within_ulp, 0.95 * d.n);
  }
}

// Both weight forms give the same bits when the plans agree (same GEMM splits): here at m = 300,
// where neither up GEMM splits K, so g and u are the same fp32 sums either way.
TEST(MoeGpuSharedTest, FusedAndSeparateAgreeWithoutSplitK) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kD = 256, kIs = 128, kM = 300;
  const auto shared = moe_test::RandomSharedExpert(kD, kIs, 77);
  const auto x = moe_test::RealisticActivations(kM, kD, 78);
  const auto fused = moe_test::UploadSharedExpert(shared, true);
  const auto separate = moe_test::UploadSharedExpert(shared, false);
  const auto plan13 = PlanLinearCuda(kM, 2 * kIs, kD), plan1 = PlanLinearCuda(kM, kIs, kD);
  if (plan13.splits != plan1.splits) GTEST_SKIP() << "plans differ in K splits";
  EXPECT_EQ(RunShared(fused->view, x, kM, kD, 10.f), RunShared(separate->view, x, kM, kD, 10.f));
}

// The forked shared expert (MoeCudaParams::shared_concurrent, the default) joins before the
// combine: y must be byte-identical to the in-order call, on the legacy stream, on a created
// stream and in a captured graph replayed several times (the fork / join events inside it), at a
// decode size and a size with many tiles.
// Gate logits in [-2, 2) for E 8 and bf16 x in [-1, 1) from a 64-bit LCG seeded with `seed`.
void LayerInputs(int64_t m, int64_t dim, uint64_t seed, std::vector<float>* logits,
                 std::vector<uint16_t>* x) {
  logits->resize(m * 8);
  x->resize(m * dim);
  uint64_t r = seed;
  auto next = [&r] {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(r >> 11) / 9007199254740992.0;
  };
  for (float& v : *logits) v = static_cast<float>(4.0 * next() - 2.0);
  for (uint16_t& v : *x) v = FloatToBf16Bits(static_cast<float>(2.0 * next() - 1.0));
}

TEST(MoeGpuSharedTest, ConcurrentSharedExpertGivesTheInOrderBytes) {
  FS_SKIP_WITHOUT_GPU();
  moe_test::LayerSpec spec;  // E 8, D 256, I 128
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  constexpr int64_t kD = 256, kIs = 256, kTopK = 2;
  const auto fused = moe_test::UploadSharedExpert(moe_test::RandomSharedExpert(kD, kIs, 17), true);
  for (int64_t m : {int64_t{1}, int64_t{300}}) {
    std::vector<float> logits;
    std::vector<uint16_t> x;
    LayerInputs(m, kD, 99 + m, &logits, &x);
    DeviceBuffer dl = ToDevice(logits), dx = ToDevice(x);
    DeviceBuffer ws(*MoeCudaWorkspaceBytes(dev->view, m, kTopK, &fused->view));
    DeviceBuffer y_seq(m * kD * 2), y_con(m * kD * 2);
    auto params = [&](bool concurrent, DeviceBuffer& y) {
      MoeCudaParams p;
      p.weights = &dev->view;
      p.options.top_k = kTopK;
      p.m = m;
      p.logits = dl.get<float>();
      p.x = dx.get<uint16_t>();
      p.x_stride = kD;
      p.y = y.get<uint16_t>();
      p.y_stride = kD;
      p.shared = &fused->view;
      p.shared_concurrent = concurrent;
      p.workspace = ws.get();
      p.workspace_bytes = ws.bytes();
      return p;
    };
    ASSERT_TRUE(MoeCuda(params(false, y_seq), nullptr).ok());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> want = ToHost<uint16_t>(y_seq, m * kD);
    int64_t nonzero = 0;
    for (uint16_t v : want) nonzero += (v & 0x7FFF) != 0 ? 1 : 0;
    ASSERT_GT(nonzero, m * kD / 2) << "m " << m;

    CUDA_CHECK(cudaMemset(y_con.get(), 0xFF, y_con.bytes()));
    ASSERT_TRUE(MoeCuda(params(true, y_con), nullptr).ok());
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(ToHost<uint16_t>(y_con, m * kD), want) << "legacy stream, m " << m;

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMemsetAsync(y_con.get(), 0xFF, y_con.bytes(), stream));
    ASSERT_TRUE(MoeCuda(params(true, y_con), stream).ok());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(ToHost<uint16_t>(y_con, m * kD), want) << "created stream, m " << m;

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    ASSERT_TRUE(MoeCuda(params(true, y_con), stream).ok());
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      CUDA_CHECK(cudaMemsetAsync(y_con.get(), 0xFF, y_con.bytes(), stream));
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(ToHost<uint16_t>(y_con, m * kD), want) << "graph replay " << rep << ", m " << m;
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

// The caller runs the shared expert on its own forked stream (as a layer schedule does, starting
// it right after the FFN norm) and passes its output with the event that marks it written
// (MoeCudaParams::shared_y + shared_y_ready): the same bytes as MoeCuda running it, on a stream
// and under graph capture, with the output buffer poisoned before each run. Both fork points:
// before MoeCuda, and from MoeCudaParams::after_up once the up stage is enqueued (called once).
TEST(MoeGpuSharedTest, CallerForkedSharedExpertWithReadyEvent) {
  FS_SKIP_WITHOUT_GPU();
  moe_test::LayerSpec spec;  // E 8, D 256, I 128
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  constexpr int64_t kD = 256, kIs = 256, kTopK = 2;
  const auto fused = moe_test::UploadSharedExpert(moe_test::RandomSharedExpert(kD, kIs, 23), true);
  for (int64_t m : {int64_t{1}, int64_t{40}}) {
    std::vector<float> logits;
    std::vector<uint16_t> x;
    LayerInputs(m, kD, 7 + m, &logits, &x);
    DeviceBuffer dl = ToDevice(logits), dx = ToDevice(x);
    DeviceBuffer ws(*MoeCudaWorkspaceBytes(dev->view, m, kTopK, &fused->view));
    DeviceBuffer sws(*MoeSharedExpertWorkspaceBytes(fused->view, m));
    DeviceBuffer sy(m * kD * 2), y_ref(m * kD * 2), y(m * kD * 2);
    MoeCudaParams p;
    p.weights = &dev->view;
    p.options.top_k = kTopK;
    p.m = m;
    p.logits = dl.get<float>();
    p.x = dx.get<uint16_t>();
    p.x_stride = kD;
    p.y_stride = kD;
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();
    MoeCudaParams ref = p;
    ref.shared = &fused->view;
    ref.y = y_ref.get<uint16_t>();
    ASSERT_TRUE(MoeCuda(ref, nullptr).ok());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> want = ToHost<uint16_t>(y_ref, m * kD);

    cudaStream_t stream, side;
    cudaEvent_t forked, ready;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    // Forks the shared expert from `from` onto `side`, its end marked by `ready`.
    auto fork_shared = [&](cudaStream_t from) {
      CUDA_CHECK(cudaEventRecord(forked, from));
      CUDA_CHECK(cudaStreamWaitEvent(side, forked, 0));
      MoeSharedExpertParams sp;
      sp.weights = &fused->view;
      sp.m = m;
      sp.x = dx.get<uint16_t>();
      sp.x_stride = kD;
      sp.y = sy.get<uint16_t>();
      sp.y_stride = kD;
      sp.workspace = sws.get();
      sp.workspace_bytes = sws.bytes();
      ASSERT_TRUE(LaunchMoeSharedExpert(sp, side).ok());
      CUDA_CHECK(cudaEventRecord(ready, side));
    };
    int after_up_calls = 0;
    auto enqueue = [&](bool after_up) {
      CUDA_CHECK(cudaMemsetAsync(y.get(), 0xFF, y.bytes(), stream));
      CUDA_CHECK(cudaMemsetAsync(sy.get(), 0xFF, sy.bytes(), stream));
      MoeCudaParams q = p;
      if (after_up) {
        q.after_up = [&](cudaStream_t s) {
          EXPECT_EQ(s, stream);
          ++after_up_calls;
          fork_shared(s);
        };
      } else {
        fork_shared(stream);
      }
      q.shared_y = sy.get<uint16_t>();
      q.shared_y_stride = kD;
      q.shared_y_ready = ready;
      q.y = y.get<uint16_t>();
      ASSERT_TRUE(MoeCuda(q, stream).ok());
    };
    for (bool after_up : {false, true}) {
      after_up_calls = 0;
      enqueue(after_up);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(ToHost<uint16_t>(y, m * kD), want)
          << "streams, m " << m << ", after_up " << after_up;
      EXPECT_EQ(after_up_calls, after_up ? 1 : 0);

      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      enqueue(after_up);
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int rep = 0; rep < 3; ++rep) {
        CUDA_CHECK(cudaGraphLaunch(exec, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        EXPECT_EQ(ToHost<uint16_t>(y, m * kD), want)
            << "graph replay " << rep << ", m " << m << ", after_up " << after_up;
      }
      CUDA_CHECK(cudaGraphExecDestroy(exec));
      CUDA_CHECK(cudaGraphDestroy(graph));
    }
    CUDA_CHECK(cudaEventDestroy(forked));
    CUDA_CHECK(cudaEventDestroy(ready));
    CUDA_CHECK(cudaStreamDestroy(side));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

TEST(MoeGpuSharedTest, ValidationNamesTheField) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kD = 256, kIs = 128;
  const auto shared = moe_test::RandomSharedExpert(kD, kIs, 5);
  const auto sep = moe_test::UploadSharedExpert(shared, false);
  const auto fused = moe_test::UploadSharedExpert(shared, true);
  auto expect_error = [](const absl::Status& s, const char* field) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.ToString().find(field), std::string::npos) << s;
  };
  MoeSharedExpertWeights w = sep->view;
  w.w2 = nullptr;
  expect_error(MoeSharedExpertWorkspaceBytes(w, 4).status(), "w2");
  w = sep->view;
  w.w13 = fused->view.w13;
  expect_error(MoeSharedExpertWorkspaceBytes(w, 4).status(), "w13");
  w = sep->view;
  w.w3 = nullptr;
  expect_error(MoeSharedExpertWorkspaceBytes(w, 4).status(), "w3");
  w = sep->view;
  w.w1 = sep->view.w2;  // [D, Is] where [Is, D] is due
  expect_error(MoeSharedExpertWorkspaceBytes(w, 4).status(), "w1");
  w = fused->view;
  w.w13 = sep->view.w1;  // [Is, D] where [2·Is, D] is due
  expect_error(MoeSharedExpertWorkspaceBytes(w, 4).status(), "w13");
  EXPECT_FALSE(MoeSharedExpertWorkspaceBytes(sep->view, -1).ok());

  DeviceBuffer x(4 * kD * 2), y(4 * kD * 2);
  auto bytes = MoeSharedExpertWorkspaceBytes(fused->view, 4);
  ASSERT_TRUE(bytes.ok());
  EXPECT_LE(*bytes, *MoeSharedExpertWorkspaceBytes(fused->view, 5));
  DeviceBuffer ws(*bytes);
  MoeSharedExpertParams p;
  p.weights = &fused->view;
  p.m = 4;
  p.x = x.get<uint16_t>();
  p.x_stride = kD;
  p.y = y.get<uint16_t>();
  p.y_stride = kD;
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  EXPECT_TRUE(Validate(p).ok());
  MoeSharedExpertParams q = p;
  q.workspace_bytes = *bytes - 1;
  expect_error(Validate(q), "workspace");
  q = p;
  q.x_stride = kD - 1;
  expect_error(Validate(q), "x_stride");
  q = p;
  q.y = nullptr;
  expect_error(LaunchMoeSharedExpert(q, nullptr), "y");
  q = p;
  q.weights = nullptr;
  expect_error(Validate(q), "weights");
  q = p;
  q.m = 0;
  q.x = nullptr;
  q.workspace = nullptr;
  EXPECT_TRUE(LaunchMoeSharedExpert(q, nullptr).ok());

  MoeSharedSwiGluParams s;
  s.m = 2;
  s.inter = 8;
  s.g = p.x;
  s.u = p.x;
  s.a = p.y;
  s.g_stride = s.u_stride = s.a_stride = 8;
  EXPECT_TRUE(Validate(s).ok());
  s.u_stride = 7;
  expect_error(Validate(s), "u_stride");

  // MoeCudaParams::shared: D must match the experts', and not together with shared_y.
  moe_test::LayerSpec spec;  // E 8, D 256, I 128
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  EXPECT_TRUE(MoeCudaWorkspaceBytes(dev->view, 4, 2, &fused->view).ok());
  EXPECT_GT(*MoeCudaWorkspaceBytes(dev->view, 4, 2, &fused->view),
            *MoeCudaWorkspaceBytes(dev->view, 4, 2));
  const auto other = moe_test::UploadSharedExpert(moe_test::RandomSharedExpert(384, kIs, 6), true);
  expect_error(MoeCudaWorkspaceBytes(dev->view, 4, 2, &other->view).status(), "shared");
  DeviceBuffer logits(4 * 8 * 4), cws(*MoeCudaWorkspaceBytes(dev->view, 4, 2, &fused->view));
  MoeCudaParams mp;
  mp.weights = &dev->view;
  mp.options.top_k = 2;
  mp.m = 4;
  mp.logits = logits.get<float>();
  mp.x = x.get<uint16_t>();
  mp.x_stride = kD;
  mp.y = y.get<uint16_t>();
  mp.y_stride = kD;
  mp.shared = &fused->view;
  mp.workspace = cws.get();
  mp.workspace_bytes = cws.bytes();
  EXPECT_TRUE(Validate(mp).ok());
  MoeCudaParams mq = mp;
  mq.workspace_bytes = *MoeCudaWorkspaceBytes(dev->view, 4, 2);
  expect_error(Validate(mq), "workspace");
  mq = mp;
  mq.shared_y = x.get<uint16_t>();
  mq.shared_y_stride = kD;
  expect_error(Validate(mq), "shared");
  mq = mp;
  mq.shared = &other->view;
  expect_error(Validate(mq), "shared");
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels
