// bench_decoder_layer_step's KV as the attention reads it: the serving rows built from the pool
// at setup, and the attention's params over either form (decoder_layer_step.h, Options::kv_rows).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "bench/decoder_layer_step.h"
#include "common/base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/common/cuda_check.h"
#include "kernels/quant/quant.h"

namespace flashserve::bench {
namespace {

void Ok(const absl::Status& s) { CHECK(s.ok()) << s.ToString(); }

}  // namespace

void LayerStep::BuildServingRows() {
  const int64_t b = max_b_;
  // The serving rows of the pool: every window row as its SWA row, every compressed row as its
  // FP4 main-KV row; then the pool holds their decoded values (what the row form computes
  // with), so that both forms (Options::kv_rows) attend over the same KV.
  main_rows_ = DeviceBuffer(static_cast<size_t>(kCompressedRows * kMainRowBytes));
  struct Part {
    kernels::quant::KvRowKind kind;
    int64_t first, rows, row_bytes;
    uint8_t* out;
  };
  for (const Part& part : {Part{kernels::quant::KvRowKind::kSwaKv, 0, b * kWindow, kSwaRowBytes,
                                swa_rows_.get<uint8_t>()},
                           Part{kernels::quant::KvRowKind::kMainKv, b * kWindow, kCompressedRows,
                                kMainRowBytes, main_rows_.get<uint8_t>()}}) {
    kernels::quant::EncodeRowsParams e;
    e.kind = part.kind;
    e.rows = part.rows;
    e.channels = kHeadDim;
    e.x = pool_.get<uint16_t>() + part.first * kHeadDim;
    e.x_stride = kHeadDim;
    e.rows_out = part.out;
    e.row_stride = part.row_bytes;
    Ok(kernels::quant::LaunchEncodeRows(e, stream_));
    kernels::quant::DecodeRowsParams d;
    d.kind = part.kind;
    d.rows = part.rows;
    d.channels = kHeadDim;
    d.rows_in = part.out;
    d.row_stride = part.row_bytes;
    d.out = pool_.get<uint16_t>() + part.first * kHeadDim;
    d.out_stride = kHeadDim;
    Ok(kernels::quant::LaunchDecodeRows(d, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

kernels::SparseAttnParams LayerStep::AttnParams(int64_t b, bool rows, bool fuse_rope,
                                                const DeviceBuffer& out) const {
  kernels::SparseAttnParams p;
  p.tokens = b;
  p.heads = kHeads;
  p.head_dim = kHeadDim;
  p.q = q_.get<uint16_t>();
  p.q_stride = kHeads * kHeadDim;
  p.q_head_stride = kHeadDim;
  // The pool's windows are max_b_'s (the indices address them); sequences t < b use their own.
  if (rows) {
    p.kv_rows.window = swa_rows_.get<uint8_t>();
    p.kv_rows.n_window = max_b_ * kWindow;
    p.kv_rows.window_stride = kSwaRowBytes;
    p.kv_rows.compressed = main_rows_.get<uint8_t>();
    p.kv_rows.n_compressed = kCompressedRows;
    p.kv_rows.compressed_stride = kMainRowBytes;
  } else {
    p.kv = pool_.get<uint16_t>();
    p.n_kv = max_b_ * kWindow + kCompressedRows;
    p.kv_stride = kHeadDim;
  }
  p.indices = indices_.get<int32_t>();
  p.width = kWindow + kTopk;
  p.indices_stride = kWindow + kTopk;
  p.attn_sink = sink_.get<float>();
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.out = out.get<uint16_t>();
  p.out_stride = kHeads * kHeadDim;
  p.out_head_stride = kHeadDim;
  p.workspace = attn_ws_.get();
  p.workspace_bytes = attn_ws_.bytes();
  if (fuse_rope) {  // q's RoPE and o's inverse RoPE inside the attention
    p.rope = rope_.get();
    p.rope_positions = positions_.get<int64_t>();
    p.rope_q = p.rope_out = true;
    p.rope_cos_sin = rope_cos_sin_.get<float>();
  }
  return p;
}

bool LayerStep::AttentionFormsAgree(int64_t b) {
  const size_t n = static_cast<size_t>(b * kHeads * kHeadDim);
  DeviceBuffer from_pool(n * 2);
  Ok(kernels::LaunchSparseAttn(AttnParams(b, false, opt_.fuse_rope, from_pool), stream_));
  Ok(kernels::LaunchSparseAttn(AttnParams(b, true, opt_.fuse_rope, o_), stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<uint16_t> a(n), r(n);
  CUDA_CHECK(cudaMemcpy(a.data(), from_pool.get(), n * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(r.data(), o_.get(), n * 2, cudaMemcpyDeviceToHost));
  return a == r;
}

}  // namespace flashserve::bench
