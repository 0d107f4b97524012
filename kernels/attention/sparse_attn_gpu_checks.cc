// sparse_attn_gpu_checks.h: the attention GPU tests' shared cases, runs and tolerance check.
#include "kernels/attention/sparse_attn_gpu_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention_gpu_test_util.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels::testing {
namespace {

using formats::Bf16BitsToFloat;

// Copies packed [rows][d] into rows of `pitch` elements (padding filled with `fill`).
std::vector<uint16_t> Pad(const std::vector<uint16_t>& packed, int64_t rows, int64_t d,
                          int64_t pitch, uint16_t fill) {
  std::vector<uint16_t> out(static_cast<size_t>(std::max<int64_t>(rows, 1) * pitch), fill);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(packed.begin() + r * d, d, out.begin() + r * pitch);
  }
  return out;
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

}  // namespace

ThreadPool* Pool() {
  static ThreadPool* pool =
      new ThreadPool(std::max<size_t>(1, std::thread::hardware_concurrency() - 1));
  return pool;
}

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

Outputs RunBoth(const AttnCase& c, const Layout& l) {
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
}  // namespace flashserve::kernels::testing
