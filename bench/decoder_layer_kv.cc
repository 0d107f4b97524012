// bench_decoder_layer_step's KV as the attention reads it: the serving rows built from the pool
// at setup, and the attention's params over either form (decoder_layer_step.h, Options::kv_rows).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "bench/decoder_layer_step.h"
#include "common/base/check.h"
#include "common/formats/bf16.h"
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

bool LayerStep::StackedQkvAgrees(int64_t b) {
  if (!opt_.stack_qkv) return true;
  DeviceBuffer qa(static_cast<size_t>(b * kQLora * 2)), kv(static_cast<size_t>(b * kHeadDim * 2)),
      qkv(static_cast<size_t>(b * kQkvCols * 2));
  auto run = [&](const Fp8Weight& w, const DeviceBuffer& y) {
    kernels::LinearCudaParams p;
    p.weight = &w.view;
    p.m = b;
    p.x_bf16 = xn_.get<uint16_t>();
    p.x_stride = kD;
    p.y_bf16 = y.get<uint16_t>();
    p.y_stride = w.view.n;
    p.workspace = lin_ws_.get();
    p.workspace_bytes = lin_ws_bytes_;
    Ok(kernels::LaunchLinearFp8(p, stream_));
  };
  run(*wq_a_, qa);
  run(*wkv_, kv);
  run(*wqa_wkv_, qkv);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<uint16_t> a(static_cast<size_t>(b * kQLora)), k(static_cast<size_t>(b * kHeadDim)),
      s(static_cast<size_t>(b * kQkvCols));
  CUDA_CHECK(cudaMemcpy(a.data(), qa.get(), a.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(k.data(), kv.get(), k.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(s.data(), qkv.get(), s.size() * 2, cudaMemcpyDeviceToHost));
  // The stack's K splits can differ from its parts' (from 9 rows the register-sourced kernel's
  // plan), so its fp32 sums may round differently: count the values equal, one bf16 ulp apart and
  // further (an output near zero after cancellation may move by more), and fail on a non-finite
  // difference or a rel-RMS above 2^-10 (prefill_linears_bench's rule for its stacks is 2^-8).
  int64_t equal = 0, ulp = 0, further = 0, nonfinite = 0;
  double diff2 = 0, ref2 = 0;
  for (int64_t t = 0; t < b; ++t) {
    for (int64_t c = 0; c < kQkvCols; ++c) {
      const uint16_t part = c < kQLora ? a[t * kQLora + c] : k[t * kHeadDim + (c - kQLora)];
      const uint16_t got = s[t * kQkvCols + c];
      const double pf = formats::Bf16BitsToFloat(part), gf = formats::Bf16BitsToFloat(got);
      if (!std::isfinite(pf) || !std::isfinite(gf)) {
        ++nonfinite;
        continue;
      }
      diff2 += (gf - pf) * (gf - pf);
      ref2 += pf * pf;
      if (got == part) {
        ++equal;
      } else if ((part ^ got) < 0x8000 && std::abs(int{part} - int{got}) == 1) {
        ++ulp;
      } else {
        ++further;
      }
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : 0;
  const bool ok = nonfinite == 0 && rel <= 1.0 / 1024;
  std::printf(
      "%ld tokens: wq_a | wkv stacked vs the two Linears: %ld equal, %ld one bf16 ulp "
      "apart, %ld further, %ld non-finite, rel-RMS %.2e%s\n",
      static_cast<long>(b), static_cast<long>(equal), static_cast<long>(ulp),
      static_cast<long>(further), static_cast<long>(nonfinite), rel, ok ? "" : " (CHECK FAILED)");
  return ok;
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
  if (a == r) return true;
  // Where they differ: the tokens, the first value, and the largest difference.
  const int64_t per_token = kHeads * kHeadDim;
  int64_t values = 0, tokens = 0, first = -1, last_token = -1;
  double worst = 0;
  for (int64_t t = 0; t < b; ++t) {
    bool token_differs = false;
    for (int64_t i = t * per_token; i < (t + 1) * per_token; ++i) {
      if (a[i] == r[i]) continue;
      ++values;
      token_differs = true;
      if (first < 0) first = i;
      const double d = std::fabs(double{formats::Bf16BitsToFloat(a[i])} -
                                 double{formats::Bf16BitsToFloat(r[i])});
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
    if (token_differs) {
      ++tokens;
      last_token = t;
    }
  }
  std::printf(
      "  forms differ in %ld values of %ld tokens (first token %ld head %ld dim %ld: pool "
      "%g rows %g; last token %ld), max |diff| %g\n",
      static_cast<long>(values), static_cast<long>(tokens), static_cast<long>(first / per_token),
      static_cast<long>(first % per_token / kHeadDim), static_cast<long>(first % kHeadDim),
      formats::Bf16BitsToFloat(a[first]), formats::Bf16BitsToFloat(r[first]),
      static_cast<long>(last_token), worst);
  // Is it the KV (the pool's window rows of that token against its SWA serving rows decoded on
  // the host) or the attention kernels?
  const int64_t t = first / per_token;
  std::vector<uint8_t> rows(static_cast<size_t>(kWindow * kSwaRowBytes));
  std::vector<uint16_t> pool(static_cast<size_t>(kWindow * kHeadDim)),
      decoded(static_cast<size_t>(kWindow * kHeadDim));
  CUDA_CHECK(cudaMemcpy(rows.data(), swa_rows_.get<uint8_t>() + t * kWindow * kSwaRowBytes,
                        rows.size(), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(pool.data(), pool_.get<uint16_t>() + t * kWindow * kHeadDim,
                        pool.size() * 2, cudaMemcpyDeviceToHost));
  kernels::quant::DecodeRowsParams d;
  d.kind = kernels::quant::KvRowKind::kSwaKv;
  d.rows = kWindow;
  d.channels = kHeadDim;
  d.rows_in = rows.data();
  d.row_stride = kSwaRowBytes;
  d.out = decoded.data();
  d.out_stride = kHeadDim;
  Ok(kernels::quant::DecodeRowsCpu(d));
  int64_t kv_diff = 0, first_row = -1;
  for (size_t i = 0; i < pool.size(); ++i) {
    if (pool[i] != decoded[i] && kv_diff++ == 0) first_row = static_cast<int64_t>(i) / kHeadDim;
  }
  std::printf(
      "  token %ld's window KV: pool vs its decoded serving rows: %ld of %ld values "
      "differ (first in window row %ld; the step's new row is slot %ld)\n",
      static_cast<long>(t), static_cast<long>(kv_diff), static_cast<long>(pool.size()),
      static_cast<long>(first_row), static_cast<long>((opt_.context - 1) % kWindow));
  return false;
}

}  // namespace flashserve::bench
