#include "model/runtime/cpu_model.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/mhc/mhc.h"
#include "kernels/norm_rope/norm_rope.h"
#include "model/runtime/cpu_model_impl.h"

namespace flashserve::model {

using kernels::PreparedLinear;

// ---------------------------------------------------------------------------------------------
// Helpers.

absl::Status CpuModel::Impl::Linear(const PreparedLinear& w, int64_t m, const uint16_t* x,
                                    int64_t x_stride, uint16_t* y, int64_t y_stride) {
  kernels::LinearParams p{.weight = &w,
                          .m = m,
                          .x_bf16 = x,
                          .x_stride = x_stride,
                          .y_bf16 = y,
                          .y_stride = y_stride,
                          .mode = options.linear_mode,
                          .workspace = ws.linear_ws.data(),
                          .workspace_bytes = ws.linear_ws.size()};
  return kernels::LinearCpu(p, pool);
}

absl::Status CpuModel::Impl::LinearF32Out(const PreparedLinear& w, int64_t m, const uint16_t* x,
                                          int64_t x_stride, float* y, int64_t y_stride) {
  kernels::LinearParams p{.weight = &w,
                          .m = m,
                          .x_bf16 = x,
                          .x_stride = x_stride,
                          .y_f32 = y,
                          .y_stride = y_stride,
                          .mode = options.linear_mode,
                          .workspace = ws.linear_ws.data(),
                          .workspace_bytes = ws.linear_ws.size()};
  return kernels::LinearCpu(p, pool);
}

absl::Status CpuModel::Impl::RmsNorm(const std::vector<uint16_t>& weight, int64_t rows,
                                     int64_t cols, const uint16_t* x, int64_t x_stride,
                                     uint16_t* out, int64_t out_stride) {
  kernels::RmsNormParams p{.rows = rows,
                           .cols = cols,
                           .x = x,
                           .x_stride = x_stride,
                           .weight_bf16 = weight.data(),
                           .eps = static_cast<float>(config->norm_eps),
                           .out = out,
                           .out_stride = out_stride};
  return kernels::RmsNormCpu(p, pool);
}

absl::Status CpuModel::Impl::Rope(const kernels::RopeTable& table, int64_t tokens, int64_t heads,
                                  int64_t head_dim, int64_t stride, const int64_t* positions,
                                  uint16_t* x, bool inverse) {
  kernels::RopeParams p{.table = &table,
                        .tokens = tokens,
                        .heads = heads,
                        .head_dim = head_dim,
                        .positions = positions,
                        .x = x,
                        .x_stride = stride,
                        .x_head_stride = head_dim,
                        .out = x,
                        .out_stride = stride,
                        .out_head_stride = head_dim,
                        .inverse = inverse};
  return kernels::RopeCpu(p, pool);
}

absl::Status CpuModel::Impl::Block(const LayerRef& layer, int64_t s,
                                   const std::function<absl::Status()>& attn,
                                   std::span<const uint8_t> image,
                                   const ForwardObserver* observer) {
  const int64_t d = config->dim, hc = kernels::kMhcStreams, xs = hc * d;
  const int layer_id = layer.info->layer_id;
  if (observer && observer->on_block) {
    observer->on_block(layer_id, BlockPoint::kInput, {ws.x.data(), size_t(s * xs)},
                       {ws.pre.data(), size_t(s * hc)});
  }
  auto mixes = [&](const uint16_t* x, const MhcSiteParams& site, const float* pre_in, float* pre,
                   float* post, float* comb) {
    kernels::MhcMixesParams p{.tokens = s,
                              .dim = d,
                              .x = x,
                              .x_stride = xs,
                              .fn = site.fn.data(),
                              .base = site.base.data(),
                              .scale = site.scale.data(),
                              .sinkhorn_iters = config->hc_sinkhorn_iters,
                              .hc_eps = static_cast<float>(config->hc_eps),
                              .norm_eps = static_cast<float>(config->norm_eps),
                              .pre = pre,
                              .post = post,
                              .comb = comb,
                              .pre_in = pre_in,
                              .collapsed = ws.collapsed.data(),
                              .collapsed_stride = d};
    return kernels::MhcMixesCpu(p, pool);
  };
  auto post = [&](const uint16_t* residual, const float* post_mix, const float* comb,
                  uint16_t* out) {
    kernels::HcPostParams p{.tokens = s,
                            .dim = d,
                            .f = ws.sub.data(),
                            .f_stride = d,
                            .residual = residual,
                            .residual_stride = xs,
                            .post = post_mix,
                            .comb = comb,
                            .out = out,
                            .out_stride = xs};
    return kernels::HcPostCpu(p, pool);
  };
  // Attention site: its mixes from X; the sublayer reads X collapsed by the incoming pre mix.
  RETURN_IF_ERROR(mixes(ws.x.data(), layer.hc_attn, ws.pre.data(), ws.a_pre.data(),
                        ws.a_post.data(), ws.a_comb.data()))
      << "layer " << layer_id << " attention mixes";
  RETURN_IF_ERROR(RmsNorm(layer.attn_norm, s, d, ws.collapsed.data(), d, ws.normed.data(), d));
  RETURN_IF_ERROR(attn()) << "layer " << layer_id << " attention";
  RETURN_IF_ERROR(post(ws.x.data(), ws.a_post.data(), ws.a_comb.data(), ws.y.data()));
  // FFN site: its mixes from Y; the sublayer reads Y collapsed by the attention site's pre mix.
  RETURN_IF_ERROR(mixes(ws.y.data(), layer.hc_ffn, ws.a_pre.data(), ws.f_pre.data(),
                        ws.f_post.data(), ws.f_comb.data()))
      << "layer " << layer_id << " FFN mixes";
  RETURN_IF_ERROR(RmsNorm(layer.ffn_norm, s, d, ws.collapsed.data(), d, ws.normed.data(), d));
  const int64_t top_k = layer.moe_options.top_k;
  kernels::MoeParams mp{.weights = &layer.moe,
                        .options = layer.moe_options,
                        .m = s,
                        .x = ws.normed.data(),
                        .x_stride = d,
                        .is_image = image.empty() ? nullptr : image.data(),
                        .y = ws.sub.data(),
                        .y_stride = d,
                        .expert_ids = ws.expert_ids.data(),
                        .expert_weights = ws.expert_weights.data(),
                        .mode = options.linear_mode,
                        .workspace = ws.moe_ws.data(),
                        .workspace_bytes = ws.moe_ws.size()};
  RETURN_IF_ERROR(kernels::MoeCpu(mp, pool)) << "layer " << layer_id << " MoE";
  RETURN_IF_ERROR(post(ws.y.data(), ws.f_post.data(), ws.f_comb.data(), ws.x.data()));
  std::copy_n(ws.f_pre.data(), s * hc, ws.pre.data());
  if (observer && observer->on_experts) {
    observer->on_experts(layer_id, {ws.expert_ids.data(), size_t(s * top_k)},
                         {ws.expert_weights.data(), size_t(s * top_k)}, top_k);
  }
  if (observer && observer->on_block) {
    observer->on_block(layer_id, BlockPoint::kOutput, {ws.x.data(), size_t(s * xs)},
                       {ws.pre.data(), size_t(s * hc)});
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Forward.

absl::Status CpuModel::Forward(SessionState& state, const ForwardInput& input,
                               ForwardOutput* out) {
  if (out == nullptr) return absl::InvalidArgumentError("out must not be null");
  SessionState* states[] = {&state};
  return ForwardBatch(states, {&input, 1}, {out, 1});
}

absl::Status CpuModel::ForwardBatch(std::span<SessionState* const> states,
                                    std::span<const ForwardInput> inputs,
                                    std::span<ForwardOutput> outputs) {
  Impl& m = *impl_;
  Workspace& ws = m.ws;
  const ModelConfig& c = *m.config;
  const int64_t D = c.dim, hc = c.hc_mult, xs = hc * D, W = c.window_size;
  if (states.size() != inputs.size() || states.size() != outputs.size() || states.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", states.size(), " states, ",
                                                   inputs.size(), " inputs, ", outputs.size(),
                                                   " outputs"));
  }
  // Validate everything before touching any state.
  m.segs.clear();
  int64_t rows = 0;
  for (size_t b = 0; b < states.size(); ++b) {
    // The message prefix naming the session, built only on an error path (no allocation per step).
    const auto who = [&]() -> std::string {
      return states.size() > 1 ? absl::StrCat("session ", b, ": ") : std::string();
    };
    SessionState* st = states[b];
    const ForwardInput& in = inputs[b];
    const int64_t s = static_cast<int64_t>(in.tokens.size());
    if (st == nullptr) return absl::InvalidArgumentError(who() + "null state");
    for (size_t e = 0; e < b; ++e) {
      if (states[e] == st) return absl::InvalidArgumentError(who() + "the session appears twice");
    }
    if (st->failed) {
      return absl::FailedPreconditionError(
          who() + "the session failed in an earlier call; start a new one");
    }
    if (st->layers.size() != m.layers.size()) {
      return absl::InvalidArgumentError(who() + "the session state was made for another model");
    }
    if (s < 1) return absl::InvalidArgumentError(who() + "a call carries at least one token");
    if (st->position + s > st->capacity) {
      return absl::OutOfRangeError(absl::StrCat(who(), "positions ", st->position, "..",
                                                st->position + s - 1,
                                                " exceed the session capacity ", st->capacity));
    }
    if (!in.image.empty() && static_cast<int64_t>(in.image.size()) != s) {
      return absl::InvalidArgumentError(absl::StrCat(who(), "image has ", in.image.size(),
                                                     " flags for ", s, " tokens"));
    }
    for (int64_t t = 0; t < s; ++t) {
      if (in.tokens[t] < 0 || in.tokens[t] >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(who(), "token ", t, " has id ",
                                                       in.tokens[t], ", outside [0, ",
                                                       c.vocab_size, ")"));
      }
    }
    if (in.journal != nullptr && s > W) {
      return absl::InvalidArgumentError(absl::StrCat(who(), "a journaled call carries at most ", W,
                                                     " tokens (the window), got ", s));
    }
    if (in.observer != nullptr && states.size() > 1) {
      return absl::InvalidArgumentError("observers are only supported for a batch of one");
    }
    if (in.ced && (states.size() > 1 || in.journal != nullptr)) {
      return absl::InvalidArgumentError("a CED prefill runs alone and without a journal");
    }
    if (in.ced_skip_decoder && !in.ced) {
      return absl::InvalidArgumentError("ced_skip_decoder needs ced");
    }
    m.segs.push_back(Segment{.state = st, .row0 = rows, .rows = s, .start = st->position,
                             .journal = in.journal});
    if (m.replay_ring_from >= 0) {
      Segment& seg = m.segs.back();
      seg.replay = true;
      seg.drop_ring_from_layer = 0;
      seg.ring_write_from_layer = m.replay_ring_from;
    }
    rows += s;
  }
  if (rows > m.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("the call carries ", rows,
                                                   " tokens; at most ", m.max_tokens));
  }
  int64_t M = rows;
  bool any_image = false;
  for (const Segment& seg : m.segs) {
    const ForwardInput& in = inputs[&seg - m.segs.data()];
    for (int64_t t = 0; t < seg.rows; ++t) {
      const int64_t r = seg.row0 + t;
      ws.image[r] = in.image.empty() ? 0 : (in.image[t] != 0);
      any_image |= ws.image[r] != 0;
      ws.positions[r] = seg.start + t;
    }
    ws.candidates_width[&seg - m.segs.data()] = -1;
  }
  std::span<const uint8_t> image =
      any_image ? std::span<const uint8_t>(ws.image.data(), size_t(M)) : std::span<const uint8_t>();
  m.observer = inputs[0].observer;
  const int dec = m.schedule->decoder_start_layer;
  const bool skip_decoder = inputs[0].ced_skip_decoder && dec < c.n_layers;
  const bool ced = inputs[0].ced && dec < c.n_layers && (M > W || skip_decoder);

  // From here on the states change: a failure poisons them.
  for (const Segment& seg : m.segs) seg.state->failed = true;
  for (size_t b = 0; b < m.segs.size(); ++b) {
    const Segment& seg = m.segs[b];
    const ForwardInput& in = inputs[b];
    if (seg.journal != nullptr) {
      StepJournal& j = *seg.journal;
      j.start = seg.start;
      j.tokens.assign(in.tokens.begin(), in.tokens.end());
      j.image.assign(in.image.begin(), in.image.end());
      j.engram = seg.state->engram;
      j.layers.resize(m.layers.size());
    }
    if (m.hasher) {
      const int64_t per = m.hasher->ids_per_position();
      std::span<const uint8_t> seg_image;
      if (any_image) seg_image = image.subspan(size_t(seg.row0), size_t(seg.rows));
      RETURN_IF_ERROR(m.hasher->HashChunk(
          in.tokens, seg_image, seg.state->engram,
          {ws.hash_ids.data() + seg.row0 * per, size_t(seg.rows * per)}))
          << "Engram hashing";
    }
    // Embedding, copied into the 4 streams; the incoming pre mix is one-hot on stream 0.
    const uint8_t* embed = m.checkpoint->weights().embed.data;
    for (int64_t t = 0; t < seg.rows; ++t) {
      const int64_t r = seg.row0 + t;
      uint16_t* row = ws.x.data() + r * xs;
      if (in.embeddings != nullptr && ws.image[r]) {
        std::memcpy(row, in.embeddings + t * D, D * 2);
      } else {
        std::memcpy(row, embed + static_cast<size_t>(in.tokens[t]) * D * 2, D * 2);
      }
      for (int64_t k = 1; k < hc; ++k) std::memcpy(row + k * D, row, D * 2);
      for (int64_t k = 0; k < hc; ++k) ws.pre[r * hc + k] = k == 0 ? 1.0f : 0.0f;
    }
  }

  const int64_t n_taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerRef& layer = m.layers[i];
    if (ced && i == dec) {
      const int64_t keep = skip_decoder ? 0 : W;
      RETURN_IF_ERROR(m.CedDecoderStart(layer, M, n_taps, keep)) << "CED at layer " << i;
      M = keep;
      if (M == 0) break;
      any_image = false;
      for (int64_t t = 0; t < M; ++t) any_image |= ws.image[t] != 0;
      image = any_image ? std::span<const uint8_t>(ws.image.data(), size_t(M))
                        : std::span<const uint8_t>();
    }
    if (layer.info->has_engram) {
      const int64_t per = m.hasher->ids_per_position();
      const int64_t cols = m.hasher->layout().num_columns();
      RETURN_IF_ERROR(m.Engram(layer, M, ws.hash_ids.data() + layer.info->engram_index * cols,
                               per, image))
          << "layer " << i << " Engram";
    }
    if (layer.info->is_dspark_tap) {
      // The stream mean of the block input (bf16 result of an fp32 mean).
      for (int64_t t = 0; t < M; ++t) {
        const uint16_t* xr = ws.x.data() + t * xs;
        uint16_t* tap = ws.taps.data() + (t * n_taps + layer.info->dspark_tap_index) * D;
        for (int64_t e = 0; e < D; ++e) {
          float sum = 0.0f;
          for (int64_t k = 0; k < hc; ++k) sum += formats::Bf16BitsToFloat(xr[k * D + e]);
          tap[e] = formats::FloatToBf16Bits(sum / static_cast<float>(hc));
        }
      }
    }
    RETURN_IF_ERROR(m.Block(
        layer, M, [&] { return m.Attention(layer, M); }, image, m.observer));
  }

  if (M == 0) {  // CED chunk that stops after the decoder's global KV
    Segment& seg = m.segs[0];
    seg.state->position = seg.start + seg.rows;
    seg.state->failed = false;
    outputs[0].logits.clear();
    outputs[0].main_hidden.clear();
    return absl::OkStatus();
  }
  // Final collapse with the last block's FFN pre mix, norm, head (fp32), per session.
  kernels::HcPreParams hp{.tokens = M,
                          .dim = D,
                          .x = ws.x.data(),
                          .x_stride = xs,
                          .pre = ws.pre.data(),
                          .out = ws.collapsed.data(),
                          .out_stride = D};
  RETURN_IF_ERROR(kernels::HcPreCpu(hp, m.pool));
  RETURN_IF_ERROR(m.RmsNorm(m.final_norm, M, D, ws.collapsed.data(), D, ws.normed.data(), D));
  for (size_t b = 0; b < m.segs.size(); ++b) {
    const Segment& seg = m.segs[b];
    ForwardOutput& out = outputs[b];
    const int64_t first = inputs[b].all_logits ? 0 : seg.rows - 1, n = seg.rows - first;
    out.logits.resize(static_cast<size_t>(n * c.vocab_size));
    RETURN_IF_ERROR(m.LinearF32Out(m.prepared->head, n, ws.normed.data() + (seg.row0 + first) * D,
                                   D, out.logits.data(), c.vocab_size))
        << "head";
    const int64_t last = seg.row0 + seg.rows - 1;
    out.main_hidden.assign(ws.taps.begin() + last * n_taps * D,
                           ws.taps.begin() + (last + 1) * n_taps * D);
  }
  if (m.schedule->n_dspark_stages > 0) {
    RETURN_IF_ERROR(m.DSparkIngest(M)) << "DSpark windows";
  }
  for (Segment& seg : m.segs) {
    seg.state->position = seg.start + seg.rows;
    seg.state->failed = false;
  }
  return absl::OkStatus();
}

absl::Status CpuModel::Impl::CedDecoderStart(const LayerRef& layer, int64_t m, int64_t n_taps,
                                             int64_t keep) {
  const ModelConfig& c = *config;
  const int64_t D = c.dim, hc = c.hc_mult, xs = hc * D, W = keep;
  // The decoder's global KV for every row: the attention input of its first layer (the mixes'
  // collapse by the incoming pre mix, then attn_norm), through the compressor and index keys.
  kernels::MhcMixesParams p{.tokens = m,
                            .dim = D,
                            .x = ws.x.data(),
                            .x_stride = xs,
                            .fn = layer.hc_attn.fn.data(),
                            .base = layer.hc_attn.base.data(),
                            .scale = layer.hc_attn.scale.data(),
                            .sinkhorn_iters = c.hc_sinkhorn_iters,
                            .hc_eps = static_cast<float>(c.hc_eps),
                            .norm_eps = static_cast<float>(c.norm_eps),
                            .pre = ws.a_pre.data(),
                            .post = ws.a_post.data(),
                            .comb = ws.a_comb.data(),
                            .pre_in = ws.pre.data(),
                            .collapsed = ws.collapsed.data(),
                            .collapsed_stride = D};
  RETURN_IF_ERROR(kernels::MhcMixesCpu(p, pool));
  RETURN_IF_ERROR(RmsNorm(layer.attn_norm, m, D, ws.collapsed.data(), D, ws.normed.data(), D));
  if (layer.info->owns_compressor) {
    RETURN_IF_ERROR(CompressSegment(layer, 0));
  }
  // The decoder runs on the last W rows only.
  const int64_t off = m - W;
  if (W == 0) {
    segs[0].start += m;  // position bookkeeping: every row was consumed
    segs[0].rows = 0;
    return absl::OkStatus();
  }
  auto keep_tail = [&](auto& v, int64_t width) {
    std::copy(v.begin() + off * width, v.begin() + m * width, v.begin());
  };
  keep_tail(ws.x, xs);
  keep_tail(ws.pre, hc);
  keep_tail(ws.image, 1);
  keep_tail(ws.positions, 1);
  if (hasher) keep_tail(ws.hash_ids, hasher->ids_per_position());
  if (n_taps > 0) keep_tail(ws.taps, n_taps * D);
  Segment& seg = segs[0];
  seg.start += off;
  seg.rows = W;
  seg.compressed_layer = layer.info->layer_id;
  seg.drop_ring_from_layer = layer.info->layer_id;
  return absl::OkStatus();
}

absl::Status CpuModel::Replay(SessionState& state, std::span<const int32_t> tokens,
                              ForwardOutput* out, int ring_from_layer) {
  Impl& m = *impl_;
  const ModelConfig& c = *m.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (out == nullptr) return absl::InvalidArgumentError("out must not be null");
  if (n < 1 || n > state.capacity) {
    return absl::InvalidArgumentError(absl::StrCat("replay of ", n, " tokens in a session of ",
                                                   state.capacity, " positions"));
  }
  if (state.layers.size() != m.layers.size()) {
    return absl::InvalidArgumentError("the session state was made for another model");
  }
  for (int64_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token ", t, " has id ", tokens[t],
                                                     ", outside [0, ", c.vocab_size, ")"));
    }
  }
  const int64_t first = n - std::min<int64_t>(c.window_size, n);
  if (n - first > m.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("replay needs max_tokens_per_call >= ",
                                                   n - first));
  }
  // The Engram look-back of position `first` comes from the token ids alone.
  state.failed = false;
  state.engram = engram::NgramLookback{};
  if (m.hasher) {
    const int64_t per = m.hasher->ids_per_position();
    for (int64_t at = 0; at < first; at += m.max_tokens) {
      const int64_t len = std::min(m.max_tokens, first - at);
      RETURN_IF_ERROR(m.hasher->HashChunk(tokens.subspan(size_t(at), size_t(len)), {},
                                          state.engram,
                                          {m.ws.hash_ids.data(), size_t(len * per)}));
    }
  }
  state.position = first;
  m.replay_ring_from = std::max(0, ring_from_layer);
  absl::Status st = Forward(state, {.tokens = tokens.subspan(size_t(first))}, out);
  m.replay_ring_from = -1;
  return st;
}

absl::Status CpuModel::Truncate(SessionState& state, const StepJournal& journal, int64_t keep) {
  Impl& m = *impl_;
  const ModelConfig& c = *m.config;
  const int64_t s = static_cast<int64_t>(journal.tokens.size());
  if (m.options.reference_stale_index_keys) {
    return absl::FailedPreconditionError(
        "Truncate is not supported with reference_stale_index_keys");
  }
  if (state.failed || journal.start < 0 || state.position != journal.start + s ||
      journal.layers.size() != m.layers.size()) {
    return absl::FailedPreconditionError(
        "the journal does not describe the last call on this session");
  }
  if (keep < 0 || keep > s) {
    return absl::OutOfRangeError(absl::StrCat("keep ", keep, " outside [0, ", s, "]"));
  }
  if (keep == s) return absl::OkStatus();
  state.failed = true;
  const int64_t W = c.window_size, start = journal.start;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const StepJournal::Layer& jl = journal.layers[l];
    LayerState& ls = state.layers[l];
    // Ring slots written for positions start + t, t >= keep, get their old rows back (a journaled
    // call carries at most W tokens, so every slot was written once).
    const int64_t rb = ls.swa.row_bytes, ch = ls.swa.channels;
    for (size_t e = 0; e < jl.slots.size(); ++e) {
      const int64_t slot = jl.slots[e];
      const int64_t t = ((slot - start) % W + W) % W;
      if (t < keep) continue;
      std::memcpy(ls.swa.row(slot), jl.old_rows.data() + e * rb, static_cast<size_t>(rb));
      std::memcpy(ls.swa.values(slot), jl.old_values.data() + e * ch, static_cast<size_t>(ch) * 2);
    }
    // The compressor: its state before the call, advanced over the kept tokens.
    if (ls.compressor && jl.compressor) {
      *ls.compressor = *jl.compressor;
      if (keep > 0) {
        int64_t groups = 0;
        kernels::CompressParams cp{.weights = &*m.layers[l].compressor,
                                   .state = &*ls.compressor,
                                   .start_pos = start,
                                   .tokens = keep,
                                   .x = jl.x.data(),
                                   .x_stride = c.dim,
                                   .latent = m.ws.latent.data(),
                                   .latent_stride = c.head_dim,
                                   .latent_capacity = keep,
                                   .group_index = m.ws.group_index.data(),
                                   .groups_emitted = &groups,
                                   .workspace = m.ws.compress_ws.data(),
                                   .workspace_bytes = m.ws.compress_ws.size()};
        RETURN_IF_ERROR(kernels::CompressCpu(cp, m.pool)) << "compressor replay";
      }
    }
  }
  state.engram = journal.engram;
  if (m.hasher && keep > 0) {
    const int64_t per = m.hasher->ids_per_position();
    std::span<const uint8_t> image;
    if (!journal.image.empty()) image = std::span(journal.image).first(size_t(keep));
    RETURN_IF_ERROR(m.hasher->HashChunk(std::span(journal.tokens).first(size_t(keep)), image,
                                        state.engram, {m.ws.hash_ids.data(), size_t(keep * per)}));
  }
  state.position = start + keep;
  state.failed = false;
  return absl::OkStatus();
}

}  // namespace flashserve::model
