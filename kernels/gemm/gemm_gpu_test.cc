// kernels_gemm_gpu_test: LaunchLinearFp8 (gemm_cuda.h) against LinearCpu in exact mode, through
// the four GEMM kernels: weight-streaming (tile_rows 8, the automatic choice at decode sizes;
// more in gemm_gpu_stream_test.cc), mma.sync (tile_rows 16 / 32 / 64), FP8 wgmma (tile_rows 128)
// and the bf16-expansion wgmma (tile_rows 128 with wgmma_bf16, the automatic choice at large M).
// - Exact-arithmetic inputs (gemm_gpu_test_util.h): bit for bit, over partial N / K tiles, every
//   kernel and tile size and several K splits, bf16 and fp32 outputs, bias and padded strides;
//   scale bytes from 12 to 230 (the decoder's one- and two-multiply paths); a NaN scale block.
// - The activation quantiser: an identity weight returns QDQ(x) exactly, on random activations
//   with widely varying block scales: bit for bit with LinearCpu and formats::QdqFp8Ue8m0B32.
// - Random inputs at the released FP8 Linear shapes, M = 1, 7, 16, 64 (weight-streaming and
//   mma.sync) and M = 128, 130, 1000, 4096 (three kernels on the same data): per element
//   |gpu - cpu| <= ulp_bf16 + (K/4 + 64)·2^-24·Σ|x·w| where Σ|x·w| is known, >= 99 % of the
//   outputs within one bf16 ulp, rel-RMS <= 2^-8 (README.md "CUDA" justifies the figures).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp8_e4m3.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_gpu_test_util.h"
#include "kernels/gemm/gemm_test_util.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using gemm_test::Comparison;
using gemm_test::GpuRunOptions;
using gemm_test::HostLinear;
using gemm_test::Rng;

ThreadPool* Pool() {
  static ThreadPool* pool = new ThreadPool(std::max(1u, std::thread::hardware_concurrency()));
  return pool;
}

std::unique_ptr<PreparedLinear> Prepare(const HostLinear& h) {
  return gemm_test::PrepareCodesOnly(h);
}
DeviceFp8Linear Upload(const PreparedLinear& w) { return gemm_test::UploadOrDie(w); }

// A case of the warp-specialised bit tests, and its random kFp8Block32 weight (with bias),
// prepared on the host and uploaded.
struct LinearCase {
  int64_t m, n, k, split_k;
};
struct CaseWeight {
  std::unique_ptr<PreparedLinear> host;
  DeviceFp8Linear device;
};
CaseWeight MakeCaseWeight(const LinearCase& c, Rng& rng) {
  const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, c.n, c.k, true, rng);
  CaseWeight cw{Prepare(h), {}};
  cw.device = Upload(*cw.host);
  return cw;
}

// LinearCpu (exact) writing y with row stride y_stride (RunLinear checks the padding stays
// unwritten); returned packed, [m, n].
std::vector<float> Cpu(const PreparedLinear& w, const std::vector<uint16_t>& x, int64_t m,
                       int64_t x_stride, bool f32_out, int64_t y_stride) {
  std::vector<float> y;
  gemm_test::RunOptions o;
  o.mode = LinearMode::kExact;
  o.f32_out = f32_out;
  o.y_stride = y_stride;
  o.pool = Pool();
  const absl::Status s = gemm_test::RunLinear(w, x, {}, m, x_stride, o, &y);
  CHECK(s.ok()) << s;
  return y;
}

// The GPU's y [m, y_stride] packed to [m, n]; the padding columns must keep RunLinearGpu's NaN
// fill (nothing written there).
std::vector<float> PackGpu(const std::vector<float>& y, int64_t m, int64_t n, int64_t y_stride) {
  std::vector<float> packed(m * n);
  int64_t written_pad = 0;
  for (int64_t r = 0; r < m; ++r) {
    std::copy_n(y.begin() + r * y_stride, n, packed.begin() + r * n);
    for (int64_t j = n; j < y_stride; ++j) written_pad += std::isnan(y[r * y_stride + j]) ? 0 : 1;
  }
  EXPECT_EQ(written_pad, 0) << "padding columns of y were written";
  return packed;
}

// `any_zero_sign`: +0 and -0 count as equal (a reference that is not a sum, e.g. the activation
// itself, keeps a -0 that a dot product of it with an identity row turns into +0).
void ExpectBitEqual(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t m,
                    int64_t n, int64_t y_stride, const std::string& what,
                    bool any_zero_sign = false) {
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const float g = gpu[r * y_stride + j], c = cpu[r * y_stride + j];
      if (std::isnan(g) && std::isnan(c)) continue;
      if (any_zero_sign && g == 0.0f && c == 0.0f) continue;
      if (std::memcmp(&g, &c, 4) != 0 && ++bad <= 5) {
        ADD_FAILURE() << what << ": y[" << r << "][" << j << "] gpu " << g << " cpu " << c;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

class GemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { FS_SKIP_WITHOUT_GPU(); }
};

// A kernel choice: tile_rows (0 = automatic) and, for 128, which wgmma kernel (bf16: the
// warp-specialised main loop unless `ws` is false).
struct Kernel {
  int64_t tile;
  bool bf16;
  bool ws = true;
  std::string Name() const {
    const char* wgmma = !bf16 ? " wgmma-fp8" : (ws ? " wgmma-bf16-ws" : " wgmma-bf16-cp.async");
    return "tile " + std::to_string(tile) +
           (tile == 128
                ? wgmma
                : (tile == kLinearCudaStreamRows ? " stream"
                                                 : (tile == kLinearCudaRsRows ? " wgmma-rs" : "")));
  }
};
const Kernel kAuto{0, true}, kStream{kLinearCudaStreamRows, false}, kMma16{16, false},
    kMma64{64, false}, kFp8Wgmma{128, false}, kBf16Wgmma{128, true},
    kBf16WgmmaCpAsync{128, true, false}, kRs{kLinearCudaRsRows, false};
const Kernel kAllKernels[] = {kAuto,  kStream,   kRs,        kMma16,           {32, false},
                              kMma64, kFp8Wgmma, kBf16Wgmma, kBf16WgmmaCpAsync};

// ---- exact-arithmetic inputs: bit for bit ----------------------------------------------------

struct ExactCase {
  int64_t n, k;
  int density_den;
};

TEST_F(GemmGpuTest, ExactArithmeticBitExactOverTilesAndSplits) {
  const ExactCase cases[] = {{96, 64, 1},    {200, 96, 1},    {130, 2304, 2},
                             {512, 1280, 1}, {1280, 5120, 2}, {2304, 5120, 2}};
  Rng rng(7);
  int runs = 0;
  for (const ExactCase& c : cases) {
    std::vector<int> base;
    const HostLinear h = gemm_test::ExactArithFp8(c.n, c.k, 125, 125, false, rng, &base);
    const auto w = Prepare(h);
    const DeviceFp8Linear d = Upload(*w);
    for (int64_t m : {1, 7, 64, 130, 300}) {
      const std::vector<uint16_t> x =
          gemm_test::SmallIntActivations(m, c.k, c.k, c.density_den, rng);
      ASSERT_TRUE(gemm_test::ExactPremiseHolds(h, base, x, m, c.k)) << c.n << "x" << c.k;
      const std::vector<float> cpu = Cpu(*w, x, m, c.k, false, c.n);
      for (const Kernel& kern : kAllKernels) {
        for (int64_t split : {0, 1, 3}) {
          const std::vector<float> gpu = gemm_test::RunLinearGpu(
              d.view(), x, m, c.k, {false, 0, kern.tile, split, kern.bf16, kern.ws});
          ExpectBitEqual(gpu, cpu, m, c.n, c.n,
                         "N " + std::to_string(c.n) + " K " + std::to_string(c.k) + " M " +
                             std::to_string(m) + " " + kern.Name() + " split " +
                             std::to_string(split));
          ++runs;
        }
      }
    }
  }
  std::printf("exact arithmetic: %d GPU runs bit-identical to LinearCpu\n", runs);
}

TEST_F(GemmGpuTest, ExactArithmeticBiasStridesAndF32Output) {
  Rng rng(11);
  // An odd y stride (4-byte element stores) and an aligned one (the register-sourced kernel's
  // staged bf16 rows).
  const int64_t n = 328, k = 640, x_stride = k + 40;
  std::vector<int> base;
  const HostLinear h = gemm_test::ExactArithFp8(n, k, 120, 130, true, rng, &base);
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  for (const int64_t y_stride : {n + 3, n + 8}) {
    SCOPED_TRACE("y stride " + std::to_string(y_stride));
    for (int64_t m : {1, 7, 64, 300}) {
      const std::vector<uint16_t> x = gemm_test::SmallIntActivations(m, k, x_stride, 1, rng);
      ASSERT_TRUE(gemm_test::ExactPremiseHolds(h, base, x, m, x_stride));
      for (bool f32 : {false, true}) {
        const std::vector<float> cpu = Cpu(*w, x, m, x_stride, f32, y_stride);
        for (const Kernel& kern : {kAuto, kStream, kRs, kMma64, kFp8Wgmma, kBf16Wgmma}) {
          for (int64_t split : {0, 1, 2}) {
            const std::vector<float> gpu = PackGpu(
                gemm_test::RunLinearGpu(d.view(), x, m, x_stride,
                                        {f32, y_stride, kern.tile, split, kern.bf16, kern.ws}),
                m, n, y_stride);
            ExpectBitEqual(gpu, cpu, m, n, n,
                           "bias M " + std::to_string(m) + (f32 ? " f32 " : " bf16 ") +
                               kern.Name() + " split " + std::to_string(split));
          }
        }
      }
    }
  }
}

TEST_F(GemmGpuTest, ExactArithmeticWideScaleRange) {
  // Scale rows with base bytes 12 .. 228: below and above the one-multiply limit (134).
  Rng rng(13);
  const int64_t n = 32 * 72, k = 512;
  std::vector<int> base;
  const HostLinear h = gemm_test::ExactArithFp8(n, k, 12, 228, false, rng, &base);
  int wide = 0;
  for (int b : base) wide += b + 2 > 134 ? 1 : 0;
  ASSERT_GT(wide, 10);
  ASSERT_LT(wide, static_cast<int>(base.size()) - 10);
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  for (int64_t m : {1, 64, 130}) {
    const std::vector<uint16_t> x = gemm_test::SmallIntActivations(m, k, k, 1, rng);
    ASSERT_TRUE(gemm_test::ExactPremiseHolds(h, base, x, m, k));
    for (bool f32 : {false, true}) {
      const std::vector<float> cpu = Cpu(*w, x, m, k, f32, n);
      for (const Kernel& kern : {kAuto, kStream, kRs, kMma64, kFp8Wgmma, kBf16Wgmma}) {
        const std::vector<float> gpu =
            gemm_test::RunLinearGpu(d.view(), x, m, k, {f32, 0, kern.tile, 0, kern.bf16, kern.ws});
        ExpectBitEqual(gpu, cpu, m, n, n, "wide scales M " + std::to_string(m) + " " + kern.Name());
      }
    }
  }
}

void CheckNanScale(const Kernel& kern) {
  Rng rng(17);
  const int64_t n = 256, k = 256, m = 7;
  std::vector<int> base;
  HostLinear h = gemm_test::ExactArithFp8(n, k, 125, 125, false, rng, &base);
  h.scale[1 * (k / 32) + 3] = 255;  // scale row 1 (outputs 32..63), K block 3
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  const std::vector<uint16_t> x = gemm_test::SmallIntActivations(m, k, k, 1, rng);
  const std::vector<float> cpu = Cpu(*w, x, m, k, false, n);
  const std::vector<float> gpu =
      gemm_test::RunLinearGpu(d.view(), x, m, k, {false, 0, kern.tile, 0, kern.bf16, kern.ws});
  int64_t nans = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const bool in_block = j >= 32 && j < 64;
      EXPECT_EQ(std::isnan(cpu[r * n + j]), in_block);
      EXPECT_EQ(std::isnan(gpu[r * n + j]), in_block) << r << " " << j;
      nans += std::isnan(gpu[r * n + j]) ? 1 : 0;
    }
  }
  EXPECT_EQ(nans, m * 32);
  ExpectBitEqual(gpu, cpu, m, n, n, "NaN scale");
}

TEST_F(GemmGpuTest, NanScaleGivesNanLikeCpu) {
  for (const Kernel& kern : {kAuto, kStream, kRs, kMma16, kFp8Wgmma, kBf16Wgmma}) {
    SCOPED_TRACE(kern.Name());
    CheckNanScale(kern);
  }
}

// ---- the activation quantiser ----------------------------------------------------------------

TEST_F(GemmGpuTest, IdentityWeightReturnsQdqActivations) {
  const int64_t k = 512, n = k;
  HostLinear h;
  h.format = WeightFormat::kFp8Block32;
  h.n = n;
  h.k = k;
  h.weight.assign(n * k, 0);
  for (int64_t i = 0; i < n; ++i) h.weight[i * k + i] = 0x38;  // E4M3 1.0
  h.scale.assign((n / 32) * (k / 32), 127);                    // 2^0
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  Rng rng(19);
  for (int64_t m : {1, 300}) {
    const std::vector<uint16_t> x = gemm_test::RandomActivations(m, k, k, rng);
    std::vector<uint16_t> qdq(x.size());
    ASSERT_TRUE(formats::QdqFp8Ue8m0B32(x, qdq).ok());
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = formats::Bf16BitsToFloat(qdq[i]);
    const std::vector<float> cpu = Cpu(*w, x, m, k, false, n);
    // The wgmma kernels first: output j = x[j] isolates operand layout errors (a wrong K
    // position, row or swizzle shows up as the first mismatching (row, column)).
    for (const Kernel& kern : {kRs, kFp8Wgmma, kBf16Wgmma, kStream, kMma16, kAuto}) {
      for (int64_t split : {0, 1}) {
        const std::vector<float> gpu = gemm_test::RunLinearGpu(
            d.view(), x, m, k, {false, 0, kern.tile, split, kern.bf16, kern.ws});
        ExpectBitEqual(gpu, cpu, m, n, n, "identity vs LinearCpu, " + kern.Name());
        ExpectBitEqual(gpu, want, m, n, n, "identity vs formats QDQ, " + kern.Name(),
                       /*any_zero_sign=*/true);
      }
    }
  }
}

// ---- random inputs at the released shapes ----------------------------------------------------

struct Shape {
  const char* name;
  int64_t n, k;
};
// Model spec §5 (released checkpoint): every FP8 32×32-block Linear.
constexpr Shape kReleased[] = {
    {"attn.wq_a", 1280, 5120},         {"attn.wq_b", 32768, 1280},
    {"attn.wkv", 512, 5120},           {"attn.wo_b", 5120, 8192},
    {"indexer.wq_b", 4096, 1280},      {"shared_experts.w1/w3", 2304, 5120},
    {"shared_experts.w2", 5120, 2304}, {"engram.wkv", 25600, 6144},
    {"mtp.0.main_proj", 5120, 15360},
};

// Rows of an M-row call that the CPU reference recomputes: all for M <= 64, else the first 24,
// 16 spread through the middle and the last 24 (with 16-, 32- and 64-row tile edges among them).
std::vector<int64_t> CheckedRows(int64_t m) {
  std::vector<int64_t> rows;
  if (m <= 64) {
    for (int64_t r = 0; r < m; ++r) rows.push_back(r);
    return rows;
  }
  for (int64_t r = 0; r < 24; ++r) rows.push_back(r);
  for (int64_t i = 1; i <= 16; ++i) rows.push_back(24 + (m - 48) * i / 17);
  for (int64_t r = m - 24; r < m; ++r) rows.push_back(r);
  return rows;
}

// Per M: one activation draw, the CPU reference once, then each of `kernels` on the same data.
void CheckRandomShape(const Shape& s, const std::vector<int64_t>& ms,
                      const std::vector<Kernel>& kernels, uint64_t seed) {
  Rng rng(seed);
  const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, s.n, s.k, false, rng);
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  const double coef = (s.k / 4.0 + 64.0) * std::ldexp(1.0, -24);
  for (int64_t m : ms) {
    const std::vector<uint16_t> x = gemm_test::RandomActivations(m, s.k, s.k, rng);
    const std::vector<int64_t> rows = CheckedRows(m);
    const auto mr = static_cast<int64_t>(rows.size());
    std::vector<uint16_t> xs(mr * s.k);
    for (int64_t i = 0; i < mr; ++i) {
      std::copy_n(x.begin() + rows[i] * s.k, s.k, xs.begin() + i * s.k);
    }
    const std::vector<float> cpu = Cpu(*w, xs, mr, s.k, false, s.n);
    // Σ|x·w| (double) on every 8th checked row: the per-element bound there.
    const int64_t step = 8;
    const gemm_test::DoubleResult dr = gemm_test::DoubleLinear(h, xs, {}, mr, s.k, step);
    for (const Kernel& kern : kernels) {
      const gemm_test::GpuRunOptions o{false, 0, kern.tile, 0, kern.bf16, kern.ws};
      const std::vector<float> gpu_all = gemm_test::RunLinearGpu(d.view(), x, m, s.k, o);
      // Determinism: a second call gives the same bits.
      const std::vector<float> again = gemm_test::RunLinearGpu(d.view(), x, m, s.k, o);
      ASSERT_EQ(std::memcmp(gpu_all.data(), again.data(), gpu_all.size() * 4), 0) << s.name;
      std::vector<float> gpu(mr * s.n);
      for (int64_t i = 0; i < mr; ++i) {
        std::copy_n(gpu_all.begin() + rows[i] * s.n, s.n, gpu.begin() + i * s.n);
      }
      const Comparison c = gemm_test::Compare(gpu, cpu, mr, s.n, s.n, dr.abs_sum, 1.0, coef);
      const LinearCudaKernel used = PlanLinearCuda(m, s.n, s.k, kern.tile, 0, kern.bf16).kernel;
      std::printf(
          "%-22s N %6ld K %6ld M %5ld %-10s: %ld outputs, bit-equal %.4f, within 1 ulp %.5f, "
          "rel-RMS %.2e, bound checked %ld (worst %.3f of allowed)\n",
          s.name, static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m),
          LinearCudaKernelName(used), static_cast<long>(c.count),
          static_cast<double>(c.bit_equal) / c.count, static_cast<double>(c.within_ulp) / c.count,
          c.rel_rms, static_cast<long>(c.bound_checked), c.worst_excess);
      // The FP8 wgmma kernel's tensor-core FP8 accumulation is coarser than the fp32 sums the
      // bound assumes (measured on the H200: rel-RMS ~6e-4, 99.3 % within one bf16 ulp, up to
      // ~5x the fp32 bound on some outputs): it is opt-in and checked by the looser figures below.
      if (used != LinearCudaKernel::kWgmmaFp8) {
        EXPECT_EQ(c.bound_failures, 0) << s.name << " M " << m << " " << kern.Name();
      }
      EXPECT_GE(c.within_ulp, c.count * 99 / 100) << s.name << " M " << m << " " << kern.Name();
      EXPECT_LE(c.rel_rms, std::ldexp(1.0, -8)) << s.name << " M " << m << " " << kern.Name();
      EXPECT_GT(c.bound_checked, 0);
    }
  }
}

// The automatic plan (weight-streaming at M = 1 and 7 on every shape, mma.sync at 16 and 64) and
// the 16-row mma.sync kernel on the same data.
TEST_F(GemmGpuTest, ReleasedShapesSmallM) {
  uint64_t seed = 100;
  for (const Shape& s : kReleased) CheckRandomShape(s, {1, 7, 16, 64}, {kAuto, kMma16}, ++seed);
}

// The register-sourced wgmma kernel at decode batches (one and two 128-row x tiles, the 64-row
// form at M <= 64) against the mma.sync kernel on the same data.
TEST_F(GemmGpuTest, ReleasedShapesDecodeBatchRs) {
  uint64_t seed = 300;
  for (const Shape& s : kReleased) {
    CheckRandomShape(s, {9, 16, 64, 100, 128, 256}, {kRs, kMma64}, ++seed);
  }
}

// The three kernels on the same data: mma.sync (64-row tiles), FP8 wgmma, bf16-expansion wgmma.
// (The test name is kept from when there were two.)
TEST_F(GemmGpuTest, ReleasedShapesLargeMBothKernels) {
  uint64_t seed = 200;
  for (const Shape& s : kReleased) {
    CheckRandomShape(s, {128, 130, 1000, 4096}, {kMma64, kFp8Wgmma, kBf16Wgmma}, ++seed);
  }
}

TEST_F(GemmGpuTest, RandomWithBiasF32OutputAndSplits) {
  Rng rng(23);
  const int64_t n = 1000, k = 2304, m = 37, y_stride = 1001;
  const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, n, k, true, rng);
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  const std::vector<uint16_t> x = gemm_test::RandomActivations(m, k, k, rng);
  const gemm_test::DoubleResult dr = gemm_test::DoubleLinear(h, x, {}, m, k, 1);
  const double coef = (k / 4.0 + 64.0) * std::ldexp(1.0, -24);
  for (bool f32 : {false, true}) {
    const std::vector<float> cpu = Cpu(*w, x, m, k, f32, y_stride);
    for (const Kernel& kern : {kAuto, kStream, kRs, kFp8Wgmma, kBf16Wgmma}) {
      const int64_t tile = kern.tile;
      for (int64_t split : {0, 1, 5}) {
        // Packed [m, n] like cpu and DoubleLinear's abs_sum.
        const std::vector<float> g =
            PackGpu(gemm_test::RunLinearGpu(d.view(), x, m, k,
                                            {f32, y_stride, tile, split, kern.bf16, kern.ws}),
                    m, n, y_stride);
        // The final fp32 bias add rounds once: sums that differ within the bound may round to
        // neighbouring floats, one fp32 ulp (= 2^-16 bf16 ulp) apart.
        const Comparison cmp =
            gemm_test::Compare(g, cpu, m, n, n, dr.abs_sum, f32 ? std::ldexp(1.0, -16) : 1.0, coef);
        if (PlanLinearCuda(m, n, k, tile, split, kern.bf16).kernel != LinearCudaKernel::kWgmmaFp8) {
          EXPECT_EQ(cmp.bound_failures, 0) << f32 << " " << kern.Name() << " split " << split;
          EXPECT_GE(cmp.within_ulp, cmp.count * 99 / 100);
        } else {
          // The opt-in FP8 wgmma's coarser FP8 accumulation (measured: 98.9 % within one bf16
          // ulp here, rel-RMS ~6e-4 on the released shapes).
          EXPECT_GE(cmp.within_ulp, cmp.count * 97 / 100) << kern.Name() << " split " << split;
          EXPECT_LE(cmp.rel_rms, std::ldexp(1.0, -8)) << kern.Name() << " split " << split;
        }
      }
    }
  }
}

// ---- contract ---------------------------------------------------------------------------------

// The warp-specialised bf16-expansion kernel runs the cp.async kernel's wgmma sequence on the same
// operands, so on any input (random codes, scales, activations) its outputs are the same bits:
// ragged N (1000: a partial 256-column tile) and K (1312: a partial 64-wide step), M = 128, 256,
// 1000 (a partial 128-row tile) and 4096 (many tiles per persistent CTA), splits, f32 output;
// first a small case (one and a half K steps, one ragged N tile). The first mismatches name M,
// N, K, split and the element.
TEST_F(GemmGpuTest, WarpSpecialisedBitIdenticalToCpAsync) {
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
          const gemm_test::GpuRunOptions cp{f32, 0, 128, split, true, false};
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
TEST_F(GemmGpuTest, WarpSpecialisedDecodesEveryCodeAndScale) {
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
TEST_F(GemmGpuTest, ExpandedWeightsBitIdenticalToInPlaceDecode) {
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
          GpuRunOptions in_place{f32, 0, 128, split, true, true};
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
TEST_F(GemmGpuTest, ExpandedWeightsNarrowTilesBitIdentical) {
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
TEST_F(GemmGpuTest, StreamKTailBitsMatchSplitAndWhole) {
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
TEST_F(GemmGpuTest, PairMulticastBitIdentical) {
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
TEST_F(GemmGpuTest, PreQuantisedXBitIdentical) {
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
TEST_F(GemmGpuTest, KeptExpansionBitIdentical) {
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

TEST_F(GemmGpuTest, ZeroRowsIsANoOp) {
  Rng rng(29);
  const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, 64, 64, false, rng);
  const auto w = Prepare(h);
  const DeviceFp8Linear d = Upload(*w);
  LinearCudaParams p;
  p.weight = &d.view();
  EXPECT_TRUE(LaunchLinearFp8(p, nullptr).ok());
  p.m = 1;  // no x, y or workspace: rejected before anything is enqueued
  EXPECT_EQ(LaunchLinearFp8(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GemmGpuTest, UploadRejectsNanCodesAndOtherFormats) {
  Rng rng(31);
  HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, 64, 64, false, rng);
  h.weight[5 * 64 + 9] = 0xFF;
  const auto w = Prepare(h);
  const auto d = DeviceFp8Linear::Upload(*w);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("row 5, column 9"), std::string::npos) << d.status();
  const HostLinear b = gemm_test::RandomLinear(WeightFormat::kBf16, 64, 64, false, rng);
  EXPECT_FALSE(DeviceFp8Linear::Upload(*Prepare(b)).ok());
}

}  // namespace
}  // namespace flashserve::kernels
