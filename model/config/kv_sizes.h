// Byte sizes of the KV state of DeepSeek-V4.1 in the serving format (spec §3, §5, §9;
// layouts in docs/kv_layout.md). The row functions are constexpr; the config-level ones assume a
// config that passed Validate() (ratios divide kCacheBlockTokens).
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>

#include "common/formats/kv_row.h"
#include "model/config/model_config.h"

namespace flashserve::model {

// Tokens per global-KV cache block: a multiple of every compress ratio and of the candidate
// block size (DESIGN §3).
inline constexpr int kCacheBlockTokens = 64;

// Row sizes come from the serving-row layouts of common/formats/kv_row.h (one definition):
// formats::MainKvRowBytes(head_dim) = 288, formats::IndexKRowBytes(index_head_dim) = 68,
// formats::SwaKvRowBytes(head_dim) = 528 at the released dimensions.

// Compressed rows one KV source of ratio `ratio` (> 0) contributes to a cache block.
constexpr int64_t RowsPerCacheBlock(int ratio) { return kCacheBlockTokens / ratio; }

// Bytes of global KV (main rows of every KV source, plus index-key rows where the source owns
// index keys, i.e. is also an index source) for one kCacheBlockTokens-token block. Exact.
int64_t GlobalKvBytesPerBlock(const ModelConfig& config);

// GlobalKvBytesPerBlock / kCacheBlockTokens. Exact (a power-of-two division of an integer):
// 890 for the released config.
double GlobalKvBytesPerToken(const ModelConfig& config);

// Sliding-window bytes per token per layer (528 for head_dim 512).
int64_t SwaBytesPerTokenPerLayer(const ModelConfig& config);

// Sliding-window bytes one session holds across the backbone: window_size x n_layers rows.
int64_t SwaBytesPerSession(const ModelConfig& config);

// DSpark window bytes one session holds: window_size x stages rows (0 when DSpark is off).
int64_t DSparkWindowBytesPerSession(const ModelConfig& config);

}  // namespace flashserve::model
