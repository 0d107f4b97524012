// CompressCpu: wkv (and wgate) GEMMs, then (ratio >= 2) CompressProjectedCpu for the pooling,
// the bf16 cast, the RMSNorm and the state (cpu/compress_projected_cpu.cc); ratio 1 is the bf16
// GEMM and the RMSNorm.
#include <cstdint>

#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "kernels/compressor/compressor.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

void* AlignPtr(void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<void*>((v + 63) & ~uintptr_t{63});
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

  CompressProjectedParams pp;
  pp.ratio = r;
  pp.channels = c;
  pp.start_pos = p.start_pos;
  pp.tokens = s;
  pp.kv = kv;
  pp.kv_stride = c;
  pp.score = z;
  pp.score_stride = c;
  pp.norm_weight = w.norm_weight;
  pp.norm_eps = w.norm_eps;
  pp.latent = p.latent;
  pp.latent_stride = p.latent_stride;
  pp.latent_capacity = p.latent_capacity;
  pp.group_index = p.group_index;
  pp.groups_emitted = p.groups_emitted;
  return CompressProjectedCpu(pp, p.state, pool);
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
