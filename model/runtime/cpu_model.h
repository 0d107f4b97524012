// The DeepSeek-V4.1-Flash forward pass on the CPU backend (model spec §4; numerics §10): embedding
// with image-span rows, Engram, 4-stream mHC blocks (attention with window + compressed sparse
// KV, compressor, hierarchical indexer, MoE), the final collapse and head, and the DSpark drafter.
//
//   ASSIGN_OR_RETURN(auto ckpt, LoadedCheckpoint::Open(dir));
//   ASSIGN_OR_RETURN(auto prepared, PrepareModel(*ckpt));
//   ASSIGN_OR_RETURN(auto model, CpuModel::Create(*ckpt, *prepared, {}, &pool));
//   ASSIGN_OR_RETURN(SessionState s, model->NewSession(4096));
//   ForwardOutput out;
//   RETURN_IF_ERROR(model->Forward(s, {.tokens = prompt}, &out));   // prefill (any chunk size)
//   RETURN_IF_ERROR(model->Forward(s, {.tokens = {&next, 1}}, &out));  // one decode step
//
// A call runs `tokens` at positions state.position .. + s − 1 and advances the state; prefill in
// one call, in chunks of any size, and decode steps are the same operation (docs/architecture.md
// "One forward for prefill and decode"). Differences from the reference's inference loop, all
// documented in docs/architecture.md:
// - Index keys: every index-key owner scores against its own keys (the reference's decode reads
//   a stale shared slot at ratio-2 sources, fixture quirk 1); checked against
//   variant_ownkeys.safetensors.
// - Window index lists always use the chunked-prefill form (width = window, −1 slots trailing), so
//   a decode step equals a one-token chunk; the reference pads at the front during the first
//   window − 1 decode positions and uses width min(s, window) for short prompts. Only the 64-entry
//   blocking of the softmax, i.e. bf16 rounding, differs.
// - Top-k ties go to the lowest position (the reference leaves them to torch).
//
// Thread safety: a CpuModel owns one workspace, so calls are serialised by the caller (one at a
// time). Sessions are independent values. Nothing is allocated per token: the workspace is sized
// at Create for max_tokens_per_call and max_context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm/gemm.h"
#include "model/engram/ngram_hasher.h"
#include "model/runtime/prepared_model.h"
#include "model/runtime/session_state.h"
#include "model/weights/loader.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::model {

struct CpuModelOptions {
  // Most tokens one Forward call may carry (prefill chunks; at least the DSpark block size).
  int64_t max_tokens_per_call = 256;
  // Most positions a session may hold; 0 = the config's max_seq_len.
  int64_t max_context = 0;
  // GEMM numerics: kFast (OpenBLAS, fp32 order differs) or kExact (the reference's block order).
  kernels::LinearMode linear_mode = kernels::LinearMode::kFast;
  // Reproduce fixture quirk 1 (spec §4.5): index sources read the index keys of the last owner
  // that produced a row, as the reference's shared slot does, instead of their own KV source's.
  // Only for comparisons with the golden run; wrong for serving.
  bool reference_stale_index_keys = false;
  // Build the Engram hasher from this tokenizer.json (needed when the config has Engram layers).
  std::string tokenizer_path;
};

// Where an observer is called, once per layer and call.
enum class BlockPoint {
  kInput,   // the block's input stream and incoming pre mix, after Engram (may be overwritten)
  kOutput,  // the block's output stream and its FFN pre mix (may be overwritten)
};

// Optional callbacks for tests and tools (teacher forcing, dumps). Spans cover the call's rows:
// x is [s, hc, dim] bf16, pre is [s, hc] fp32; topk is [s, k] compressed positions (−1 unused);
// experts are [s, top_k] ids and weights in rank order.
struct ForwardObserver {
  std::function<void(int layer, BlockPoint point, std::span<uint16_t> x, std::span<float> pre)>
      on_block;
  std::function<void(int layer, std::span<const int32_t> topk, int64_t k)> on_topk;
  std::function<void(int layer, std::span<const int32_t> ids, std::span<const float> weights,
                     int64_t top_k)>
      on_experts;
};

// What a Forward call overwrote in one session, so that the call can be cut after the fact
// (CpuModel::Truncate): the old ring rows of the slots it wrote, each KV source's compressor state
// and attention input, the Engram look-back. Filled by Forward when ForwardInput::journal is set;
// reuse one journal per session to avoid reallocation. Opaque to callers.
struct StepJournal {
  int64_t start = -1;  // position of the call's first token (-1: empty journal)
  std::vector<int32_t> tokens;
  std::vector<uint8_t> image;
  engram::NgramLookback engram;
  struct Layer {
    std::vector<int64_t> slots;       // ring slots the call wrote, in call order
    std::vector<uint8_t> old_rows;    // their serving rows before the call
    std::vector<uint16_t> old_values;  // and their bf16 mirror
    std::optional<kernels::CompressorState> compressor;  // KV sources: state before the call
    std::vector<uint16_t> x;          // KV sources: the compressor's input rows [s, dim]
  };
  std::vector<Layer> layers;
};

struct ForwardInput {
  std::span<const int32_t> tokens;  // s >= 1 token ids
  // Empty, or one flag per token: nonzero marks an image-span token (VL router bias, no Engram).
  std::span<const uint8_t> image;
  // Optional bf16 [s, dim]: row t replaces token t's embedding where image[t] is set (the image
  // span's learned delimiters and aligner rows, spec §4.10).
  const uint16_t* embeddings = nullptr;
  bool all_logits = false;  // logits of every position instead of the last one only
  const ForwardObserver* observer = nullptr;
  // Optional: record what the call overwrites so that Truncate can keep only a prefix of its
  // tokens (speculative verification). Requires tokens.size() <= window_size.
  StepJournal* journal = nullptr;
  // CED prefill (DESIGN.md §3): the encoder layers (before schedule().decoder_start_layer) run on
  // every token, the decoder's first layer computes its global KV and index keys for every token,
  // and the decoder runs on the last window_size tokens only, their windows truncated at the
  // first of them (decoder bounded replay). Equal to exact for calls of at most window_size
  // tokens. With all_logits, the logits of those last rows. Only in a batch of one, without a
  // journal.
  bool ced = false;
  // With ced, for every prefill chunk but the last: stop after the decoder's global KV (the
  // decoder's outputs would only matter for the last window tokens of the prompt); no logits,
  // no DSpark windows. The last chunk must then carry at least window_size tokens.
  bool ced_skip_decoder = false;
};

struct ForwardOutput {
  std::vector<float> logits;  // [rows, vocab] fp32; rows = s with all_logits, else 1
  // DSpark taps of the last position: the stream means of the target layers' inputs, bf16
  // [taps·dim] (spec §4.1 step 4). Empty without DSpark.
  std::vector<uint16_t> main_hidden;
};

struct DraftOutput {
  std::vector<int32_t> ids;       // [block + 1]: the anchor, then the drafts (greedy)
  std::vector<float> logits;      // [block, vocab] fp32, Markov bias included
  std::vector<float> confidence;  // [block] raw confidence-head outputs
};

class CpuModel {
 public:
  // Binds `checkpoint` (views) and `prepared` (Linears); both must outlive the model. Errors:
  // InvalidArgument for options out of range or a config the CPU backend does not support
  // (hc_mult != 4); errors of the Engram hasher (tokenizer).
  static absl::StatusOr<std::unique_ptr<CpuModel>> Create(const LoadedCheckpoint& checkpoint,
                                                          const PreparedModel& prepared,
                                                          const CpuModelOptions& options,
                                                          ThreadPool* pool);
  ~CpuModel();

  const ModelConfig& config() const;
  const LayerSchedule& schedule() const;
  int64_t max_context() const;
  int64_t max_tokens_per_call() const;

  // A fresh sequence holding up to `capacity` positions (<= max_context()).
  absl::StatusOr<SessionState> NewSession(int64_t capacity) const;

  // Runs input.tokens at state.position .. and advances the state (also the DSpark windows when
  // the model has DSpark). Errors (nothing changed in `state`): InvalidArgument for an empty or
  // too long call, token ids outside the vocabulary, span sizes that do not match, a state made
  // for another model; OutOfRange when the state's capacity would be exceeded. An error from a
  // kernel midway leaves `state` unusable (FailedPrecondition on the next call).
  absl::Status Forward(SessionState& state, const ForwardInput& input, ForwardOutput* out);

  // One step over several sessions: the dense layers run over all their tokens together, the
  // attention per session. Each session's logits and state equal those of Forward on it alone
  // (bit for bit with exact GEMMs). Sessions may be at any positions and may join or leave
  // between steps; their states are not copied. Errors: those of Forward (naming the session
  // index), InvalidArgument when the spans' sizes differ, a session appears twice or the total
  // token count exceeds max_tokens_per_call. Nothing changes on a validation error.
  absl::Status ForwardBatch(std::span<SessionState* const> states,
                            std::span<const ForwardInput> inputs,
                            std::span<ForwardOutput> outputs);

  // Keeps the first `keep` tokens of the call recorded in `journal` (the last Forward on `state`)
  // and rolls back the rest: SWA rings and DSpark windows, the compressors' open groups, the
  // Engram look-back and the position become those after `keep` single steps. Compressed rows of
  // dropped groups stay in the buffers past the new position and are never read. Errors:
  // FailedPrecondition when the journal does not describe the state's last call, or with
  // reference_stale_index_keys; OutOfRange for keep outside [0, tokens].
  absl::Status Truncate(SessionState& state, const StepJournal& journal, int64_t keep);

  // Bounded replay (DESIGN.md §3): `state` holds the global KV rows (main and index-K rows of
  // every KV source) of positions [0, n), e.g. restored from the cache, and no usable SWA state;
  // `tokens` are those n tokens. Runs the last min(window_size, n) of them through every layer,
  // each window truncated at the first replayed position, without rewriting any global KV row;
  // writes the SWA rings of layers >= ring_from_layer (and the DSpark windows), the compressors'
  // open groups and the Engram look-back. The state ends at position n, ready to decode; `out`
  // has the last token's logits. Errors: InvalidArgument for n outside [1, capacity] or ids
  // outside the vocabulary; the state is unusable after a kernel error (as Forward).
  absl::Status Replay(SessionState& state, std::span<const int32_t> tokens, ForwardOutput* out,
                      int ring_from_layer = 0);

  // DSpark draft after a Forward: the anchor (the token sampled from the last logits) sits at
  // position state.position, the drafts at the following block − 1 positions. Does not change
  // `state`. Errors: FailedPrecondition without DSpark or before any Forward.
  absl::Status Draft(const SessionState& state, int32_t anchor, DraftOutput* out);

  struct Impl;

 private:
  explicit CpuModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashserve::model
