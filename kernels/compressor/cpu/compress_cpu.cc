// CompressCpu: wkv (and wgate) GEMMs, softmax-gated pooling over groups of `ratio` tokens (fp32),
// one bf16 cast, then RMSNorm. Compiled with -ffp-contract=off: the pooling's fp32 products and
// sums must round exactly as written (no fused multiply-adds).
#include <cmath>
#include <cstring>

#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/compressor/compressor.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

void* AlignPtr(void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<void*>((v + 63) & ~uintptr_t{63});
}

// Pools one group of r token rows (kv[i], z[i] point at C floats each) into bf16 `out`:
// per channel, w = softmax over the r gate logits (exp(z − max) / Σ, fp32), then
// Σ_i w_i·kv_i in token order, each product rounded to fp32; one cast to bf16 at the end.
void PoolGroup(const float* const* kv, const float* const* z, int64_t r, int64_t c,
               uint16_t* out) {
  float e[kMaxCompressRatio];
  for (int64_t ch = 0; ch < c; ++ch) {
    float mx = z[0][ch];
    for (int64_t i = 1; i < r; ++i) mx = std::fmax(mx, z[i][ch]);
    float sum = 0.0f;
    for (int64_t i = 0; i < r; ++i) {
      e[i] = std::exp(z[i][ch] - mx);
      sum += e[i];
    }
    float acc = 0.0f;
    for (int64_t i = 0; i < r; ++i) {
      const float w = e[i] / sum;
      acc += w * kv[i][ch];  // from +0, as torch's sum: two −0 products give +0
    }
    out[ch] = formats::FloatToBf16Bits(acc);
  }
}

absl::Status NormRows(const CompressorWeights& w, int64_t rows, int64_t c, uint16_t* latent,
                      int64_t stride, ThreadPool* pool) {
  RmsNormParams n;
  n.rows = rows;
  n.cols = c;
  n.x = latent;
  n.x_stride = stride;
  n.weight_bf16 = w.norm_weight;
  n.eps = w.norm_eps;
  n.out = latent;
  n.out_stride = stride;
  return RmsNormCpu(n, pool);
}

absl::Status CompressRatio1(const CompressParams& p, ThreadPool* pool) {
  const CompressorWeights& w = *p.weights;
  const int64_t c = w.wkv->out_features();
  LinearParams lp;
  lp.weight = w.wkv;
  lp.m = p.tokens;
  lp.x_bf16 = p.x;
  lp.x_stride = p.x_stride;
  lp.y_bf16 = p.latent;
  lp.y_stride = p.latent_stride;
  lp.mode = w.mode;
  lp.workspace = p.workspace;
  lp.workspace_bytes = p.workspace_bytes;
  RETURN_IF_ERROR(LinearCpu(lp, pool)) << "compressor wkv";
  RETURN_IF_ERROR(NormRows(w, p.tokens, c, p.latent, p.latent_stride, pool));
  for (int64_t t = 0; t < p.tokens; ++t) p.group_index[t] = p.start_pos + t;
  *p.groups_emitted = p.tokens;
  p.state->next_pos = p.start_pos + p.tokens;
  return absl::OkStatus();
}

absl::Status CompressPooled(const CompressParams& p, ThreadPool* pool) {
  const CompressorWeights& w = *p.weights;
  CompressorState& st = *p.state;
  const int64_t r = w.ratio, c = w.wkv->out_features(), s = p.tokens;
  const size_t rows_bytes = (static_cast<size_t>(s * c) * sizeof(float) + 63) & ~size_t{63};
  auto* kv = static_cast<float*>(AlignPtr(p.workspace));
  float* z = kv + rows_bytes / sizeof(float);
  uint8_t* lin_ws = reinterpret_cast<uint8_t*>(z) + rows_bytes;
  const size_t used = static_cast<size_t>(lin_ws - static_cast<uint8_t*>(p.workspace));
  const size_t lin_bytes = p.workspace_bytes - used;

  // True fp32 GEMMs: the bf16 input is upcast inside LinearCpu, the weight is the fp32 (or exact
  // bf16-upcast) copy, the output stays fp32.
  const PreparedLinear* mats[2] = {w.wkv, w.wgate};
  float* outs[2] = {kv, z};
  for (int k = 0; k < 2; ++k) {
    LinearParams lp;
    lp.weight = mats[k];
    lp.m = s;
    lp.x_bf16 = p.x;
    lp.x_stride = p.x_stride;
    lp.y_f32 = outs[k];
    lp.y_stride = c;
    lp.mode = w.mode;
    lp.workspace = lin_ws;
    lp.workspace_bytes = lin_bytes;
    RETURN_IF_ERROR(LinearCpu(lp, pool)) << (k == 0 ? "compressor wkv" : "compressor wgate");
  }

  // Token i of the combined stream: the state's pending rows first, then this call's rows.
  const int64_t pending = st.pending, total = pending + s, groups = total / r;
  auto kv_row = [&](int64_t i) {
    return i < pending ? st.kv.data() + i * c : kv + (i - pending) * c;
  };
  auto z_row = [&](int64_t i) {
    return i < pending ? st.score.data() + i * c : z + (i - pending) * c;
  };
  const int64_t first_group = (p.start_pos - pending) / r;
  auto pool_range = [&](size_t begin, size_t end) {
    const float* kvp[kMaxCompressRatio];
    const float* zp[kMaxCompressRatio];
    for (size_t g = begin; g < end; ++g) {
      for (int64_t i = 0; i < r; ++i) {
        kvp[i] = kv_row(static_cast<int64_t>(g) * r + i);
        zp[i] = z_row(static_cast<int64_t>(g) * r + i);
      }
      PoolGroup(kvp, zp, r, c, p.latent + static_cast<int64_t>(g) * p.latent_stride);
    }
  };
  if (pool != nullptr && groups > 1) {
    pool->ParallelFor(static_cast<size_t>(groups), 16, pool_range);
  } else {
    pool_range(0, static_cast<size_t>(groups));
  }
  if (groups > 0) {
    RETURN_IF_ERROR(NormRows(w, groups, c, p.latent, p.latent_stride, pool));
  }
  for (int64_t g = 0; g < groups; ++g) p.group_index[g] = first_group + g;

  // Keep the new open group. When no group completed, its first rows are already in place.
  for (int64_t i = groups * r; i < total; ++i) {
    const int64_t dst = i - groups * r;
    if (i < pending) continue;  // groups == 0: the row is already at index dst == i
    std::memcpy(st.kv.data() + dst * c, kv_row(i), static_cast<size_t>(c) * sizeof(float));
    std::memcpy(st.score.data() + dst * c, z_row(i), static_cast<size_t>(c) * sizeof(float));
  }
  st.pending = total - groups * r;
  st.next_pos = p.start_pos + s;
  *p.groups_emitted = groups;
  return absl::OkStatus();
}

}  // namespace

absl::Status CompressCpu(const CompressParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateCompress(p, pool));
  if (p.tokens == 0) {
    *p.groups_emitted = 0;
    return absl::OkStatus();
  }
  return p.weights->ratio == 1 ? CompressRatio1(p, pool) : CompressPooled(p, pool);
}

}  // namespace flashserve::kernels
