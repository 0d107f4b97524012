// The per-request state of a DeepSeek-V4.1-Flash sequence on the CPU backend: everything a forward
// call needs from earlier calls of the same sequence (model spec §4.3–4.9, §9; layout in
// docs/kv_layout.md "Session state"). It replaces the reference's module buffers and its shared
// attention slots with one plain value per sequence.
//
// Per layer (backbone layers, then DSpark stages):
//   swa        the sliding-window ring: `window` rows, ring slot = position % window, in the
//              serving layout (FP8 E4M3 + UE8M0 per 32: 528 B per row at head_dim 512)
// Per KV-source layer (owns_compressor):
//   main       compressed (main) KV rows, one per completed group: FP4 E2M1 + E4M3 per 16
//              (288 B at 512 channels), row j = group j (positions j·r .. j·r + r − 1)
//   index_k    index keys of the same groups when the layer owns them: FP4 + UE8M0 per 32
//              (68 B at 128 channels)
//   compressor the open group's fp32 kv/score (kernels/compressor CompressorState)
// Per sequence: the position (tokens consumed), the Engram n-gram look-back.
//
// The serving rows are the canonical state (what the cache service and the transfer layer carry,
// byte for byte). The CPU kernels read bf16, so every row also has a bf16 mirror, written together
// with the row: decoding a serving row gives exactly the quant-dequantised values the reference
// attends over, so the mirror is a pure function of the rows (Deserialize rebuilds it).
//
// Thread safety: a SessionState belongs to one sequence; one call at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/compressor/compressor.h"
#include "model/config/layer_schedule.h"
#include "model/config/model_config.h"
#include "model/engram/ngram_hasher.h"

namespace flashserve::model {

// Serving rows plus their bf16 mirror, a fixed number of rows allocated up front.
struct KvRows {
  int64_t capacity = 0;   // rows allocated
  int64_t row_bytes = 0;  // serving row size
  int64_t channels = 0;   // bf16 values per row
  std::vector<uint8_t> bytes;  // [capacity, row_bytes]
  std::vector<uint16_t> bf16;  // [capacity, channels]

  uint8_t* row(int64_t r) { return bytes.data() + r * row_bytes; }
  const uint8_t* row(int64_t r) const { return bytes.data() + r * row_bytes; }
  uint16_t* values(int64_t r) { return bf16.data() + r * channels; }
  const uint16_t* values(int64_t r) const { return bf16.data() + r * channels; }
};

struct LayerState {
  KvRows swa;                    // [window] ring
  KvRows main;                   // [capacity / ratio] at KV sources, else empty
  KvRows index_k;                // [capacity / ratio] at index-key owners, else empty
  std::optional<kernels::CompressorState> compressor;  // KV sources
};

struct SessionState {
  int64_t capacity = 0;  // most positions this state can hold
  int64_t position = 0;  // tokens consumed so far (= position of the next token)
  std::vector<LayerState> layers;  // schedule order: backbone layers, then DSpark stages
  engram::NgramLookback engram;
  // Only with CpuModelOptions::reference_stale_index_keys: the layer whose index keys the
  // reference's shared index_k slot holds (the last owner that produced a row), -1 before any.
  int32_t shared_index_k_layer = -1;
  // Set when a forward failed midway: the rows and the position may disagree, so the state must
  // not be used again.
  bool failed = false;

  // Bytes of everything allocated (serving rows, mirrors, compressor buffers).
  int64_t AllocatedBytes() const;
  // Bytes of the serving rows alone, by tier.
  int64_t SwaBytes() const;
  int64_t GlobalKvBytes() const;  // main + index_k rows of every KV source
};

// Makes `state` a fresh sequence again without reallocating (position 0, empty compressor groups,
// empty Engram look-back); rows are left as they are and never read below the new position.
void ResetSessionState(SessionState& state);

// A fixed set of session states allocated once at start-up (sessions × capacity), handed out and
// taken back; no allocation after Create. Thread safety: not thread-safe (one owner, e.g. the
// scheduler thread).
class SessionPool {
 public:
  static absl::StatusOr<SessionPool> Create(const ModelConfig& config,
                                            const LayerSchedule& schedule, int sessions,
                                            int64_t capacity);
  // A reset state, or ResourceExhausted when every state is in use.
  absl::StatusOr<SessionState*> Acquire();
  // Returns a state obtained from Acquire. InvalidArgument for a foreign or released state.
  absl::Status Release(SessionState* state);

  int size() const { return static_cast<int>(states_.size()); }
  int in_use() const { return in_use_count_; }
  // Bytes allocated, by tier (all sessions): the serving rows of the SWA rings and of the global
  // KV (main + index K), the compressors' open groups, and the CPU backend's bf16 mirrors.
  struct Bytes {
    int64_t swa = 0, global = 0, compressor = 0, mirrors = 0, total = 0;
  };
  Bytes bytes() const { return bytes_; }

 private:
  std::vector<std::unique_ptr<SessionState>> states_;
  std::vector<bool> in_use_;
  int in_use_count_ = 0;
  Bytes bytes_;
};

// Allocates a state for up to `capacity` positions (a multiple of every compress ratio is not
// required: rows are floor(capacity / ratio)). Errors: InvalidArgument for capacity < 1.
absl::StatusOr<SessionState> MakeSessionState(const ModelConfig& config,
                                              const LayerSchedule& schedule, int64_t capacity);

}  // namespace flashserve::model

namespace flashserve::model {

// Serialisation of a whole session state (for moving a session between processes and for tests;
// the cache service stores global KV blocks and SWA snapshots, docs/kv_layout.md). Layout, all
// integers little-endian: "FSSS" | u32 version 1 | i64 capacity | i64 position | i32 layers |
// i32 shared_index_k_layer | Engram look-back (i64 position, 7 × i64 recent) | per layer: u8 flags
// (1 main, 2 index_k, 4 compressor) | the `window` SWA rows | main rows [position / ratio] |
// index-K rows [position / ratio] | the compressor state (kernels/compressor layout); the ratio
// comes from the schedule. Only rows below the position are written; bf16 mirrors are not (they
// are decoded again).
absl::StatusOr<std::vector<uint8_t>> SerializeSessionState(const SessionState& state,
                                                           const LayerSchedule& schedule);

// Reads `bytes` into `state`, which must come from MakeSessionState for the same model with a
// capacity of at least the serialised position (it may differ from the serialised capacity).
// Errors: InvalidArgument / DataLoss naming what does not match (magic, version, layer count,
// flags, sizes, a position beyond the capacity, trailing bytes); `state` is unchanged on error.
absl::Status DeserializeSessionState(std::span<const uint8_t> bytes, const LayerSchedule& schedule,
                                     SessionState& state);

}  // namespace flashserve::model
