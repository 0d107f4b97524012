// CompressProjectedCpu: softmax-gated pooling over groups of `ratio` tokens (fp32), one bf16 cast,
// then RMSNorm, from the projections (CompressCpu runs the GEMMs and then this). Compiled with
// -ffp-contract=off: the pooling's fp32 products and sums must round exactly as written (no fused
// multiply-adds); the CUDA kernel performs the same operations in the same order.
#include <cmath>
#include <cstring>

#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/exp_rn.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

// Pools one group of r token rows (kv[i], z[i] point at C floats each) into bf16 `out`:
// per channel, w = softmax over the r gate logits (exp(z − max) / Σ, fp32, exp correctly
// rounded), then Σ_i w_i·kv_i in token order, each product rounded to fp32; one cast to bf16.
void PoolGroup(const float* const* kv, const float* const* z, int64_t r, int64_t c, uint16_t* out) {
  float e[kMaxCompressRatio];
  for (int64_t ch = 0; ch < c; ++ch) {
    float mx = z[0][ch];
    for (int64_t i = 1; i < r; ++i) mx = std::fmax(mx, z[i][ch]);
    float sum = 0.0f;
    for (int64_t i = 0; i < r; ++i) {
      e[i] = compressor_math::ExpRn(z[i][ch] - mx);
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

absl::Status NormRows(const CompressProjectedParams& p, int64_t rows, const uint16_t* x,
                      int64_t x_stride, ThreadPool* pool) {
  RmsNormParams n;
  n.rows = rows;
  n.cols = p.channels;
  n.x = x;
  n.x_stride = x_stride;
  n.weight_bf16 = p.norm_weight;
  n.eps = p.norm_eps;
  n.out = p.latent;
  n.out_stride = p.latent_stride;
  return RmsNormCpu(n, pool);
}

absl::Status Ratio1(const CompressProjectedParams& p, CompressorState& st, ThreadPool* pool) {
  const int64_t c = p.channels;
  if (p.kv_bf16 != nullptr) {
    RETURN_IF_ERROR(NormRows(p, p.tokens, p.kv_bf16, p.kv_stride, pool));
  } else {
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t ch = 0; ch < c; ++ch) {
        p.latent[t * p.latent_stride + ch] = formats::FloatToBf16Bits(p.kv[t * p.kv_stride + ch]);
      }
    }
    RETURN_IF_ERROR(NormRows(p, p.tokens, p.latent, p.latent_stride, pool));
  }
  for (int64_t t = 0; t < p.tokens; ++t) p.group_index[t] = p.start_pos + t;
  *p.groups_emitted = p.tokens;
  st.next_pos = p.start_pos + p.tokens;
  return absl::OkStatus();
}

}  // namespace

absl::Status CompressProjectedCpu(const CompressProjectedParams& p, CompressorState* state,
                                  ThreadPool* pool) {
  if (state == nullptr) return absl::InvalidArgumentError("compressor: state is null");
  RETURN_IF_ERROR(ValidateCompressProjected(p, *state));
  if (p.tokens == 0) {
    *p.groups_emitted = 0;
    return absl::OkStatus();
  }
  CompressorState& st = *state;
  if (p.ratio == 1) return Ratio1(p, st, pool);
  const int64_t r = p.ratio, c = p.channels, s = p.tokens;

  // Token i of the combined stream: the state's pending rows first, then this call's rows.
  const int64_t pending = st.pending, total = pending + s, groups = total / r;
  auto kv_row = [&](int64_t i) {
    return i < pending ? st.kv.data() + i * c : p.kv + (i - pending) * p.kv_stride;
  };
  auto z_row = [&](int64_t i) {
    return i < pending ? st.score.data() + i * c : p.score + (i - pending) * p.score_stride;
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
    RETURN_IF_ERROR(NormRows(p, groups, p.latent, p.latent_stride, pool));
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

absl::Status CompressProjectedBatchCpu(const CompressProjectedBatchParams& p,
                                       CompressorState* const* states, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateCompressProjectedBatch(p, states));
  for (int64_t b = 0; b < p.batch; ++b) {
    RETURN_IF_ERROR(CompressProjectedCpu(p.sequences[b], states[b], pool));
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
