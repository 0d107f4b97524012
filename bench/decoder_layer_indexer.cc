// bench_decoder_layer_step's Reindex layer: the indexer's stages for a decode batch (weights_proj,
// q's wq_b, RoPE and QDQ, the batched scores and top-k) and the per-sequence launches they are
// checked against (decoder_layer_step.h). Moved out of decoder_layer_step.cc in session 79.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "bench/decoder_layer_step.h"
#include "common/base/check.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/indexer/indexer.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/quant/quant.h"

namespace flashserve::bench {
namespace {

void Ok(const absl::Status& s) { CHECK(s.ok()) << s.ToString(); }

}  // namespace

std::vector<Stage> LayerStep::IndexerStages(int64_t b) {
  const double db = static_cast<double>(b);
  const int64_t l = opt_.context;
  std::vector<Stage> s;
  cudaStream_t st = stream_;
  const Fp8Weight* w = idx_wq_b_.get();
  s.push_back({"indexer wq_b (FP8 4096x1280)",
               [=, this] {
                 kernels::LinearCudaParams p;
                 p.weight = &w->view;
                 p.m = b;
                 p.x_bf16 = qr_.get<uint16_t>();
                 p.x_stride = kQLora;
                 p.y_bf16 = iq_.get<uint16_t>();
                 p.y_stride = kIdxHeads * kIdxDim;
                 p.workspace = lin_ws_.get();
                 p.workspace_bytes = lin_ws_bytes_;
                 Ok(kernels::LaunchLinearFp8(p, st));
               },
               w->bytes() + db * 2 * (kQLora + kIdxHeads * kIdxDim),
               2 * db * kIdxHeads * kIdxDim * kQLora});
  s.push_back({"index q RoPE + FP4 QDQ",
               [=, this] {
                 kernels::RopeParams p;
                 p.table = rope_.get();
                 p.tokens = b;
                 p.heads = kIdxHeads;
                 p.head_dim = kIdxDim;
                 p.positions = positions_.get<int64_t>();
                 p.x = iq_.get<uint16_t>();
                 p.x_stride = kIdxHeads * kIdxDim;
                 p.x_head_stride = kIdxDim;
                 p.out = iq_.get<uint16_t>();
                 p.out_stride = kIdxHeads * kIdxDim;
                 p.out_head_stride = kIdxDim;
                 Ok(kernels::LaunchRope(p, st));
                 kernels::quant::QdqParams q;
                 q.format = kernels::quant::BlockFormat::kFp4E2m1Ue8m0B32;
                 q.rows = b * kIdxHeads;
                 q.cols = kIdxDim;
                 q.x = iq_.get<uint16_t>();
                 q.x_stride = kIdxDim;
                 q.out = iq_.get<uint16_t>();
                 q.out_stride = kIdxDim;
                 Ok(kernels::quant::LaunchQdq(q, st));
               },
               db * kIdxHeads * kIdxDim * 2 * 3, 0});
  s.push_back({"weights_proj (bf16 32x5120)", [=, this] { LaunchFloat(WeightsProjParams(b)); },
               static_cast<double>(weights_proj_.bytes()) + db * 2 * (kD + kIdxHeads),
               2 * db * kIdxHeads * kD});
  // One launch each for all b sequences (indexer.h "Batched decode"); LaunchIndexerPerSequence
  // is the per-sequence form they must equal.
  s.push_back({"index scores (L FP4 key rows per sequence, batched)",
               [=, this] {
                 kernels::IndexerScoreBatchParams p;
                 p.batch = b;
                 p.heads = kIdxHeads;
                 p.head_dim = kIdxDim;
                 p.max_width = l;
                 p.q = iq_.get<uint16_t>();
                 p.q_stride = kIdxHeads * kIdxDim;
                 p.w = iw_.get<uint16_t>();
                 p.w_stride = kIdxHeads;
                 p.k_rows = index_keys_.get<uint8_t>();
                 p.k_row_stride = kIdxKRowBytes;
                 p.k_row_offsets = seq_key_offsets_.get<int64_t>();
                 p.widths = seq_widths_.get<int32_t>();
                 p.candidates = candidates_.get<uint8_t>();
                 p.candidates_stride = l;
                 p.scores = scores_.get<uint16_t>();
                 p.scores_stride = l;
                 Ok(kernels::LaunchIndexerScoreBatch(p, st));
               },
               db * (l * kIdxKRowBytes + l + l * 2), 2 * db * l * kIdxHeads * kIdxDim});
  s.push_back({"index top-512 (batched)",
               [=, this] {
                 kernels::IndexerTopkBatchParams p;
                 p.batch = b;
                 p.max_width = l;
                 p.index_topk = kTopk;
                 p.offset = kWindow;
                 p.widths = seq_widths_.get<int32_t>();
                 p.scores = scores_.get<uint16_t>();
                 p.scores_stride = l;
                 p.indices = idx_topk_.get<int32_t>();
                 p.indices_stride = kTopk;
                 p.workspace = topk_ws_.get();
                 p.workspace_bytes = topk_ws_bytes_;
                 Ok(kernels::LaunchIndexerTopkBatch(p, st));
               },
               db * (l * 2 + kTopk * 4), 0});
  return s;
}

void LayerStep::LaunchIndexerPerSequence(int64_t b) {
  const int64_t l = opt_.context;
  for (int64_t t = 0; t < b; ++t) {
    kernels::IndexerScoreParams p;
    p.tokens = 1;
    p.heads = kIdxHeads;
    p.head_dim = kIdxDim;
    p.width = l;
    p.start_pos = l - 1;
    p.ratio = 1;
    p.q = iq_.get<uint16_t>() + t * kIdxHeads * kIdxDim;
    p.q_stride = kIdxHeads * kIdxDim;
    p.k_rows = index_keys_.get<uint8_t>() + t * l * kIdxKRowBytes;
    p.k_row_stride = kIdxKRowBytes;
    p.w = iw_.get<uint16_t>() + t * kIdxHeads;
    p.w_stride = kIdxHeads;
    p.candidates = candidates_.get<uint8_t>() + t * l;
    p.candidates_stride = 0;
    p.scores = scores_.get<uint16_t>() + t * l;
    p.scores_stride = l;
    Ok(kernels::LaunchIndexerScore(p, stream_));
  }
  for (int64_t t = 0; t < b; ++t) {
    kernels::IndexerTopkParams p;
    p.tokens = 1;
    p.width = l;
    p.start_pos = l - 1;
    p.ratio = 1;
    p.index_topk = kTopk;
    p.offset = kWindow;
    p.scores = scores_.get<uint16_t>() + t * l;
    p.scores_stride = l;
    p.indices = idx_topk_.get<int32_t>() + t * kTopk;
    p.indices_stride = kTopk;
    p.workspace = topk_ws_.get();
    p.workspace_bytes = topk_ws_bytes_;
    Ok(kernels::LaunchIndexerTopk(p, stream_));
  }
}

}  // namespace flashserve::bench
