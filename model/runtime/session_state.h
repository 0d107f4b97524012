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

// Allocates a state for up to `capacity` positions (a multiple of every compress ratio is not
// required: rows are floor(capacity / ratio)). Errors: InvalidArgument for capacity < 1.
absl::StatusOr<SessionState> MakeSessionState(const ModelConfig& config,
                                              const LayerSchedule& schedule, int64_t capacity);

}  // namespace flashserve::model
