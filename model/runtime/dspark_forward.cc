// The DSpark drafter on the CPU backend (model spec §4.9): the stage windows fed from the main
// model's taps, and the draft block (stages, head, Markov head, confidence head).
#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/formats/bf16.h"
#include "kernels/mhc/mhc.h"
#include "model/runtime/cpu_model_impl.h"

namespace flashserve::model {

absl::Status CpuModel::Impl::DSparkIngest(int64_t s) {
  const ModelConfig& c = *config;
  const int64_t D = c.dim;
  const int64_t taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  // main_x = main_norm(main_proj(taps)), shared by every stage.
  RETURN_IF_ERROR(Linear(prepared->dspark->main_proj, s, ws.taps.data(), taps * D,
                         ws.main_x.data(), D))
      << "main_proj";
  RETURN_IF_ERROR(RmsNorm(dspark_main_norm, s, D, ws.main_x.data(), D, ws.main_x.data(), D));
  for (int st = 0; st < schedule->n_dspark_stages; ++st) {
    const LayerRef& layer = layers[c.n_layers + st];
    RETURN_IF_ERROR(WindowKv(layer, s, ws.main_x.data(), ws.positions.data()))
        << "stage " << st;
    for (const Segment& seg : segs) {
      StepJournal::Layer* journal =
          seg.journal != nullptr ? &seg.journal->layers[c.n_layers + st] : nullptr;
      UpdateRing(seg.state->layers[c.n_layers + st], seg.start, seg.rows, seg.row0, journal);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuModel::Draft(const SessionState& state, int32_t anchor, DraftOutput* out) {
  Impl& m = *impl_;
  Workspace& ws = m.ws;
  const ModelConfig& c = *m.config;
  if (m.schedule->n_dspark_stages == 0) {
    return absl::FailedPreconditionError("the model has no DSpark drafter");
  }
  if (out == nullptr) return absl::InvalidArgumentError("out must not be null");
  if (state.failed || state.position < 1) {
    return absl::FailedPreconditionError("Draft needs a session after a successful Forward");
  }
  if (state.layers.size() != m.layers.size()) {
    return absl::InvalidArgumentError("the session state was made for another model");
  }
  if (anchor < 0 || anchor >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("anchor id ", anchor, " outside the vocabulary"));
  }
  const int64_t B = c.dspark_block_size, D = c.dim, hc = c.hc_mult, xs = hc * D;
  const int64_t W = c.window_size, hd = c.head_dim, V = c.vocab_size;
  const int64_t last = state.position - 1;  // the newest main position in the windows
  if (last + B >= m.max_context + 1) {
    return absl::OutOfRangeError("draft positions beyond the RoPE tables");
  }
  // Draft block: the anchor then noise tokens at positions last+1 .. last+B.
  const uint8_t* embed = m.checkpoint->weights().embed.data;
  for (int64_t t = 0; t < B; ++t) {
    const int32_t id = t == 0 ? anchor : c.dspark_noise_token_id;
    uint16_t* row = ws.x.data() + t * xs;
    std::memcpy(row, embed + static_cast<size_t>(id) * D * 2, D * 2);
    for (int64_t k = 1; k < hc; ++k) std::memcpy(row + k * D, row, D * 2);
    for (int64_t k = 0; k < hc; ++k) ws.pre[t * hc + k] = k == 0 ? 1.0f : 0.0f;
    ws.positions[t] = last + 1 + t;
  }
  m.observer = nullptr;
  m.segs.clear();
  const int64_t ring_valid = std::min<int64_t>(W, last + 1);
  for (int st = 0; st < m.schedule->n_dspark_stages; ++st) {
    const LayerRef& layer = m.layers[c.n_layers + st];
    const LayerState& ring = state.layers[c.n_layers + st];
    auto attention = [&]() -> absl::Status {
      RETURN_IF_ERROR(m.AttentionQuery(layer, B, ws.positions.data()));
      RETURN_IF_ERROR(m.WindowKv(layer, B, ws.normed.data(), ws.positions.data()));
      // Pool: the ring (slot order) then the B draft rows; every query sees all of them.
      std::memcpy(ws.pool.data(), ring.swa.values(0), static_cast<size_t>(W * hd) * 2);
      std::memcpy(ws.pool.data() + W * hd, ws.kv.data(), static_cast<size_t>(B * hd) * 2);
      const int64_t width = ring_valid + B;
      for (int64_t t = 0; t < B; ++t) {
        int32_t* row = ws.list.data() + t * width;
        for (int64_t e = 0; e < ring_valid; ++e) row[e] = static_cast<int32_t>(e);
        for (int64_t e = 0; e < B; ++e) row[ring_valid + e] = static_cast<int32_t>(W + e);
      }
      RETURN_IF_ERROR(m.SparseAttnRows(layer, 0, B, W + B, width));
      return m.OutputProjection(layer, B, ws.positions.data());
    };
    RETURN_IF_ERROR(m.Block(layer, B, attention, {}, nullptr)) << "DSpark stage " << st;
  }
  // Head: collapse with the last stage's FFN pre mix (kept pre-norm for the confidence head),
  // the stage's own norm, the shared fp32 head on every block row.
  kernels::HcPreParams hp{.tokens = B,
                          .dim = D,
                          .x = ws.x.data(),
                          .x_stride = xs,
                          .pre = ws.pre.data(),
                          .out = ws.collapsed.data(),
                          .out_stride = D};
  RETURN_IF_ERROR(kernels::HcPreCpu(hp, m.pool));
  RETURN_IF_ERROR(m.RmsNorm(m.dspark_norm, B, D, ws.collapsed.data(), D, ws.normed.data(), D));
  out->logits.resize(static_cast<size_t>(B * V));
  RETURN_IF_ERROR(m.LinearF32Out(m.prepared->head, B, ws.normed.data(), D, out->logits.data(), V))
      << "DSpark head";
  // Markov head, sequentially: the bias of row i depends on the id drafted at row i − 1.
  const DSparkWeights& dw = *m.checkpoint->weights().dspark;
  const int64_t rank = c.dspark_markov_rank;
  std::vector<uint16_t>& markov = ws.sub;  // [B, rank] bf16 embeddings (fits: rank <= dim)
  std::vector<float>& bias = ws.markov_bias;  // [V]
  out->ids.assign(static_cast<size_t>(B + 1), 0);
  out->ids[0] = anchor;
  for (int64_t i = 0; i < B; ++i) {
    const int32_t prev = out->ids[i];
    std::memcpy(markov.data() + i * rank, dw.markov_embed.data + static_cast<size_t>(prev) * rank * 2,
                rank * 2);
    RETURN_IF_ERROR(m.LinearF32Out(m.prepared->dspark->markov_head, 1, markov.data() + i * rank,
                                   rank, bias.data(), V))
        << "Markov head";
    float* row = out->logits.data() + i * V;
    int32_t best = 0;
    for (int64_t v = 0; v < V; ++v) {
      row[v] += bias[v];
      if (row[v] > row[best]) best = static_cast<int32_t>(v);
    }
    out->ids[i + 1] = best;
  }
  // Confidence: proj(concat(pre-norm collapsed row, its Markov embedding)), fp32.
  const int64_t cin = D + rank;
  std::vector<uint16_t>& cat = ws.confidence_in;  // [B, dim + rank]
  for (int64_t i = 0; i < B; ++i) {
    std::memcpy(cat.data() + i * cin, ws.collapsed.data() + i * D, D * 2);
    std::memcpy(cat.data() + i * cin + D, markov.data() + i * rank, rank * 2);
  }
  out->confidence.resize(static_cast<size_t>(B));
  RETURN_IF_ERROR(m.LinearF32Out(m.prepared->dspark->confidence_proj, B, cat.data(), cin,
                                 out->confidence.data(), 1))
      << "confidence head";
  return absl::OkStatus();
}

}  // namespace flashserve::model
