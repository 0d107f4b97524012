#include "kernels/gemm/gemm_test_util.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <span>

#include "absl/strings/str_format.h"
#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "common/formats/weight_quant.h"

namespace flashserve::kernels::gemm_test {
namespace {

using formats::Bf16BitsToFloat;
constexpr uint16_t kSentinel = 0x7FC1;  // a NaN nobody writes

void PushBf16(std::vector<uint8_t>& out, float v) {
  const uint16_t b = formats::FloatToBf16Bits(v);
  out.push_back(static_cast<uint8_t>(b & 0xFF));
  out.push_back(static_cast<uint8_t>(b >> 8));
}

float ReadBf16(const std::vector<uint8_t>& bytes, int64_t i) {
  return Bf16BitsToFloat(static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8)));
}

float ReadF32(const std::vector<uint8_t>& bytes, int64_t i) {
  float v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

// The weight decoded once: value[r*k + c] is the bare code value (FP8/FP4) or the weight
// (bf16/f32); scale[r*kb + b] the UE8M0 scale of block b of row r (1 for bf16/f32).
struct Decoded {
  std::vector<float> value;
  std::vector<float> scale;
  int64_t kb = 0;
};

Decoded Decode(const HostLinear& w) {
  Decoded d;
  d.kb = (w.k + 31) / 32;
  d.value.resize(w.n * w.k);
  d.scale.assign(w.n * d.kb, 1.0f);
  for (int64_t r = 0; r < w.n; ++r) {
    for (int64_t c = 0; c < w.k; ++c) {
      float& v = d.value[r * w.k + c];
      switch (w.format) {
        case WeightFormat::kFp8Block32:
          v = formats::E4m3ToFloat(w.weight[r * w.k + c]);
          d.scale[r * d.kb + c / 32] =
              formats::Ue8m0ToFloat(w.scale[(r / 32) * formats::Fp8WeightScaleCols(w.k) + c / 32]);
          break;
        case WeightFormat::kFp4Block32: {
          const uint8_t byte = w.weight[(r * w.k + c) / 2];
          v = formats::E2m1ToFloat(c % 2 == 0 ? (byte & 0xF) : (byte >> 4));
          d.scale[r * d.kb + c / 32] = formats::Ue8m0ToFloat(w.scale[r * (w.k / 32) + c / 32]);
          break;
        }
        case WeightFormat::kBf16:
          v = ReadBf16(w.weight, r * w.k + c);
          break;
        case WeightFormat::kF32:
          v = ReadF32(w.weight, r * w.k + c);
          break;
      }
    }
  }
  return d;
}

// Activation codes/values of one row: FP8 codes as floats and per-block scales, via the
// formats quantiser on the row zero-padded to a multiple of 32.
void QuantizeRow(const uint16_t* x, int64_t k, std::vector<float>* q, std::vector<float>* s) {
  const int64_t kp = (k + 31) / 32 * 32;
  std::vector<uint16_t> padded(kp, 0);
  std::memcpy(padded.data(), x, k * 2);
  std::vector<uint8_t> codes(kp), scales(kp / 32);
  CHECK_OK(formats::QuantizeFp8Ue8m0B32(padded, codes, scales));
  q->resize(kp);
  s->resize(kp / 32);
  for (int64_t i = 0; i < kp; ++i) (*q)[i] = formats::E4m3ToFloat(codes[i]);
  for (int64_t b = 0; b < kp / 32; ++b) (*s)[b] = formats::Ue8m0ToFloat(scales[b]);
}

float InputAt(const std::vector<uint16_t>& xb, const std::vector<float>& xf, int64_t i) {
  return xf.empty() ? Bf16BitsToFloat(xb[i]) : xf[i];
}

}  // namespace

uint64_t Rng::Next() {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
int64_t Rng::Int(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
}
double Rng::Normal() {
  const double u1 = Uniform() + 1e-300, u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

HostLinear RandomLinear(WeightFormat format, int64_t n, int64_t k, bool with_bias, Rng& rng) {
  HostLinear w{format, n, k, {}, {}, {}};
  const double sd = 1.0 / std::sqrt(static_cast<double>(k));
  switch (format) {
    case WeightFormat::kFp8Block32:
      w.weight.resize(n * k);
      for (auto& c : w.weight) {
        c = static_cast<uint8_t>(rng.Next());
        if ((c & 0x7F) == 0x7F) c ^= 1;  // NaN codes 0x7F / 0xFF become ±448
      }
      break;
    case WeightFormat::kFp4Block32:
      w.weight.resize(n * k / 2);
      for (auto& c : w.weight) c = static_cast<uint8_t>(rng.Next());
      break;
    case WeightFormat::kBf16:
      for (int64_t i = 0; i < n * k; ++i) PushBf16(w.weight, static_cast<float>(sd * rng.Normal()));
      break;
    case WeightFormat::kF32:
      for (int64_t i = 0; i < n * k; ++i) {
        const float v = static_cast<float>(sd * rng.Normal());
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        w.weight.insert(w.weight.end(), p, p + 4);
      }
      break;
  }
  w.scale.resize(LinearScaleBytes(format, n, k));
  for (auto& s : w.scale) s = static_cast<uint8_t>(127 + rng.Int(-12, 2));
  if (with_bias) {
    for (int64_t i = 0; i < n; ++i) PushBf16(w.bias, static_cast<float>(rng.Normal()));
  }
  return w;
}

std::vector<uint16_t> RandomActivations(int64_t m, int64_t k, int64_t stride, Rng& rng) {
  std::vector<uint16_t> x(m * stride, kSentinel);
  for (int64_t r = 0; r < m; ++r) {
    const double row_scale = std::ldexp(1.0, static_cast<int>(rng.Int(-6, 6)));
    for (int64_t b0 = 0; b0 < k; b0 += 32) {
      const bool zero = rng.Int(0, 15) == 0;
      const double s = row_scale * std::ldexp(1.0, static_cast<int>(rng.Int(-4, 4)));
      for (int64_t i = b0; i < std::min(k, b0 + 32); ++i) {
        x[r * stride + i] =
            formats::FloatToBf16Bits(zero ? 0.0f : static_cast<float>(s * rng.Normal()));
      }
    }
  }
  return x;
}

std::vector<float> ScalarLinear(const HostLinear& w, const std::vector<uint16_t>& x_bf16,
                                const std::vector<float>& x_f32, int64_t m, int64_t x_stride) {
  std::vector<float> y(m * w.n);
  const bool quant = QuantizesActivations(w.format);
  const Decoded d = Decode(w);
  std::vector<float> q, s;
  for (int64_t r = 0; r < m; ++r) {
    if (quant) QuantizeRow(x_bf16.data() + r * x_stride, w.k, &q, &s);
    for (int64_t c = 0; c < w.n; ++c) {
      const float* wr = &d.value[c * w.k];
      float acc = 0.0f;
      if (quant) {
        for (int64_t b0 = 0; b0 < w.k; b0 += 32) {
          float partial = 0.0f;
          for (int64_t i = b0; i < std::min(w.k, b0 + 32); ++i) partial += q[i] * wr[i];
          acc += (partial * s[b0 / 32]) * d.scale[c * d.kb + b0 / 32];
        }
      } else {
        for (int64_t i = 0; i < w.k; ++i) acc += InputAt(x_bf16, x_f32, r * x_stride + i) * wr[i];
      }
      y[r * w.n + c] = w.bias.empty() ? acc : acc + ReadBf16(w.bias, c);
    }
  }
  return y;
}

DoubleResult DoubleLinear(const HostLinear& w, const std::vector<uint16_t>& x_bf16,
                          const std::vector<float>& x_f32, int64_t m, int64_t x_stride,
                          int64_t row_step) {
  DoubleResult out{std::vector<double>(m * w.n), std::vector<double>(m * w.n, -1.0)};
  const bool quant = QuantizesActivations(w.format);
  const Decoded d = Decode(w);
  std::vector<float> q, s;
  std::vector<double> xv(w.k);
  for (int64_t r = 0; r < m; ++r) {
    if (r % row_step != 0 && r != m - 1) continue;
    if (quant) QuantizeRow(x_bf16.data() + r * x_stride, w.k, &q, &s);
    for (int64_t i = 0; i < w.k; ++i) {
      xv[i] = quant ? double{q[i]} * s[i / 32] : InputAt(x_bf16, x_f32, r * x_stride + i);
    }
    for (int64_t c = 0; c < w.n; ++c) {
      double acc = 0.0, abs_sum = 0.0;
      for (int64_t i = 0; i < w.k; ++i) {
        const double p = xv[i] * (double{d.value[c * w.k + i]} * d.scale[c * d.kb + i / 32]);
        acc += p;
        abs_sum += std::fabs(p);
      }
      out.y[r * w.n + c] = w.bias.empty() ? acc : acc + ReadBf16(w.bias, c);
      out.abs_sum[r * w.n + c] = abs_sum;
    }
  }
  return out;
}

absl::Status RunLinear(const PreparedLinear& w, const std::vector<uint16_t>& x_bf16,
                       const std::vector<float>& x_f32, int64_t m, int64_t x_stride,
                       const RunOptions& o, std::vector<float>* y) {
  const int64_t n = w.out_features();
  const int64_t ys = o.y_stride > 0 ? o.y_stride : n;
  std::vector<uint16_t> yb(o.f32_out ? 0 : m * ys, kSentinel);
  std::vector<float> yf(o.f32_out ? m * ys : 0, std::bit_cast<float>(0x7FC00001u));
  std::vector<uint8_t> ws(LinearWorkspaceBytes(w, m, o.mode, o.pool));
  // Garbage in the workspace must not matter.
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = static_cast<uint8_t>(0xFF - i % 7);
  LinearParams p;
  p.weight = &w;
  p.m = m;
  p.x_bf16 = x_f32.empty() ? x_bf16.data() : nullptr;
  p.x_f32 = x_f32.empty() ? nullptr : x_f32.data();
  p.x_stride = x_stride;
  p.y_bf16 = o.f32_out ? nullptr : yb.data();
  p.y_f32 = o.f32_out ? yf.data() : nullptr;
  p.y_stride = ys;
  p.mode = o.mode;
  p.workspace = ws.data();
  p.workspace_bytes = ws.size();
  if (absl::Status s = LinearCpu(p, o.pool); !s.ok()) return s;
  y->assign(m * n, 0.0f);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < ys; ++c) {
      const bool pad = c >= n;
      const uint32_t bits =
          o.f32_out ? std::bit_cast<uint32_t>(yf[r * ys + c]) : uint32_t{yb[r * ys + c]};
      if (pad && bits != (o.f32_out ? 0x7FC00001u : kSentinel)) {
        return absl::InternalError(absl::StrFormat("padding at row %d col %d was written", r, c));
      }
      if (!pad) {
        (*y)[r * n + c] = o.f32_out ? yf[r * ys + c] : Bf16BitsToFloat(yb[r * ys + c]);
      }
    }
  }
  return absl::OkStatus();
}

double Bf16Ulp(double v) {
  const double a = std::fabs(v);
  if (a < 0x1.0p-126) return 0x1.0p-133;
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

}  // namespace flashserve::kernels::gemm_test
