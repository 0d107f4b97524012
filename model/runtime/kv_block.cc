#include "model/runtime/kv_block.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "kernels/quant/quant.h"

namespace flashserve::model {
namespace {

// Calls fn(rows, first_row, count, kind) for each part of a block, in payload order.
template <typename State, typename Fn>
absl::Status ForEachPart(State& state, const LayerSchedule& schedule, int64_t block, Fn fn) {
  if (state.layers.size() != schedule.layers.size()) {
    return absl::InvalidArgumentError("the state was made for another model");
  }
  for (size_t l = 0; l < schedule.layers.size(); ++l) {
    const LayerInfo& info = schedule.layers[l];
    if (!info.owns_compressor) continue;
    const int64_t per = kKvBlockTokens / info.compress_ratio;
    RETURN_IF_ERROR(fn(state.layers[l].main, block * per, per, kernels::quant::KvRowKind::kMainKv));
    if (info.owns_index_keys) {
      RETURN_IF_ERROR(
          fn(state.layers[l].index_k, block * per, per, kernels::quant::KvRowKind::kIndexK));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t GlobalKvBlockBytes(const SessionState& state, const LayerSchedule& schedule) {
  int64_t bytes = 0;
  (void)ForEachPart(state, schedule, 0,
                    [&](const KvRows& rows, int64_t, int64_t n, kernels::quant::KvRowKind) {
                      bytes += n * rows.row_bytes;
                      return absl::OkStatus();
                    });
  return bytes;
}

absl::Status ExportGlobalKvBlock(const SessionState& state, const LayerSchedule& schedule,
                                 int64_t block, std::span<uint8_t> out) {
  if (block < 0 || state.position < (block + 1) * kKvBlockTokens) {
    return absl::FailedPreconditionError(absl::StrCat("block ", block, " is not complete at position ",
                                                      state.position));
  }
  if (static_cast<int64_t>(out.size()) != GlobalKvBlockBytes(state, schedule)) {
    return absl::InvalidArgumentError(absl::StrCat("block buffer of ", out.size(), " bytes, need ",
                                                   GlobalKvBlockBytes(state, schedule)));
  }
  size_t at = 0;
  return ForEachPart(state, schedule, block,
                     [&](const KvRows& rows, int64_t first, int64_t n, kernels::quant::KvRowKind) {
                       const size_t len = static_cast<size_t>(n * rows.row_bytes);
                       std::memcpy(out.data() + at, rows.row(first), len);
                       at += len;
                       return absl::OkStatus();
                     });
}

absl::Status ImportGlobalKvBlock(SessionState& state, const LayerSchedule& schedule, int64_t block,
                                 std::span<const uint8_t> payload) {
  if (static_cast<int64_t>(payload.size()) != GlobalKvBlockBytes(state, schedule)) {
    return absl::InvalidArgumentError(absl::StrCat("block payload of ", payload.size(),
                                                   " bytes, this model's blocks have ",
                                                   GlobalKvBlockBytes(state, schedule)));
  }
  if (block < 0 || (block + 1) * kKvBlockTokens > state.capacity) {
    return absl::OutOfRangeError(absl::StrCat("block ", block, " beyond the session capacity ",
                                              state.capacity));
  }
  size_t at = 0;
  return ForEachPart(state, schedule, block,
                     [&](KvRows& rows, int64_t first, int64_t n,
                         kernels::quant::KvRowKind kind) -> absl::Status {
                       const size_t len = static_cast<size_t>(n * rows.row_bytes);
                       std::memcpy(rows.row(first), payload.data() + at, len);
                       at += len;
                       kernels::quant::DecodeRowsParams p{.kind = kind,
                                                          .rows = n,
                                                          .channels = rows.channels,
                                                          .rows_in = rows.row(first),
                                                          .row_stride = rows.row_bytes,
                                                          .out = rows.values(first),
                                                          .out_stride = rows.channels};
                       return kernels::quant::DecodeRowsCpu(p);
                     });
}

}  // namespace flashserve::model
