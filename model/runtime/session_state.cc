#include "model/runtime/session_state.h"

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/formats/kv_row.h"

namespace flashserve::model {
namespace {

KvRows MakeRows(int64_t capacity, int64_t row_bytes, int64_t channels) {
  KvRows r{.capacity = capacity, .row_bytes = row_bytes, .channels = channels};
  r.bytes.assign(static_cast<size_t>(capacity * row_bytes), 0);
  r.bf16.assign(static_cast<size_t>(capacity * channels), 0);
  return r;
}

int64_t RowsBytes(const KvRows& r) {
  return static_cast<int64_t>(r.bytes.size() + r.bf16.size() * sizeof(uint16_t));
}

}  // namespace

absl::StatusOr<SessionState> MakeSessionState(const ModelConfig& config,
                                              const LayerSchedule& schedule, int64_t capacity) {
  if (capacity < 1) {
    return absl::InvalidArgumentError("session capacity must be at least 1 position");
  }
  SessionState s{.capacity = capacity};
  s.layers.resize(schedule.layers.size());
  for (size_t i = 0; i < schedule.layers.size(); ++i) {
    const LayerInfo& info = schedule.layers[i];
    LayerState& l = s.layers[i];
    l.swa = MakeRows(config.window_size, formats::SwaKvRowBytes(config.head_dim), config.head_dim);
    if (info.owns_compressor) {
      const int64_t rows = capacity / info.compress_ratio;
      l.main = MakeRows(rows, formats::MainKvRowBytes(config.head_dim), config.head_dim);
      if (info.owns_index_keys) {
        l.index_k = MakeRows(rows, formats::IndexKRowBytes(config.index_head_dim),
                             config.index_head_dim);
      }
      ASSIGN_OR_RETURN(l.compressor,
                       kernels::MakeCompressorState(info.compress_ratio, config.head_dim));
    }
  }
  return s;
}

int64_t SessionState::AllocatedBytes() const {
  int64_t total = 0;
  for (const LayerState& l : layers) {
    total += RowsBytes(l.swa) + RowsBytes(l.main) + RowsBytes(l.index_k);
    if (l.compressor) {
      total += static_cast<int64_t>((l.compressor->kv.size() + l.compressor->score.size()) *
                                    sizeof(float));
    }
  }
  return total;
}

int64_t SessionState::SwaBytes() const {
  int64_t total = 0;
  for (const LayerState& l : layers) total += static_cast<int64_t>(l.swa.bytes.size());
  return total;
}

int64_t SessionState::GlobalKvBytes() const {
  int64_t total = 0;
  for (const LayerState& l : layers) {
    total += static_cast<int64_t>(l.main.bytes.size() + l.index_k.bytes.size());
  }
  return total;
}

}  // namespace flashserve::model
