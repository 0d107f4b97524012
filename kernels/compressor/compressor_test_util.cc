#include "kernels/compressor/compressor_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/compressor/exp_rn.h"

namespace flashserve::kernels::compressor_test {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

std::unique_ptr<PreparedLinear> Prepare(const std::vector<uint16_t>& w, int64_t c, int64_t d,
                                        bool f32) {
  std::vector<float> up(w.size());
  for (size_t i = 0; i < w.size(); ++i) up[i] = Bf16BitsToFloat(w[i]);
  LinearWeightView v;
  v.format = f32 ? WeightFormat::kF32 : WeightFormat::kBf16;
  v.out_features = c;
  v.in_features = d;
  if (f32) {
    v.weight = {reinterpret_cast<const uint8_t*>(up.data()), up.size() * sizeof(float)};
  } else {
    v.weight = {reinterpret_cast<const uint8_t*>(w.data()), w.size() * sizeof(uint16_t)};
  }
  auto lin = PreparedLinear::Create(v);
  EXPECT_TRUE(lin.ok()) << lin.status();
  return std::make_unique<PreparedLinear>(std::move(lin).value());
}

// The norm recipe of kernels/norm_rope (README): fp32 squares summed exactly, var = s·fp32(1/n),
// r = 1 / sqrt(var + eps), out = bf16(w · (x · r)).
void RecipeNorm(const float* x, int64_t c, const uint16_t* w, float eps, uint16_t* out) {
  double s = 0.0;
  for (int64_t i = 0; i < c; ++i) s += static_cast<double>(x[i] * x[i]);
  const float var = static_cast<float>(s) * (1.0f / static_cast<float>(c));
  const float r = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < c; ++i) out[i] = FloatToBf16Bits(Bf16BitsToFloat(w[i]) * (x[i] * r));
}

}  // namespace

std::vector<uint16_t> RandomBf16(int64_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& b : v) b = FloatToBf16Bits(u(rng));
  return v;
}

std::unique_ptr<Layer> MakeLayer(int64_t ratio, int64_t c, int64_t d, std::vector<uint16_t> wkv,
                                 std::vector<uint16_t> wgate, std::vector<uint16_t> norm,
                                 bool f32) {
  auto l = std::make_unique<Layer>();
  l->ratio = ratio;
  l->c = c;
  l->d = d;
  l->wkv = std::move(wkv);
  l->wgate = std::move(wgate);
  l->norm = std::move(norm);
  // Ratio 1 is the plain bf16 Linear of the reference; larger ratios use the fp32 copies.
  l->wkv_lin = Prepare(l->wkv, c, d, ratio > 1 && f32);
  if (ratio > 1) l->wgate_lin = Prepare(l->wgate, c, d, f32);
  l->weights.ratio = ratio;
  l->weights.wkv = l->wkv_lin.get();
  l->weights.wgate = l->wgate_lin.get();
  l->weights.norm_weight = l->norm.data();
  l->weights.norm_eps = 1e-20f;
  l->weights.mode = LinearMode::kExact;
  return l;
}

std::unique_ptr<Layer> RandomLayer(int64_t ratio, int64_t c, int64_t d, uint32_t seed, bool f32) {
  std::mt19937 rng(seed);
  const float a = 1.0f / std::sqrt(static_cast<float>(d));
  auto wkv = RandomBf16(c * d, -a, a, rng);
  std::vector<uint16_t> wgate;
  if (ratio > 1) wgate = RandomBf16(c * d, -2 * a, 2 * a, rng);
  auto norm = RandomBf16(c, 0.5f, 1.5f, rng);
  return MakeLayer(ratio, c, d, std::move(wkv), std::move(wgate), std::move(norm), f32);
}

Rows RunChunks(const Layer& layer, const uint16_t* x, int64_t x_stride, int64_t n,
               const std::vector<int64_t>& sizes, int64_t start_pos, CompressorState* state,
               ThreadPool* pool) {
  CompressorState fresh = MakeCompressorState(layer.ratio, layer.c).value();
  CompressorState* st = state != nullptr ? state : &fresh;
  const int64_t max_s = sizes.empty() ? 1 : *std::max_element(sizes.begin(), sizes.end());
  std::vector<uint8_t> ws(CompressorWorkspaceBytes(layer.weights, max_s, pool));
  const int64_t cap = CompressMaxGroups(layer.ratio, max_s);
  std::vector<uint16_t> lat(static_cast<size_t>(std::max<int64_t>(cap, 1) * layer.c));
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(cap, 1)));
  Rows out;
  int64_t done = 0;
  for (int64_t s : sizes) {
    int64_t emitted = -1;
    CompressParams p;
    p.weights = &layer.weights;
    p.state = st;
    p.start_pos = start_pos + done;
    p.tokens = s;
    p.x = x + done * x_stride;
    p.x_stride = x_stride;
    p.latent = lat.data();
    p.latent_stride = layer.c;
    p.latent_capacity = cap;
    p.group_index = idx.data();
    p.groups_emitted = &emitted;
    p.workspace = ws.data();
    p.workspace_bytes = ws.size();
    const absl::Status status = CompressCpu(p, pool);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return out;
    out.latent.insert(out.latent.end(), lat.begin(), lat.begin() + emitted * layer.c);
    out.index.insert(out.index.end(), idx.begin(), idx.begin() + emitted);
    done += s;
  }
  EXPECT_EQ(done, n);
  return out;
}

float RecipeDot(const uint16_t* x, const uint16_t* w, int64_t d) {
  float acc = 0.0f;
  for (int64_t k = 0; k < d; ++k) acc += Bf16BitsToFloat(x[k]) * Bf16BitsToFloat(w[k]);
  return acc;
}

std::vector<uint16_t> RecipeCompress(const Layer& l, const uint16_t* x, int64_t x_stride,
                                     int64_t n, bool cast_first) {
  const int64_t r = l.ratio, c = l.c, groups = n / r;
  std::vector<uint16_t> out(static_cast<size_t>(groups * c));
  std::vector<float> pooled(static_cast<size_t>(c)), kv(static_cast<size_t>(r)),
      z(static_cast<size_t>(r));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const uint16_t* wk = l.wkv.data() + ch * l.d;
      if (r == 1) {
        pooled[ch] = RecipeDot(x + g * x_stride, wk, l.d);
        if (cast_first) pooled[ch] = formats::RoundToBf16(pooled[ch]);
        continue;
      }
      float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
      for (int64_t i = 0; i < r; ++i) {
        kv[i] = RecipeDot(x + (g * r + i) * x_stride, wk, l.d);
        z[i] = RecipeDot(x + (g * r + i) * x_stride, l.wgate.data() + ch * l.d, l.d);
        mx = std::max(mx, z[i]);
      }
      for (int64_t i = 0; i < r; ++i) sum += compressor_math::ExpRn(z[i] - mx);
      for (int64_t i = 0; i < r; ++i) acc += (compressor_math::ExpRn(z[i] - mx) / sum) * kv[i];
      pooled[ch] = cast_first ? formats::RoundToBf16(acc) : acc;
    }
    RecipeNorm(pooled.data(), c, l.norm.data(), 1e-20f, out.data() + g * c);
  }
  return out;
}

std::vector<double> DoubleCompress(const Layer& l, const uint16_t* x, int64_t x_stride,
                                   int64_t n) {
  const int64_t r = l.ratio, c = l.c, groups = n / r;
  std::vector<double> out(static_cast<size_t>(groups * c)), pooled(static_cast<size_t>(c));
  auto dot = [&](const uint16_t* xr, const uint16_t* w) {
    double acc = 0.0;
    for (int64_t k = 0; k < l.d; ++k) {
      acc += static_cast<double>(Bf16BitsToFloat(xr[k])) * Bf16BitsToFloat(w[k]);
    }
    return acc;
  };
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t ch = 0; ch < c; ++ch) {
      double num = 0.0, den = 0.0, zmax = -INFINITY;
      std::vector<double> z(static_cast<size_t>(r)), kv(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) {
        const uint16_t* xr = x + (g * r + i) * x_stride;
        kv[i] = dot(xr, l.wkv.data() + ch * l.d);
        z[i] = r > 1 ? dot(xr, l.wgate.data() + ch * l.d) : 0.0;
        zmax = std::max(zmax, z[i]);
      }
      for (int64_t i = 0; i < r; ++i) {
        num += std::exp(z[i] - zmax) * kv[i];
        den += std::exp(z[i] - zmax);
      }
      pooled[ch] = formats::RoundToBf16(static_cast<float>(num / den));  // the one bf16 cast
    }
    double ss = 0.0;
    for (int64_t ch = 0; ch < c; ++ch) ss += pooled[ch] * pooled[ch];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c) + 1e-20);
    for (int64_t ch = 0; ch < c; ++ch) {
      out[g * c + ch] = Bf16BitsToFloat(l.norm[ch]) * pooled[ch] * inv;
    }
  }
  return out;
}

double UlpBf16(double v) {
  const double a = std::max(std::fabs(v), 1e-30);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 7);
}

Projections Project(const Layer& l, const uint16_t* x, int64_t x_stride, int64_t n) {
  Projections pr;
  pr.ratio = l.ratio;
  pr.c = l.c;
  pr.n = n;
  pr.kv.resize(static_cast<size_t>(n * l.c));
  if (l.ratio > 1) pr.score.resize(pr.kv.size());
  if (l.ratio == 1) pr.kv_bf16.resize(pr.kv.size());
  std::vector<uint8_t> ws(
      LinearWorkspaceBytes(*l.wkv_lin, n, l.weights.mode, nullptr) +
      (l.ratio > 1 ? LinearWorkspaceBytes(*l.wgate_lin, n, l.weights.mode, nullptr) : 0));
  auto run = [&](const PreparedLinear* w, float* y_f32, uint16_t* y_bf16) {
    LinearParams lp;
    lp.weight = w;
    lp.m = n;
    lp.x_bf16 = x;
    lp.x_stride = x_stride;
    lp.y_f32 = y_f32;
    lp.y_bf16 = y_bf16;
    lp.y_stride = l.c;
    lp.mode = l.weights.mode;
    lp.workspace = ws.data();
    lp.workspace_bytes = ws.size();
    const absl::Status st = LinearCpu(lp, nullptr);
    EXPECT_TRUE(st.ok()) << st;
  };
  run(l.wkv_lin.get(), pr.kv.data(), nullptr);
  if (l.ratio > 1) run(l.wgate_lin.get(), pr.score.data(), nullptr);
  if (l.ratio == 1) run(l.wkv_lin.get(), nullptr, pr.kv_bf16.data());
  return pr;
}

Projections RandomProjections(int64_t ratio, int64_t c, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> kv(-2.0f, 2.0f), z(-4.0f, 4.0f);
  Projections pr;
  pr.ratio = ratio;
  pr.c = c;
  pr.n = n;
  pr.kv.resize(static_cast<size_t>(n * c));
  for (float& v : pr.kv) v = kv(rng);
  if (ratio > 1) {
    pr.score.resize(pr.kv.size());
    for (float& v : pr.score) v = z(rng);
  } else {
    pr.kv_bf16.resize(pr.kv.size());
    for (size_t i = 0; i < pr.kv.size(); ++i) pr.kv_bf16[i] = FloatToBf16Bits(pr.kv[i]);
  }
  return pr;
}

Rows RunProjectedChunks(const Projections& pr, const uint16_t* norm,
                        const std::vector<int64_t>& sizes, bool bf16, int64_t start_pos,
                        CompressorState* state, ThreadPool* pool) {
  CompressorState fresh = MakeCompressorState(pr.ratio, pr.c).value();
  CompressorState* st = state != nullptr ? state : &fresh;
  const int64_t max_s = sizes.empty() ? 1 : *std::max_element(sizes.begin(), sizes.end());
  const int64_t cap = std::max<int64_t>(CompressMaxGroups(pr.ratio, max_s), 1);
  std::vector<uint16_t> lat(static_cast<size_t>(cap * pr.c));
  std::vector<int64_t> idx(static_cast<size_t>(cap));
  Rows out;
  int64_t done = 0;
  for (int64_t s : sizes) {
    int64_t emitted = -1;
    CompressProjectedParams p;
    p.ratio = pr.ratio;
    p.channels = pr.c;
    p.start_pos = start_pos + done;
    p.tokens = s;
    if (bf16) {
      p.kv_bf16 = pr.kv_bf16.data() + done * pr.c;
    } else {
      p.kv = pr.kv.data() + done * pr.c;
    }
    p.kv_stride = pr.c;
    if (pr.ratio > 1) {
      p.score = pr.score.data() + done * pr.c;
      p.score_stride = pr.c;
    }
    p.norm_weight = norm;
    p.latent = lat.data();
    p.latent_stride = pr.c;
    p.latent_capacity = cap;
    p.group_index = idx.data();
    p.groups_emitted = &emitted;
    const absl::Status status = CompressProjectedCpu(p, st, pool);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return out;
    out.latent.insert(out.latent.end(), lat.begin(), lat.begin() + emitted * pr.c);
    out.index.insert(out.index.end(), idx.begin(), idx.begin() + emitted);
    done += s;
  }
  EXPECT_EQ(done, pr.n);
  return out;
}

}  // namespace flashserve::kernels::compressor_test
