// kernels_gemm_gpu_test, the weight-streaming kernel (LinearCudaKernel::kStream, tile_rows 8;
// cuda/linear_fp8_stream.cuh) beyond the shared grids of gemm_gpu_test.cc:
// - Identity weights first (y = x exactly, any split): a wrong K position, row or swizzle shows
//   up as the first mismatching (row, column), from one 32-block upwards.
// - Exact-arithmetic inputs bit for bit with LinearCpu: x with an odd stride (the scalar load
//   path), a K that ends inside a 128-wide unit, 1 .. 40 rows (one and two n8 tiles, several
//   16-row tiles), bias, bf16 and f32 outputs, 1 .. 32 splits.
// - Determinism: the same bits over repeated calls and over replays of a CUDA graph (one kernel
//   node), with the workspace overwritten and shared with another Linear between replays (the
//   split-K counters must reset and tolerate any contents).
// - Long K (many ring and slab wraps): exact-arithmetic inputs bit for bit with LinearCpu over
//   1 .. 26 splits; random inputs within the bound, each row's bits independent of M.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_gpu_test_util.h"
#include "kernels/gemm/gemm_test_util.h"

namespace flashserve::kernels {
namespace {

using gemm_test::GpuRunOptions;
using gemm_test::HostLinear;
using gemm_test::Rng;

std::unique_ptr<PreparedLinear> Prepare(const HostLinear& h) {
  return gemm_test::PrepareCodesOnly(h);
}
DeviceFp8Linear Upload(const PreparedLinear& w) { return gemm_test::UploadOrDie(w); }

// Bits of gpu [m, n] (row stride y_stride) against want [m, n]; the first 5 mismatches named.
// +0 and -0 are equal (an identity product turns a -0 activation into +0), NaN equals NaN.
int64_t CountMismatches(const std::vector<float>& gpu, int64_t y_stride,
                        const std::vector<float>& want, int64_t m, int64_t n,
                        const std::string& what) {
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const float g = gpu[r * y_stride + j], c = want[r * n + j];
      if ((std::isnan(g) && std::isnan(c)) || (g == 0.0f && c == 0.0f)) continue;
      if (std::memcmp(&g, &c, 4) != 0 && ++bad <= 5) {
        ADD_FAILURE() << what << ": y[" << r << "][" << j << "] gpu " << g << " want " << c;
      }
    }
  }
  return bad;
}

ThreadPool* Pool() {
  static ThreadPool* pool = new ThreadPool(std::max(1u, std::thread::hardware_concurrency()));
  return pool;
}

std::vector<float> CpuExact(const PreparedLinear& w, const std::vector<uint16_t>& x, int64_t m,
                            int64_t x_stride, bool f32_out) {
  std::vector<float> y;
  gemm_test::RunOptions o;
  o.mode = LinearMode::kExact;
  o.f32_out = f32_out;
  o.pool = Pool();
  const absl::Status s = gemm_test::RunLinear(w, x, {}, m, x_stride, o, &y);
  CHECK(s.ok()) << s;
  return y;
}

class GemmGpuStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { FS_SKIP_WITHOUT_GPU(); }
};

// W = identity (E4M3 1.0, scale 2^0) of size n × k (n <= k: the first n columns), x small
// integers that QDQ keeps exactly: y[r][j] = x[r][j].
TEST_F(GemmGpuStreamTest, IdentityWeightSmallCasesFirst) {
  struct Case {
    int64_t n, k, m;
  };
  const Case cases[] = {{32, 32, 1},   {128, 128, 1},  {256, 256, 1},   {256, 256, 2},
                        {256, 256, 8}, {256, 256, 9},  {256, 256, 16},  {160, 160, 5},
                        {96, 416, 16}, {384, 384, 13}, {1280, 1280, 3}, {130, 2304, 33}};
  for (const Case& c : cases) {
    HostLinear h;
    h.format = WeightFormat::kFp8Block32;
    h.n = c.n;
    h.k = c.k;
    h.weight.assign(c.n * c.k, 0);
    for (int64_t i = 0; i < c.n; ++i) h.weight[i * c.k + i] = 0x38;  // E4M3 1.0
    h.scale.assign(((c.n + 31) / 32) * (c.k / 32), 127);             // 2^0
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    std::vector<uint16_t> x(c.m * c.k);
    std::vector<float> want(c.m * c.n);
    for (int64_t r = 0; r < c.m; ++r) {
      for (int64_t j = 0; j < c.k; ++j) {
        // Distinct neighbours within a row and between rows: -3 .. 3, never a long constant run.
        const float v = static_cast<float>((r * 5 + j * 3 + j / 7) % 7 - 3);
        x[r * c.k + j] = formats::FloatToBf16Bits(v);
        if (j < c.n) want[r * c.n + j] = v;
      }
    }
    for (int64_t split : {0, 1, 2, 3}) {
      const std::string what = "identity N " + std::to_string(c.n) + " K " + std::to_string(c.k) +
                               " M " + std::to_string(c.m) + " split " + std::to_string(split);
      const std::vector<float> gpu = gemm_test::RunLinearGpu(
          d.view(), x, c.m, c.k, {true, 0, kLinearCudaStreamRows, split, false, true});
      EXPECT_EQ(CountMismatches(gpu, c.n, want, c.m, c.n, what), 0) << what;
    }
  }
}

TEST_F(GemmGpuStreamTest, ExactArithmeticOddStridesPartialUnitsManySplits) {
  Rng rng(41);
  struct Dims {
    int64_t n, k;
  };
  int runs = 0;
  // K = 1312: 10 whole 128-wide units and one of a single 32-block; K = 32: a single block.
  for (const Dims& s : {Dims{200, 1312}, Dims{40, 32}, Dims{1280, 5120}}) {
    std::vector<int> base;
    const HostLinear h = gemm_test::ExactArithFp8(s.n, s.k, 118, 132, true, rng, &base);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    const int64_t x_stride = s.k + 3;  // odd: the kernel's scalar x loads
    for (int64_t m : {1, 5, 8, 9, 16, 17, 40}) {
      const std::vector<uint16_t> x = gemm_test::SmallIntActivations(m, s.k, x_stride, 2, rng);
      ASSERT_TRUE(gemm_test::ExactPremiseHolds(h, base, x, m, x_stride));
      for (bool f32 : {false, true}) {
        const std::vector<float> cpu = CpuExact(*w, x, m, x_stride, f32);
        for (int64_t split : {0, 2, 5, 11, 32}) {
          const int64_t y_stride = s.n + 5;
          const std::string what = "N " + std::to_string(s.n) + " K " + std::to_string(s.k) +
                                   " M " + std::to_string(m) + (f32 ? " f32" : " bf16") +
                                   " split " + std::to_string(split);
          const std::vector<float> gpu = gemm_test::RunLinearGpu(
              d.view(), x, m, x_stride, {f32, y_stride, kLinearCudaStreamRows, split, false, true});
          EXPECT_EQ(CountMismatches(gpu, y_stride, cpu, m, s.n, what), 0) << what;
          int64_t written_pad = 0;
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t j = s.n; j < y_stride; ++j) {
              written_pad += std::isnan(gpu[r * y_stride + j]) ? 0 : 1;
            }
          }
          EXPECT_EQ(written_pad, 0) << what << ": padding columns of y written";
          ++runs;
        }
      }
    }
  }
  std::printf("stream kernel: %d exact-arithmetic runs bit-identical to LinearCpu\n", runs);
}

TEST_F(GemmGpuStreamTest, DeterministicOverCallsAndGraphReplays) {
  Rng rng(43);
  // wq_a (10 column tiles: 20 splits) and a second Linear with other tiles and splits sharing
  // the workspace.
  const HostLinear ha = gemm_test::RandomLinear(WeightFormat::kFp8Block32, 1280, 5120, true, rng);
  const HostLinear hb = gemm_test::RandomLinear(WeightFormat::kFp8Block32, 512, 2304, false, rng);
  const auto wa = Prepare(ha);
  const auto wb = Prepare(hb);
  const DeviceFp8Linear da = Upload(*wa);
  const DeviceFp8Linear db = Upload(*wb);
  // The stream kernel forced (tile_rows 8): the automatic plan takes it only at decode sizes; and
  // the same plans on the TMA-ring variant (stream_tma, M <= 8: the ring kernel, then the
  // reduction kernel as its programmatic dependent — two graph nodes).
  constexpr int64_t kTile = kLinearCudaStreamRows;
  const std::pair<int64_t, bool> cases[] = {{1, false}, {16, false}, {1, true}, {8, true}};
  for (const auto& c : cases) {
    const int64_t m = c.first;  // named copies: a lambda below captures them
    const bool ring = c.second;
    SCOPED_TRACE("M " + std::to_string(m) + (ring ? " ring" : ""));
    const LinearCudaPlan plan = PlanLinearCuda(m, 1280, 5120, kTile);
    ASSERT_EQ(plan.kernel, LinearCudaKernel::kStream);
    ASSERT_GT(plan.splits, 1);
    ASSERT_NE(PlanLinearCuda(m, 512, 2304, kTile).splits, plan.splits);
    const DeviceBuffer xa = ToDevice(gemm_test::RandomActivations(m, 5120, 5120, rng));
    const DeviceBuffer xb = ToDevice(gemm_test::RandomActivations(m, 2304, 2304, rng));
    DeviceBuffer ya(static_cast<size_t>(m * 1280 * 2)), yb(static_cast<size_t>(m * 512 * 2));
    DeviceBuffer ws(std::max(LinearCudaWorkspaceBytes(da.view(), m, kTile),
                             LinearCudaWorkspaceBytes(db.view(), m, kTile)));
    CUDA_CHECK(cudaMemset(ws.get(), 0x5A, ws.bytes()));
    auto params = [&](const DeviceFp8Linear& d, const DeviceBuffer& x, DeviceBuffer& y) {
      LinearCudaParams p;
      p.weight = &d.view();
      p.m = m;
      p.x_bf16 = x.get<uint16_t>();
      p.x_stride = d.view().k;
      p.y_bf16 = y.get<uint16_t>();
      p.y_stride = d.view().n;
      p.workspace = ws.get();
      p.workspace_bytes = ws.bytes();
      p.tile_rows = kTile;
      p.stream_tma = ring;
      return p;
    };
    const LinearCudaParams pa = params(da, xa, ya), pb = params(db, xb, yb);
    ASSERT_TRUE(LaunchLinearFp8(pa, nullptr).ok());
    const std::vector<uint16_t> ref = ToHost<uint16_t>(ya, m * 1280);
    ASSERT_TRUE(LaunchLinearFp8(pb, nullptr).ok());
    const std::vector<uint16_t> ref_b = ToHost<uint16_t>(yb, m * 512);
    // Against LinearCpu: within one bf16 ulp nearly everywhere (the bound tests are elsewhere).
    {
      std::vector<uint16_t> xh = ToHost<uint16_t>(xa, m * 5120);
      const std::vector<float> cpu = CpuExact(*wa, xh, m, 5120, false);
      int64_t close = 0;
      for (int64_t i = 0; i < m * 1280; ++i) {
        const float g = formats::Bf16BitsToFloat(ref[i]);
        close += std::fabs(g - cpu[i]) <= gemm_test::Bf16Ulp(std::fabs(cpu[i])) ? 1 : 0;
      }
      EXPECT_GE(close, m * 1280 * 99 / 100);
    }
    for (int rep = 0; rep < 4; ++rep) {
      CUDA_CHECK(cudaMemset(ya.get(), 0xFF, ya.bytes()));
      ASSERT_TRUE(LaunchLinearFp8(pa, nullptr).ok());
      ASSERT_EQ(ToHost<uint16_t>(ya, m * 1280), ref) << "eager call " << rep;
      ASSERT_TRUE(LaunchLinearFp8(pb, nullptr).ok());
      ASSERT_EQ(ToHost<uint16_t>(yb, m * 512), ref_b) << "eager call " << rep;
    }

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status captured = LaunchLinearFp8(pa, stream);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(captured.ok()) << captured;
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    EXPECT_EQ(nodes, ring ? 2u : 1u) << "the stream plan is one kernel launch (the ring's two)";
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 6; ++rep) {
      CUDA_CHECK(cudaMemsetAsync(ya.get(), 0xFF, ya.bytes(), stream));
      // Between some replays: the workspace overwritten, or used by the other Linear.
      if (rep == 2) CUDA_CHECK(cudaMemsetAsync(ws.get(), 0x00, ws.bytes(), stream));
      if (rep == 3) CUDA_CHECK(cudaMemsetAsync(ws.get(), 0xFF, ws.bytes(), stream));
      if (rep == 4) {
        ASSERT_TRUE(LaunchLinearFp8(pb, stream).ok());
      }
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      ASSERT_EQ(ToHost<uint16_t>(ya, m * 1280), ref) << "graph replay " << rep;
      if (rep == 4) {
        ASSERT_EQ(ToHost<uint16_t>(yb, m * 512), ref_b) << "interleaved call";
      }
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

// Long K (the register ring and the slabs wrap many times) on exact-arithmetic inputs: bit for
// bit with LinearCpu, so every split count gives the same bits. K = 8224: 65 units (the last one
// 32-block), 5 slabs unsplit; K = 16416: 129 units. N 200 / 136: the last warp's 16 rows and the
// last CTA partial; M 1 / 3 / 16 (one n8 tile, partly filled; two); splits 1 / 3 / 7 and
// automatic (22 of 3 units / 26 of 5: K 8224's splits are shorter than the ring's 4 units); bias.
TEST_F(GemmGpuStreamTest, LongKExactArithmeticOverSplits) {
  Rng rng(53);
  struct Dims {
    int64_t n, k;
  };
  int runs = 0;
  for (const Dims& s : {Dims{200, 8224}, Dims{136, 16416}}) {
    std::vector<int> base;
    const HostLinear h = gemm_test::ExactArithFp8(s.n, s.k, 120, 128, true, rng, &base);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    for (int64_t m : {1, 3, 16}) {
      const std::vector<uint16_t> x = gemm_test::SmallIntActivations(m, s.k, s.k, 3, rng);
      ASSERT_TRUE(gemm_test::ExactPremiseHolds(h, base, x, m, s.k)) << s.n << "x" << s.k;
      const std::vector<float> cpu = CpuExact(*w, x, m, s.k, false);
      for (int64_t split : {0, 1, 3, 7}) {
        const std::string what = "exact N " + std::to_string(s.n) + " K " + std::to_string(s.k) +
                                 " M " + std::to_string(m) + " split " + std::to_string(split);
        const std::vector<float> gpu = gemm_test::RunLinearGpu(
            d.view(), x, m, s.k, {false, 0, kLinearCudaStreamRows, split, false, true});
        EXPECT_EQ(CountMismatches(gpu, s.n, cpu, m, s.n, what), 0) << what;
        ++runs;
      }
    }
  }
  std::printf("stream kernel: %d long-K exact-arithmetic runs bit-identical to LinearCpu\n", runs);
}

// Long K on random data: within the README's bound of LinearCpu (exact mode), and a row's bits
// do not depend on the other rows of the call: rows 0 .. 2 of an M = 16 call (two n8 tiles) are
// the bits of an M = 3 call (one, partly filled: the fix-up's rows past M) and of M = 1 calls,
// at the same split count (the plan depends on M only through ceil(M / 16)). K 8224 (65 units,
// 5 slabs), N 200; N 2304 x K 1280 (18 CTAs of columns, 10 units); N 40 x K 4096 (one partial
// warp: rows 32 .. 39 of 48). Splits automatic / 1 / 3.
TEST_F(GemmGpuStreamTest, LongKRandomWithinBoundAndRowsIndependentOfM) {
  Rng rng(59);
  struct Dims {
    int64_t n, k;
  };
  int runs = 0;
  for (const Dims& s : {Dims{200, 8224}, Dims{2304, 1280}, Dims{40, 4096}}) {
    const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, s.n, s.k, true, rng);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    const int64_t m16 = 16;
    const std::vector<uint16_t> x = gemm_test::RandomActivations(m16, s.k, s.k, rng);
    const std::vector<float> cpu = CpuExact(*w, x, m16, s.k, false);
    const gemm_test::DoubleResult dr = gemm_test::DoubleLinear(h, x, {}, m16, s.k, 1);
    const double coef = (s.k / 4.0 + 64.0) * std::ldexp(1.0, -24);
    for (int64_t split : {0, 1, 3}) {
      const std::string what = "random N " + std::to_string(s.n) + " K " + std::to_string(s.k) +
                               " split " + std::to_string(split);
      const GpuRunOptions o{false, 0, kLinearCudaStreamRows, split, false, true};
      const std::vector<float> all = gemm_test::RunLinearGpu(d.view(), x, m16, s.k, o);
      const gemm_test::Comparison c =
          gemm_test::Compare(all, cpu, m16, s.n, s.n, dr.abs_sum, 1.0, coef);
      EXPECT_EQ(c.bound_failures, 0) << what << " (worst " << c.worst_excess << " of allowed)";
      EXPECT_GE(c.within_ulp, c.count * 99 / 100) << what;
      EXPECT_LE(c.rel_rms, std::ldexp(1.0, -8)) << what;
      // M = 3: the first three rows of x.
      const std::vector<uint16_t> x3(x.begin(), x.begin() + 3 * s.k);
      const std::vector<float> three = gemm_test::RunLinearGpu(d.view(), x3, 3, s.k, o);
      EXPECT_EQ(CountMismatches(three, s.n, all, 3, s.n, what + " M 3 vs rows of M 16"), 0);
      // M = 1: rows 0, 2 and 15 alone.
      for (int64_t r : {0, 2, 15}) {
        const std::vector<uint16_t> x1(x.begin() + r * s.k, x.begin() + (r + 1) * s.k);
        const std::vector<float> one = gemm_test::RunLinearGpu(d.view(), x1, 1, s.k, o);
        const std::vector<float> row(all.begin() + r * s.n, all.begin() + (r + 1) * s.n);
        EXPECT_EQ(CountMismatches(one, s.n, row, 1, s.n,
                                  what + " M 1 vs row " + std::to_string(r) + " of M 16"),
                  0);
      }
      runs += 5;
    }
  }
  std::printf("stream kernel: %d long-K random runs within the bound, rows independent of M\n",
              runs);
}

// The TMA-ring variant (LinearCudaParams::stream_tma) runs the stream plan's work with the same
// per-split sums and fix-up order: its bits must be the stream kernel's, on random data (every
// rounding shows) and on exact-arithmetic data (also LinearCpu's). K 1312 (a last unit of one
// 32-block: the TMA box past K zero-filled), K 32 (one unit), wq_a's 1280 x 5120 (20 splits),
// K 8224 (65 units), K 16416 (x's slab does not fit beside the ring: the stream kernel itself),
// 4096 x 4096 at 8 forced splits (256 items: several per CTA); M 1 / 3 / 8; splits automatic / 1 /
// 3 / 8; an odd x stride (the scalar x loads) and f32 output on one shape; and the automatic
// plan's ring on a 64 MiB weight (M 1 / 5 / 8).
TEST_F(GemmGpuStreamTest, TmaRingGivesTheStreamKernelsBits) {
  Rng rng(61);
  struct Dims {
    int64_t n, k;
    bool exact;
  };
  int runs = 0;
  for (const Dims& s : {Dims{200, 1312, true}, Dims{40, 32, false}, Dims{1280, 5120, false},
                        Dims{200, 8224, true}, Dims{136, 16416, false}, Dims{4096, 4096, false}}) {
    std::vector<int> base;
    const HostLinear h =
        s.exact ? gemm_test::ExactArithFp8(s.n, s.k, 120, 128, true, rng, &base)
                : gemm_test::RandomLinear(WeightFormat::kFp8Block32, s.n, s.k, true, rng);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    const bool big = s.n * s.k > (int64_t{8} << 20);
    for (int64_t m : {1, 3, 8}) {
      if (big && m != 1) continue;
      const int64_t x_stride = s.n == 200 && s.k == 1312 ? s.k + 3 : s.k;
      const std::vector<uint16_t> x = s.exact
                                          ? gemm_test::SmallIntActivations(m, s.k, x_stride, 2, rng)
                                          : gemm_test::RandomActivations(m, s.k, x_stride, rng);
      const bool f32 = x_stride != s.k;
      std::vector<float> cpu;
      if (s.exact) {
        ASSERT_TRUE(gemm_test::ExactPremiseHolds(h, base, x, m, x_stride));
        cpu = CpuExact(*w, x, m, x_stride, f32);
      }
      for (int64_t split : big ? std::vector<int64_t>{8} : std::vector<int64_t>{0, 1, 3, 8}) {
        const std::string what = "N " + std::to_string(s.n) + " K " + std::to_string(s.k) + " M " +
                                 std::to_string(m) + " split " + std::to_string(split);
        GpuRunOptions o{f32, 0, kLinearCudaStreamRows, split, false, true};
        const std::vector<float> stream = gemm_test::RunLinearGpu(d.view(), x, m, x_stride, o);
        o.stream_tma = true;
        const std::vector<float> tma = gemm_test::RunLinearGpu(d.view(), x, m, x_stride, o);
        EXPECT_EQ(CountMismatches(tma, s.n, stream, m, s.n, what + " tma vs stream"), 0) << what;
        if (s.exact) {
          EXPECT_EQ(CountMismatches(tma, s.n, cpu, m, s.n, what + " tma vs cpu"), 0);
        }
        ++runs;
      }
    }
  }
  // The automatic plan's ring (LinearCudaStreamTmaPays: 8192 x 8192 is 64 MiB of codes; its own
  // split rule: 2 splits) against the stream kernel forced to the same splits.
  {
    const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, 8192, 8192, true, rng);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    for (int64_t m : {1, 5, 8}) {
      const LinearCudaPlan plan = PlanLinearCuda(m, 8192, 8192);
      ASSERT_TRUE(plan.tma_ring);
      const std::vector<uint16_t> x = gemm_test::RandomActivations(m, 8192, 8192, rng);
      const std::string what = "auto ring M " + std::to_string(m);
      const std::vector<float> ring =
          gemm_test::RunLinearGpu(d.view(), x, m, 8192, GpuRunOptions{false, 0, 0, 0, false, true});
      const std::vector<float> stream = gemm_test::RunLinearGpu(
          d.view(), x, m, 8192,
          GpuRunOptions{false, 0, kLinearCudaStreamRows, plan.splits, false, true});
      EXPECT_EQ(CountMismatches(ring, 8192, stream, m, 8192, what), 0) << what;
      ++runs;
    }
  }
  std::printf("stream kernel's TMA ring: %d runs bit-identical to the stream kernel\n", runs);
}

TEST_F(GemmGpuStreamTest, ZeroRowsIsANoOp) {
  Rng rng(47);
  const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, 64, 64, false, rng);
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  LinearCudaParams p;
  p.weight = &d.view();
  p.tile_rows = kLinearCudaStreamRows;
  EXPECT_TRUE(LaunchLinearFp8(p, nullptr).ok());
  EXPECT_EQ(LinearCudaWorkspaceBytes(d.view(), 0, kLinearCudaStreamRows), 0u);
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels
