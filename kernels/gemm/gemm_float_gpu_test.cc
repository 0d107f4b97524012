// kernels_gemm_gpu_test, FloatLinearGpuTest.*: LaunchFloatLinear (gemm_float_cuda.h) against
// LinearCpu (kExact and kFast) per group.
// - One-hot activations (one nonzero x = ±2^e per row, at a column that moves with row and
//   group): every output is x·w (+ bias) exactly on both sides, so GPU == CPU bit for bit over
//   every dtype pair, tile size (wgmma's 128 for bf16 x · bf16 W), split count, group layout and
//   padded / odd / misaligned stride.
//   A failure here is an indexing or fragment-layout bug; the first mismatches are printed.
// - Small-integer bf16 inputs (every partial sum exact in any order): bit for bit with sums over
//   all of K, across splits.
// - Random inputs at the released shapes (wo_a 8 × [1024, 4096] on o viewed [M, 8, 4096],
//   indexer weights_proj [32, 5120] and wk [128, 512], compressor r = 1 wkv [512, 5120] bf16;
//   MoE gate [384, 5120] and compressor r = 2 wkv / wgate [512, 5120] fp32 with fp32 output),
//   M = 1, 3, 16, and M = 128, 130, 1000, 4096 through both kernels (mma.sync tile_rows 64 and
//   wgmma tile_rows 128, bf16 W; fp32 W has the mma.sync kernel only). Per element |gpu - cpu| <=
//   u·ulp_bf16 + (2K + 64)·2^-24·Σ|x·w| (u = 1 for bf16 outputs, 2^-16 for fp32 ones with a bias);
//   bf16 outputs: at most 0.1 % more than one bf16 ulp apart; fp32 outputs: max |gpu - cpu| /
//   Σ|x·w| <= 2^-14. README.md "CUDA" justifies the figures.
// - The model's fp32-weight Linears narrowed to bf16 (NarrowFloatLinearWeight) through every plan.
// Over 800 lines on purpose: one suite over one launcher, whose helpers (the layout / problem
// description, RunGpu, the CPU references, the tolerance check) serve every case; a split would
// need a helper header used by this file alone.
#include <algorithm>
#include <cmath>
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
#include "kernels/gemm/gemm_float_cuda.h"
#include "kernels/gemm/gemm_test_util.h"

namespace flashserve::kernels {
namespace {

using gemm_test::HostLinear;
using gemm_test::Rng;

ThreadPool* Pool() {
  static ThreadPool* pool = new ThreadPool(std::max(1u, std::thread::hardware_concurrency()));
  return pool;
}

// How x, W and y are laid out and typed. Group g's x block starts at x_offset + g · x_gs with
// row stride x_stride (interleaved groups like o viewed [M, 8, 4096]); likewise y.
struct Layout {
  bool w_f32 = false, x_f32 = false, y_f32 = false, bias = false;
  int64_t groups = 1;
  int64_t x_pad = 0;     // x_gs = k + x_pad; x_stride = groups · x_gs + x_pad
  int64_t x_offset = 0;  // elements before x's first row (odd: misaligned rows)
  int64_t y_pad = 0;     // y_gs = n + y_pad; y_stride = groups · y_gs + y_pad
  int64_t w_pad = 0;     // w_group_stride = n·k + w_pad (a multiple of 8)
  int64_t tile_rows = 0, split_k = 0;
  bool ws = true;       // FloatLinearCudaParams::wgmma_ws
  int64_t ws_cols = 0;  // FloatLinearCudaParams::ws_tile_cols (0: the default, by waves)
  // w_f32 weights hold bf16 values (the model's fp32-weight Linears: bf16 checkpoint weights
  // promoted to fp32); the GPU gets them through NarrowFloatLinearWeight as w_bf16. The CPU
  // reference keeps the kF32 PreparedLinear.
  bool narrow = false;
};

std::string Describe(const Layout& l, int64_t m, int64_t n, int64_t k) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "M %ld N %ld K %ld G %ld w %s x %s y %s%s x_pad %ld x_off %ld y_pad %ld tile %ld "
                "split %ld%s%s",
                static_cast<long>(m), static_cast<long>(n), static_cast<long>(k),
                static_cast<long>(l.groups), l.w_f32 ? "f32" : "bf16", l.x_f32 ? "f32" : "bf16",
                l.y_f32 ? "f32" : "bf16", l.bias ? " bias" : "", static_cast<long>(l.x_pad),
                static_cast<long>(l.x_offset), static_cast<long>(l.y_pad),
                static_cast<long>(l.tile_rows), static_cast<long>(l.split_k),
                l.ws ? "" : " cp.async", l.narrow ? " narrowed" : "");
  return buf;
}

// The problem on the host: per group a HostLinear (the bias is group 0's, shared) and packed
// activations [m, k] (bf16 bits, or fp32 when x_f32).
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  Layout l;
  std::vector<HostLinear> w;
  std::vector<std::vector<uint16_t>> xb;
  std::vector<std::vector<float>> xf;
};

// Runs LaunchFloatLinear on a device copy; returns y per group, packed [m, n], widened to float.
// Checks that no element outside the groups' [m, n] blocks was written.
std::vector<std::vector<float>> RunGpu(const Problem& pr) {
  const Layout& l = pr.l;
  const int64_t m = pr.m, n = pr.n, k = pr.k, g_count = l.groups;
  const int64_t x_gs = k + l.x_pad, x_stride = g_count * x_gs + l.x_pad;
  const int64_t y_gs = n + l.y_pad, y_stride = g_count * y_gs + l.y_pad;
  const int64_t w_gs = n * k + l.w_pad;
  const size_t xe = static_cast<size_t>(l.x_offset + std::max<int64_t>(1, m) * x_stride);
  const size_t ye = static_cast<size_t>(std::max<int64_t>(1, m) * y_stride);
  const size_t we = static_cast<size_t>(g_count * w_gs);
  const bool w_dev_f32 = l.w_f32 && !l.narrow;
  const size_t x_es = l.x_f32 ? 4 : 2, y_es = l.y_f32 ? 4 : 2, w_es = w_dev_f32 ? 4 : 2;

  std::vector<uint8_t> hx(xe * x_es, 0), hw(we * w_es, 0);
  for (int64_t g = 0; g < g_count; ++g) {
    if (l.narrow) {
      std::vector<float> wf(pr.w[g].weight.size() / 4);
      std::memcpy(wf.data(), pr.w[g].weight.data(), pr.w[g].weight.size());
      CHECK(NarrowFloatLinearWeight(wf.data(), wf.size(),
                                    reinterpret_cast<uint16_t*>(hw.data() + g * w_gs * w_es)));
    } else {
      std::memcpy(hw.data() + g * w_gs * w_es, pr.w[g].weight.data(), pr.w[g].weight.size());
    }
    for (int64_t r = 0; r < m; ++r) {
      const size_t at = static_cast<size_t>(l.x_offset + r * x_stride + g * x_gs) * x_es;
      const void* src = l.x_f32 ? static_cast<const void*>(pr.xf[g].data() + r * k)
                                : static_cast<const void*>(pr.xb[g].data() + r * k);
      std::memcpy(hx.data() + at, src, k * x_es);
    }
  }
  std::vector<float> bias;
  if (l.bias) {
    for (int64_t c = 0; c < n; ++c) {
      uint16_t b;
      std::memcpy(&b, pr.w[0].bias.data() + 2 * c, 2);
      bias.push_back(formats::Bf16BitsToFloat(b));
    }
  }
  DeviceBuffer dx(hx.size()), dw(hw.size()), dy(ye * y_es), db(std::max<size_t>(4, n * 4));
  dx.CopyFromHost(hx.data(), hx.size());
  dw.CopyFromHost(hw.data(), hw.size());
  if (l.bias) db.CopyFromHost(bias.data(), n * 4);
  CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));  // NaN: unwritten outputs show up

  FloatLinearCudaParams p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.groups = g_count;
  p.w_bf16 = w_dev_f32 ? nullptr : dw.get<uint16_t>();
  p.w_f32 = w_dev_f32 ? dw.get<float>() : nullptr;
  p.w_group_stride = w_gs;
  p.bias = l.bias ? db.get<float>() : nullptr;
  p.x_bf16 = l.x_f32 ? nullptr : dx.get<uint16_t>() + l.x_offset;
  p.x_f32 = l.x_f32 ? dx.get<float>() + l.x_offset : nullptr;
  p.x_stride = x_stride;
  p.x_group_stride = x_gs;
  p.y_bf16 = l.y_f32 ? nullptr : dy.get<uint16_t>();
  p.y_f32 = l.y_f32 ? dy.get<float>() : nullptr;
  p.y_stride = y_stride;
  p.y_group_stride = y_gs;
  p.tile_rows = l.tile_rows;
  p.split_k = l.split_k;
  p.wgmma_ws = l.ws;
  p.ws_tile_cols = l.ws_cols;
  DeviceBuffer ws(std::max<size_t>(16, FloatLinearCudaWorkspaceBytes(p, m)));
  // Garbage in the workspace must not matter.
  CUDA_CHECK(cudaMemset(ws.get(), 0x7F, ws.bytes()));
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  const absl::Status s = LaunchFloatLinear(p, nullptr);
  CHECK(s.ok()) << s;
  CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<uint8_t> hy(ye * y_es);
  dy.CopyToHost(hy.data(), hy.size());
  auto at = [&](size_t i) {
    if (l.y_f32) {
      float v;
      std::memcpy(&v, hy.data() + 4 * i, 4);
      return v;
    }
    uint16_t b;
    std::memcpy(&b, hy.data() + 2 * i, 2);
    return formats::Bf16BitsToFloat(b);
  };
  std::vector<std::vector<float>> out(g_count, std::vector<float>(m * n));
  std::vector<uint8_t> inside(ye, 0);
  for (int64_t g = 0; g < g_count; ++g) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        const size_t i = static_cast<size_t>(r * y_stride + g * y_gs + c);
        out[g][r * n + c] = at(i);
        inside[i] = 1;
      }
    }
  }
  int64_t written = 0;
  for (size_t i = 0; i < ye; ++i) written += (!inside[i] && !std::isnan(at(i))) ? 1 : 0;
  EXPECT_EQ(written, 0) << "elements outside the outputs were written";
  return out;
}

std::unique_ptr<PreparedLinear> Prepare(const HostLinear& h) {
  auto l = PreparedLinear::Create(h.View());
  CHECK(l.ok()) << l.status();
  return std::make_unique<PreparedLinear>(std::move(l).value());
}

// LinearCpu on group g's rows `rows` (packed [rows, n]).
std::vector<float> Cpu(const Problem& pr, const PreparedLinear& w, int64_t g,
                       const std::vector<int64_t>& rows, LinearMode mode) {
  const auto mr = static_cast<int64_t>(rows.size());
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  for (int64_t r : rows) {
    if (pr.l.x_f32) {
      xf.insert(xf.end(), pr.xf[g].begin() + r * pr.k, pr.xf[g].begin() + (r + 1) * pr.k);
    } else {
      xb.insert(xb.end(), pr.xb[g].begin() + r * pr.k, pr.xb[g].begin() + (r + 1) * pr.k);
    }
  }
  gemm_test::RunOptions o;
  o.mode = mode;
  o.f32_out = pr.l.y_f32;
  o.pool = Pool();
  std::vector<float> y;
  const absl::Status s = gemm_test::RunLinear(w, xb, xf, mr, pr.k, o, &y);
  CHECK(s.ok()) << s;
  return y;
}

// Σ_k |x·w| in double for group g's rows (packed [rows, n]).
std::vector<double> AbsSum(const Problem& pr, int64_t g, const std::vector<int64_t>& rows) {
  const HostLinear& h = pr.w[g];
  std::vector<float> wf(pr.n * pr.k);
  for (int64_t i = 0; i < pr.n * pr.k; ++i) {
    if (pr.l.w_f32) {
      std::memcpy(&wf[i], h.weight.data() + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, h.weight.data() + 2 * i, 2);
      wf[i] = formats::Bf16BitsToFloat(b);
    }
  }
  std::vector<double> out;
  std::vector<double> x(pr.k);
  for (int64_t r : rows) {
    for (int64_t c = 0; c < pr.k; ++c) {
      x[c] = std::fabs(pr.l.x_f32 ? pr.xf[g][r * pr.k + c]
                                  : formats::Bf16BitsToFloat(pr.xb[g][r * pr.k + c]));
    }
    for (int64_t j = 0; j < pr.n; ++j) {
      const float* wr = wf.data() + j * pr.k;
      double s = 0;
      for (int64_t c = 0; c < pr.k; ++c) s += x[c] * std::fabs(wr[c]);
      out.push_back(s);
    }
  }
  return out;
}

// Rows of an M-row call the CPU reference recomputes: all for M <= 130, else the first 24, 16
// spread through the middle and the last 24 (tile edges among them).
std::vector<int64_t> CheckedRows(int64_t m) {
  std::vector<int64_t> rows;
  if (m <= 130) {
    for (int64_t r = 0; r < m; ++r) rows.push_back(r);
    return rows;
  }
  for (int64_t r = 0; r < 24; ++r) rows.push_back(r);
  for (int64_t i = 1; i <= 16; ++i) rows.push_back(24 + (m - 48) * i / 17);
  for (int64_t r = m - 24; r < m; ++r) rows.push_back(r);
  return rows;
}

void ExpectBitEqual(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t n,
                    const std::vector<int64_t>& rows, const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const float g = gpu[rows[i / n] * n + i % n], c = cpu[i];
    if (std::isnan(g) && std::isnan(c)) continue;
    if (std::memcmp(&g, &c, 4) != 0 && ++bad <= 5) {
      ADD_FAILURE() << what << ": y[" << rows[i / n] << "][" << i % n << "] gpu " << g << " cpu "
                    << c;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Tolerance check of one group (see the file comment); prints the statistics.
void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu,
                 const std::vector<double>& abs_sum, int64_t n, int64_t k,
                 const std::vector<int64_t>& rows, const Layout& l, const std::string& what) {
  const double coef = (2.0 * k + 64.0) * std::ldexp(1.0, -24);
  const double ulp_w = l.y_f32 ? (l.bias ? std::ldexp(1.0, -16) : 0.0) : 1.0;
  int64_t count = 0, bit_equal = 0, beyond_ulp = 0, failures = 0;
  double worst_rel = 0, worst_excess = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const int64_t r = rows[i / n], c = static_cast<int64_t>(i % n);
    const float g = gpu[r * n + c], e = cpu[i];
    ++count;
    uint32_t gb, eb;
    std::memcpy(&gb, &g, 4);
    std::memcpy(&eb, &e, 4);
    if (gb == eb) {
      ++bit_equal;
      continue;
    }
    const double diff = std::fabs(static_cast<double>(g) - e);
    const double ulp = gemm_test::Bf16Ulp(std::max(std::fabs(g), std::fabs(e)));
    if (!(diff <= ulp)) ++beyond_ulp;
    const double allowed = ulp_w * ulp + coef * abs_sum[i];
    if (abs_sum[i] > 0) worst_rel = std::max(worst_rel, diff / abs_sum[i]);
    if (allowed > 0) worst_excess = std::max(worst_excess, diff / allowed);
    if (!(diff <= allowed) && ++failures <= 5) {
      ADD_FAILURE() << what << ": y[" << r << "][" << c << "] gpu " << g << " cpu " << e
                    << " sum|xw| " << abs_sum[i];
    }
  }
  std::printf(
      "%s: %ld outputs, bit-equal %.4f, beyond 1 bf16 ulp %ld, max |d|/sum|xw| %.2e, worst "
      "%.4f of the bound\n",
      what.c_str(), static_cast<long>(count), static_cast<double>(bit_equal) / count,
      static_cast<long>(beyond_ulp), worst_rel, worst_excess);
  EXPECT_EQ(failures, 0) << what;
  if (!l.y_f32) {
    // 0.1 %, at least one: a single output of a small case may sit past one ulp under heavy
    // cancellation while well inside the bound (seen on the H200: M 16 x N 32, 0.01 of it).
    EXPECT_LE(beyond_ulp, std::max<int64_t>(1, count / 1000)) << what;
  } else {
    EXPECT_LE(worst_rel, std::ldexp(1.0, -14)) << what;
  }
}

class FloatLinearGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { FS_SKIP_WITHOUT_GPU(); }
};

HostLinear RandomWeight(const Layout& l, int64_t n, int64_t k, Rng& rng) {
  if (l.narrow) {  // a bf16 weight widened to the kF32 format
    HostLinear h = gemm_test::RandomLinear(WeightFormat::kBf16, n, k, l.bias, rng);
    std::vector<uint8_t> wide;
    for (size_t i = 0; i < h.weight.size(); i += 2) {
      const uint8_t four[4] = {0, 0, h.weight[i], h.weight[i + 1]};  // little-endian fp32
      wide.insert(wide.end(), four, four + 4);
    }
    h.format = WeightFormat::kF32;
    h.weight = std::move(wide);
    return h;
  }
  return gemm_test::RandomLinear(l.w_f32 ? WeightFormat::kF32 : WeightFormat::kBf16, n, k, l.bias,
                                 rng);
}

// fp32 activations with all 24 significand bits in use (bf16 activations perturbed).
std::vector<float> RandomF32Activations(int64_t m, int64_t k, Rng& rng) {
  const std::vector<uint16_t> b = gemm_test::RandomActivations(m, k, k, rng);
  std::vector<float> x(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    x[i] = formats::Bf16BitsToFloat(b[i]) * static_cast<float>(1.0 + rng.Uniform() / 128.0);
  }
  return x;
}

Problem MakeProblem(int64_t m, int64_t n, int64_t k, const Layout& l, bool one_hot, Rng& rng) {
  Problem pr;
  pr.m = m;
  pr.n = n;
  pr.k = k;
  pr.l = l;
  for (int64_t g = 0; g < l.groups; ++g) {
    pr.w.push_back(RandomWeight(l, n, k, rng));
    if (l.bias) pr.w[g].bias = pr.w[0].bias;
    std::vector<float> x(m * k, 0.f);
    if (one_hot) {
      for (int64_t r = 0; r < m; ++r) {
        const double v = std::ldexp(1.0, static_cast<int>(rng.Int(-2, 2)));
        x[r * k + (r * 37 + g * 11 + 5) % k] = static_cast<float>(rng.Int(0, 1) ? v : -v);
      }
    } else if (l.x_f32) {
      x = RandomF32Activations(m, k, rng);
    }
    if (l.x_f32) {
      pr.xf.push_back(x);
    } else if (one_hot) {
      std::vector<uint16_t> b(m * k);
      for (size_t i = 0; i < b.size(); ++i) b[i] = formats::FloatToBf16Bits(x[i]);
      pr.xb.push_back(b);
    } else {
      pr.xb.push_back(gemm_test::RandomActivations(m, k, k, rng));
    }
  }
  return pr;
}

// ---- one-hot activations: bit for bit ---------------------------------------------------------

TEST_F(FloatLinearGpuTest, OneHotBitExactOverDtypesTilesSplitsAndLayouts) {
  Rng rng(41);
  int runs = 0;
  for (int dtypes = 0; dtypes < 8; ++dtypes) {
    Layout l;
    l.w_f32 = dtypes & 1;
    l.x_f32 = dtypes & 2;
    l.y_f32 = dtypes & 4;
    for (int64_t m : {1, 3, 16, 40, 130}) {
      for (int layout = 0; layout < 3; ++layout) {
        l.groups = layout == 0 ? 1 : 3;
        l.bias = layout == 2;
        l.x_pad = layout == 2 ? 5 : (layout == 1 ? 8 : 0);  // odd: the slow load path
        l.x_offset = layout == 2 ? 1 : 0;
        l.y_pad = layout == 0 ? 0 : 3;
        l.w_pad = layout == 1 ? 16 : 0;
        const int64_t n = layout == 0 ? 200 : 72, k = layout == 0 ? 520 : 264;
        const Problem pr = MakeProblem(m, n, k, l, /*one_hot=*/true, rng);
        const std::vector<int64_t> rows = CheckedRows(m);
        std::vector<std::vector<float>> cpu;
        for (int64_t g = 0; g < l.groups; ++g) {
          cpu.push_back(Cpu(pr, *Prepare(pr.w[g]), g, rows, LinearMode::kExact));
        }
        for (int64_t tile : {0, 1, 16, 32, 64, 128, 256}) {
          if (tile == 64 && l.x_f32) continue;
          if (tile >= 128 && (l.x_f32 || l.w_f32)) continue;
          if (tile == 256 && layout == 2) continue;  // misaligned x rows: no TMA (rejected)
          // The CUDA-core kernel: at most 4 rows, aligned x rows (rejected otherwise).
          if (tile == 1 && (m > kFloatLinearCudaGemvMaxM || layout == 2)) continue;
          for (int64_t split : {0, 1, 3}) {
            if (tile == 1 && split != 0) continue;  // it never splits
            Problem q = pr;
            q.l.tile_rows = tile;
            q.l.split_k = split;
            const auto gpu = RunGpu(q);
            for (int64_t g = 0; g < l.groups; ++g) {
              ExpectBitEqual(gpu[g], cpu[g], n, rows,
                             Describe(q.l, m, n, k) + " group " + std::to_string(g));
            }
            ++runs;
          }
        }
      }
    }
  }
  std::printf("one-hot: %d GPU runs bit-identical to LinearCpu (exact)\n", runs);
}

// The wgmma kernel over several 256-column tiles (N 520: a partial third), 128-row tile edges,
// groups, odd / misaligned strides and splits; the mma.sync kernel on the same data.
TEST_F(FloatLinearGpuTest, OneHotBitExactWgmmaWideN) {
  Rng rng(45);
  int runs = 0;
  for (bool y_f32 : {false, true}) {
    Layout l;
    l.y_f32 = y_f32;
    for (int64_t m : {127, 130, 300}) {
      // Layouts 3 and 4: aligned y rows with a bias, one group and two (the shared-memory bf16
      // epilogues of the warp-specialised and the swapped-role kernel, with the bias add).
      for (int layout = 0; layout < 5; ++layout) {
        l.groups = layout == 0 || layout == 3 ? 1 : 2;
        l.bias = layout >= 2;
        l.x_pad = layout == 2 ? 5 : (layout == 1 || layout == 4 ? 8 : 0);
        l.x_offset = layout == 2 ? 1 : 0;
        l.y_pad = layout == 0 || layout == 3 ? 0 : (layout == 4 ? 8 : 3);
        l.w_pad = layout == 1 || layout == 4 ? 16 : 0;
        const int64_t n = 520, k = layout == 0 || layout == 3 ? 1000 : 264;
        const Problem pr = MakeProblem(m, n, k, l, /*one_hot=*/true, rng);
        const std::vector<int64_t> rows = CheckedRows(m);
        std::vector<std::vector<float>> cpu;
        for (int64_t g = 0; g < l.groups; ++g) {
          cpu.push_back(Cpu(pr, *Prepare(pr.w[g]), g, rows, LinearMode::kExact));
        }
        for (int64_t tile : {64, 128, 256}) {
          if (tile == 256 && layout == 2) continue;  // misaligned x rows: no TMA (rejected)
          for (int64_t split : {0, 1, 3}) {
            Problem q = pr;
            q.l.tile_rows = tile;
            q.l.split_k = split;
            const auto gpu = RunGpu(q);
            for (int64_t g = 0; g < l.groups; ++g) {
              ExpectBitEqual(gpu[g], cpu[g], n, rows,
                             Describe(q.l, m, n, k) + " group " + std::to_string(g));
            }
            ++runs;
          }
        }
      }
    }
  }
  std::printf("one-hot wide N: %d GPU runs bit-identical to LinearCpu (exact)\n", runs);
}

// ---- small-integer bf16 inputs: every sum exact, bit for bit ----------------------------------

TEST_F(FloatLinearGpuTest, SmallIntegerBf16BitExactAcrossSplits) {
  Rng rng(43);
  for (int64_t k : {64, 1000, 5120}) {
    const int64_t n = 136;
    HostLinear h;
    h.format = WeightFormat::kBf16;
    h.n = n;
    h.k = k;
    h.weight.resize(2 * n * k);
    for (int64_t i = 0; i < n * k; ++i) {
      // Multiples of 2^-3 in [-1, 1]: with x integers in [-3, 3], Σ|x·w| < 2^15, so every sum
      // is exact in fp32 in any order.
      const uint16_t b = formats::FloatToBf16Bits(static_cast<float>(rng.Int(-8, 8)) / 8.f);
      std::memcpy(&h.weight[2 * i], &b, 2);
    }
    for (int64_t m : {1, 17, 130, 300}) {
      Problem pr;
      pr.m = m;
      pr.n = n;
      pr.k = k;
      pr.w = {h};
      std::vector<uint16_t> x(m * k);
      for (uint16_t& v : x) v = formats::FloatToBf16Bits(static_cast<float>(rng.Int(-3, 3)));
      pr.xb = {x};
      const std::vector<int64_t> rows = CheckedRows(m);
      const std::vector<float> cpu = Cpu(pr, *Prepare(h), 0, rows, LinearMode::kExact);
      for (bool y_f32 : {false, true}) {
        Problem q = pr;
        q.l.y_f32 = y_f32;
        const std::vector<float> cpu_y =
            y_f32 ? Cpu(q, *Prepare(h), 0, rows, LinearMode::kExact) : cpu;
        for (int64_t tile : {0, 1, 64, 128, 256}) {
          if (tile == 1 && m > kFloatLinearCudaGemvMaxM) continue;
          for (int64_t split : {0, 1, 7}) {
            if (tile == 1 && split != 0) continue;
            q.l.tile_rows = tile;
            q.l.split_k = split;
            ExpectBitEqual(RunGpu(q)[0], cpu_y, n, rows, Describe(q.l, m, n, k));
          }
        }
      }
    }
  }
}

// ---- random inputs at the released shapes -----------------------------------------------------

struct Released {
  const char* name;
  int64_t n, k, groups;
  bool w_f32, y_f32;
};
// Model spec §4.3 step 6, §4.4, §4.5, §4.7.
constexpr Released kReleased[] = {
    {"attn.wo_a (8 groups)", 1024, 4096, 8, false, false},
    {"indexer.weights_proj", 32, 5120, 1, false, false},
    {"indexer.wk", 128, 512, 1, false, false},
    {"compressor r=1 wkv", 512, 5120, 1, false, false},
    {"moe.gate (fp32)", 384, 5120, 1, true, true},
    {"compressor r=2 wkv/wgate", 512, 5120, 1, true, true},
};

// One random problem; the CPU references once; then each of `tiles` (l.tile_rows replaced: 0 =
// automatic, 64 = mma.sync, 128 = wgmma) on the same data.
void CheckRandom(const char* name, int64_t m, int64_t n, int64_t k, const Layout& l, uint64_t seed,
                 const std::vector<int64_t>& tiles) {
  Rng rng(seed);
  const Problem pr = MakeProblem(m, n, k, l, /*one_hot=*/false, rng);
  const std::vector<int64_t> rows = CheckedRows(m);
  std::vector<std::vector<double>> abs_sum;
  std::vector<std::vector<float>> exact, fast;
  for (int64_t g = 0; g < l.groups; ++g) {
    const auto w = Prepare(pr.w[g]);
    abs_sum.push_back(AbsSum(pr, g, rows));
    exact.push_back(Cpu(pr, *w, g, rows, LinearMode::kExact));
    fast.push_back(Cpu(pr, *w, g, rows, LinearMode::kFast));
  }
  for (int64_t tile : tiles) {
    Problem q = pr;
    q.l.tile_rows = tile;
    const auto gpu = RunGpu(q);
    // Determinism: a second call gives the same bits.
    const auto again = RunGpu(q);
    for (int64_t g = 0; g < l.groups; ++g) {
      ASSERT_EQ(std::memcmp(gpu[g].data(), again[g].data(), gpu[g].size() * 4), 0) << name;
    }
    for (int64_t g = 0; g < l.groups; ++g) {
      for (LinearMode mode : {LinearMode::kExact, LinearMode::kFast}) {
        ExpectClose(
            gpu[g], mode == LinearMode::kExact ? exact[g] : fast[g], abs_sum[g], n, k, rows, q.l,
            std::string(name) + " " + Describe(q.l, m, n, k) + " group " + std::to_string(g) +
                (mode == LinearMode::kExact ? " vs exact" : " vs fast"));
      }
    }
  }
}

TEST_F(FloatLinearGpuTest, ReleasedShapes) {
  uint64_t seed = 300;
  for (const Released& s : kReleased) {
    for (int64_t m : {1, 3, 16}) {
      Layout l;
      l.w_f32 = s.w_f32;
      l.y_f32 = s.y_f32;
      l.groups = s.groups;
      // Up to 4 rows the automatic plan is the CUDA-core kernel: the mma.sync one (16) on the
      // same data too.
      std::vector<int64_t> tiles = s.w_f32 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 256};
      if (m <= kFloatLinearCudaGemvMaxM) tiles.push_back(16);
      CheckRandom(s.name, m, s.n, s.k, l, ++seed, tiles);
    }
  }
}

// Decode-batch M through the swapped-role kernel (tile_rows 256; N = 64 x rows per CTA up to
// M = 64, 128 above; two m tiles at 256) and the automatic plan on the same data.
TEST_F(FloatLinearGpuTest, ReleasedShapesDecodeBatchSwap) {
  uint64_t seed = 320;
  for (const Released& s : kReleased) {
    if (s.w_f32) continue;
    for (int64_t m : {8, 9, 33, 64, 65, 100, 256}) {
      Layout l;
      l.y_f32 = s.y_f32;
      l.groups = s.groups;
      CheckRandom(s.name, m, s.n, s.k, l, ++seed, {0, 256});
    }
  }
}

// The model's fp32-weight Linears (the gate, the r = 2 compressor's wkv / wgate pair: bf16 values
// in fp32) narrowed to bf16: every plan the automatic choice takes from 1 to 4,096 rows (the
// CUDA-core kernel, the swapped-role kernel, wgmma) against LinearCpu on the kF32 weight.
TEST_F(FloatLinearGpuTest, NarrowedFp32WeightsEveryPlan) {
  uint64_t seed = 370;
  for (const Released& s : kReleased) {
    if (!s.w_f32) continue;
    for (int64_t m : {1, 3, 16, 64, 200, 1000, 4096}) {
      Layout l;
      l.w_f32 = true;
      l.narrow = true;
      l.y_f32 = s.y_f32;
      // The compressor's wkv and wgate as one grouped call; the gate alone.
      l.groups = std::string(s.name).rfind("moe.gate", 0) == 0 ? 1 : 2;
      CheckRandom(s.name, m, s.n, s.k, l, ++seed, {0});
    }
  }
}

// Large M through both kernels on the same data (bf16 W: mma.sync 64-row tiles and wgmma; fp32
// W: the automatic plan, mma.sync).
TEST_F(FloatLinearGpuTest, ReleasedShapesLargeMBothKernels) {
  uint64_t seed = 350;
  for (const Released& s : kReleased) {
    for (int64_t m : {128, 130, 1000, 4096}) {
      Layout l;
      l.w_f32 = s.w_f32;
      l.y_f32 = s.y_f32;
      l.groups = s.groups;
      CheckRandom(s.name, m, s.n, s.k, l, ++seed,
                  s.w_f32 ? std::vector<int64_t>{0} : std::vector<int64_t>{64, 128, 256});
    }
  }
}

TEST_F(FloatLinearGpuTest, RandomOddStridesBiasAndDtypes) {
  uint64_t seed = 400;
  for (int dtypes = 0; dtypes < 8; ++dtypes) {
    Layout l;
    l.w_f32 = dtypes & 1;
    l.x_f32 = dtypes & 2;
    l.y_f32 = dtypes & 4;
    l.bias = true;
    l.groups = 2;
    l.x_pad = 3;  // odd strides: the slow x load path
    l.x_offset = 1;
    l.y_pad = 1;
    l.w_pad = 8;
    const bool bf16 = !l.x_f32 && !l.w_f32;
    const std::vector<int64_t> tiles =
        bf16 ? std::vector<int64_t>{0, 64, 128} : std::vector<int64_t>{0};
    for (int64_t m : {3, 130}) CheckRandom("odd strides", m, 300, 776, l, ++seed, tiles);
    l.x_pad = 8;  // padded, aligned strides: cp.async
    l.x_offset = 0;
    l.split_k = 5;
    CheckRandom("padded strides", 16, 200, 776, l, ++seed, {0});
    // The CUDA-core kernel (the automatic plan here) with bias, groups and padded strides.
    CheckRandom("padded strides", 3, 200, 776, l, ++seed, {0, 1});
    if (bf16) CheckRandom("padded strides", 300, 300, 776, l, ++seed, {128, 256});
    if (bf16) CheckRandom("padded strides", 40, 300, 776, l, ++seed, {256});
  }
}

// The warp-specialised wgmma kernel runs the cp.async kernel's wgmma sequence on the same
// operands: the same bits on random data. Ragged N (520) and K (1000), wo_a's 8 interleaved
// groups (x [M, 8·4096] viewed per group, W [8][1024][4096]), padded strides (x, y and the
// weight's group stride), M = 128, 256, 1000 and 4096, splits, f32 output and bias.
// Fails (naming the first 5 outputs) where runs a and b differ in any bit of any group's [m, n]
// output; NaN matches NaN.
void ExpectSameBits(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b, int64_t n, const std::string& what,
                    const char* a_name, const char* b_name) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t g = 0; g < a.size(); ++g) {
    int64_t bad = 0;
    for (size_t i = 0; i < a[g].size(); ++i) {
      if (std::memcmp(&a[g][i], &b[g][i], 4) != 0 &&
          !(std::isnan(a[g][i]) && std::isnan(b[g][i])) && ++bad <= 5) {
        ADD_FAILURE() << what << " group " << g << ": y[" << i / n << "][" << i % n << "] "
                      << a_name << " " << a[g][i] << " " << b_name << " " << b[g][i];
      }
    }
    EXPECT_EQ(bad, 0) << what << " group " << g;
  }
}

// The warp-specialised kernel against the cp.async one, and its narrower tiles (ws_tile_cols 128 /
// 160 / 192 and the by-waves width 0) against its 256-column ones: the same wgmma K steps in the
// same order for every output, so the same bits — over groups (wo_a's 8 interleaved, 2 with padded
// strides and bias), ragged N (a tile past the last column: 384 = the gate, 520), splits and both
// output types.
TEST_F(FloatLinearGpuTest, WarpSpecialisedBitIdenticalToCpAsync) {
  Rng rng(51);
  struct Case {
    int64_t n, k, groups, x_pad, y_pad, w_pad;
    bool y_f32;
  };
  const Case cases[] = {{520, 1000, 1, 0, 0, 0, false},
                        {384, 5120, 1, 0, 0, 0, true},
                        {520, 1000, 2, 8, 3, 16, true},
                        {1024, 4096, 8, 0, 0, 0, false}};
  int runs = 0, narrow_runs = 0;
  for (const Case& c : cases) {
    for (int64_t m : {128, 256, 1000, 4096}) {
      Layout l;
      l.groups = c.groups;
      l.x_pad = c.x_pad;
      l.y_pad = c.y_pad;
      l.w_pad = c.w_pad;
      l.y_f32 = c.y_f32;
      l.bias = c.groups == 2;
      l.tile_rows = 128;
      l.ws_cols = kFloatLinearCudaWgmmaCols;  // the reference width
      const Problem pr = MakeProblem(m, c.n, c.k, l, /*one_hot=*/false, rng);
      for (int64_t split : {0, 1, 3}) {
        if (c.groups == 8 && m == 4096 && split != 0) continue;  // covered at smaller M
        Problem q = pr;
        q.l.split_k = split;
        const auto wide = RunGpu(q);
        for (int64_t cols : {int64_t{128}, int64_t{160}, int64_t{192}, int64_t{0}}) {
          if (split == 1) break;  // the narrow tiles: splits 0 and 3
          Problem narrow = q;
          narrow.l.ws_cols = cols;
          ExpectSameBits(RunGpu(narrow), wide, c.n,
                         Describe(q.l, m, c.n, c.k) + " ws_tile_cols " + std::to_string(cols),
                         "narrow", "256 columns");
          ++narrow_runs;
        }
        // Where the automatic ws plan drops the splits the cp.async plan keeps
        // (LinearCudaWsUnsplitPays: the gate at 4,096 rows), the cp.async run takes the ws
        // plan's count, so both sum every output in the same order.
        FloatLinearCudaParams shape;
        shape.m = m;
        shape.n = c.n;
        shape.k = c.k;
        shape.groups = c.groups;
        shape.x_stride = c.groups * (c.k + c.x_pad) + c.x_pad;
        shape.tile_rows = 128;
        shape.split_k = split;
        q.l.split_k = PlanFloatLinearCuda(shape).splits;
        q.l.ws = false;
        ExpectSameBits(wide, RunGpu(q), c.n, Describe(q.l, m, c.n, c.k), "ws", "cp.async");
        ++runs;
      }
    }
  }
  std::printf(
      "warp-specialised wgmma: %d runs bit-identical to the cp.async kernel, %d narrow-tile runs "
      "to the 256-column tiles\n",
      runs, narrow_runs);
}

// ---- contract ---------------------------------------------------------------------------------

// A split launch (GEMM + reduction) captured into a CUDA graph (global capture mode: any
// synchronising or allocating call inside the launch would fail the capture) replays to the same
// bits as a direct launch.
// m = 3: the mma.sync kernel; m = 64: the swapped-role kernel; m = 256: the wgmma kernel (all
// split K here).
void CheckGraphCapture(int64_t m, int64_t tile) {
  Rng rng(47);
  const int64_t n = 1024, k = 4096, groups = 2;
  std::vector<uint16_t> w(groups * n * k), x(m * groups * k);
  for (uint16_t& v : w) v = formats::FloatToBf16Bits(static_cast<float>(rng.Normal() / 64.0));
  for (uint16_t& v : x) v = formats::FloatToBf16Bits(static_cast<float>(rng.Normal()));
  DeviceBuffer dw(w.size() * 2), dx(x.size() * 2), dy(m * groups * n * 2), dy2(m * groups * n * 2);
  dw.CopyFromHost(w.data(), w.size() * 2);
  dx.CopyFromHost(x.data(), x.size() * 2);
  FloatLinearCudaParams p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.groups = groups;
  p.w_bf16 = dw.get<uint16_t>();
  p.w_group_stride = n * k;
  p.x_bf16 = dx.get<uint16_t>();
  p.x_stride = groups * k;
  p.x_group_stride = k;
  p.y_bf16 = dy.get<uint16_t>();
  p.y_stride = groups * n;
  p.y_group_stride = n;
  p.tile_rows = tile;
  DeviceBuffer ws(FloatLinearCudaWorkspaceBytes(p, m));
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  ASSERT_GT(PlanFloatLinearCuda(p).splits, 1);
  ASSERT_EQ(PlanFloatLinearCuda(p).tile_rows, tile);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_TRUE(LaunchFloatLinear(p, stream).ok());  // sets the kernels' smem limit once
  CUDA_CHECK(cudaStreamSynchronize(stream));
  p.y_bf16 = dy2.get<uint16_t>();
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const absl::Status s = LaunchFloatLinear(p, stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(s.ok()) << s;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint16_t> y1(m * groups * n), y2(m * groups * n);
  dy.CopyToHost(y1.data(), y1.size() * 2);
  dy2.CopyToHost(y2.data(), y2.size() * 2);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 2), 0);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_F(FloatLinearGpuTest, GraphCaptureReplaysTheSameBits) {
  for (const auto& [m, tile] : {std::pair<int64_t, int64_t>{3, 16}, {64, 256}, {256, 128}}) {
    SCOPED_TRACE("M " + std::to_string(m));
    CheckGraphCapture(m, tile);
  }
}

TEST_F(FloatLinearGpuTest, ZeroRowsIsANoOpAndBadParamsEnqueueNothing) {
  FloatLinearCudaParams p;
  p.n = 64;
  p.k = 64;
  EXPECT_TRUE(LaunchFloatLinear(p, nullptr).ok());
  p.m = 1;  // no x, W, y: rejected before anything is enqueued
  EXPECT_EQ(LaunchFloatLinear(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // The swapped-role kernel needs TMA-able x rows and bf16 operands.
  DeviceBuffer dx(4096), dw(64 * 64 * 4), dy(4096);
  p.x_bf16 = dx.get<uint16_t>();
  p.x_stride = 64;
  p.w_bf16 = dw.get<uint16_t>();
  p.y_bf16 = dy.get<uint16_t>();
  p.y_stride = 64;
  p.tile_rows = kFloatLinearCudaSwapRows;
  EXPECT_TRUE(LaunchFloatLinear(p, nullptr).ok());
  p.x_stride = 67;
  EXPECT_EQ(LaunchFloatLinear(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.x_stride = 64;
  p.x_bf16 = dx.get<uint16_t>() + 1;
  EXPECT_EQ(LaunchFloatLinear(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.x_bf16 = dx.get<uint16_t>();
  p.w_bf16 = nullptr;
  p.w_f32 = dw.get<float>();
  EXPECT_EQ(LaunchFloatLinear(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels
