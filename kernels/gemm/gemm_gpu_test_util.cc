#include "kernels/gemm/gemm_gpu_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/weight_quant.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels::gemm_test {

std::unique_ptr<PreparedLinear> PrepareCodesOnly(const HostLinear& h) {
  PrepareLinearOptions o;
  o.expand_to_f32 = false;
  auto l = PreparedLinear::Create(h.View(), o);
  CHECK(l.ok()) << l.status();
  return std::make_unique<PreparedLinear>(std::move(l).value());
}

DeviceFp8Linear UploadOrDie(const PreparedLinear& w, bool keep_expanded) {
  auto d = DeviceFp8Linear::Upload(w, keep_expanded);
  CHECK(d.ok()) << d.status();
  return std::move(d).value();
}

HostLinear ExactArithFp8(int64_t n, int64_t k, int base_lo, int base_hi, bool with_bias, Rng& rng,
                         std::vector<int>* base_of_row) {
  std::vector<uint8_t> codes;  // E4M3 values that are multiples of 2^-3 with |v| <= 8
  for (int c = 0; c < 256; ++c) {
    const float v = formats::E4m3ToFloat(static_cast<uint8_t>(c));
    if (std::isfinite(v) && std::fabs(v) <= 8.f && v * 8.f == std::floor(v * 8.f)) {
      codes.push_back(static_cast<uint8_t>(c));
    }
  }
  HostLinear w;
  w.format = WeightFormat::kFp8Block32;
  w.n = n;
  w.k = k;
  w.weight.resize(n * k);
  for (uint8_t& c : w.weight) c = codes[rng.Int(0, static_cast<int64_t>(codes.size()) - 1)];
  const int64_t rows = formats::Fp8WeightScaleRows(n), cols = formats::Fp8WeightScaleCols(k);
  w.scale.resize(rows * cols);
  std::vector<int> base(rows);
  for (int64_t r = 0; r < rows; ++r) {
    base[r] = static_cast<int>(rng.Int(base_lo, base_hi));
    for (int64_t b = 0; b < cols; ++b) {
      w.scale[r * cols + b] = static_cast<uint8_t>(base[r] + rng.Int(0, 2));
    }
  }
  if (with_bias) {
    // Multiples of 2^(base - 130) far below the sums' bound: the fp32 bias add stays exact.
    w.bias.resize(2 * n);
    for (int64_t i = 0; i < n; ++i) {
      const float v = std::ldexp(static_cast<float>(rng.Int(-64, 64)), base[i / 32] - 130);
      const uint16_t bits = formats::FloatToBf16Bits(v);
      std::memcpy(&w.bias[2 * i], &bits, 2);
    }
  }
  if (base_of_row != nullptr) *base_of_row = base;
  return w;
}

std::vector<uint16_t> SmallIntActivations(int64_t m, int64_t k, int64_t stride, int density_den,
                                          Rng& rng) {
  std::vector<uint16_t> x(m * stride, formats::FloatToBf16Bits(0.f));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      if (rng.Int(0, density_den - 1) != 0) continue;
      const int64_t v = rng.Int(1, 3) * (rng.Int(0, 1) == 0 ? 1 : -1);
      x[r * stride + c] = formats::FloatToBf16Bits(static_cast<float>(v));
    }
  }
  return x;
}

bool ExactPremiseHolds(const HostLinear& w, const std::vector<int>& base_of_row,
                       const std::vector<uint16_t>& x, int64_t m, int64_t x_stride) {
  const DoubleResult d = DoubleLinear(w, x, {}, m, x_stride);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < w.n; ++c) {
      const double bound = std::ldexp(1.0, 24 + base_of_row[c / 32] - 130);
      // The bias (|b| <= 64 · 2^(base - 130), ExactArithFp8) joins the sum as one more addend.
      const double bias = w.bias.empty() ? 0.0 : std::ldexp(64.0, base_of_row[c / 32] - 130);
      if (d.abs_sum[r * w.n + c] + bias >= bound) return false;
    }
  }
  return true;
}

std::vector<float> RunLinearGpu(const Fp8LinearDevice& w, const std::vector<uint16_t>& x, int64_t m,
                                int64_t x_stride, const GpuRunOptions& o) {
  const int64_t y_stride = o.y_stride > 0 ? o.y_stride : w.n;
  DeviceBuffer dx(std::max<size_t>(2, x.size() * 2));
  if (!x.empty()) dx.CopyFromHost(x.data(), x.size() * 2);
  const size_t y_elems = static_cast<size_t>(std::max<int64_t>(1, m * y_stride));
  DeviceBuffer dy(y_elems * (o.f32_out ? 4 : 2));
  // NaN-fill so unwritten outputs show up.
  CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
  DeviceBuffer ws(std::max<size_t>(
      16, LinearCudaWorkspaceBytes(w, m, o.tile_rows, o.split_k, o.wgmma_bf16, o.wgmma_ws,
                                   o.expand_weights, o.stream_k_tail)));
  // Garbage-fill: no kernel may rely on the workspace's contents (the stream kernel's split-K
  // counters included).
  CUDA_CHECK(cudaMemset(ws.get(), 0xA5, ws.bytes()));
  LinearCudaParams p;
  p.weight = &w;
  p.m = m;
  p.x_bf16 = dx.get<uint16_t>();
  p.x_stride = x_stride;
  p.y_bf16 = o.f32_out ? nullptr : dy.get<uint16_t>();
  p.y_f32 = o.f32_out ? dy.get<float>() : nullptr;
  p.y_stride = y_stride;
  p.tile_rows = o.tile_rows;
  p.split_k = o.split_k;
  p.wgmma_bf16 = o.wgmma_bf16;
  p.wgmma_ws = o.wgmma_ws;
  p.expand_weights = o.expand_weights;
  p.stream_tma = o.stream_tma;
  p.ws_tile_cols = o.ws_tile_cols;
  p.stream_k_tail = o.stream_k_tail;
  p.ws_multicast = o.ws_multicast;
  p.x_qdq = o.x_qdq;
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  for (int i = 0; i < std::max(o.repeats, 1); ++i) {
    const absl::Status s = LaunchLinearFp8(p, nullptr);
    CHECK(s.ok()) << s;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> y(y_elems);
  if (o.f32_out) {
    dy.CopyToHost(y.data(), y_elems * 4);
  } else {
    std::vector<uint16_t> bits(y_elems);
    dy.CopyToHost(bits.data(), y_elems * 2);
    for (size_t i = 0; i < y_elems; ++i) y[i] = formats::Bf16BitsToFloat(bits[i]);
  }
  return y;
}

Comparison Compare(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t m,
                   int64_t n, int64_t y_stride, const std::vector<double>& abs_sum,
                   double ulp_weight, double reorder_coef) {
  Comparison c;
  double num = 0, den = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const float g = gpu[r * y_stride + j], e = cpu[r * y_stride + j];
      ++c.count;
      if (std::isnan(g) || std::isnan(e)) {
        if (std::isnan(g) && std::isnan(e)) {
          ++c.bit_equal;
          ++c.within_ulp;
        } else {
          ++c.bound_failures;
        }
        continue;
      }
      uint32_t gb, eb;
      std::memcpy(&gb, &g, 4);
      std::memcpy(&eb, &e, 4);
      if (gb == eb) ++c.bit_equal;
      const double diff = std::fabs(static_cast<double>(g) - e);
      const double ulp = Bf16Ulp(std::max(std::fabs(g), std::fabs(e)));
      if (diff <= ulp) ++c.within_ulp;
      num += diff * diff;
      den += static_cast<double>(e) * e;
      const double s = abs_sum.empty() ? -1 : abs_sum[r * n + j];
      if (s >= 0) {
        ++c.bound_checked;
        const double allowed = ulp_weight * ulp + reorder_coef * s;
        if (diff > allowed) ++c.bound_failures;
        if (allowed > 0) c.worst_excess = std::max(c.worst_excess, diff / allowed);
      }
    }
  }
  c.rel_rms = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
  return c;
}

}  // namespace flashserve::kernels::gemm_test
