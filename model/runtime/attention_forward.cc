// Attention of one main-model layer on the CPU backend (model spec §4.3–4.6): q path, window KV,
// the KV source's compressor and index keys, the indexer (own keys, candidate mask), the gathered
// KV pool, sparse attention and the grouped output projection.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/formats/bf16.h"
#include "common/formats/kv_row.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/window_indices.h"
#include "kernels/indexer/indexer.h"
#include "kernels/quant/quant.h"
#include "model/runtime/cpu_model_impl.h"

namespace flashserve::model {
namespace {

using kernels::quant::KvRowKind;

absl::Status EncodeRows(KvRowKind kind, int64_t rows, int64_t channels, const uint16_t* x,
                        uint8_t* out) {
  kernels::quant::EncodeRowsParams p{.kind = kind,
                                     .rows = rows,
                                     .channels = channels,
                                     .x = x,
                                     .x_stride = channels,
                                     .rows_out = out,
                                     .row_stride = kernels::quant::KvRowBytes(kind, channels)};
  return kernels::quant::EncodeRowsCpu(p);
}

absl::Status DecodeRows(KvRowKind kind, int64_t rows, int64_t channels, const uint8_t* in,
                        uint16_t* out) {
  kernels::quant::DecodeRowsParams p{.kind = kind,
                                     .rows = rows,
                                     .channels = channels,
                                     .rows_in = in,
                                     .row_stride = kernels::quant::KvRowBytes(kind, channels),
                                     .out = out,
                                     .out_stride = channels};
  return kernels::quant::DecodeRowsCpu(p);
}

// Stores `rows` serving rows (and their decoded bf16 values) at row `first` of `dst`.
absl::Status StoreRows(KvRowKind kind, KvRows& dst, int64_t first, int64_t rows,
                       const uint8_t* bytes) {
  if (first < 0 || first + rows > dst.capacity) {
    return absl::OutOfRangeError(absl::StrCat("rows ", first, "..", first + rows - 1,
                                              " outside the cache of ", dst.capacity, " rows"));
  }
  std::memcpy(dst.row(first), bytes, static_cast<size_t>(rows * dst.row_bytes));
  return DecodeRows(kind, rows, dst.channels, bytes, dst.values(first));
}

}  // namespace

absl::Status CpuModel::Impl::AttentionQuery(const LayerRef& layer, int64_t s,
                                            const int64_t* positions) {
  const ModelConfig& c = *config;
  const PreparedAttention& a = layer.prepared->attn;
  const int64_t D = c.dim, ql = c.q_lora_rank, H = c.n_heads, hd = c.head_dim;
  RETURN_IF_ERROR(Linear(a.wq_a, s, ws.normed.data(), D, ws.qr.data(), ql)) << "wq_a";
  RETURN_IF_ERROR(RmsNorm(layer.q_norm, s, ql, ws.qr.data(), ql, ws.qr.data(), ql)) << "q_norm";
  RETURN_IF_ERROR(Linear(a.wq_b, s, ws.qr.data(), ql, ws.q.data(), H * hd)) << "wq_b";
  return Rope(*layer.rope, s, H, hd, H * hd, positions, ws.q.data());
}

absl::Status CpuModel::Impl::WindowKv(const LayerRef& layer, int64_t s, const uint16_t* x,
                                      const int64_t* positions) {
  const ModelConfig& c = *config;
  const int64_t hd = c.head_dim;
  RETURN_IF_ERROR(Linear(layer.prepared->attn.wkv, s, x, c.dim, ws.kv.data(), hd)) << "wkv";
  RETURN_IF_ERROR(RmsNorm(layer.kv_norm, s, hd, ws.kv.data(), hd, ws.kv.data(), hd));
  RETURN_IF_ERROR(Rope(*layer.rope, s, 1, hd, hd, positions, ws.kv.data()));
  // FP8 rows are the ring's content; their decoded values are the quant-dequantised KV.
  RETURN_IF_ERROR(EncodeRows(KvRowKind::kSwaKv, s, hd, ws.kv.data(), ws.kv_rows.data()));
  return DecodeRows(KvRowKind::kSwaKv, s, hd, ws.kv_rows.data(), ws.kv.data());
}

void CpuModel::Impl::UpdateRing(LayerState& l, int64_t start, int64_t s, int64_t row0,
                                StepJournal::Layer* journal) {
  const int64_t W = l.swa.capacity, rb = l.swa.row_bytes, ch = l.swa.channels;
  if (journal != nullptr) {
    journal->slots.clear();
    journal->old_rows.clear();
    journal->old_values.clear();
  }
  for (int64_t t = std::max<int64_t>(0, s - W); t < s; ++t) {
    const int64_t slot = (start + t) % W;
    if (journal != nullptr) {
      journal->slots.push_back(slot);
      journal->old_rows.insert(journal->old_rows.end(), l.swa.row(slot), l.swa.row(slot) + rb);
      journal->old_values.insert(journal->old_values.end(), l.swa.values(slot),
                                 l.swa.values(slot) + ch);
    }
    std::memcpy(l.swa.row(slot), ws.kv_rows.data() + (row0 + t) * rb, static_cast<size_t>(rb));
    std::memcpy(l.swa.values(slot), ws.kv.data() + (row0 + t) * ch, static_cast<size_t>(ch) * 2);
  }
}

absl::Status CpuModel::Impl::SparseAttnRows(const LayerRef& layer, int64_t row0, int64_t s,
                                            int64_t pool_rows, int64_t list_width) {
  const ModelConfig& c = *config;
  const int64_t H = c.n_heads, hd = c.head_dim;
  kernels::SparseAttnParams p{.tokens = s,
                              .heads = H,
                              .head_dim = hd,
                              .q = ws.q.data() + row0 * H * hd,
                              .q_stride = H * hd,
                              .q_head_stride = hd,
                              .kv = ws.pool.data(),
                              .n_kv = pool_rows,
                              .kv_stride = hd,
                              .indices = ws.list.data(),
                              .width = list_width,
                              .indices_stride = list_width,
                              .attn_sink = layer.attn_sink.data(),
                              .softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                              .out = ws.o.data() + row0 * H * hd,
                              .out_stride = H * hd,
                              .out_head_stride = hd,
                              .workspace = ws.attn_ws.data(),
                              .workspace_bytes = ws.attn_ws.size()};
  RETURN_IF_ERROR(kernels::SparseAttnCpu(p, pool)) << "sparse attention";
  return absl::OkStatus();
}

absl::Status CpuModel::Impl::OutputProjection(const LayerRef& layer, int64_t m,
                                              const int64_t* positions) {
  const ModelConfig& c = *config;
  const PreparedAttention& a = layer.prepared->attn;
  const int64_t H = c.n_heads, hd = c.head_dim, G = c.o_groups, r = c.o_lora_rank;
  RETURN_IF_ERROR(Rope(*layer.rope, m, H, hd, H * hd, positions, ws.o.data(), /*inverse=*/true));
  // Grouped low-rank output: group g projects its own H/G heads.
  const int64_t group_in = H / G * hd;
  for (int64_t g = 0; g < G; ++g) {
    RETURN_IF_ERROR(Linear(a.wo_a[g], m, ws.o.data() + g * group_in, H * hd,
                           ws.o_low.data() + g * r, G * r))
        << "wo_a group " << g;
  }
  RETURN_IF_ERROR(Linear(a.wo_b, m, ws.o_low.data(), G * r, ws.sub.data(), c.dim)) << "wo_b";
  return absl::OkStatus();
}

absl::Status CpuModel::Impl::Attention(const LayerRef& layer, int64_t m) {
  RETURN_IF_ERROR(AttentionQuery(layer, m, ws.positions.data()));
  RETURN_IF_ERROR(WindowKv(layer, m, ws.normed.data(), ws.positions.data()));
  for (size_t b = 0; b < segs.size(); ++b) {
    RETURN_IF_ERROR(AttentionSegment(layer, static_cast<int64_t>(b)))
        << (segs.size() > 1 ? absl::StrCat("session ", b) : std::string());
  }
  return OutputProjection(layer, m, ws.positions.data());
}

absl::Status CpuModel::Impl::CompressSegment(const LayerRef& layer, int64_t b) {
  const ModelConfig& c = *config;
  const LayerInfo& info = *layer.info;
  const PreparedAttention& a = layer.prepared->attn;
  const Segment& seg = segs[b];
  SessionState& state = *seg.state;
  const int64_t D = c.dim, hd = c.head_dim;
  const int64_t r0 = seg.row0, s = seg.rows, start = seg.start;
  const uint16_t* x = ws.normed.data() + r0 * D;
  LayerState& own = state.layers[info.layer_id];
  StepJournal::Layer* journal =
      seg.journal != nullptr ? &seg.journal->layers[info.layer_id] : nullptr;
  // KV source: compress this call's tokens, derive index keys, append the cache rows.
  {
    const int64_t r = info.compress_ratio;
    if (journal != nullptr) {
      journal->compressor = *own.compressor;
      journal->x.assign(x, x + s * D);
    }
    // Replay: the rows of these positions are cached; only the open group is rebuilt, from the
    // first group boundary of the call on.
    const int64_t skip = seg.replay ? (r - start % r) % r : 0;
    if (seg.replay) {
      own.compressor->pending = 0;
      if (skip >= s) return absl::OkStatus();
    }
    int64_t groups = 0;
    kernels::CompressParams cp{.weights = &*layer.compressor,
                               .state = &*own.compressor,
                               .start_pos = start + skip,
                               .tokens = s - skip,
                               .x = x + skip * D,
                               .x_stride = D,
                               .latent = ws.latent.data(),
                               .latent_stride = hd,
                               .latent_capacity = s,
                               .group_index = ws.group_index.data(),
                               .groups_emitted = &groups,
                               .workspace = ws.compress_ws.data(),
                               .workspace_bytes = ws.compress_ws.size()};
    RETURN_IF_ERROR(kernels::CompressCpu(cp, pool)) << "compressor";
    if (groups > 0 && !seg.replay) {
      const int64_t first = ws.group_index[0];
      if (info.owns_index_keys) {
        const int64_t id = c.index_head_dim;
        RETURN_IF_ERROR(Linear(*a.indexer_wk, groups, ws.latent.data(), hd, ws.ik.data(), id))
            << "indexer wk";
        RETURN_IF_ERROR(RmsNorm(layer.k_norm, groups, id, ws.ik.data(), id, ws.ik.data(), id));
        for (int64_t g = 0; g < groups; ++g) ws.group_positions[g] = ws.group_index[g] * r;
        RETURN_IF_ERROR(Rope(*layer.rope, groups, 1, id, id, ws.group_positions.data(),
                             ws.ik.data()));
        RETURN_IF_ERROR(EncodeRows(KvRowKind::kIndexK, groups, id, ws.ik.data(),
                                   ws.ik_rows.data()));
        RETURN_IF_ERROR(StoreRows(KvRowKind::kIndexK, own.index_k, first, groups,
                                  ws.ik_rows.data()))
            << "index keys";
        state.shared_index_k_layer = info.layer_id;
      }
      kernels::FinalizeCompressedKvParams fp{.table = layer.rope,
                                             .ratio = r,
                                             .rows = groups,
                                             .channels = hd,
                                             .group_index = ws.group_index.data(),
                                             .latent = ws.latent.data(),
                                             .latent_stride = hd,
                                             .kv = ws.latent.data(),
                                             .kv_stride = hd,
                                             .cache_rows = ws.main_rows.data(),
                                             .cache_row_stride = formats::MainKvRowBytes(hd)};
      RETURN_IF_ERROR(kernels::FinalizeCompressedKvCpu(fp, pool));
      RETURN_IF_ERROR(StoreRows(KvRowKind::kMainKv, own.main, first, groups, ws.main_rows.data()))
          << "compressed KV";
    }
  }

  return absl::OkStatus();
}

absl::Status CpuModel::Impl::AttentionSegment(const LayerRef& layer, int64_t b) {
  const ModelConfig& c = *config;
  const LayerInfo& info = *layer.info;
  const PreparedAttention& a = layer.prepared->attn;
  const Segment& seg = segs[b];
  SessionState& state = *seg.state;
  const int64_t D = c.dim, hd = c.head_dim, W = c.window_size, T = max_tokens;
  const int64_t r0 = seg.row0, s = seg.rows, start = seg.start;
  const uint16_t* x = ws.normed.data() + r0 * D;  // this session's attention input rows
  LayerState& own = state.layers[info.layer_id];
  StepJournal::Layer* journal =
      seg.journal != nullptr ? &seg.journal->layers[info.layer_id] : nullptr;

  if (info.owns_compressor && seg.compressed_layer != info.layer_id) {
    RETURN_IF_ERROR(CompressSegment(layer, b));
  }

  // Indexer: scores against the KV source's own index keys, top-k per row.
  const int64_t ratio = info.compress_ratio;
  const int64_t width = ratio > 0 ? (start + s) / ratio : 0;
  const int64_t C = max_context;
  int32_t* own_topk =
      info.owns_indexer ? ws.topk[info.layer_id].data() + r0 * std::min<int64_t>(c.index_topk, C)
                        : nullptr;
  const int64_t K = std::min<int64_t>(c.index_topk, C);  // row stride of the top-k buffers
  if (info.owns_indexer) {
    const int64_t id = c.index_head_dim, IH = c.index_n_heads;
    const int64_t k = kernels::IndexerTopkK(c.index_topk, width);
    ws.topk_k[info.layer_id * T + b] = k;
    if (width > 0) {
      const int key_layer = options.reference_stale_index_keys && state.shared_index_k_layer >= 0
                                ? state.shared_index_k_layer
                                : info.kv_source_layer;
      const LayerState& src = state.layers[key_layer];
      if (src.index_k.capacity < width) {
        return absl::FailedPreconditionError(
            absl::StrCat("layer ", key_layer, " holds no index keys for ", width, " positions"));
      }
      uint16_t* iq = ws.iq.data() + r0 * IH * id;
      uint16_t* iw = ws.iw.data() + r0 * IH;
      RETURN_IF_ERROR(Linear(*a.indexer_wq_b, s, ws.qr.data() + r0 * c.q_lora_rank,
                             c.q_lora_rank, iq, IH * id))
          << "indexer wq_b";
      RETURN_IF_ERROR(Rope(*layer.rope, s, IH, id, IH * id, ws.positions.data() + r0, iq));
      kernels::quant::QdqParams qp{.format = kernels::quant::BlockFormat::kFp4E2m1Ue8m0B32,
                                   .rows = s * IH,
                                   .cols = id,
                                   .x = iq,
                                   .x_stride = id,
                                   .out = iq,
                                   .out_stride = id};
      RETURN_IF_ERROR(kernels::quant::QdqCpu(qp));
      RETURN_IF_ERROR(Linear(*a.indexer_weights_proj, s, x, D, iw, IH))
          << "indexer weights_proj";
      const float wscale = static_cast<float>(1.0 / std::sqrt(double(id) * double(IH)));
      for (int64_t e = 0; e < s * IH; ++e) {
        iw[e] = formats::FloatToBf16Bits(formats::Bf16BitsToFloat(iw[e]) * wscale);
      }
      const bool masked = info.candidate_masked;
      uint8_t* candidates = ws.candidates.data() + r0 * C;  // row stride C
      if (masked && ws.candidates_width[b] != width) {
        return absl::FailedPreconditionError(
            absl::StrCat("layer ", info.layer_id, " needs the candidate mask of width ", width,
                         "; this call published ", ws.candidates_width[b]));
      }
      kernels::IndexerScoreParams sp{.tokens = s,
                                     .heads = IH,
                                     .head_dim = id,
                                     .width = width,
                                     .start_pos = start,
                                     .ratio = ratio,
                                     .q = iq,
                                     .q_stride = IH * id,
                                     .k = src.index_k.values(0),
                                     .k_stride = id,
                                     .w = iw,
                                     .w_stride = IH,
                                     .candidates = masked ? candidates : nullptr,
                                     .candidates_stride = masked ? C : 0,
                                     .scores = ws.scores.data(),
                                     .scores_stride = width};
      RETURN_IF_ERROR(kernels::IndexerScoreCpu(sp, pool)) << "indexer scores";
      if (info.is_candidate_source) {
        kernels::CandidateBlocksParams bp{.tokens = s,
                                          .width = width,
                                          .start_pos = start,
                                          .ratio = ratio,
                                          .block_size = c.candidate_block_size,
                                          .topk_blocks = c.candidate_topk_blocks,
                                          .scores = ws.scores.data(),
                                          .scores_stride = width,
                                          .candidates = candidates,
                                          .candidates_stride = C,
                                          .workspace = ws.cand_ws.data(),
                                          .workspace_bytes = ws.cand_ws.size()};
        RETURN_IF_ERROR(kernels::CandidateBlocksCpu(bp, pool)) << "candidate blocks";
        ws.candidates_width[b] = width;
      }
      kernels::IndexerTopkParams tp{.tokens = s,
                                    .width = width,
                                    .start_pos = start,
                                    .ratio = ratio,
                                    .index_topk = c.index_topk,
                                    .offset = 0,
                                    .scores = ws.scores.data(),
                                    .scores_stride = width,
                                    .indices = own_topk,
                                    .indices_stride = K,
                                    .workspace = ws.topk_ws.data(),
                                    .workspace_bytes = ws.topk_ws.size()};
      RETURN_IF_ERROR(kernels::IndexerTopkCpu(tp, pool)) << "indexer top-k";
    }
  }

  // KV pool: [ring (W rows) | this call's window KV (s rows) | gathered compressed rows].
  std::memcpy(ws.pool.data(), own.swa.values(0), static_cast<size_t>(W * hd) * 2);
  std::memcpy(ws.pool.data() + W * hd, ws.kv.data() + r0 * hd, static_cast<size_t>(s * hd) * 2);
  int64_t pool_rows = W + s;
  int64_t k = 0;
  const int32_t* topk = nullptr;
  if (ratio > 0 && width > 0) {
    k = ws.topk_k[info.index_source_layer * T + b];
    topk = ws.topk[info.index_source_layer].data() + r0 * K;
    if (info.owns_indexer && observer != nullptr && observer->on_topk) {
      std::vector<int32_t> rows(static_cast<size_t>(s * k));  // observers are for tests
      for (int64_t t = 0; t < s; ++t) std::copy_n(topk + t * K, k, rows.data() + t * k);
      observer->on_topk(info.layer_id, rows, k);
    }
  }
  // Window entries (chunk form, width W; docs/architecture.md), then the compressed entries,
  // each compressed row copied once into the pool.
  RETURN_IF_ERROR(kernels::FillChunkWindowIndices(
      start, s, W, W, absl::Span<int32_t>(ws.window_list.data(), size_t(s * W))));
  if (info.layer_id >= seg.drop_ring_from_layer) {
    // Bounded window: only this call's rows (pool rows >= W) are visible.
    for (int64_t e = 0; e < s * W; ++e) {
      if (ws.window_list[e] < W) ws.window_list[e] = -1;
    }
  }
  const int64_t list_width = W + k;
  if (k > 0) {
    const KvRows& compressed = state.layers[info.kv_source_layer].main;
    for (int64_t t = 0; t < s; ++t) {
      for (int64_t e = 0; e < k; ++e) {
        const int32_t j = topk[t * K + e];
        if (j < 0) continue;
        if (j >= width) {
          return absl::InternalError(absl::StrCat("top-k entry ", j, " beyond width ", width));
        }
        if (ws.remap[j] < 0) {
          ws.remap[j] = static_cast<int32_t>(pool_rows);
          std::memcpy(ws.pool.data() + pool_rows * hd, compressed.values(j),
                      static_cast<size_t>(hd) * 2);
          ++pool_rows;
        }
      }
    }
  }
  for (int64_t t = 0; t < s; ++t) {
    int32_t* row = ws.list.data() + t * list_width;
    std::copy_n(ws.window_list.data() + t * W, W, row);
    for (int64_t e = 0; e < k; ++e) {
      const int32_t j = topk[t * K + e];
      row[W + e] = j < 0 ? -1 : ws.remap[j];
    }
  }
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t e = 0; e < k; ++e) {
      if (topk[t * K + e] >= 0) ws.remap[topk[t * K + e]] = -1;
    }
  }
  RETURN_IF_ERROR(SparseAttnRows(layer, r0, s, pool_rows, list_width));
  if (info.layer_id >= seg.ring_write_from_layer) UpdateRing(own, start, s, r0, journal);
  return absl::OkStatus();
}

}  // namespace flashserve::model
