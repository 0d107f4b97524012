#include "kernels/moe/moe_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <thread>

#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/fp4_e2m1.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "kernels/gemm/gemm.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"

namespace flashserve::kernels::moe_test {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

// splitmix64 stream: deterministic on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() { return Mix64(s_++); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Normal() {
    const double u = std::max(Uniform(), 1e-300), v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  uint64_t s_;
};

std::unique_ptr<PreparedLinear> MakeLinear(const LinearWeightView& v) {
  PrepareLinearOptions o;
  o.expand_to_f32 = false;  // exact mode reads the codes; keeps released-size experts small
  auto l = PreparedLinear::Create(v, o);
  CHECK_OK(l.status());
  return std::make_unique<PreparedLinear>(std::move(l).value());
}

std::unique_ptr<PreparedLinear> Fp4Linear(int64_t n, int64_t k, const HostFp4& w) {
  return MakeLinear({WeightFormat::kFp4Block32, n, k, w.codes, w.scales, {}});
}

// The host references' thread pool: every core (the GPU machine has 16; LinearCpu and MoeCpu give
// the same bits with any pool). One row of D 1024 × I 1280 took ~2.5 ms on one core, and the GPU
// tests check thousands of rows against the host.
ThreadPool* HostPool() {
  static ThreadPool* pool = new ThreadPool(std::max(2u, std::thread::hardware_concurrency()));
  return pool;
}

void RunLinear(const PreparedLinear& w, const uint16_t* x, int64_t m, uint16_t* y_bf16,
               float* y_f32) {
  ThreadPool* pool = HostPool();
  std::vector<uint8_t> ws(LinearWorkspaceBytes(w, m, LinearMode::kExact, pool));
  LinearParams p;
  p.weight = &w;
  p.m = m;
  p.x_bf16 = x;
  p.x_stride = w.in_features();
  p.y_bf16 = y_bf16;
  p.y_f32 = y_f32;
  p.y_stride = w.out_features();
  p.mode = LinearMode::kExact;
  p.workspace = ws.data();
  p.workspace_bytes = ws.size();
  CHECK_OK(LinearCpu(p, pool));
}

}  // namespace

int64_t ProjRows(const LayerSpec& s, int proj) { return proj == kW2 ? s.dim : s.inter; }
int64_t ProjCols(const LayerSpec& s, int proj) { return proj == kW2 ? s.inter : s.dim; }

HostFp4 GenerateProjection(const LayerSpec& s, int proj, int64_t expert) {
  const int64_t n = ProjRows(s, proj), k = ProjCols(s, proj);
  HostFp4 w;
  w.codes.resize(static_cast<size_t>(n * k / 2));
  w.scales.resize(static_cast<size_t>(n * k / 32));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < k / 2; ++b) {
      w.codes[r * (k / 2) + b] = WeightCodeByte(s.seed, proj, expert, r, b);
    }
    for (int64_t b = 0; b < k / 32; ++b) {
      w.scales[r * (k / 32) + b] = WeightScaleByte(s.seed, s.kind, proj, expert, r, b);
    }
  }
  return w;
}

CpuExperts::CpuExperts(int64_t n_experts, int64_t dim, int64_t inter) : dim_(dim), inter_(inter) {
  for (int proj : {kW1, kW2}) {
    const int64_t n = proj == kW2 ? dim : inter, k = proj == kW2 ? inter : dim;
    HostFp4 zero{std::vector<uint8_t>(n * k / 2, 0), std::vector<uint8_t>(n * k / 32, 127)};
    owned_.push_back(Fp4Linear(n, k, zero));
    const PreparedLinear* dummy = owned_.back().get();
    ptr_[proj].assign(n_experts, dummy);
    if (proj == kW1) ptr_[kW3].assign(n_experts, dummy);
  }
}

void CpuExperts::Set(int64_t expert, int proj, const HostFp4& w) {
  const int64_t n = proj == kW2 ? dim_ : inter_, k = proj == kW2 ? inter_ : dim_;
  owned_.push_back(Fp4Linear(n, k, w));
  ptr_[proj][expert] = owned_.back().get();
}

std::unique_ptr<CpuExperts> BuildCpuExperts(const LayerSpec& s, const std::vector<bool>& used) {
  auto experts = std::make_unique<CpuExperts>(s.n_experts, s.dim, s.inter);
  for (int64_t e = 0; e < s.n_experts; ++e) {
    if (!used.empty() && !used[e]) continue;
    for (int proj : {kW1, kW3, kW2}) experts->Set(e, proj, GenerateProjection(s, proj, e));
  }
  return experts;
}

std::unique_ptr<PreparedLinear> RandomGate(int64_t n_experts, int64_t dim, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> w(n_experts * dim);
  const double sd = 1.0 / std::sqrt(static_cast<double>(dim));
  for (float& v : w) v = Bf16BitsToFloat(FloatToBf16Bits(static_cast<float>(rng.Normal() * sd)));
  return MakeLinear({WeightFormat::kF32,
                     n_experts,
                     dim,
                     {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4},
                     {},
                     {}});
}

std::vector<float> RandomUniform(int64_t n, double lo, double hi, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  return v;
}

std::vector<float> RandomBias(int64_t n, float scale, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> b(n);
  for (float& v : b) v = static_cast<float>((2 * rng.Uniform() - 1) * scale);
  return b;
}

std::vector<uint16_t> RealisticActivations(int64_t m, int64_t dim, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> x(m * dim);
  for (int64_t t = 0; t < m; ++t) {
    const double row_scale = std::ldexp(1.0, static_cast<int>(rng.Next() % 5) - 2);
    for (int64_t c = 0; c < dim; ++c) {
      double v = rng.Normal() * row_scale;
      if (rng.Next() % 100 == 0) v *= 16;
      x[t * dim + c] = FloatToBf16Bits(static_cast<float>(v));
    }
    if (rng.Next() % 4 == 0) {  // an all-zero 32-block: the FP8 scale's amax floor
      const int64_t b = static_cast<int64_t>(rng.Next() % (dim / 32));
      std::fill_n(x.begin() + t * dim + 32 * b, 32, uint16_t{0});
    }
  }
  return x;
}

std::vector<uint16_t> SmallIntActivations(int64_t m, int64_t dim, int64_t density_den,
                                          uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> x(m * dim, 0);
  for (uint16_t& v : x) {
    if (rng.Next() % density_den != 0) continue;
    const int64_t i = static_cast<int64_t>(rng.Next() % 6);  // ±1, ±2, ±3
    v = FloatToBf16Bits(static_cast<float>((i % 2 == 0 ? 1 : -1) * (1 + i / 2)));
  }
  return x;
}

std::vector<float> GateLogits(const PreparedLinear& gate, const std::vector<uint16_t>& x,
                              int64_t m) {
  std::vector<float> logits(m * gate.out_features());
  if (m > 0) RunLinear(gate, x.data(), m, nullptr, logits.data());
  return logits;
}

bool RouteIsClear(const float* logits, int64_t n_experts, const float* bias, const MoeOptions& o) {
  std::vector<double> b(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) {
    const double v = static_cast<double>(logits[e]) / o.gate_temp;
    const double s = std::sqrt(v > 20 ? v : std::log1p(std::exp(v)));
    b[e] = s + (bias != nullptr ? bias[e] : 0.0);
  }
  const int64_t top = std::min(o.top_k + 1, n_experts);
  std::partial_sort(b.begin(), b.begin() + top, b.end(), std::greater<>());
  for (int64_t i = 0; i + 1 < top; ++i) {
    if (b[i] - b[i + 1] <= 1e-5 * std::max(1.0, std::fabs(b[i]))) return false;
  }
  return true;
}

std::vector<float> ClearRouteLogits(int64_t m, int64_t n_experts, const float* bias,
                                    const float* bias_vl, const uint8_t* is_image,
                                    const MoeOptions& o, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> logits(m * n_experts);
  for (int64_t t = 0; t < m; ++t) {
    float* row = logits.data() + t * n_experts;
    do {
      for (int64_t e = 0; e < n_experts; ++e) row[e] = normal(rng);
    } while (!RouteIsClear(row, n_experts, is_image[t] != 0 ? bias_vl : bias, o));
  }
  return logits;
}

std::vector<float> ClearRoutingActivations(const PreparedLinear& gate, const float* bias,
                                           const float* bias_vl, const uint8_t* is_image,
                                           const MoeOptions& o, int64_t m, int64_t dim,
                                           uint64_t seed, std::vector<uint16_t>* x) {
  const int64_t n = gate.out_features();
  *x = RealisticActivations(m, dim, seed);
  for (int round = 1;; ++round) {
    std::vector<float> logits = GateLogits(gate, *x, m);
    bool changed = false;
    for (int64_t t = 0; t < m; ++t) {
      const bool image = is_image != nullptr && is_image[t] != 0;
      if (RouteIsClear(logits.data() + t * n, n, image ? bias_vl : bias, o)) continue;
      const auto row = RealisticActivations(1, dim, seed + 7919 * round + 104729 * t);
      std::copy(row.begin(), row.end(), x->begin() + t * dim);
      changed = true;
    }
    if (!changed) return logits;
    CHECK_LT(round, 100) << "could not draw activations without near-tie routes";
  }
}

HostPermutation CountingSort(const std::vector<int32_t>& ids, const std::vector<float>& weights,
                             int64_t m, int64_t k, int64_t n_experts) {
  HostPermutation h;
  h.counts.assign(n_experts, 0);
  for (int64_t i = 0; i < m * k; ++i) ++h.counts[ids[i]];
  h.offsets.assign(n_experts + 1, 0);
  for (int64_t e = 0; e < n_experts; ++e) h.offsets[e + 1] = h.offsets[e] + h.counts[e];
  std::vector<int32_t> cursor(h.offsets.begin(), h.offsets.end() - 1);
  h.slot_token.resize(m * k);
  h.slot_weight.resize(m * k);
  h.token_slot.resize(m * k);
  for (int64_t i = 0; i < m * k; ++i) {
    const int32_t at = cursor[ids[i]]++;
    h.slot_token[at] = static_cast<int32_t>(i / k);
    h.slot_weight[at] = weights[i];
    h.token_slot[i] = at;
  }
  return h;
}

MoeCudaWeights StandInCudaWeights(const uint8_t* buf) {
  MoeCudaWeights w;
  w.n_experts = 8;
  w.dim = 256;
  w.inter = 128;
  w.w1 = w.w3 = w.w2 = buf;
  w.w1_scale = w.w3_scale = w.w2_scale = buf + 64;
  w.code_order = MoeFp4CodeOrder::kDevice;
  return w;
}

std::vector<int32_t> TileList(const std::vector<int32_t>& offsets, int64_t tile_rows) {
  std::vector<int32_t> tiles;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    for (int64_t r = offsets[e]; r < offsets[e + 1]; r += tile_rows) {
      tiles.push_back(static_cast<int32_t>(e));
      tiles.push_back(static_cast<int32_t>(r));
    }
  }
  return tiles;
}

std::array<int64_t, 5> RsTilesByWidth(const std::vector<int32_t>& ids, int64_t n_experts) {
  std::vector<int32_t> offsets(n_experts + 1, 0);
  for (const int32_t id : ids) ++offsets[id + 1];
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
  const std::vector<int32_t> tiles = TileList(offsets, kMoeCudaWgmmaTileRows);
  constexpr uint32_t kAll = moe_cuda_internal::kMoeRsN16 | moe_cuda_internal::kMoeRsN32 |
                            moe_cuda_internal::kMoeRsN64 | moe_cuda_internal::kMoeRsN96;
  std::array<int64_t, 5> bins{};
  for (size_t i = 0; i < tiles.size(); i += 2) {
    const int64_t row0 = tiles[i + 1], end = offsets[tiles[i] + 1];
    const int rows = static_cast<int>(std::min<int64_t>(end - row0, kMoeCudaWgmmaTileRows));
    const int width = moe_cuda_internal::MoeRsTileWidth(kAll, rows);
    ++bins[width == 16 ? 0 : width == 32 ? 1 : width == 64 ? 2 : width == 96 ? 3 : 4];
  }
  return bins;
}

std::vector<uint16_t> ToOperandOrder(const uint16_t* row, int64_t n, bool rs) {
  std::vector<uint16_t> out(n);
  for (int64_t k = 0; k < n; ++k) out[rs ? MoeRsOperandColumn(k) : MoeOperandColumn(k)] = row[k];
  return out;
}

std::vector<uint16_t> QdqRow(const uint16_t* row, int64_t n, std::vector<uint8_t>* codes,
                             std::vector<uint8_t>* scales) {
  std::vector<uint8_t> c(n), s(n / 32);
  std::vector<uint16_t> out(n);
  CHECK_OK(formats::QuantizeFp8Ue8m0B32(std::span<const uint16_t>(row, n), c, s));
  CHECK_OK(formats::DequantizeFp8Ue8m0B32(c, s, out));
  if (codes != nullptr) *codes = c;
  if (scales != nullptr) *scales = s;
  return out;
}

uint16_t SwiGluCr(uint16_t g, uint16_t u, float limit, const float* weight) {
  float gv = Bf16BitsToFloat(g);
  float uv = Bf16BitsToFloat(u);
  if (limit > 0.f) {
    uv = uv < -limit ? -limit : (uv > limit ? limit : uv);
    gv = gv > limit ? limit : gv;
  }
  const float e = static_cast<float>(std::exp(static_cast<double>(-gv)));
  float a = gv / (1.f + e) * uv;
  if (weight != nullptr) a = *weight * a;
  return FloatToBf16Bits(a);
}

std::vector<uint16_t> LinearRow(const PreparedLinear& w, const uint16_t* x) {
  std::vector<uint16_t> y(w.out_features());
  RunLinear(w, x, 1, y.data(), nullptr);
  return y;
}

namespace {

// |w| of one generated projection as fp32 (E2M1 value × UE8M0 scale, row-major [N, K]), and
// whether every value is finite. ExactSumBound is called once per slot row and projection, so the
// last few projections are kept (decoding one took ~15 ms at D 1024 × I 1280, ~90 % of the host
// time of the wgmma GPU tests before session 61).
struct Magnitudes {
  std::vector<float> w;
  bool finite = true;
};

std::shared_ptr<const Magnitudes> ProjectionMagnitudes(const LayerSpec& s, int proj,
                                                       int64_t expert) {
  struct Entry {
    uint64_t seed;
    WeightKind kind;
    int64_t dim, inter, expert;
    int proj;
    std::shared_ptr<const Magnitudes> m;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;  // most recent last, at most kKeep
  constexpr size_t kKeep = 6;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Entry& e : cache) {
      if (e.seed == s.seed && e.kind == s.kind && e.dim == s.dim && e.inter == s.inter &&
          e.expert == expert && e.proj == proj) {
        return e.m;
      }
    }
  }
  const int64_t n = ProjRows(s, proj), k = ProjCols(s, proj);
  const HostFp4 w = GenerateProjection(s, proj, expert);
  auto m = std::make_shared<Magnitudes>();
  m->w.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = w.codes[(r * k + c) / 2];
      const float v = formats::E2m1ToFloat(c % 2 == 0 ? (byte & 0xF) : (byte >> 4)) *
                      formats::Ue8m0ToFloat(w.scales[r * (k / 32) + c / 32]);
      m->finite = m->finite && std::isfinite(v);
      m->w[r * k + c] = std::fabs(v);
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() == kKeep) cache.erase(cache.begin());
  cache.push_back({s.seed, s.kind, s.dim, s.inter, expert, proj, m});
  return m;
}

}  // namespace

double ExactSumBound(const LayerSpec& s, int proj, int64_t expert, const uint16_t* x) {
  const int64_t n = ProjRows(s, proj), k = ProjCols(s, proj);
  const std::shared_ptr<const Magnitudes> mag = ProjectionMagnitudes(s, proj, expert);
  const std::vector<uint16_t> q = QdqRow(x, k);
  // Per output, Σ_c |w_c · q_c| in double, c ascending. Each term |w|·|q| is exact (a 2-bit
  // significand times an 8-bit one), and where q_c is ±0 and w finite it is +0, which leaves the
  // sum unchanged: so only the nonzero q_c are visited, in order — the same sum bit for bit.
  std::vector<int64_t> cols;
  std::vector<double> qa;
  for (int64_t c = 0; c < k; ++c) {
    const float qv = Bf16BitsToFloat(q[c]);
    if (qv != 0.0f || !mag->finite) {
      cols.push_back(c);
      qa.push_back(std::fabs(static_cast<double>(qv)));
    }
  }
  double worst = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* wr = mag->w.data() + r * k;
    double sum = 0;
    for (size_t i = 0; i < cols.size(); ++i) sum += static_cast<double>(wr[cols[i]]) * qa[i];
    worst = std::max(worst, sum);
  }
  return worst * 32;
}

SharedExpert RandomSharedExpert(int64_t dim, int64_t inter, uint64_t seed) {
  Rng rng(seed);
  auto fp8 = [&rng](int64_t n, int64_t k) {
    std::vector<uint8_t> codes(n * k), scales(((n + 31) / 32) * ((k + 31) / 32));
    for (uint8_t& c : codes) {
      const float v = std::clamp(static_cast<float>(rng.Normal() * 64), -448.f, 448.f);
      c = formats::FloatToE4m3(v);
    }
    for (uint8_t& sc : scales) sc = static_cast<uint8_t>(113 + rng.Next() % 3);
    return MakeLinear({WeightFormat::kFp8Block32, n, k, codes, scales, {}});
  };
  SharedExpert s;
  s.w1 = fp8(inter, dim);
  s.w3 = fp8(inter, dim);
  s.w2 = fp8(dim, inter);
  return s;
}

std::vector<uint16_t> SharedExpertOutput(const SharedExpert& s, const std::vector<uint16_t>& x,
                                         int64_t m, int64_t dim, float swiglu_limit) {
  const int64_t inter = s.w1->out_features();
  std::vector<uint16_t> y(m * dim), a(inter);
  for (int64_t t = 0; t < m; ++t) {
    const auto g = LinearRow(*s.w1, x.data() + t * dim);
    const auto u = LinearRow(*s.w3, x.data() + t * dim);
    MoeSwiGluRow(g.data(), u.data(), inter, swiglu_limit, nullptr, a.data());
    const auto row = LinearRow(*s.w2, a.data());
    std::copy(row.begin(), row.end(), y.begin() + t * dim);
  }
  return y;
}

CpuRun RunMoeCpu(const MoeWeights& w, const MoeOptions& o, const std::vector<uint16_t>& x,
                 int64_t m, const uint8_t* is_image) {
  ThreadPool* pool = HostPool();
  const int64_t dim = w.gate->in_features();
  CpuRun r{std::vector<uint16_t>(m * dim), std::vector<int32_t>(m * o.top_k),
           std::vector<float>(m * o.top_k)};
  auto bytes = MoeWorkspaceBytes(w, m, o.top_k, LinearMode::kExact, pool);
  CHECK_OK(bytes.status());
  std::vector<uint8_t> ws(*bytes);
  MoeParams p;
  p.weights = &w;
  p.options = o;
  p.m = m;
  p.x = x.data();
  p.x_stride = dim;
  p.is_image = is_image;
  p.y = r.y.data();
  p.y_stride = dim;
  p.expert_ids = r.ids.data();
  p.expert_weights = r.weights.data();
  p.mode = LinearMode::kExact;
  p.workspace = ws.data();
  p.workspace_bytes = ws.size();
  CHECK_OK(MoeCpu(p, pool));
  return r;
}

double Bf16Ulp(double v) {
  v = std::fabs(v);
  if (v < 0x1.0p-126) return 0x1.0p-133;
  return std::ldexp(1.0, std::ilogb(v) - 7);
}

double F32Ulps(float got, float want) {
  const double ulp =
      std::fabs(want) < 0x1.0p-126 ? 0x1.0p-149 : std::ldexp(1.0, std::ilogb(want) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

Diff Compare(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  CHECK_EQ(got.size(), want.size());
  Diff d;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = Bf16BitsToFloat(got[i]), w = Bf16BitsToFloat(want[i]);
    const double e = std::isnan(g) || std::isnan(w) ? INFINITY : std::fabs(g - w);
    err2 += e * e;
    ref2 += w * w;
    d.max_abs = std::max(d.max_abs, e);
    d.max_ref = std::max(d.max_ref, std::fabs(w));
    d.within_ulp += e <= Bf16Ulp(w) ? 1 : 0;
    d.identical += got[i] == want[i] ? 1 : 0;
  }
  d.rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  d.n = static_cast<int64_t>(got.size());
  return d;
}

}  // namespace flashserve::kernels::moe_test
