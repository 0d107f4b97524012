// kernels_gemm_gpu_test, the warp-specialised bf16-expansion kernel's variants against each
// other, bit for bit (the same bf16 operands meet the same wgmma sequence, so every variant must
// give the same bits on any input): the cp.async main loop, the in-place FP8 decode, the weight
// expanded per call or kept (Fp8LinearDevice::expanded), the by-waves tile widths, the stream-K
// tail, CTA pairs sharing the weight box, and an x handed over already QDQ'd
// (LinearCudaParams::x_qdq). Accuracy against LinearCpu: gemm_gpu_test.cc.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_gpu_bits.h"
#include "kernels/gemm/gemm_gpu_test_util.h"
#include "kernels/gemm/gemm_test_util.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using gemm_test::CaseWeight;
using gemm_test::ExpectBitEqual;
using gemm_test::GpuRunOptions;
using gemm_test::HostLinear;
using gemm_test::LinearCase;
using gemm_test::MakeCaseWeight;
using gemm_test::Rng;

std::unique_ptr<PreparedLinear> Prepare(const HostLinear& h) {
  return gemm_test::PrepareCodesOnly(h);
}
DeviceFp8Linear Upload(const PreparedLinear& w) { return gemm_test::UploadOrDie(w); }

class GemmGpuWsTest : public ::testing::Test {
 protected:
  void SetUp() override { FS_SKIP_WITHOUT_GPU(); }
};

// The warp-specialised bf16-expansion kernel runs the cp.async kernel's wgmma sequence on the same
// operands, so on any input (random codes, scales, activations) its outputs are the same bits:
// ragged N (1000: a partial 256-column tile) and K (1312: a partial 64-wide step), M = 128, 256,
// 1000 (a partial 128-row tile) and 4096 (many tiles per persistent CTA), splits, f32 output;
// first a small case (one and a half K steps, one ragged N tile). The first mismatches name M,
// N, K, split and the element.
TEST_F(GemmGpuWsTest, WarpSpecialisedBitIdenticalToCpAsync) {
  Rng rng(31);
  struct Dims {
    int64_t n, k;
  };
  int runs = 0;
  for (const Dims& s : {Dims{300, 96}, Dims{1000, 1312}, Dims{2304, 5120}}) {
    const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, s.n, s.k, true, rng);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    for (int64_t m : {128, 256, 1000, 4096}) {
      const std::vector<uint16_t> x = gemm_test::RandomActivations(m, s.k, s.k, rng);
      for (int64_t split : {0, 1, 3}) {
        for (bool f32 : {false, true}) {
          if (f32 && split == 1) continue;
          // The cp.async run at the ws plan's split count: from kLinearCudaExpandMinRows rows the
          // ws plan expands the weight and may drop splits the cp.async plan keeps (N 300 at M
          // 4,096; LinearCudaWsUnsplitPays), and equal bits need the same K order.
          const gemm_test::GpuRunOptions cp{
              f32, 0, 128, PlanLinearCuda(m, s.n, s.k, 128, split).splits, true, false};
          const std::vector<float> b = gemm_test::RunLinearGpu(d.view(), x, m, s.k, cp);
          const gemm_test::GpuRunOptions ws{f32, 0, 128, split, true, true};
          const std::vector<float> a = gemm_test::RunLinearGpu(d.view(), x, m, s.k, ws);
          ExpectBitEqual(a, b, m, s.n, s.n,
                         "ws vs cp.async N " + std::to_string(s.n) + " K " + std::to_string(s.k) +
                             " M " + std::to_string(m) + " split " + std::to_string(split) +
                             (f32 ? " f32" : " bf16"));
          ++runs;
        }
      }
    }
  }
  std::printf("warp-specialised wgmma: %d runs bit-identical to the cp.async kernel\n", runs);
}

// Every E4M3 code (the NaN codes too, which Upload rejects: written raw here) under every scale
// byte, through the whole kernel: W [65536, 32] holds one nonzero code per row, code n % 256 at
// column n % 32, and scale block (n / 32, 0) = n / 256, so rows 256·s .. 256·s + 255 hold codes
// 0 .. 255 under scale byte s; x is all ones, so y[m][n] = the decoded code plus zeros (no
// 0 · inf). The warp-specialised kernel must give the cp.async kernel's bits (NaN == NaN), and
// every normal finite result of a non-NaN code must be E4M3(code) · 2^(s - 127).
TEST_F(GemmGpuWsTest, WarpSpecialisedDecodesEveryCodeAndScale) {
  const int64_t n = 65536, k = 32, m = 128;
  std::vector<uint8_t> codes(n * k, 0), scales(n / 32);
  for (int64_t r = 0; r < n; ++r) codes[r * k + r % 32] = static_cast<uint8_t>(r % 256);
  for (int64_t b = 0; b < n / 32; ++b) scales[b] = static_cast<uint8_t>(b / 8);
  DeviceBuffer dcodes(codes.size()), dscales(scales.size());
  dcodes.CopyFromHost(codes.data(), codes.size());
  dscales.CopyFromHost(scales.data(), scales.size());
  const Fp8LinearDevice w{n, k, dcodes.get<uint8_t>(), dscales.get<uint8_t>(), nullptr};
  const std::vector<uint16_t> x(m * k, 0x3F80);  // 1.0
  const GpuRunOptions cp{true, 0, 128, 1, true, false};
  const std::vector<float> ref = gemm_test::RunLinearGpu(w, x, m, k, cp);
  int64_t bad = 0, checked = 0;
  for (int64_t c = 0; c < n; ++c) {
    const uint8_t code = static_cast<uint8_t>(c % 256);
    const int sb = static_cast<int>(c / 256);
    const float want = std::ldexp(formats::E4m3ToFloat(code), sb - 127);
    if ((code & 0x7F) == 0x7F || sb == 255 || std::isinf(want) ||
        (want != 0.0f && std::fabs(want) < std::ldexp(1.0f, -126))) {
      continue;
    }
    ++checked;
    const float got = ref[(c % m) * n + c];
    if (got != want && ++bad <= 5) {
      ADD_FAILURE() << "cp.async: code " << int{code} << " scale " << sb << " gives " << got
                    << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(checked, n / 2);
  const GpuRunOptions ws{true, 0, 128, 1, true, true};
  const std::vector<float> got = gemm_test::RunLinearGpu(w, x, m, k, ws);
  ExpectBitEqual(got, ref, m, n, n, "warp-specialised");
}

// From kLinearCudaExpandMinRows rows the warp-specialised plan expands the weight to bf16 in the
// workspace first and runs the bf16-weight main loop: the same bf16 values (the same decoder)
// meet the same wgmma sequence, so the bits equal the in-place decode's on any input: ragged N
// and K, several M (one and many tiles per persistent CTA), splits, bias, f32 output; then every
// E4M3 code under every scale byte (the WarpSpecialisedDecodesEveryCodeAndScale weight).
TEST_F(GemmGpuWsTest, ExpandedWeightsBitIdenticalToInPlaceDecode) {
  ASSERT_TRUE(PlanLinearCuda(kLinearCudaExpandMinRows, 1000, 1312, 128).expand_weights);
  ASSERT_FALSE(PlanLinearCuda(kLinearCudaExpandMinRows - 1, 1000, 1312, 128).expand_weights);
  ASSERT_FALSE(PlanLinearCuda(4096, 1000, 1312, 128, 0, true, true, false).expand_weights);
  Rng rng(37);
  struct Dims {
    int64_t n, k;
  };
  int runs = 0;
  for (const Dims& s : {Dims{300, 96}, Dims{1000, 1312}, Dims{5120, 2304}}) {
    const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, s.n, s.k, true, rng);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    for (int64_t m : {int64_t{512}, int64_t{1000}, int64_t{4096}}) {
      const std::vector<uint16_t> x = gemm_test::RandomActivations(m, s.k, s.k, rng);
      for (int64_t split : {0, 3}) {
        for (bool f32 : {false, true}) {
          // The in-place run at the expanded plan's split count: the expanded plan drops the
          // splits the in-place one keeps where narrow tiles fill half the SMs (N 300 at M
          // 4,096; LinearCudaWsUnsplitPays), and equal bits need the same K order.
          GpuRunOptions in_place{f32,  0,   128, PlanLinearCuda(m, s.n, s.k, 128, split).splits,
                                 true, true};
          in_place.expand_weights = false;
          const std::vector<float> b = gemm_test::RunLinearGpu(d.view(), x, m, s.k, in_place);
          const GpuRunOptions expanded{f32, 0, 128, split, true, true};
          const std::vector<float> a = gemm_test::RunLinearGpu(d.view(), x, m, s.k, expanded);
          ExpectBitEqual(a, b, m, s.n, s.n,
                         "expanded vs in place N " + std::to_string(s.n) + " K " +
                             std::to_string(s.k) + " M " + std::to_string(m) + " split " +
                             std::to_string(split) + (f32 ? " f32" : " bf16"));
          ++runs;
        }
      }
    }
  }
  std::printf("expanded weights: %d runs bit-identical to the in-place decode\n", runs);

  const int64_t n = 65536, k = 32, m = kLinearCudaExpandMinRows;
  std::vector<uint8_t> codes(n * k, 0), scales(n / 32);
  for (int64_t r = 0; r < n; ++r) codes[r * k + r % 32] = static_cast<uint8_t>(r % 256);
  for (int64_t b = 0; b < n / 32; ++b) scales[b] = static_cast<uint8_t>(b / 8);
  DeviceBuffer dcodes(codes.size()), dscales(scales.size());
  dcodes.CopyFromHost(codes.data(), codes.size());
  dscales.CopyFromHost(scales.data(), scales.size());
  const Fp8LinearDevice all{n, k, dcodes.get<uint8_t>(), dscales.get<uint8_t>(), nullptr};
  const std::vector<uint16_t> ones(m * k, 0x3F80);  // 1.0
  GpuRunOptions in_place{true, 0, 128, 1, true, true};
  in_place.expand_weights = false;
  const std::vector<float> ref = gemm_test::RunLinearGpu(all, ones, m, k, in_place);
  const GpuRunOptions expanded{true, 0, 128, 1, true, true};
  ExpectBitEqual(gemm_test::RunLinearGpu(all, ones, m, k, expanded), ref, m, n, n,
                 "expanded, every code and scale");
}

// The warp-specialised kernel's narrower tiles on expanded weights (ws_tile_cols 128 / 160 / 192
// and the default by-waves choice): every output runs the same wgmma K steps in the same order, so
// the bits must equal the 256-column tiles' — over ragged N (a tile past the last column) and K,
// one and several tiles per persistent CTA, M not a multiple of 128 (the edge rows' generic
// stores), splits (fp32 partials), bias, bf16 (the staged epilogue, its 64-byte last round at
// 160 columns) and f32 outputs.
TEST_F(GemmGpuWsTest, ExpandedWeightsNarrowTilesBitIdentical) {
  Rng rng(41);
  struct Dims {
    int64_t n, k;
  };
  int runs = 0;
  for (const Dims& s : {Dims{1280, 512}, Dims{1000, 1312}, Dims{2304, 256}}) {
    const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, s.n, s.k, true, rng);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    for (int64_t m : {int64_t{kLinearCudaExpandMinRows}, int64_t{1000}, int64_t{4096}}) {
      ASSERT_TRUE(PlanLinearCuda(m, s.n, s.k, 128).expand_weights);
      const std::vector<uint16_t> x = gemm_test::RandomActivations(m, s.k, s.k, rng);
      for (int64_t split : {0, 3}) {
        for (bool f32 : {false, true}) {
          GpuRunOptions wide{f32, 0, 128, split, true, true};
          wide.ws_tile_cols = kLinearCudaWgmmaCols;
          const std::vector<float> ref = gemm_test::RunLinearGpu(d.view(), x, m, s.k, wide);
          for (int64_t cols : {int64_t{128}, int64_t{160}, int64_t{192}, int64_t{0}}) {
            GpuRunOptions narrow = wide;
            narrow.ws_tile_cols = cols;
            ExpectBitEqual(gemm_test::RunLinearGpu(d.view(), x, m, s.k, narrow), ref, m, s.n, s.n,
                           "ws_tile_cols " + std::to_string(cols) + " N " + std::to_string(s.n) +
                               " K " + std::to_string(s.k) + " M " + std::to_string(m) + " split " +
                               std::to_string(split) + (f32 ? " f32" : " bf16"));
            ++runs;
          }
        }
      }
    }
  }
  std::printf("narrow ws tiles: %d runs bit-identical to the 256-column tiles\n", runs);
}

// The stream-K tail (LinearCudaParams::stream_k_tail): the tiles before the tail hold the
// unsplit plan's bits, the tail tiles the bits of the plan with split_k = the tail's ranges
// (the same K ranges, summed in the same order from +0 by their last range instead of the
// reduction kernel). Ragged M, N and K (a partial last K step and a short last range), bias,
// bf16 and fp32 outputs, expanded weights and the in-place FP8 decode, and three calls on one
// workspace (the counters' reset and tags).
TEST_F(GemmGpuWsTest, StreamKTailBitsMatchSplitAndWhole) {
  Rng rng(43);
  int runs = 0;
  for (const LinearCase& c :
       {LinearCase{4096, 1280, 1312, 0},    // 160 tiles: 28 tail tiles of 4 ranges
        LinearCase{4500, 1000, 1312, 0},    // 144 tiles: 12 of 5 ranges (5, 5, 5, 5, 1)
        LinearCase{600, 1280, 2048, 1}}) {  // 25 tiles, all tail (split 1 forced)
    const CaseWeight cw = MakeCaseWeight(c, rng);
    const DeviceFp8Linear& d = cw.device;
    const std::vector<uint16_t> x = gemm_test::RandomActivations(c.m, c.k, c.k, rng);
    for (bool expand : {true, false}) {
      const LinearCudaPlan plan =
          PlanLinearCuda(c.m, c.n, c.k, 128, c.split_k, true, true, expand, true);
      ASSERT_TRUE(plan.warp_specialised);
      ASSERT_GT(plan.tail.ranges, 1) << c.m << " x " << c.n;
      for (bool f32 : {false, true}) {
        GpuRunOptions whole{f32, 0, 128, 1, true, true, expand};
        whole.ws_tile_cols = kLinearCudaWgmmaCols;
        GpuRunOptions split = whole;
        split.split_k = plan.tail.ranges;
        GpuRunOptions tail = whole;
        tail.split_k = c.split_k;
        tail.ws_tile_cols = 0;
        tail.stream_k_tail = true;
        tail.repeats = 3;
        const std::vector<float> y_whole = gemm_test::RunLinearGpu(d.view(), x, c.m, c.k, whole);
        const std::vector<float> y_split = gemm_test::RunLinearGpu(d.view(), x, c.m, c.k, split);
        std::vector<float> expect(y_whole.size());
        int64_t tail_outputs = 0;
        for (int64_t r = 0; r < c.m; ++r) {
          for (int64_t j = 0; j < c.n; ++j) {
            const int64_t t = r / 128 + (j / 256) * plan.m_tiles;
            const bool in_tail = t >= plan.tail.begin;
            tail_outputs += in_tail ? 1 : 0;
            expect[r * c.n + j] = (in_tail ? y_split : y_whole)[r * c.n + j];
          }
        }
        ASSERT_GT(tail_outputs, 0);
        ExpectBitEqual(gemm_test::RunLinearGpu(d.view(), x, c.m, c.k, tail), expect, c.m, c.n, c.n,
                       "stream-K tail M " + std::to_string(c.m) + " N " + std::to_string(c.n) +
                           " K " + std::to_string(c.k) + (expand ? " expanded" : " in place") +
                           (f32 ? " f32" : " bf16"));
        ++runs;
      }
    }
  }
  std::printf("stream-K tail: %d runs bit-identical to the whole / split plans\n", runs);
}

// CTA pairs sharing each weight box by TMA multicast (LinearCudaParams::ws_multicast) change
// which CTA loads what, never a tile's wgmma sequence: bit-identical to one CTA per tile. Odd
// m-tile counts (a pair's second CTA past the last tile), ragged N and K, bias, bf16 and fp32
// outputs, every expanded width and the in-place FP8 decode, K splits, more pairs than fit at once
// (the persistent walk), and three calls on one workspace.
TEST_F(GemmGpuWsTest, PairMulticastBitIdentical) {
  Rng rng(47);
  int runs = 0;
  for (const LinearCase& c :
       {LinearCase{4096, 1280, 1312, 0},   // 32 m tiles × 5 (256) / 8 (160)
        LinearCase{4500, 1000, 1312, 0},   // 36 m tiles, ragged N
        LinearCase{600, 1280, 2048, 0},    // 5 m tiles: one lone CTA per pair column
        LinearCase{384, 2000, 4096, 3},    // 3 m tiles, 3 K splits
        LinearCase{9000, 520, 256, 0}}) {  // 71 m tiles, short K
    const CaseWeight cw = MakeCaseWeight(c, rng);
    const DeviceFp8Linear& d = cw.device;
    const std::vector<uint16_t> x = gemm_test::RandomActivations(c.m, c.k, c.k, rng);
    for (bool expand : {true, false}) {
      const LinearCudaPlan plan =
          PlanLinearCuda(c.m, c.n, c.k, 128, c.split_k, true, true, expand, false);
      ASSERT_TRUE(plan.warp_specialised) << c.m << " x " << c.n;
      for (int64_t cols :
           expand ? std::vector<int64_t>{0, 128, 160, 192, 256} : std::vector<int64_t>{256}) {
        for (bool f32 : {false, true}) {
          GpuRunOptions one{f32, 0, 128, c.split_k, true, true, expand};
          one.ws_tile_cols = cols;
          GpuRunOptions pair = one;
          pair.ws_multicast = true;
          pair.repeats = 3;
          ExpectBitEqual(gemm_test::RunLinearGpu(d.view(), x, c.m, c.k, pair),
                         gemm_test::RunLinearGpu(d.view(), x, c.m, c.k, one), c.m, c.n, c.n,
                         "pairs M " + std::to_string(c.m) + " N " + std::to_string(c.n) + " K " +
                             std::to_string(c.k) + " split " + std::to_string(c.split_k) +
                             (expand ? " expanded cols " + std::to_string(cols) : " in place") +
                             (f32 ? " f32" : " bf16"));
          ++runs;
        }
      }
    }
  }
  std::printf("pair multicast: %d runs bit-identical to one CTA per tile\n", runs);
}

// A pre-QDQ'd x (LinearCudaParams::x_qdq: the kernel reads it in place, no activation pass)
// gives the bits of the Linear on the un-QDQ'd x: ragged M, N and K (a half-zero last K step), K
// splits, bias, bf16 and fp32 outputs, by-waves and 256-column tiles, the in-place FP8 decode, the
// cp.async kernel, the stream-K tail, CTA pairs, x strides beyond K (16-byte multiples: read in
// place; K + 4: not, so the pass runs on x) and blocks the fast QDQ path skips (all zeros, a
// NaN), three calls per workspace. Values near bf16's largest, whose QDQ overflows to ±Inf, give
// the same bits where x is read in place (one QDQ either way); the plans that run the pass on the
// QDQ'd x (mma.sync, register-sourced) are checked without them.
TEST_F(GemmGpuWsTest, PreQuantisedXBitIdentical) {
  Rng rng(53);
  int runs = 0;
  for (const LinearCase& c :
       {LinearCase{4096, 1280, 1312, 0},   // 32 m tiles, a half-zero last K step
        LinearCase{600, 1000, 2048, 0},    // ragged M and N
        LinearCase{384, 2000, 4096, 3},    // 3 K splits
        LinearCase{9000, 520, 256, 0}}) {  // 71 m tiles, short K
    const CaseWeight cw = MakeCaseWeight(c, rng);
    const DeviceFp8Linear& d = cw.device;
    for (int64_t pad : {0, 8, 4}) {
      const int64_t stride = c.k + pad;
      std::vector<uint16_t> x = gemm_test::RandomActivations(c.m, c.k, stride, rng);
      for (int64_t j = 0; j < 32; ++j) x[1 * stride + 64 + j] = 0;  // a zero block
      x[2 * stride + 5] = 0x7FC1;                                   // a NaN
      std::vector<uint16_t> huge = x;
      huge[3 * stride + 40] = 0x7F7F;  // bf16's largest: the QDQ overflows
      huge[3 * stride + 41] = 0xFF70;
      for (bool overflow : {false, true}) {
        const std::vector<uint16_t>& src = overflow ? huge : x;
        std::vector<uint16_t> xq(src.size(), 0);
        ASSERT_TRUE(quant::QdqCpu({quant::BlockFormat::kFp8E4m3Ue8m0B32, c.m, c.k, src.data(),
                                   stride, xq.data(), stride})
                        .ok());
        struct Plan {
          const char* name;
          GpuRunOptions o;
          bool in_place;  // reads x itself where x is a TMA operand
        };
        std::vector<Plan> plans;
        for (int64_t cols : {0, 256}) {
          for (bool f32 : {false, true}) {
            GpuRunOptions o{f32, 0, 128, c.split_k, true, true, true};
            o.ws_tile_cols = cols;
            plans.push_back({cols == 0 ? "expanded by waves" : "expanded 256", o, true});
          }
        }
        GpuRunOptions o{false, 0, 128, c.split_k, true, true, false};
        plans.push_back({"in-place decode", o, true});
        o = GpuRunOptions{false, 0, 128, c.split_k, true, false, false};
        plans.push_back({"cp.async", o, true});
        if (c.split_k == 0) {
          o = GpuRunOptions{true, 0, 128, 0, true, true, true};
          o.stream_k_tail = true;
          plans.push_back({"stream-K tail", o, true});
          o = GpuRunOptions{false, 0, 128, 0, true, true, true};
          o.ws_multicast = true;
          plans.push_back({"pairs", o, true});
        }
        o = GpuRunOptions{false, 0, 64, c.split_k, true, true, true};
        plans.push_back({"mma.sync (pass on x)", o, false});
        o = GpuRunOptions{false, 0, kLinearCudaRsRows, 0, true, true, true};
        plans.push_back({"register-sourced (pass on x)", o, false});
        for (const Plan& pl : plans) {
          if (overflow && (!pl.in_place || pad % 8 != 0)) continue;  // two QDQs: ±Inf -> NaN
          GpuRunOptions pre = pl.o;
          pre.x_qdq = true;
          pre.repeats = 3;
          ExpectBitEqual(gemm_test::RunLinearGpu(d.view(), xq, c.m, stride, pre),
                         gemm_test::RunLinearGpu(d.view(), src, c.m, stride, pl.o), c.m, c.n, c.n,
                         std::string("pre-QDQ'd x, ") + pl.name + " M " + std::to_string(c.m) +
                             " N " + std::to_string(c.n) + " K " + std::to_string(c.k) +
                             " stride " + std::to_string(stride) + (overflow ? " overflow" : ""));
          ++runs;
        }
      }
    }
  }
  std::printf("pre-QDQ'd x: %d runs bit-identical to the Linear's own activation pass\n", runs);
}

// A weight uploaded with its bf16 expansion kept (Fp8LinearDevice::expanded) gives the bits of
// the per-call expansion on every plan that expands (by-waves and 256-column tiles, splits, the
// stream-K tail, CTA pairs, bias, bf16 and fp32 outputs), and the kept bf16 values are exactly
// code × scale; plans that do not expand (in-place decode, M below the expansion rows) ignore it.
TEST_F(GemmGpuWsTest, KeptExpansionBitIdentical) {
  Rng rng(59);
  int runs = 0;
  for (const LinearCase& c : {LinearCase{4096, 1280, 1312, 0}, LinearCase{600, 1000, 2048, 0},
                              LinearCase{384, 2000, 4096, 3}, LinearCase{64, 520, 256, 0}}) {
    const CaseWeight cw = MakeCaseWeight(c, rng);
    const DeviceFp8Linear& plain = cw.device;
    const DeviceFp8Linear kept = gemm_test::UploadOrDie(*cw.host, true);
    ASSERT_EQ(plain.view().expanded, nullptr);
    ASSERT_NE(kept.view().expanded, nullptr);
    EXPECT_GE(kept.device_bytes(), plain.device_bytes() + 2 * c.n * c.k);
    // The kept values against the host codes × scales, value by value.
    std::vector<uint16_t> bf(static_cast<size_t>(c.n * c.k));
    CUDA_CHECK(cudaMemcpy(bf.data(), kept.view().expanded, bf.size() * 2, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < c.n; ++r) {
      for (int64_t col = 0; col < c.k; col += 7) {
        const float want =
            formats::E4m3ToFloat(cw.host->codes()[r * c.k + col]) *
            std::ldexp(1.0f,
                       static_cast<int>(cw.host->scales()[(r / 32) * (c.k / 32) + col / 32]) - 127);
        ASSERT_EQ(bf[r * c.k + col], formats::FloatToBf16Bits(want)) << r << ", " << col;
      }
    }
    const std::vector<uint16_t> x = gemm_test::RandomActivations(c.m, c.k, c.k, rng);
    std::vector<GpuRunOptions> plans;
    for (int64_t cols : {0, 256}) {
      for (bool f32 : {false, true}) {
        GpuRunOptions o{f32, 0, 128, c.split_k, true, true, true};
        o.ws_tile_cols = cols;
        plans.push_back(o);
      }
    }
    GpuRunOptions o{false, 0, 128, 0, true, true, true};
    o.stream_k_tail = c.split_k == 0;
    plans.push_back(o);
    o.stream_k_tail = false;
    o.ws_multicast = c.split_k == 0;
    plans.push_back(o);
    plans.push_back(GpuRunOptions{false, 0, 128, c.split_k, true, true, false});  // in place
    plans.push_back(GpuRunOptions{});                                             // automatic
    for (const GpuRunOptions& pl : plans) {
      GpuRunOptions rep = pl;
      rep.repeats = 3;
      ExpectBitEqual(gemm_test::RunLinearGpu(kept.view(), x, c.m, c.k, rep),
                     gemm_test::RunLinearGpu(plain.view(), x, c.m, c.k, pl), c.m, c.n, c.n,
                     "kept expansion M " + std::to_string(c.m) + " N " + std::to_string(c.n) +
                         " K " + std::to_string(c.k) + " cols " + std::to_string(pl.ws_tile_cols) +
                         (pl.stream_k_tail ? " tail" : "") + (pl.ws_multicast ? " pairs" : "") +
                         (pl.expand_weights ? "" : " in place"));
      ++runs;
    }
  }
  std::printf("kept expansion: %d runs bit-identical to the per-call expansion\n", runs);
}

}  // namespace
}  // namespace flashserve::kernels
