#include "kernels/attention/attention_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/attention/attention.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::testing {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

std::vector<uint16_t> RandomBf16(int64_t n, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = FloatToBf16Bits(dist(gen));
  return v;
}

std::vector<float> RandomFloats(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

AttnCase RandomCase(int64_t tokens, int64_t heads, int64_t head_dim, int64_t n_kv, int64_t width,
                    double invalid_frac, uint32_t seed) {
  AttnCase c;
  c.tokens = tokens;
  c.heads = heads;
  c.head_dim = head_dim;
  c.n_kv = n_kv;
  c.width = width;
  c.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  c.q = RandomBf16(tokens * heads * head_dim, 1.0f, seed);
  c.kv = RandomBf16(n_kv * head_dim, 1.0f, seed + 1);
  c.sink = RandomFloats(heads, -1.0f, 3.0f, seed + 2);
  std::mt19937 gen(seed + 3);
  std::uniform_int_distribution<int32_t> pick(0,
                                              static_cast<int32_t>(std::max<int64_t>(n_kv, 1) - 1));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  c.indices.resize(static_cast<size_t>(tokens * width));
  for (auto& i : c.indices) i = (n_kv == 0 || coin(gen) < invalid_frac) ? -1 : pick(gen);
  return c;
}

SparseAttnParams MakeParams(const AttnCase& c, const ThreadPool* pool, std::vector<uint16_t>* out,
                            std::vector<uint8_t>* workspace) {
  out->assign(static_cast<size_t>(c.tokens * c.heads * c.head_dim), 0xFFFF);
  workspace->assign(SparseAttnWorkspaceBytes(c.head_dim, pool), 0);
  SparseAttnParams p;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.q = c.q.data();
  p.q_stride = c.heads * c.head_dim;
  p.q_head_stride = c.head_dim;
  p.kv = c.kv.data();
  p.n_kv = c.n_kv;
  p.kv_stride = c.head_dim;
  p.indices = c.indices.data();
  p.width = c.width;
  p.indices_stride = c.width;
  p.attn_sink = c.sink.data();
  p.softmax_scale = c.scale;
  p.out = out->data();
  p.out_stride = c.heads * c.head_dim;
  p.out_head_stride = c.head_dim;
  p.workspace = workspace->data();
  p.workspace_bytes = workspace->size();
  return p;
}

absl::Status RunKernel(const AttnCase& c, ThreadPool* pool, std::vector<uint16_t>* out) {
  std::vector<uint8_t> workspace;
  const SparseAttnParams p = MakeParams(c, pool, out, &workspace);
  return SparseAttnCpu(p, pool);
}

std::vector<uint16_t> ScalarReference(const AttnCase& c) {
  constexpr int64_t kBlock = 64;
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t d = c.head_dim;
  std::vector<uint16_t> out(static_cast<size_t>(c.tokens * c.heads * d));
  std::vector<float> acc(d), part(d), k(kBlock * d), logit(kBlock);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const uint16_t* q = c.q.data() + (t * c.heads + h) * d;
      std::fill(acc.begin(), acc.end(), 0.0f);
      float m = -1e30f;
      float sum_exp = 0.0f;
      for (int64_t b0 = 0; b0 < c.width; b0 += kBlock) {
        const int64_t n = std::min(kBlock, c.width - b0);
        // Gather the block, invalid rows zeroed; logits where(valid, q·k, -inf) * scale.
        float bmax = -inf;
        for (int64_t e = 0; e < n; ++e) {
          const int32_t idx = c.indices[t * c.width + b0 + e];
          float dot = 0.0f;
          for (int64_t i = 0; i < d; ++i) {
            k[e * d + i] = idx >= 0 ? Bf16BitsToFloat(c.kv[idx * d + i]) : 0.0f;
            dot += Bf16BitsToFloat(q[i]) * k[e * d + i];
          }
          logit[e] = (idx >= 0 ? dot : -inf) * c.scale;
          bmax = std::max(bmax, logit[e]);
        }
        const float m_prev = m;
        m = std::max(m_prev, bmax);
        const float alpha = std::exp(m_prev - m);
        float psum = 0.0f;
        std::fill(part.begin(), part.end(), 0.0f);
        for (int64_t e = 0; e < n; ++e) {
          const float p = std::exp(logit[e] - m);
          psum += p;
          const float pb = formats::RoundToBf16(p);
          for (int64_t i = 0; i < d; ++i) part[i] += pb * k[e * d + i];
        }
        sum_exp = sum_exp * alpha + psum;
        for (int64_t i = 0; i < d; ++i) acc[i] = acc[i] * alpha + part[i];
      }
      sum_exp = sum_exp + std::exp(c.sink[h] - m);
      uint16_t* o = out.data() + (t * c.heads + h) * d;
      for (int64_t i = 0; i < d; ++i) o[i] = FloatToBf16Bits(acc[i] / sum_exp);
    }
  }
  return out;
}

void DoubleReference(const AttnCase& c, std::vector<double>* ref, std::vector<double>* mass) {
  const int64_t d = c.head_dim;
  ref->assign(static_cast<size_t>(c.tokens * c.heads * d), 0.0);
  mass->assign(ref->size(), 0.0);
  std::vector<double> logits(static_cast<size_t>(c.width));
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int32_t* ids = c.indices.data() + t * c.width;
    for (int64_t h = 0; h < c.heads; ++h) {
      const uint16_t* q = c.q.data() + (t * c.heads + h) * d;
      double mx = -std::numeric_limits<double>::infinity();
      bool any = false;
      for (int64_t e = 0; e < c.width; ++e) {
        if (ids[e] < 0) continue;
        double dot = 0.0;
        for (int64_t i = 0; i < d; ++i) {
          dot += static_cast<double>(Bf16BitsToFloat(q[i])) * Bf16BitsToFloat(c.kv[ids[e] * d + i]);
        }
        logits[e] = dot * static_cast<double>(c.scale);
        mx = std::max(mx, logits[e]);
        any = true;
      }
      if (!any) continue;
      double den = std::exp(static_cast<double>(c.sink[h]) - mx);
      double* r = ref->data() + (t * c.heads + h) * d;
      double* ms = mass->data() + (t * c.heads + h) * d;
      for (int64_t e = 0; e < c.width; ++e) {
        if (ids[e] < 0) continue;
        const double w = std::exp(logits[e] - mx);
        den += w;
        for (int64_t i = 0; i < d; ++i) {
          const double v = Bf16BitsToFloat(c.kv[ids[e] * d + i]);
          r[i] += w * v;
          ms[i] += w * std::fabs(v);
        }
      }
      for (int64_t i = 0; i < d; ++i) {
        r[i] /= den;
        ms[i] /= den;
      }
    }
  }
}

int64_t CountOutsideTolerance(const std::vector<uint16_t>& out, const std::vector<double>& ref,
                              const std::vector<double>& mass, double* worst_ratio) {
  int64_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double bound = std::ldexp(std::fabs(ref[i]) + mass[i], -8) + 1e-6;
    const double err = std::fabs(static_cast<double>(Bf16BitsToFloat(out[i])) - ref[i]);
    worst = std::max(worst, err / bound);
    if (!(err <= bound)) ++bad;
  }
  if (worst_ratio != nullptr) *worst_ratio = worst;
  return bad;
}

RopeTable TextRopeTable(int64_t rd) {
  RopeSpec spec;
  spec.rope_dims = rd;
  spec.theta = 160000.0;
  spec.original_seq_len = 65536;
  spec.factor = 16.0;
  return RopeTable::Create(spec, 0).value();
}

int64_t CountBitDiffs(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

KvRowPools EncodeKvRows(AttnCase* c, int64_t n_window, int64_t pad) {
  CHECK(n_window >= 0 && n_window <= c->n_kv) << "EncodeKvRows: n_window " << n_window;
  KvRowPools pools;
  pools.n_window = n_window;
  pools.n_compressed = c->n_kv - n_window;
  const int64_t d = c->head_dim;
  struct Part {
    quant::KvRowKind kind;
    int64_t first;
    int64_t rows;
    int64_t* stride;
    std::vector<uint8_t>* bytes;
  };
  const Part parts[2] = {
      {quant::KvRowKind::kSwaKv, 0, pools.n_window, &pools.window_stride, &pools.window},
      {quant::KvRowKind::kMainKv, n_window, pools.n_compressed, &pools.compressed_stride,
       &pools.compressed}};
  for (const Part& part : parts) {
    *part.stride = quant::KvRowBytes(part.kind, d) + pad;
    part.bytes->assign(static_cast<size_t>(std::max<int64_t>(part.rows, 1) * *part.stride), 0xEE);
    if (part.rows == 0) continue;
    quant::EncodeRowsParams ep;
    ep.kind = part.kind;
    ep.rows = part.rows;
    ep.channels = d;
    ep.x = c->kv.data() + part.first * d;
    ep.x_stride = d;
    ep.rows_out = part.bytes->data();
    ep.row_stride = *part.stride;
    CHECK_OK(quant::EncodeRowsCpu(ep));
    quant::DecodeRowsParams dp;
    dp.kind = part.kind;
    dp.rows = part.rows;
    dp.channels = d;
    dp.rows_in = part.bytes->data();
    dp.row_stride = *part.stride;
    dp.out = c->kv.data() + part.first * d;
    dp.out_stride = d;
    CHECK_OK(quant::DecodeRowsCpu(dp));
  }
  return pools;
}

void SetKvRows(const KvRowPools& pools, const uint8_t* window, const uint8_t* compressed,
               SparseAttnParams* p) {
  p->kv = nullptr;
  p->n_kv = 0;
  p->kv_rows.window = pools.n_window > 0 ? window : nullptr;
  p->kv_rows.n_window = pools.n_window;
  p->kv_rows.window_stride = pools.window_stride;
  p->kv_rows.compressed = pools.n_compressed > 0 ? compressed : nullptr;
  p->kv_rows.n_compressed = pools.n_compressed;
  p->kv_rows.compressed_stride = pools.compressed_stride;
}

}  // namespace flashserve::kernels::testing
