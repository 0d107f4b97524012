// Global KV blocks: the payload the cache service stores per 64-token block (docs/kv_layout.md
// "Block payload"), cut from and put back into a SessionState. A block holds, for every KV
// source layer in layer order, the main-KV rows of the block's compressed groups (64 / ratio
// rows, 288 B each at full size), then their index-K rows when the layer owns index keys (68 B
// each). Released config: 3 × 32 × (288 + 68) + 64 × (288 + 68) = 56,960 B.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "model/config/layer_schedule.h"
#include "model/runtime/session_state.h"

namespace flashserve::model {

inline constexpr int64_t kKvBlockTokens = 64;

// Payload bytes of one block for `state`'s layers (the same for every state of a model).
int64_t GlobalKvBlockBytes(const SessionState& state, const LayerSchedule& schedule);

// Copies block `block` (positions 64·block .. 64·block + 63) out of `state`. Errors:
// FailedPrecondition unless the state has consumed the whole block (position >= 64·(block+1));
// InvalidArgument for a wrong `out` size or a state made for another schedule.
absl::Status ExportGlobalKvBlock(const SessionState& state, const LayerSchedule& schedule,
                                 int64_t block, std::span<uint8_t> out);

// Writes block `block` into `state`'s global KV rows (and their bf16 mirrors); the position, the
// SWA rings and the open compressor groups are not touched (CpuModel::Replay rebuilds those).
// Errors: InvalidArgument for a wrong payload size; OutOfRange when the block is beyond the
// state's capacity. Nothing is written on error.
absl::Status ImportGlobalKvBlock(SessionState& state, const LayerSchedule& schedule, int64_t block,
                                 std::span<const uint8_t> payload);

}  // namespace flashserve::model
