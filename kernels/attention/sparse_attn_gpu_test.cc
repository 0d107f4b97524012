// LaunchSparseAttn against SparseAttnCpu on the same inputs and against the double-precision
// softmax (README.md "CUDA" states the tolerance): the released dims (64 heads × 512, 128 window +
// 512 selected entries with -1 slots; 1, 4 and 64 tokens, i.e. split and unsplit launches), the
// tiny fixture's dims, odd head counts, head_dim 256, the scalar path (odd head_dim, unaligned
// strides: bit-exact with the CPU in practice), rows without a valid entry, large and small sinks,
// determinism, and the launcher's errors; the warp-specialised wgmma kernel (wgmma-ws) bit for bit
// against wgmma over the decode shape grid. Outputs start poisoned, so an element the kernel fails
// to write is a mismatch. Each comparison prints what it measured.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_gpu_test_util.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using attention_internal::SetSparseAttnCudaPathOverride;
using attention_internal::SparseAttnCudaPath;
using attention_internal::SparseAttnCudaPathFor;
using attention_internal::SparseAttnCudaPathName;
using formats::Bf16BitsToFloat;
using testing::AttnCase;
using testing::PathOverride;
using testing::RandomCase;
using testing::ToDevice;

constexpr uint16_t kPoison = 0xFFC1;  // a NaN: any unwritten element fails every comparison

ThreadPool* Pool() {
  static ThreadPool* pool =
      new ThreadPool(std::max<size_t>(1, std::thread::hardware_concurrency() - 1));
  return pool;
}

// Element pitches of one run: heads and tokens padded by q_pad / out_pad elements, KV rows by
// kv_pad (a pad that is not a multiple of 8 sends a head_dim-128 case down the scalar path).
struct Layout {
  int64_t q_pad = 0;
  int64_t kv_pad = 0;
  int64_t out_pad = 0;
  int64_t ws_offset = 0;  // bytes: the device workspace starts this far into its allocation
};

// Copies packed [rows][d] into rows of `pitch` elements (padding filled with `fill`).
std::vector<uint16_t> Pad(const std::vector<uint16_t>& packed, int64_t rows, int64_t d,
                          int64_t pitch, uint16_t fill) {
  std::vector<uint16_t> out(static_cast<size_t>(std::max<int64_t>(rows, 1) * pitch), fill);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(packed.begin() + r * d, d, out.begin() + r * pitch);
  }
  return out;
}

// Params over host or device copies of `c` in layout `l` (q and out use head pitch d + pad and
// token pitch heads · (d + pad) + pad).
SparseAttnParams LayoutParams(const AttnCase& c, const Layout& l) {
  SparseAttnParams p;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.q_head_stride = c.head_dim + l.q_pad;
  p.q_stride = c.heads * p.q_head_stride + l.q_pad;
  p.n_kv = c.n_kv;
  p.kv_stride = c.head_dim + l.kv_pad;
  p.width = c.width;
  p.indices_stride = c.width;
  p.softmax_scale = c.scale;
  p.out_head_stride = c.head_dim + l.out_pad;
  p.out_stride = c.heads * p.out_head_stride + l.out_pad;
  return p;
}

// Extracts the packed [tokens, heads, d] output from a strided one.
std::vector<uint16_t> Unpad(const std::vector<uint16_t>& out, const SparseAttnParams& p) {
  std::vector<uint16_t> packed(static_cast<size_t>(p.tokens * p.heads * p.head_dim));
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t h = 0; h < p.heads; ++h) {
      std::copy_n(out.begin() + t * p.out_stride + h * p.out_head_stride, p.head_dim,
                  packed.begin() + (t * p.heads + h) * p.head_dim);
    }
  }
  return packed;
}

struct Outputs {
  std::vector<uint16_t> gpu;
  std::vector<uint16_t> cpu;
};

// Runs LaunchSparseAttn and SparseAttnCpu on the same (padded) inputs; packed outputs.
Outputs RunBoth(const AttnCase& c, const Layout& l = {}) {
  SparseAttnParams hp = LayoutParams(c, l);
  const int64_t q_rows = c.tokens * c.heads;
  // q as [tokens][heads][head pitch] + token pad: pad every head row, then re-pitch tokens.
  std::vector<uint16_t> q(static_cast<size_t>(std::max<int64_t>(c.tokens, 1) * hp.q_stride),
                          0x7FC0);
  for (int64_t r = 0; r < q_rows; ++r) {
    std::copy_n(c.q.begin() + r * c.head_dim, c.head_dim,
                q.begin() + (r / c.heads) * hp.q_stride + (r % c.heads) * hp.q_head_stride);
  }
  const std::vector<uint16_t> kv = Pad(c.kv, c.n_kv, c.head_dim, hp.kv_stride, 0x7FC0);
  const size_t out_elems = static_cast<size_t>(std::max<int64_t>(c.tokens, 1) * hp.out_stride);

  Outputs o;
  std::vector<uint16_t> cpu_out(out_elems, kPoison);
  std::vector<uint8_t> cpu_ws(SparseAttnWorkspaceBytes(c.head_dim, Pool()));
  hp.q = q.data();
  hp.kv = c.n_kv > 0 ? kv.data() : nullptr;
  hp.indices = c.indices.data();
  hp.attn_sink = c.sink.data();
  hp.out = cpu_out.data();
  hp.workspace = cpu_ws.data();
  hp.workspace_bytes = cpu_ws.size();
  CHECK_OK(SparseAttnCpu(hp, Pool()));
  o.cpu = Unpad(cpu_out, hp);

  DeviceBuffer dq = ToDevice(q), dkv = ToDevice(kv), didx = ToDevice(c.indices),
               dsink = ToDevice(c.sink), dout = ToDevice(std::vector<uint16_t>(out_elems, kPoison));
  const size_t ws_bytes = SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim);
  DeviceBuffer dws(ws_bytes + static_cast<size_t>(l.ws_offset));
  SparseAttnParams dp = hp;
  dp.q = dq.get<uint16_t>();
  dp.kv = c.n_kv > 0 ? dkv.get<uint16_t>() : nullptr;
  dp.indices = didx.get<int32_t>();
  dp.attn_sink = dsink.get<float>();
  dp.out = dout.get<uint16_t>();
  dp.workspace = static_cast<unsigned char*>(dws.get()) + l.ws_offset;
  dp.workspace_bytes = ws_bytes;  // exactly the documented size, wherever it starts
  const absl::Status st = LaunchSparseAttn(dp, nullptr);
  CHECK(st.ok()) << st.message();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> gpu_out(out_elems);
  dout.CopyToHost(gpu_out.data(), out_elems * sizeof(uint16_t));
  o.gpu = Unpad(gpu_out, hp);
  return o;
}

// The tensor-core path's tolerance against SparseAttnCpu, per element (README.md "CUDA"):
//   |gpu − cpu| <= 2^-8 · (|cpu| + mass) + 1e-6
// (one bf16(p) rounding flip moves a term by ≤ 2^-8 relative, the output rounding by ≤ 1 ulp).
// Also checks the GPU against the double reference with the CPU body's own bound, and reports
// bit-identical elements, the largest difference in output ulps and the relative RMS difference.
struct Stats {
  int64_t outside = 0;
  int64_t outside_double = 0;
  int64_t bit_diffs = 0;
  int max_ulps = 0;
  double rel_rms = 0;      // gpu vs cpu
  double rel_rms_gpu = 0;  // gpu vs the double reference
  double rel_rms_cpu = 0;  // cpu vs the double reference
  double worst_ratio = 0;
};

// sqrt(Σ (a − ref)² / Σ ref²) over bf16 outputs against a double reference.
double RelRms(const std::vector<uint16_t>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = Bf16BitsToFloat(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

Stats Compare(const AttnCase& c, const Outputs& o, const char* label) {
  std::vector<double> ref, mass;
  testing::DoubleReference(c, &ref, &mass);
  Stats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < o.gpu.size(); ++i) {
    const double g = Bf16BitsToFloat(o.gpu[i]);
    const double k = Bf16BitsToFloat(o.cpu[i]);
    const double bound = std::ldexp(std::fabs(k) + mass[i], -8) + 1e-6;
    const double err = std::fabs(g - k);
    s.worst_ratio = std::max(s.worst_ratio, err / bound);
    if (!(err <= bound)) {
      // The first few offenders with their (token, head, dim), to localise a layout error.
      if (s.outside < 5) {
        const int64_t th = static_cast<int64_t>(i) / c.head_dim;
        std::printf("  %s: outside the bound at token %ld head %ld dim %ld: gpu %g cpu %g\n", label,
                    long(th / c.heads), long(th % c.heads), long(i % c.head_dim), g, k);
      }
      ++s.outside;
    }
    if (o.gpu[i] != o.cpu[i]) {
      ++s.bit_diffs;
      // Distance in bf16 steps (same-sign values; a sign change counts as "far").
      const int ulps =
          ((o.gpu[i] ^ o.cpu[i]) & 0x8000) != 0
              ? 1000
              : std::abs(static_cast<int>(o.gpu[i] & 0x7FFF) - static_cast<int>(o.cpu[i] & 0x7FFF));
      s.max_ulps = std::max(s.max_ulps, ulps);
    }
    num += (g - k) * (g - k);
    den += k * k;
  }
  s.rel_rms = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  s.outside_double = testing::CountOutsideTolerance(o.gpu, ref, mass, nullptr);
  s.rel_rms_gpu = RelRms(o.gpu, ref);
  s.rel_rms_cpu = RelRms(o.cpu, ref);
  // FNV-1a of the GPU output: two builds (e.g. before / after a change that must not move a
  // bit) compare by diffing their logs.
  uint64_t hash = 1469598103934665603ull;
  for (uint16_t v : o.gpu) hash = (hash ^ v) * 1099511628211ull;
  std::printf(
      "%-34s %9zu elems: bit-identical %6.2f%%, max %d ulp (a sign flip counts 1000), "
      "rel-RMS gpu-cpu %.2e, vs double: gpu %.2e cpu %.2e, worst |gpu-cpu|/bound %.3f, "
      "outside %ld, outside double-ref bound %ld, gpu hash %016llx\n",
      label, o.gpu.size(),
      o.gpu.empty() ? 100.0 : 100.0 * (1.0 - double(s.bit_diffs) / double(o.gpu.size())),
      s.max_ulps, s.rel_rms, s.rel_rms_gpu, s.rel_rms_cpu, s.worst_ratio,
      static_cast<long>(s.outside), static_cast<long>(s.outside_double),
      static_cast<unsigned long long>(hash));
  return s;
}

void ExpectClose(const AttnCase& c, const Outputs& o, const char* label) {
  const Stats s = Compare(c, o, label);
  EXPECT_EQ(s.outside, 0) << label;
  EXPECT_EQ(s.outside_double, 0) << label;
  // Two bf16 roundings of nearly equal values differ by one ulp (2^-8..2^-7 relative) where they
  // straddle a rounding boundary: below 2^-8 RMS means far fewer than all elements moved.
  EXPECT_LE(s.rel_rms, std::ldexp(1.0, -8)) << label;
  // No less accurate than the CPU body: its own error is the bf16 rounding of p and of o.
  EXPECT_LE(s.rel_rms_gpu, 1.25 * s.rel_rms_cpu + 1e-6) << label;
}

// A decode-like list per token: `window` entries from the window rows [0, window) (the first
// `leading_invalid` of them -1, as while the ring fills), then `selected` distinct-ish random
// compressed rows from [window, n_kv) with about `invalid_frac` of them -1.
AttnCase DecodeCase(int64_t tokens, int64_t heads, int64_t d, int64_t window, int64_t selected,
                    int64_t n_compressed, double invalid_frac, uint32_t seed) {
  AttnCase c =
      RandomCase(tokens, heads, d, window + n_compressed, window + selected, invalid_frac, seed);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t leading_invalid = t % 3 == 2 ? 70 : 0;  // straddles the first 64-block
    int32_t* row = c.indices.data() + t * c.width;
    for (int64_t e = 0; e < window; ++e) {
      row[e] = e < leading_invalid ? -1 : static_cast<int32_t>((e + 7 * t) % window);
    }
    for (int64_t e = window; e < c.width; ++e) {
      if (row[e] >= 0) row[e] = static_cast<int32_t>(window + row[e] % n_compressed);
    }
  }
  return c;
}

TEST(SparseAttnGpuTest, ReleasedDimsDecode) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t tokens : {1, 4, 64}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 100 + tokens);
    char label[64];
    std::snprintf(label, sizeof(label), "released 64x512 w640 tokens %ld", long(tokens));
    ExpectClose(c, RunBoth(c), label);
  }
}

TEST(SparseAttnGpuTest, ReleasedDimsPaddedStrides) {
  FS_SKIP_WITHOUT_GPU();
  const AttnCase c = DecodeCase(3, 64, 512, 128, 512, 1000, 0.05, 7);
  ExpectClose(c, RunBoth(c, {8, 16, 24}), "released, padded strides");
}

TEST(SparseAttnGpuTest, TinyDims) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t tokens : {1, 5, 17}) {
    const AttnCase c = RandomCase(tokens, 4, 128, 40, 32, 0.2, 200 + tokens);
    ExpectClose(c, RunBoth(c), "tiny 4x128 w32");
  }
}

TEST(SparseAttnGpuTest, OddHeadCountsAndPartialBlocks) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t heads : {1, 5, 16, 17, 33, 65, 100}) {
    const AttnCase c = RandomCase(3, heads, 128, 300, 200, 0.3, 300 + heads);
    char label[64];
    std::snprintf(label, sizeof(label), "heads %ld x128 w200", long(heads));
    ExpectClose(c, RunBoth(c), label);
  }
}

TEST(SparseAttnGpuTest, HeadDim256) {
  FS_SKIP_WITHOUT_GPU();
  const AttnCase c = RandomCase(9, 24, 256, 500, 130, 0.1, 11);
  ExpectClose(c, RunBoth(c), "24x256 w130");
}

// The scalar path does the CPU's operations in the CPU's order: equal bits but where the device
// exp and glibc expf round differently (not seen in practice; allowed up to 0.1 %).
TEST(SparseAttnGpuTest, ScalarPathOddShapes) {
  FS_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t heads, d, width;
    Layout layout;
  };
  for (const Shape& s :
       {Shape{3, 1, 70, {}}, Shape{5, 7, 64, {}}, Shape{8, 96, 130, {}}, Shape{2, 100, 33, {}},
        Shape{4, 600, 65, {}}, Shape{6, 128, 150, {2, 0, 0}}, Shape{6, 512, 150, {0, 3, 0}},
        Shape{6, 512, 150, {0, 0, 1}}}) {
    const AttnCase c = RandomCase(4, s.heads, s.d, 90, s.width, 0.25, 400 + s.d);
    char label[64];
    std::snprintf(label, sizeof(label), "scalar %ldx%ld w%ld", long(s.heads), long(s.d),
                  long(s.width));
    const Outputs o = RunBoth(c, s.layout);
    const Stats st = Compare(c, o, label);
    EXPECT_EQ(st.outside, 0) << label;
    EXPECT_EQ(st.outside_double, 0) << label;
    EXPECT_LE(st.bit_diffs, static_cast<int64_t>(o.gpu.size()) / 1000) << label;
  }
}

TEST(SparseAttnGpuTest, RowsWithoutValidEntriesAreZero) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t d : {128, 512, 100}) {
    AttnCase c = RandomCase(5, 64, d, 200, 192, 0.0, 500 + d);
    std::fill_n(c.indices.begin() + 1 * c.width, c.width, -1);  // token 1: all -1
    std::fill_n(c.indices.begin() + 3 * c.width, c.width, -1);  // token 3: all -1
    const Outputs o = RunBoth(c);
    ExpectClose(c, o, "all-invalid tokens 1 and 3");
    for (int64_t t : {1, 3}) {
      for (int64_t i = 0; i < c.heads * d; ++i) {
        ASSERT_EQ(o.gpu[t * c.heads * d + i], 0) << "token " << t << " element " << i;
      }
    }
    // Width 0 and an empty pool: every row is +0.
    AttnCase e = RandomCase(2, 64, d, 0, 0, 1.0, 7);
    const Outputs oe = RunBoth(e);
    EXPECT_EQ(oe.gpu, std::vector<uint16_t>(oe.gpu.size(), 0));
  }
}

TEST(SparseAttnGpuTest, LargeAndSmallSinks) {
  FS_SKIP_WITHOUT_GPU();
  for (float sink : {-60.0f, 0.0f, 8.0f, 30.0f}) {
    AttnCase c = DecodeCase(4, 64, 512, 128, 512, 2000, 0.1, 600);
    std::fill(c.sink.begin(), c.sink.end(), sink);
    c.sink[5] = -sink;  // a mix within one group
    char label[64];
    std::snprintf(label, sizeof(label), "sink %.0f", sink);
    ExpectClose(c, RunBoth(c), label);
  }
}

TEST(SparseAttnGpuTest, Deterministic) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t tokens : {1, 64}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 700);
    const Outputs a = RunBoth(c);
    const Outputs b = RunBoth(c);
    EXPECT_EQ(a.gpu, b.gpu) << "tokens " << tokens;
  }
}

// Forces a path for the scope (the launcher's process-wide override), then restores the default.
// The path the launcher takes for case `c` in layout `l` under the current override.
SparseAttnCudaPath PathOf(const AttnCase& c, const Layout& l = {}) {
  SparseAttnParams p = LayoutParams(c, l);
  // Alignment is judged on the pointers: any 16-byte aligned address stands for the buffers.
  alignas(16) static const uint16_t kAligned[8] = {};
  p.q = p.kv = p.out = const_cast<uint16_t*>(kAligned);
  return SparseAttnCudaPathFor(p);
}

// PathOf for `c`'s params with tokens and width replaced (the selection reads only the dims, the
// strides and the pointers' alignment; nothing is launched).
SparseAttnCudaPath PathOfDims(const AttnCase& c, int64_t tokens, int64_t width) {
  SparseAttnParams p = LayoutParams(c, {});
  alignas(16) static const uint16_t kAligned[8] = {};
  p.q = p.kv = p.out = const_cast<uint16_t*>(kAligned);
  p.tokens = tokens;
  p.width = width;
  return SparseAttnCudaPathFor(p);
}

TEST(SparseAttnGpuTest, PathSelection) {
  const AttnCase released = RandomCase(1, 64, 512, 10, 8, 0.0, 1);
  EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmma);  // one block: nothing to pipeline
  EXPECT_EQ(PathOf(released, {8, 16, 24}), SparseAttnCudaPath::kWgmma);
  // Width 640 (10 blocks): 1 / 8 / 12 tokens run 1-block units (wgmma), 13 tokens 2-block ones,
  // 64 and 256 tokens 5- and 10-block ones (wgmma-ws; the threshold is 2 blocks per unit).
  EXPECT_EQ(PathOfDims(released, 1, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 8, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 12, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 13, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_EQ(PathOfDims(released, 64, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_EQ(PathOfDims(released, 256, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_EQ(PathOfDims(released, 256, 64), SparseAttnCudaPath::kWgmma);     // 1-block lists
  EXPECT_EQ(PathOfDims(released, 256, 128), SparseAttnCudaPath::kWgmmaWs);  // 2-block lists
  EXPECT_EQ(PathOfDims(released, 1, 2560), SparseAttnCudaPath::kWgmma);     // 40 splits of 1 block
  EXPECT_EQ(PathOfDims(released, 1, 24576), SparseAttnCudaPath::kWgmmaWs);  // 128 splits of 3
  EXPECT_EQ(PathOf(released, {0, 3, 0}), SparseAttnCudaPath::kScalar);
  const AttnCase heads65 = RandomCase(1, 65, 512, 10, 8, 0.0, 1);
  EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kMmaSync);
  const AttnCase d128 = RandomCase(1, 64, 128, 10, 8, 0.0, 1);
  EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);
  {
    PathOverride force(SparseAttnCudaPath::kWgmma);
    EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kWgmma);
    EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);  // does not fit: falls back
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaSplitK);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmmaSplitK);
    EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kWgmmaSplitK);
    EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);  // does not fit: falls back
    EXPECT_EQ(PathOf(released, {0, 3, 0}), SparseAttnCudaPath::kScalar);
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);  // does not fit: falls back
    EXPECT_EQ(PathOf(released, {0, 3, 0}), SparseAttnCudaPath::kScalar);
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOfDims(released, 1, 640), SparseAttnCudaPath::kWgmmaWs);  // forced at any size
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmma);
    EXPECT_EQ(PathOfDims(released, 256, 640), SparseAttnCudaPath::kWgmma);  // A/B against ws
  }
  {
    PathOverride force(SparseAttnCudaPath::kMmaSync);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kMmaSync);
  }
  {
    PathOverride force(SparseAttnCudaPath::kScalar);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kScalar);
  }
  // The row form: wgmma by default at every size; an override to wgmma-ws (opt-in) forces the
  // warp-specialised row kernel, any other override is ignored.
  auto row_path = [&](int64_t tokens, int64_t width) {
    SparseAttnParams p = LayoutParams(released, {});
    alignas(16) static const uint8_t kRows[16] = {};
    p.kv = nullptr;
    p.kv_rows.window = p.kv_rows.compressed = kRows;
    p.tokens = tokens;
    p.width = width;
    return SparseAttnCudaPathFor(p);
  };
  EXPECT_EQ(row_path(8, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(row_path(256, 640), SparseAttnCudaPath::kWgmma);
  for (SparseAttnCudaPath force :
       {SparseAttnCudaPath::kScalar, SparseAttnCudaPath::kMmaSync, SparseAttnCudaPath::kWgmmaSplitK,
        SparseAttnCudaPath::kWgmma, SparseAttnCudaPath::kWgmmaWs}) {
    PathOverride scope(force);
    const SparseAttnCudaPath want =
        force == SparseAttnCudaPath::kWgmmaWs ? force : SparseAttnCudaPath::kWgmma;
    EXPECT_EQ(row_path(1, 640), want);
    EXPECT_EQ(row_path(256, 640), want);
  }
  EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 256, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_STREQ(SparseAttnCudaPathName(SparseAttnCudaPath::kWgmmaWs), "wgmma-ws");
}

// The released dims through each tensor-core path explicitly (the default takes wgmma or
// wgmma-ws there by the list blocks per unit):
// decode batches split (1, 4, 64 tokens) and unsplit (128), padded strides, a partial last
// block, sinks, and head counts that leave a wgmma group partly empty.
void CheckReleasedDimsOn(SparseAttnCudaPath path) {
  {
    PathOverride force(path);
    const char* name = SparseAttnCudaPathName(path);
    char label[96];
    for (int64_t tokens : {1, 4, 64, 128}) {
      const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 800 + tokens);
      ASSERT_EQ(PathOf(c), path);
      std::snprintf(label, sizeof(label), "%s 64x512 w640 tokens %ld", name, long(tokens));
      ExpectClose(c, RunBoth(c), label);
    }
    const AttnCase padded = DecodeCase(3, 64, 512, 128, 512, 1000, 0.05, 17);
    ASSERT_EQ(PathOf(padded, {8, 16, 24}), path);
    std::snprintf(label, sizeof(label), "%s padded strides", name);
    ExpectClose(padded, RunBoth(padded, {8, 16, 24}), label);
    // Width 150: blocks of 64, 64, 22 entries; 30 % -1.
    const AttnCase partial = RandomCase(5, 64, 512, 300, 150, 0.3, 19);
    std::snprintf(label, sizeof(label), "%s 64x512 w150", name);
    ExpectClose(partial, RunBoth(partial), label);
    AttnCase sinks = DecodeCase(4, 64, 512, 128, 512, 2000, 0.1, 21);
    for (size_t h = 0; h < sinks.sink.size(); ++h) sinks.sink[h] = h % 2 == 0 ? 30.0f : -60.0f;
    std::snprintf(label, sizeof(label), "%s sinks 30 / -60", name);
    ExpectClose(sinks, RunBoth(sinks), label);
    for (int64_t heads : {65, 128}) {
      const AttnCase c = RandomCase(3, heads, 512, 300, 200, 0.2, 900 + heads);
      std::snprintf(label, sizeof(label), "%s heads %ld x512 w200", name, long(heads));
      ExpectClose(c, RunBoth(c), label);
    }
  }
}

TEST(SparseAttnGpuTest, BothTensorPathsAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  CheckReleasedDimsOn(SparseAttnCudaPath::kWgmma);
  CheckReleasedDimsOn(SparseAttnCudaPath::kMmaSync);
}

// The same cases on the opt-in split-K S variant of the wgmma kernel (never the default).
TEST(SparseAttnGpuTest, WgmmaSplitKAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  CheckReleasedDimsOn(SparseAttnCudaPath::kWgmmaSplitK);
}

// The same cases on the warp-specialised wgmma kernel (producer warpgroup + mbarrier ring).
TEST(SparseAttnGpuTest, WgmmaWsAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  CheckReleasedDimsOn(SparseAttnCudaPath::kWgmmaWs);
}

// wgmma-ws runs wgmma's instructions on the same shared-memory tiles in the same order (only the
// gather and the synchronisation moved), so its output must equal wgmma's bit for bit; both are
// also checked against SparseAttnCpu within the tolerance. The first mismatches are printed with
// their token / head / dim.
void ExpectWsEqualsWgmma(const AttnCase& c, const char* label, const Layout& l = {}) {
  Outputs ws, base;
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaWs);
    ASSERT_EQ(PathOf(c, l), SparseAttnCudaPath::kWgmmaWs);
    ws = RunBoth(c, l);
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmma);
    base = RunBoth(c, l);
  }
  int64_t diffs = 0;
  for (size_t i = 0; i < ws.gpu.size(); ++i) {
    if (ws.gpu[i] == base.gpu[i]) continue;
    if (diffs < 5) {
      const int64_t th = static_cast<int64_t>(i) / c.head_dim;
      std::printf("  %s: wgmma-ws != wgmma at token %ld head %ld dim %ld: %04x vs %04x\n", label,
                  long(th / c.heads), long(th % c.heads), long(i % c.head_dim), ws.gpu[i],
                  base.gpu[i]);
    }
    ++diffs;
  }
  std::printf("%-40s wgmma-ws vs wgmma: %ld of %zu elements differ\n", label, long(diffs),
              ws.gpu.size());
  EXPECT_EQ(diffs, 0) << label;
  ExpectClose(c, ws, label);
}

// The shape grid at the released dims: 1 / 8 / 64 tokens (split: 10, 10 and 2 splits of the 10
// blocks) and 256 (unsplit: the two tiles alternate five times per unit), window-only lists,
// ragged selected counts (token t keeps 512 − 37t mod 512 selected entries, the rest -1:
// trailing all--1 blocks), sinks ±, a 2560-entry list (40 blocks; 40 splits at 2 tokens).
TEST(SparseAttnGpuTest, WgmmaWsEqualsWgmma) {
  FS_SKIP_WITHOUT_GPU();
  char label[96];
  for (int64_t tokens : {1, 8, 64, 256}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 65536, 0.1, 1300 + tokens);
    std::snprintf(label, sizeof(label), "ws 64x512 w640 tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  for (int64_t tokens : {1, 8, 64}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 0, 1, 0.0, 1400 + tokens);
    std::snprintf(label, sizeof(label), "ws window-only w128 tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  for (int64_t tokens : {8, 64}) {
    AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 8192, 0.05, 1500 + tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t keep = 512 - (37 * t) % 512;
      for (int64_t e = 128 + keep; e < c.width; ++e) c.indices[t * c.width + e] = -1;
    }
    std::snprintf(label, sizeof(label), "ws ragged selected tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  AttnCase sinks = DecodeCase(8, 64, 512, 128, 512, 4096, 0.1, 1600);
  for (size_t h = 0; h < sinks.sink.size(); ++h) sinks.sink[h] = h % 3 == 0 ? 25.0f : -40.0f;
  ExpectWsEqualsWgmma(sinks, "ws sinks 25 / -40");
  const AttnCase padded = DecodeCase(3, 64, 512, 128, 512, 1000, 0.05, 1700);
  ExpectWsEqualsWgmma(padded, "ws padded strides", {8, 16, 24});
  for (int64_t tokens : {2, 32}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 2432, 20000, 0.1, 1800 + tokens);
    std::snprintf(label, sizeof(label), "ws w2560 tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  AttnCase none = DecodeCase(4, 64, 512, 128, 512, 4096, 0.0, 1900);
  for (int64_t e = 0; e < none.width; ++e) none.indices[2 * none.width + e] = -1;
  ExpectWsEqualsWgmma(none, "ws token 2 without a valid entry");
}

// The launchers accept a workspace at any address (README: "any alignment"; the split paths align
// their state region inside the 16 bytes of slack SparseAttnCudaWorkspaceBytes includes): a
// workspace 4 and 12 bytes past a 256-byte boundary gives the same bits as an aligned one on
// every tensor path, at token counts that split (1, 8) and one that does not (64).
TEST(SparseAttnGpuTest, MisalignedWorkspaceGivesTheSameBits) {
  FS_SKIP_WITHOUT_GPU();
  for (SparseAttnCudaPath path : {SparseAttnCudaPath::kMmaSync, SparseAttnCudaPath::kWgmma,
                                  SparseAttnCudaPath::kWgmmaSplitK, SparseAttnCudaPath::kWgmmaWs}) {
    PathOverride force(path);
    for (int64_t tokens : {1, 8, 64}) {
      const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 65536, 0.1, 2000 + tokens);
      const Outputs aligned = RunBoth(c);
      for (int64_t offset : {4, 12}) {
        SCOPED_TRACE(::testing::Message() << SparseAttnCudaPathName(path) << " tokens " << tokens
                                          << " workspace offset " << offset);
        Layout l;
        l.ws_offset = offset;
        const Outputs shifted = RunBoth(c, l);
        EXPECT_EQ(shifted.gpu, aligned.gpu);
      }
    }
  }
}

// ---- the row form (attention.h SparseAttnKvRows) ----------------------------------------------

struct RowOutputs {
  std::vector<uint16_t> bf16;     // the wgmma kernel on the decoded bf16 pool
  std::vector<uint16_t> rows;     // the wgmma kernel on the serving rows
  std::vector<uint16_t> ws_rows;  // the wgmma-ws kernel on the serving rows (producer decodes)
  // The decode-once variant (kv_rows.decoded, forced on; the scratch poisoned first) on the
  // wgmma and wgmma-ws bodies (heads a multiple of 64; otherwise it runs the row kernels).
  std::vector<uint16_t> once;
  std::vector<uint16_t> once_ws;
  std::vector<uint16_t> cpu;  // SparseAttnCpu on the serving rows
};

// A row-form case's device copies (q, the decoded bf16 pool, indices, sink, both row pools, the
// workspace) and its params over them with packed q / out: the row form, or (rows = false) the
// bf16 form over the decoded pool.
struct RowFormDevice {
  RowFormDevice(const AttnCase& c, const testing::KvRowPools& pools)
      : c(c),
        pools(pools),
        dq(ToDevice(c.q)),
        dkv(ToDevice(c.kv)),
        didx(ToDevice(c.indices)),
        dsink(ToDevice(c.sink)),
        dwin(ToDevice(pools.window)),
        dcmp(ToDevice(pools.compressed)),
        dws(SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim)) {}

  SparseAttnParams Params(uint16_t* out, bool rows = true) const {
    SparseAttnParams p = LayoutParams(c, {});
    p.q = dq.get<uint16_t>();
    p.kv = dkv.get<uint16_t>();
    p.indices = didx.get<int32_t>();
    p.attn_sink = dsink.get<float>();
    p.out = out;
    p.workspace = dws.get();
    p.workspace_bytes = dws.bytes();
    if (rows) testing::SetKvRows(pools, dwin.get<uint8_t>(), dcmp.get<uint8_t>(), &p);
    return p;
  }

  const AttnCase& c;
  const testing::KvRowPools& pools;
  DeviceBuffer dq, dkv, didx, dsink, dwin, dcmp, dws;
};

// c holds the decoded pool of `pools` (testing::EncodeKvRows). Packed q / out; poisoned outputs.
RowOutputs RunRowForms(const AttnCase& c, const testing::KvRowPools& pools) {
  RowOutputs o;
  SparseAttnParams hp = LayoutParams(c, {});
  const size_t out_elems = c.q.size();
  std::vector<uint16_t> cpu_out(out_elems, kPoison);
  std::vector<uint8_t> cpu_ws(SparseAttnWorkspaceBytes(c.head_dim, Pool()));
  hp.q = c.q.data();
  hp.indices = c.indices.data();
  hp.attn_sink = c.sink.data();
  hp.out = cpu_out.data();
  hp.workspace = cpu_ws.data();
  hp.workspace_bytes = cpu_ws.size();
  testing::SetKvRows(pools, pools.window.data(), pools.compressed.data(), &hp);
  CHECK_OK(SparseAttnCpu(hp, Pool()));
  o.cpu = cpu_out;

  const RowFormDevice dev(c, pools);
  const size_t decoded_bytes =
      SparseAttnDecodedBytes(pools.n_window, pools.n_compressed, c.head_dim);
  const std::vector<uint16_t> poison(decoded_bytes / 2, kPoison);
  DeviceBuffer ddecoded = ToDevice(poison);
  auto run = [&](bool rows, SparseAttnCudaPath path, bool once = false) {
    DeviceBuffer dout = ToDevice(std::vector<uint16_t>(out_elems, kPoison));
    SparseAttnParams dp = dev.Params(dout.get<uint16_t>(), rows);
    if (once) {
      ddecoded.CopyFromHost(poison.data(), decoded_bytes);  // nothing left from an earlier run
      dp.kv_rows.decoded = ddecoded.get<uint16_t>();
      dp.kv_rows.decoded_bytes = decoded_bytes;
    }
    {
      PathOverride force(path);
      testing::DecodeOnceOverride force_once(once ? attention_internal::SparseAttnDecodeOnce::kOn
                                                  : attention_internal::SparseAttnDecodeOnce::kOff);
      EXPECT_EQ(attention_internal::SparseAttnDecodesOnce(dp), once && c.heads % 64 == 0);
      EXPECT_EQ(SparseAttnCudaPathFor(dp), path);
      const absl::Status st = LaunchSparseAttn(dp, nullptr);
      CHECK(st.ok()) << st.message();
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(out_elems);
    dout.CopyToHost(out.data(), out_elems * sizeof(uint16_t));
    return out;
  };
  o.bf16 = run(false, SparseAttnCudaPath::kWgmma);
  o.rows = run(true, SparseAttnCudaPath::kWgmma);
  o.ws_rows = run(true, SparseAttnCudaPath::kWgmmaWs);
  o.once = run(true, SparseAttnCudaPath::kWgmma, /*once=*/true);
  o.once_ws = run(true, SparseAttnCudaPath::kWgmmaWs, /*once=*/true);
  return o;
}

// Both row-form kernels (wgmma, wgmma-ws) against the bf16 form on the decoded pool (bit for bit:
// wgmma-ws computes wgmma's operations in the same order; the first mismatches are printed with
// their token / head / dim), and against SparseAttnCpu on the same rows within the tensor-core
// tolerance.
void ExpectRowForm(AttnCase c, int64_t n_window, int64_t pad, const char* label) {
  const testing::KvRowPools pools = testing::EncodeKvRows(&c, n_window, pad);
  const RowOutputs o = RunRowForms(c, pools);
  auto check = [&](const char* name, const std::vector<uint16_t>& rows) {
    int64_t diffs = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] == o.bf16[i]) continue;
      if (diffs++ < 5) {
        const int64_t th = static_cast<int64_t>(i) / c.head_dim;
        std::printf("  %s: %s != bf16 at token %ld head %ld dim %ld: %04x vs %04x\n", label, name,
                    long(th / c.heads), long(th % c.heads), long(i % c.head_dim), rows[i],
                    o.bf16[i]);
      }
    }
    std::printf("%-40s %s vs decoded-bf16 wgmma: %ld of %zu elements differ\n", label, name,
                static_cast<long>(diffs), rows.size());
    EXPECT_EQ(diffs, 0) << label << " " << name;
    ExpectClose(c, Outputs{rows, o.cpu}, label);
  };
  check("wgmma rows", o.rows);
  check("wgmma-ws rows", o.ws_rows);
  check("decode-once wgmma", o.once);
  check("decode-once wgmma-ws", o.once_ws);
}

// Released dims: 64 heads × 512, window 128 + 512 compressed entries per token (10 blocks: the
// two tiles alternate five times per unsplit list), -1 entries in the window (leading 70 in
// every third token, i.e. a whole first block of -1 there) and ~10 % among the compressed; 1, 8
// and 64 tokens split their lists (1 or 2 blocks per split: no next block to decode ahead), 256
// do not.
TEST(SparseAttnGpuTest, RowFormEqualsDecodedPoolAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  char label[96];
  for (int64_t tokens : {1, 8, 64, 256}) {
    std::snprintf(label, sizeof(label), "row form 64x512 w640 tokens %ld", long(tokens));
    ExpectRowForm(DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 1000 + tokens), 128, 0, label);
  }
}

// Long lists (40 blocks, one token and 32 tokens), padded row strides (544 / 304 bytes), a partial
// last block, window-only and compressed-only pools, heads that leave a group partly empty or
// take two groups, and large / small sinks.
TEST(SparseAttnGpuTest, RowFormShapes) {
  FS_SKIP_WITHOUT_GPU();
  ExpectRowForm(DecodeCase(1, 64, 512, 128, 2432, 8192, 0.1, 31), 128, 0, "row form w2560 t1");
  ExpectRowForm(DecodeCase(32, 64, 512, 128, 2432, 8192, 0.1, 32), 128, 0, "row form w2560 t32");
  ExpectRowForm(DecodeCase(5, 64, 512, 128, 512, 1000, 0.05, 33), 128, 16, "row form pad 16");
  ExpectRowForm(RandomCase(5, 64, 512, 300, 150, 0.3, 34), 120, 0, "row form w150 mixed");
  ExpectRowForm(RandomCase(4, 64, 512, 128, 128, 0.1, 35), 128, 0, "row form window only");
  ExpectRowForm(RandomCase(4, 64, 512, 500, 300, 0.1, 36), 0, 0, "row form compressed only");
  ExpectRowForm(RandomCase(3, 40, 512, 300, 200, 0.2, 37), 100, 0, "row form heads 40");
  ExpectRowForm(RandomCase(3, 128, 512, 300, 200, 0.2, 38), 100, 0, "row form heads 128");
  AttnCase sinks = DecodeCase(4, 64, 512, 128, 512, 2000, 0.1, 39);
  for (size_t h = 0; h < sinks.sink.size(); ++h) sinks.sink[h] = h % 2 == 0 ? 30.0f : -60.0f;
  ExpectRowForm(sinks, 128, 0, "row form sinks 30 / -60");
  // Every entry -1: zeros (no valid entry anywhere).
  AttnCase none = DecodeCase(3, 64, 512, 128, 128, 500, 0.0, 40);
  for (auto& i : none.indices) i = -1;
  ExpectRowForm(none, 128, 0, "row form all -1");
}

// The decode-once variant under the default rule (attention.h SparseAttnDecodeOncePays): 64 tokens
// over a shared 128-row window and 1,000 compressed rows (40,960 list entries, ~36 per row) decode
// once and run the bf16 pool's default body (wgmma-ws), bit for bit equal to the row kernel; the
// same again captured into a CUDA graph and replayed twice; 63 tokens (below the rule's minimum)
// and 64 tokens over a pool too large for the rule run the row kernel, and leave the scratch
// unwritten.
TEST(SparseAttnGpuTest, RowFormDecodesOnceWhereItPays) {
  FS_SKIP_WITHOUT_GPU();
  auto run = [](int64_t tokens, int64_t n_compressed, bool scratch, bool graph, bool* once,
                bool* scratch_written) {
    AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, n_compressed, 0.1, 2000 + tokens);
    const testing::KvRowPools pools = testing::EncodeKvRows(&c, 128, 0);
    const RowFormDevice dev(c, pools);
    DeviceBuffer dout = ToDevice(std::vector<uint16_t>(c.q.size(), kPoison));
    const size_t decoded_bytes = SparseAttnDecodedBytes(128, n_compressed, 512);
    const std::vector<uint16_t> poison(decoded_bytes / 2, kPoison);
    DeviceBuffer ddecoded = ToDevice(poison);
    SparseAttnParams p = dev.Params(dout.get<uint16_t>());
    if (scratch) {
      p.kv_rows.decoded = ddecoded.get<uint16_t>();
      p.kv_rows.decoded_bytes = decoded_bytes;
    }
    *once = attention_internal::SparseAttnDecodesOnce(p);
    if (*once) {
      EXPECT_EQ(SparseAttnCudaPathFor(p), SparseAttnCudaPath::kWgmmaWs);
    }
    if (graph) {
      cudaStream_t stream = nullptr;
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      CHECK_OK(LaunchSparseAttn(p, stream));
      CUDA_CHECK(cudaStreamEndCapture(stream, &g));
      cudaGraphExec_t exec = nullptr;
      CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      for (int i = 0; i < 2; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CUDA_CHECK(cudaGraphExecDestroy(exec));
      CUDA_CHECK(cudaGraphDestroy(g));
      CUDA_CHECK(cudaStreamDestroy(stream));
    } else {
      CHECK_OK(LaunchSparseAttn(p, nullptr));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(c.q.size()), decoded(poison.size());
    dout.CopyToHost(out.data(), out.size() * 2);
    ddecoded.CopyToHost(decoded.data(), decoded.size() * 2);
    *scratch_written = decoded != poison;
    return out;
  };
  bool once = false, written = false;
  const std::vector<uint16_t> rows = run(64, 1000, false, false, &once, &written);
  EXPECT_FALSE(once);
  for (bool graph : {false, true}) {
    const std::vector<uint16_t> got = run(64, 1000, true, graph, &once, &written);
    const int64_t diffs = testing::CountBitDiffs(got, rows);
    std::printf("decode once, 64 tokens, 1,128 rows%s: %ld of %zu differ from the row kernel\n",
                graph ? " (graph, 2 replays)" : "", static_cast<long>(diffs), got.size());
    EXPECT_TRUE(once);
    EXPECT_TRUE(written);
    EXPECT_EQ(diffs, 0);
  }
  run(63, 1000, true, false, &once, &written);
  EXPECT_FALSE(once);
  EXPECT_FALSE(written);
  run(64, 8000, true, false, &once, &written);  // 40,960 entries < 8 × 8,128 rows
  EXPECT_FALSE(once);
  EXPECT_FALSE(written);
  // Never decodes once, forced or not, where the row kernel's bits would not follow or quant's
  // GPU decoder could not take a pool in one launch (host-side checks only: nothing is read).
  AttnCase c = DecodeCase(64, 64, 512, 128, 512, 1000, 0.1, 2100);
  const testing::KvRowPools pools = testing::EncodeKvRows(&c, 128, 0);
  const RowFormDevice dev(c, pools);
  DeviceBuffer dout(c.q.size() * 2), ddecoded(SparseAttnDecodedBytes(128, 1000, 512));
  SparseAttnParams p = dev.Params(dout.get<uint16_t>());
  p.kv_rows.decoded = ddecoded.get<uint16_t>();
  p.kv_rows.decoded_bytes = ddecoded.bytes();
  testing::DecodeOnceOverride force(attention_internal::SparseAttnDecodeOnce::kOn);
  EXPECT_TRUE(attention_internal::SparseAttnDecodesOnce(p));
  SparseAttnParams bad = p;
  bad.heads = 40;  // the decoded pool would take mma.sync
  EXPECT_FALSE(attention_internal::SparseAttnDecodesOnce(bad));
  bad = p;
  bad.q_stride += 4;  // the row form does not fit (q strides multiples of 8)
  EXPECT_FALSE(attention_internal::SparseAttnDecodesOnce(bad));
  bad = p;
  bad.kv_rows.n_compressed = (int64_t{1} << 31) / 64;  // 2^31 / 64 rows of 64 units: too many
  EXPECT_FALSE(attention_internal::SparseAttnDecodesOnce(bad));
  bad.kv_rows.n_compressed -= 1;
  EXPECT_TRUE(attention_internal::SparseAttnDecodesOnce(bad));
  // Path overrides other than wgmma / wgmma-ws are ignored (the row kernel's bits).
  for (SparseAttnCudaPath path : {SparseAttnCudaPath::kMmaSync, SparseAttnCudaPath::kScalar,
                                  SparseAttnCudaPath::kWgmmaSplitK}) {
    PathOverride path_force(path);
    EXPECT_EQ(SparseAttnCudaPathFor(p), SparseAttnCudaPath::kWgmmaWs)
        << SparseAttnCudaPathName(path);
  }
  PathOverride wgmma(SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(SparseAttnCudaPathFor(p), SparseAttnCudaPath::kWgmma);
}

TEST(SparseAttnGpuTest, RowFormLauncherErrors) {
  FS_SKIP_WITHOUT_GPU();
  AttnCase c = RandomCase(2, 64, 128, 40, 30, 0.0, 41);
  const testing::KvRowPools pools = testing::EncodeKvRows(&c, 20, 0);
  const RowFormDevice dev(c, pools);
  DeviceBuffer dout(c.q.size() * 2);
  SparseAttnParams p = dev.Params(dout.get<uint16_t>());
  // head_dim 128: valid params, but the CUDA row form runs at head_dim 512 only.
  absl::Status st = LaunchSparseAttn(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("kv_rows"), std::string::npos) << st.message();
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(SparseAttnGpuTest, LauncherErrors) {
  FS_SKIP_WITHOUT_GPU();
  const AttnCase c = RandomCase(2, 4, 128, 10, 8, 0.0, 9);
  DeviceBuffer dq = ToDevice(c.q), dkv = ToDevice(c.kv), didx = ToDevice(c.indices),
               dsink = ToDevice(c.sink), dout(c.q.size() * 2);
  DeviceBuffer dws(SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim));
  SparseAttnParams p = LayoutParams(c, {});
  p.q = dq.get<uint16_t>();
  p.kv = dkv.get<uint16_t>();
  p.indices = didx.get<int32_t>();
  p.attn_sink = dsink.get<float>();
  p.out = dout.get<uint16_t>();
  p.workspace = dws.get();
  p.workspace_bytes = dws.bytes();
  EXPECT_TRUE(LaunchSparseAttn(p, nullptr).ok());
  SparseAttnParams bad = p;
  bad.workspace_bytes = SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim) - 1;
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.q = nullptr;
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.softmax_scale = 0.0f;
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.out = const_cast<uint16_t*>(p.q);
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.tokens = 0;
  EXPECT_TRUE(LaunchSparseAttn(bad, nullptr).ok());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels
