// CpuModel construction: the per-layer weight references, the RoPE tables, the Engram hasher
// and the one workspace every call reuses, sized for max_tokens_per_call and max_context.
#include "model/runtime/cpu_model.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/kv_row.h"
#include "kernels/attention/attention.h"
#include "kernels/indexer/indexer.h"
#include "kernels/mhc/mhc.h"
#include "kernels/norm_rope/norm_rope.h"
#include "model/engram/token_map.h"
#include "model/runtime/cpu_model_impl.h"
#include "model/tokenizer/tokenizer.h"


namespace flashserve::model {
namespace {

using kernels::PreparedLinear;

std::vector<uint16_t> CopyBf16(const TensorView& v) {
  std::vector<uint16_t> out(v.nbytes / 2);
  if (!out.empty()) std::memcpy(out.data(), v.data, out.size() * 2);
  return out;
}

std::vector<float> CopyF32(const TensorView& v) {
  std::vector<float> out(v.nbytes / 4);
  if (!out.empty()) std::memcpy(out.data(), v.data, out.size() * 4);
  return out;
}

MhcSiteParams CopySite(const MhcSite& s) {
  return MhcSiteParams{CopyF32(s.fn), CopyF32(s.base), CopyF32(s.scale)};
}

template <typename T>
void Resize(std::vector<T>& v, int64_t n) {
  v.assign(static_cast<size_t>(std::max<int64_t>(n, 1)), T{});
}

// Collects every Linear the forward runs through ws.linear_ws (the MoE and the compressor have
// their own workspaces).
void BlockLinears(const PreparedBlock& b, std::vector<const PreparedLinear*>& out) {
  const PreparedAttention& a = b.attn;
  for (const PreparedLinear* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) out.push_back(l);
  for (const PreparedLinear& l : a.wo_a) out.push_back(&l);
  for (const auto* l : {&a.indexer_wq_b, &a.indexer_weights_proj, &a.indexer_wk}) {
    if (l->has_value()) out.push_back(&**l);
  }
  if (b.engram_wkv) out.push_back(&*b.engram_wkv);
}

absl::StatusOr<LayerRef> MakeLayerRef(const ModelConfig& config, const LayerInfo& info,
                                      const BlockWeights& w, const PreparedBlock& p,
                                      const kernels::RopeTable* rope) {
  LayerRef l;
  l.info = &info;
  l.prepared = &p;
  l.rope = rope;
  l.attn_norm = CopyBf16(w.attn_norm);
  l.ffn_norm = CopyBf16(w.ffn_norm);
  l.q_norm = CopyBf16(w.attn.q_norm);
  l.kv_norm = CopyBf16(w.attn.kv_norm);
  l.hc_attn = CopySite(w.hc_attn);
  l.hc_ffn = CopySite(w.hc_ffn);
  l.attn_sink = CopyF32(w.attn.attn_sink);
  if (info.owns_compressor) {
    if (!w.attn.compressor || !p.attn.compressor_wkv) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", info.layer_id, ": KV source without compressor weights"));
    }
    l.compressor_norm = CopyBf16(w.attn.compressor->norm);
    l.compressor = kernels::CompressorWeights{
        .ratio = info.compress_ratio,
        .wkv = &*p.attn.compressor_wkv,
        .wgate = p.attn.compressor_wgate ? &*p.attn.compressor_wgate : nullptr,
        .norm_weight = l.compressor_norm.data(),
        .norm_eps = static_cast<float>(config.norm_eps)};
  }
  if (info.owns_index_keys) {
    if (!w.attn.indexer || !w.attn.indexer->k_norm || !p.attn.indexer_wk) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", info.layer_id, ": index-key owner without wk / k_norm"));
    }
    l.k_norm = CopyBf16(*w.attn.indexer->k_norm);
  }
  if (info.owns_indexer && (!p.attn.indexer_wq_b || !p.attn.indexer_weights_proj)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", info.layer_id, ": index source without indexer weights"));
  }
  l.gate_bias = CopyF32(w.ffn.gate_bias);
  if (w.ffn.gate_bias_vl) l.gate_bias_vl = CopyF32(*w.ffn.gate_bias_vl);
  for (const PreparedExpert& e : p.ffn.experts) {
    l.w1.push_back(&e.w1);
    l.w2.push_back(&e.w2);
    l.w3.push_back(&e.w3);
  }
  l.moe = kernels::MoeWeights{
      .n_experts = static_cast<int64_t>(p.ffn.experts.size()),
      .gate = &p.ffn.gate,
      .gate_bias = l.gate_bias.data(),
      .gate_bias_vl = l.gate_bias_vl.empty() ? nullptr : l.gate_bias_vl.data(),
      .w1 = l.w1.data(),
      .w3 = l.w3.data(),
      .w2 = l.w2.data(),
      .shared_w1 = &p.ffn.shared.w1,
      .shared_w3 = &p.ffn.shared.w3,
      .shared_w2 = &p.ffn.shared.w2};
  l.moe_options = kernels::MoeOptions{.top_k = info.n_activated_experts,
                                      .route_scale = static_cast<float>(config.route_scale),
                                      .swiglu_limit = static_cast<float>(config.swiglu_limit),
                                      .gate_temp = static_cast<float>(config.gate_temp),
                                      .norm_topk_prob = config.norm_topk_prob};
  if (info.has_engram) {
    if (!w.engram || !p.engram_wkv) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", info.layer_id, ": Engram layer without Engram weights"));
    }
    l.engram_codes = w.engram->table_codes.data;
    l.engram_scales = w.engram->table_scales.data;
    l.engram_rows = w.engram->table_codes.shape.empty() ? 0 : w.engram->table_codes.shape[0];
    const std::vector<uint16_t> q = CopyBf16(w.engram->q_weight);
    const std::vector<uint16_t> k = CopyBf16(w.engram->k_weight);
    l.engram_weight.resize(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      l.engram_weight[i] = formats::Bf16BitsToFloat(q[i]) * formats::Bf16BitsToFloat(k[i]);
    }
  }
  return l;
}

absl::StatusOr<engram::NgramHasher> MakeHasher(const ModelConfig& config,
                                               const std::string& tokenizer_path) {
  if (tokenizer_path.empty()) {
    return absl::InvalidArgumentError(
        "the config has Engram layers: CpuModelOptions.tokenizer_path must name tokenizer.json");
  }
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::Load(tokenizer_path), "Engram token map");
  ASSIGN_OR_RETURN(
      engram::CompressedTokenMap map,
      engram::BuildCompressedTokenMap(
          static_cast<int32_t>(tok->VocabSize()),
          [&](int32_t id) { return tok->Decode({id}, /*skip_special=*/false); },
          [&](int32_t id) -> absl::StatusOr<std::string> {
            ASSIGN_OR_RETURN(std::string_view raw, tok->IdToToken(id));
            return std::string(raw);
          }));
  if (static_cast<int>(map.class_of.size()) < config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", map.class_of.size(),
                                                   " ids, the model's vocabulary ",
                                                   config.vocab_size));
  }
  return engram::NgramHasher::FromConfig(config, std::move(map));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Create.

CpuModel::CpuModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuModel::~CpuModel() = default;

const ModelConfig& CpuModel::config() const { return *impl_->config; }
const LayerSchedule& CpuModel::schedule() const { return *impl_->schedule; }
int64_t CpuModel::max_context() const { return impl_->max_context; }
int64_t CpuModel::max_tokens_per_call() const { return impl_->max_tokens; }

absl::StatusOr<std::unique_ptr<CpuModel>> CpuModel::Create(const LoadedCheckpoint& checkpoint,
                                                          const PreparedModel& prepared,
                                                          const CpuModelOptions& options,
                                                          ThreadPool* pool) {
  const ModelConfig& c = checkpoint.config();
  const LayerSchedule& sched = checkpoint.schedule();
  const ModelWeights& w = checkpoint.weights();
  if (c.hc_mult != kernels::kMhcStreams) {
    return absl::InvalidArgumentError(absl::StrCat("hc_mult ", c.hc_mult,
                                                   " is not supported (the CPU kernels use ",
                                                   kernels::kMhcStreams, " streams)"));
  }
  auto impl = std::make_unique<Impl>();
  impl->checkpoint = &checkpoint;
  impl->prepared = &prepared;
  impl->config = &c;
  impl->schedule = &sched;
  impl->options = options;
  impl->pool = pool;
  impl->max_context = options.max_context > 0 ? options.max_context : c.max_seq_len;
  impl->max_tokens = options.max_tokens_per_call;
  if (impl->max_tokens < std::max(1, c.dspark_block_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens_per_call ", impl->max_tokens,
                     " must be at least 1 and the DSpark block size ", c.dspark_block_size));
  }
  if (impl->max_context < 1) {
    return absl::InvalidArgumentError("max_context must be at least 1");
  }
  if (prepared.layers.size() != static_cast<size_t>(c.n_layers) ||
      (sched.n_dspark_stages > 0 &&
       (!prepared.dspark || prepared.dspark->stages.size() != size_t(sched.n_dspark_stages)))) {
    return absl::InvalidArgumentError("the prepared model does not match the checkpoint");
  }

  // RoPE tables: [0] plain (ratio-0 layers, DSpark), [1] compressed layers.
  const int64_t cached = impl->max_context + c.dspark_block_size + 1;
  kernels::RopeSpec plain{.rope_dims = c.rope_head_dim, .theta = c.rope_theta};
  kernels::RopeSpec compressed{.rope_dims = c.rope_head_dim,
                               .theta = c.compress_rope_theta,
                               .original_seq_len = c.original_seq_len,
                               .factor = c.rope_factor,
                               .beta_fast = static_cast<double>(c.beta_fast),
                               .beta_slow = static_cast<double>(c.beta_slow)};
  ASSIGN_OR_RETURN(kernels::RopeTable t0, kernels::RopeTable::Create(plain, cached));
  ASSIGN_OR_RETURN(kernels::RopeTable t1, kernels::RopeTable::Create(compressed, cached));
  impl->ropes.push_back(std::move(t0));
  impl->ropes.push_back(std::move(t1));

  for (const LayerInfo& info : sched.layers) {
    const bool stage = info.dspark_stage >= 0;
    const BlockWeights& bw = stage ? w.dspark->stages[info.dspark_stage] : w.layers[info.layer_id];
    const PreparedBlock& pb =
        stage ? prepared.dspark->stages[info.dspark_stage] : prepared.layers[info.layer_id];
    const kernels::RopeTable* rope =
        info.rope == RopeKind::kPlain ? &impl->ropes[0] : &impl->ropes[1];
    ASSIGN_OR_RETURN(LayerRef ref, MakeLayerRef(c, info, bw, pb, rope));
    impl->layers.push_back(std::move(ref));
  }
  impl->final_norm = CopyBf16(w.norm);
  if (w.dspark) {
    impl->dspark_main_norm = CopyBf16(w.dspark->main_norm);
    impl->dspark_norm = CopyBf16(w.dspark->norm);
  }
  if (!c.engram_layer_ids.empty()) {
    ASSIGN_OR_RETURN(engram::NgramHasher hasher, MakeHasher(c, options.tokenizer_path));
    impl->hasher.emplace(std::move(hasher));
  }

  // Workspace.
  Workspace& ws = impl->ws;
  const int64_t T = impl->max_tokens, C = impl->max_context, D = c.dim, hc = c.hc_mult;
  const int64_t W = c.window_size, hd = c.head_dim, H = c.n_heads, id = c.index_head_dim;
  const int64_t IH = c.index_n_heads, K = std::min<int64_t>(c.index_topk, C);
  Resize(ws.x, T * hc * D);
  Resize(ws.y, T * hc * D);
  for (auto* v : {&ws.pre, &ws.a_pre, &ws.a_post, &ws.f_pre, &ws.f_post}) Resize(*v, T * hc);
  Resize(ws.a_comb, T * hc * hc);
  Resize(ws.f_comb, T * hc * hc);
  for (auto* v : {&ws.collapsed, &ws.normed, &ws.sub, &ws.main_x}) Resize(*v, T * D);
  Resize(ws.positions, T);
  Resize(ws.image, T);
  Resize(ws.qr, T * c.q_lora_rank);
  Resize(ws.q, T * H * hd);
  Resize(ws.o, T * H * hd);
  Resize(ws.o_low, T * c.o_groups * c.o_lora_rank);
  Resize(ws.kv, T * hd);
  Resize(ws.kv_rows, T * formats::SwaKvRowBytes(hd));
  Resize(ws.pool, (W + T + std::min(C, T * K) + c.dspark_block_size) * hd);
  Resize(ws.list, T * (W + K + c.dspark_block_size));
  Resize(ws.window_list, T * W);
  ws.remap.assign(static_cast<size_t>(C), -1);
  Resize(ws.latent, T * hd);
  Resize(ws.group_index, T);
  Resize(ws.main_rows, T * formats::MainKvRowBytes(hd));
  Resize(ws.ik, T * id);
  Resize(ws.ik_rows, T * formats::IndexKRowBytes(id));
  Resize(ws.iq, T * IH * id);
  Resize(ws.iw, T * IH);
  Resize(ws.scores, T * C);
  Resize(ws.candidates, T * C);
  ws.topk.resize(impl->layers.size());
  ws.topk_k.assign(impl->layers.size() * T, 0);
  ws.candidates_width.assign(static_cast<size_t>(T), -1);
  Resize(ws.group_positions, T);
  impl->segs.reserve(static_cast<size_t>(T));
  int max_top_k = 1;
  for (const LayerRef& l : impl->layers) {
    if (l.info->owns_indexer) Resize(ws.topk[l.info->layer_id], T * K);
    max_top_k = std::max(max_top_k, l.info->n_activated_experts);
  }
  Resize(ws.expert_ids, T * max_top_k);
  Resize(ws.expert_weights, T * max_top_k);
  if (impl->hasher) {
    const int64_t cols = impl->hasher->layout().num_columns();
    Resize(ws.hash_ids, T * impl->hasher->ids_per_position());
    Resize(ws.engram_e, T * cols * c.engram_head_dim);
    Resize(ws.engram_kv, T * (hc + 1) * D);
  }
  const int64_t n_taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  Resize(ws.taps, T * std::max<int64_t>(n_taps, 1) * D);
  if (c.dspark_enabled()) {
    Resize(ws.markov_bias, c.vocab_size);
    Resize(ws.confidence_in, c.dspark_block_size * (D + c.dspark_markov_rank));
  }

  std::vector<const PreparedLinear*> linears;
  for (const PreparedBlock& b : prepared.layers) BlockLinears(b, linears);
  if (prepared.dspark) {
    for (const PreparedBlock& b : prepared.dspark->stages) BlockLinears(b, linears);
    linears.push_back(&prepared.dspark->main_proj);
    linears.push_back(&prepared.dspark->markov_head);
    linears.push_back(&prepared.dspark->confidence_proj);
  }
  linears.push_back(&prepared.head);
  size_t linear_bytes = 0, moe_bytes = 0, compress_bytes = 0;
  for (const PreparedLinear* l : linears) {
    linear_bytes = std::max(linear_bytes, kernels::LinearWorkspaceBytes(*l, T, options.linear_mode,
                                                                         pool));
  }
  for (const LayerRef& l : impl->layers) {
    ASSIGN_OR_RETURN(size_t b, kernels::MoeWorkspaceBytes(l.moe, T, l.moe_options.top_k,
                                                          options.linear_mode, pool),
                     absl::StrCat("layer ", l.info->layer_id));
    moe_bytes = std::max(moe_bytes, b);
    if (l.compressor) {
      compress_bytes =
          std::max(compress_bytes, kernels::CompressorWorkspaceBytes(*l.compressor, T, pool));
    }
  }
  const int64_t slots = pool ? static_cast<int64_t>(pool->size()) + 1 : 1;
  Resize(ws.linear_ws, static_cast<int64_t>(linear_bytes));
  Resize(ws.moe_ws, static_cast<int64_t>(moe_bytes));
  Resize(ws.compress_ws, static_cast<int64_t>(compress_bytes));
  Resize(ws.attn_ws, static_cast<int64_t>(kernels::SparseAttnWorkspaceBytes(hd, pool)));
  Resize(ws.topk_ws, static_cast<int64_t>(kernels::IndexerTopkWorkspaceBytes(C, slots)));
  Resize(ws.cand_ws, static_cast<int64_t>(kernels::CandidateBlocksWorkspaceBytes(
                         C, std::max(1, c.candidate_block_size), slots)));
  return std::unique_ptr<CpuModel>(new CpuModel(std::move(impl)));
}

absl::StatusOr<SessionState> CpuModel::NewSession(int64_t capacity) const {
  if (capacity > impl_->max_context) {
    return absl::InvalidArgumentError(absl::StrCat("session capacity ", capacity,
                                                   " exceeds the model's max_context ",
                                                   impl_->max_context));
  }
  return MakeSessionState(*impl_->config, *impl_->schedule, capacity);
}

}  // namespace flashserve::model
