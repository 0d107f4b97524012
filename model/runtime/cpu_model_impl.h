// Internals of CpuModel (cpu_model.h), shared by its .cc files: the resolved per-layer weights and
// the one workspace every call reuses. Not for use outside model/runtime.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/compressor/compressor.h"
#include "kernels/gemm/gemm.h"
#include "kernels/moe/moe.h"
#include "kernels/norm_rope/rope_table.h"
#include "model/engram/ngram_hasher.h"
#include "model/runtime/cpu_model.h"

namespace flashserve::model {

// One mHC site's parameters, copied to aligned fp32.
struct MhcSiteParams {
  std::vector<float> fn, base, scale;
};

// Everything one block (backbone layer or DSpark stage) needs, resolved once at Create.
struct LayerRef {
  const LayerInfo* info = nullptr;
  const PreparedBlock* prepared = nullptr;
  const kernels::RopeTable* rope = nullptr;
  std::vector<uint16_t> attn_norm, ffn_norm, q_norm, kv_norm;  // bf16
  MhcSiteParams hc_attn, hc_ffn;
  std::vector<float> attn_sink;
  // Compressor (KV sources) and index keys (owners).
  std::vector<uint16_t> compressor_norm, k_norm;
  std::optional<kernels::CompressorWeights> compressor;
  // MoE.
  std::vector<float> gate_bias, gate_bias_vl;
  std::vector<const kernels::PreparedLinear*> w1, w2, w3;
  kernels::MoeWeights moe;
  kernels::MoeOptions moe_options;
  // Engram (layers that have it).
  const uint8_t* engram_codes = nullptr;   // F8_E4M3 [rows, engram_head_dim]
  const uint8_t* engram_scales = nullptr;  // E8M0 [rows, engram_head_dim / 32]
  int64_t engram_rows = 0;
  std::vector<float> engram_weight;  // fp32 q_weight · k_weight [hc, dim]
};

// Scratch reused by every call; sized at Create (T = max tokens per call, C = max context).
struct Workspace {
  std::vector<uint16_t> x, y;                         // [T, hc, dim] streams
  std::vector<float> pre, a_pre, a_post, a_comb, f_pre, f_post, f_comb;
  std::vector<uint16_t> collapsed, normed, sub;       // [T, dim]
  std::vector<int64_t> positions;                     // [2T]: tokens, then group positions
  std::vector<uint8_t> image;                         // [T]
  // Attention.
  std::vector<uint16_t> qr, q, o, o_low, kv;          // [T, q_lora], [T, H·d] x2, [T, G·r], [T, d]
  std::vector<uint8_t> kv_rows;                       // [T, swa row bytes]
  std::vector<uint16_t> pool;                         // [window + T + gathered, d]
  std::vector<int32_t> list;                          // [T, window + topk]
  std::vector<int32_t> window_list;                   // [T, window]
  std::vector<int32_t> remap;                         // [C]
  // Compressor and indexer.
  std::vector<uint16_t> latent, ik, iq, iw, scores;   // [T, d], [T, id], [T, IH·id], [T, IH], [T, C]
  std::vector<int64_t> group_index;                   // [T]
  std::vector<uint8_t> ik_rows;                       // [T, index row bytes]
  std::vector<uint8_t> main_rows;                     // [T, main row bytes]
  std::vector<uint8_t> candidates;                    // [T, C]
  std::vector<int64_t> candidates_width;              // per segment: width of its mask (−1: none)
  std::vector<std::vector<int32_t>> topk;             // per layer: [T, K] rows (index sources)
  std::vector<int64_t> topk_k;                        // [layer · T + segment]: k of this call
  std::vector<int64_t> group_positions;               // [T]: j·r of emitted groups
  // Engram.
  std::vector<int64_t> hash_ids;                      // [T, ids per position]
  std::vector<uint16_t> engram_e, engram_kv;          // [T, cols·hd], [T, (hc+1)·dim]
  // MoE routing outputs.
  std::vector<int32_t> expert_ids;
  std::vector<float> expert_weights;
  // DSpark.
  std::vector<uint16_t> taps, main_x;                 // [T, taps·dim], [T, dim]
  std::vector<float> markov_bias;                     // [vocab]
  std::vector<uint16_t> confidence_in;                // [block, dim + markov rank]
  // Raw kernel workspaces.
  std::vector<uint8_t> linear_ws, attn_ws, moe_ws, compress_ws, topk_ws, cand_ws;
};

// One session's rows in a (batched) call.
struct Segment {
  SessionState* state = nullptr;
  int64_t row0 = 0;   // first row in the call's activations
  int64_t rows = 0;   // tokens of this session
  int64_t start = 0;  // position of its first token
  StepJournal* journal = nullptr;
  // Bounded replay and CED (docs/architecture.md "CED prefill and bounded replay"):
  int drop_ring_from_layer = 1 << 30;  // layers >= this ignore the ring (window truncated at start)
  int compressed_layer = -1;           // this layer's compressor already ran for the call
  bool replay = false;                 // global KV of these positions is cached: write none
  int ring_write_from_layer = 0;       // layers below keep their rings untouched
};

struct CpuModel::Impl {
  const LoadedCheckpoint* checkpoint = nullptr;
  const PreparedModel* prepared = nullptr;
  const ModelConfig* config = nullptr;
  const LayerSchedule* schedule = nullptr;
  CpuModelOptions options;
  ThreadPool* pool = nullptr;
  int64_t max_context = 0;
  int64_t max_tokens = 0;

  std::vector<kernels::RopeTable> ropes;  // plain (ratio 0), compressed (YaRN or plain)
  std::vector<LayerRef> layers;           // backbone, then DSpark stages
  std::vector<uint16_t> final_norm;       // bf16 [dim]
  // DSpark heads.
  std::vector<uint16_t> dspark_main_norm, dspark_norm;
  std::optional<engram::NgramHasher> hasher;
  Workspace ws;
  const ForwardObserver* observer = nullptr;  // of the current call (batch of one)
  std::vector<Segment> segs;                  // of the current call
  int replay_ring_from = -1;                  // set by Replay for its call (-1: not a replay)

  // ---- helpers (cpu_model.cc) ----
  absl::Status Linear(const kernels::PreparedLinear& w, int64_t m, const uint16_t* x,
                      int64_t x_stride, uint16_t* y, int64_t y_stride);
  absl::Status LinearF32Out(const kernels::PreparedLinear& w, int64_t m, const uint16_t* x,
                            int64_t x_stride, float* y, int64_t y_stride);
  absl::Status RmsNorm(const std::vector<uint16_t>& weight, int64_t rows, int64_t cols,
                       const uint16_t* x, int64_t x_stride, uint16_t* out, int64_t out_stride);
  absl::Status Rope(const kernels::RopeTable& table, int64_t tokens, int64_t heads,
                    int64_t head_dim, int64_t stride, const int64_t* positions, uint16_t* x,
                    bool inverse = false);
  // Block forward over ws.x (in place) with the incoming pre mix in ws.pre (replaced by the FFN
  // pre mix). `attention` computes ws.sub [s, dim] from ws.normed.
  absl::Status Block(const LayerRef& layer, int64_t s, const std::function<absl::Status()>& attn,
                     std::span<const uint8_t> image, const ForwardObserver* observer);

  // ---- attention (attention_forward.cc) ----
  // Main-model attention of `layer` on ws.normed rows [0, m) for the call's segments.
  absl::Status Attention(const LayerRef& layer, int64_t m);
  // The per-session part: compressor, index keys, indexer, KV pool, sparse attention into ws.o.
  absl::Status AttentionSegment(const LayerRef& layer, int64_t b);
  // The KV-source part alone on ws.normed rows of segment b: compressor, index keys, cache rows.
  absl::Status CompressSegment(const LayerRef& layer, int64_t b);
  // q path shared by main and draft attention: ws.qr and ws.q at `positions`.
  absl::Status AttentionQuery(const LayerRef& layer, int64_t s, const int64_t* positions);
  // Window KV of s rows of `x`: kv_norm(wkv(x)), RoPE, FP8 rows in ws.kv_rows, bf16 in ws.kv.
  absl::Status WindowKv(const LayerRef& layer, int64_t s, const uint16_t* x,
                        const int64_t* positions);
  // Sparse attention of q rows [row0, row0 + s) over ws.pool with ws.list into ws.o.
  absl::Status SparseAttnRows(const LayerRef& layer, int64_t row0, int64_t s, int64_t pool_rows,
                              int64_t list_width);
  // Inverse RoPE of ws.o rows [0, m) and the grouped output projection into ws.sub.
  absl::Status OutputProjection(const LayerRef& layer, int64_t m, const int64_t* positions);
  // Writes ws.kv_rows / ws.kv rows [row0, row0 + s) (positions start..) into the layer's ring,
  // first saving the overwritten rows into `journal` when given.
  void UpdateRing(LayerState& l, int64_t start, int64_t s, int64_t row0,
                  StepJournal::Layer* journal);

  // CED: at the decoder's first layer, its global KV for every row of the (single) segment, then
  // the activations cut to the last window rows.
  absl::Status CedDecoderStart(const LayerRef& layer, int64_t m, int64_t n_taps, int64_t keep);

  // ---- Engram (engram_forward.cc) ----
  absl::Status Engram(const LayerRef& layer, int64_t s, const int64_t* hash_ids,
                      int64_t ids_stride, std::span<const uint8_t> image);

  // ---- DSpark (dspark_forward.cc) ----
  // Writes the stage windows for the call's m rows (every segment).
  absl::Status DSparkIngest(int64_t m);
};

}  // namespace flashserve::model
