// Compressor state handling, params validation and workspace sizes (shared by the CPU bodies and
// the CUDA launchers, so both reject the same params with the same messages).
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/formats/kv_row.h"
#include "kernels/compressor/compressor.h"

namespace flashserve::kernels {
namespace {

absl::Status Invalid(const char* field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("compressor: ", field, " ", what));
}

bool ValidRatio(int64_t ratio) { return ratio >= 1 && ratio <= kMaxCompressRatio; }

absl::Status ValidateWeights(const CompressorWeights& w) {
  if (!ValidRatio(w.ratio)) return Invalid("weights.ratio", absl::StrCat("= ", w.ratio));
  if (w.wkv == nullptr) return Invalid("weights.wkv", "is null");
  if (w.wkv->quantizes_activations()) {
    return Invalid("weights.wkv", "must be a kBf16 or kF32 Linear (no activation quant)");
  }
  if (w.ratio == 1 && w.wgate != nullptr) {
    return Invalid("weights.wgate", "must be null at ratio 1");
  }
  if (w.ratio >= 2) {
    if (w.wgate == nullptr) return Invalid("weights.wgate", "is null at ratio >= 2");
    if (w.wgate->quantizes_activations()) {
      return Invalid("weights.wgate", "must be a kBf16 or kF32 Linear");
    }
    if (w.wgate->out_features() != w.wkv->out_features() ||
        w.wgate->in_features() != w.wkv->in_features()) {
      return Invalid("weights.wgate", "shape differs from wkv");
    }
  }
  if (w.norm_weight == nullptr) return Invalid("weights.norm_weight", "is null");
  if (!(w.norm_eps > 0.0f) || w.norm_eps == std::numeric_limits<float>::infinity()) {
    return Invalid("weights.norm_eps", "must be finite and > 0");
  }
  if (w.mode != LinearMode::kExact && w.mode != LinearMode::kFast) {
    return Invalid("weights.mode", "is not a valid LinearMode");
  }
  return absl::OkStatus();
}

size_t AlignUp(size_t n) { return (n + 63) & ~size_t{63}; }

}  // namespace

absl::StatusOr<CompressorState> MakeCompressorState(int64_t ratio, int64_t channels) {
  if (!ValidRatio(ratio)) return Invalid("ratio", absl::StrCat("= ", ratio));
  if (channels < 1 || channels > (int64_t{1} << 24)) {
    return Invalid("channels", absl::StrCat("= ", channels));
  }
  CompressorState s;
  s.ratio = ratio;
  s.channels = channels;
  s.kv.assign(static_cast<size_t>((ratio - 1) * channels), 0.0f);
  s.score.assign(static_cast<size_t>((ratio - 1) * channels), 0.0f);
  return s;
}

int64_t CompressorStateBytes(int64_t ratio, int64_t channels) {
  return 16 + 8 * (ratio - 1) * channels;
}

namespace {
absl::Status CheckStateShape(const CompressorState& s, size_t bytes) {
  if (!ValidRatio(s.ratio) || s.channels < 1 ||
      s.kv.size() != static_cast<size_t>((s.ratio - 1) * s.channels) ||
      s.score.size() != s.kv.size()) {
    return Invalid("state", "was not made by MakeCompressorState");
  }
  if (bytes != static_cast<size_t>(CompressorStateBytes(s.ratio, s.channels))) {
    return Invalid("buffer", absl::StrCat("has ", bytes, " bytes, expected ",
                                          CompressorStateBytes(s.ratio, s.channels)));
  }
  return absl::OkStatus();
}
}  // namespace

// Host byte order is little-endian on every platform we build for (x86-64, aarch64).
absl::Status SerializeCompressorState(const CompressorState& state, std::span<uint8_t> out) {
  if (absl::Status st = CheckStateShape(state, out.size()); !st.ok()) return st;
  uint8_t* d = out.data();
  std::memcpy(d, &state.next_pos, 8);
  std::memcpy(d + 8, &state.pending, 8);
  const size_t n = state.kv.size() * sizeof(float);
  if (n > 0) {
    std::memcpy(d + 16, state.kv.data(), n);
    std::memcpy(d + 16 + n, state.score.data(), n);
  }
  return absl::OkStatus();
}

absl::Status DeserializeCompressorState(std::span<const uint8_t> in, CompressorState& state) {
  if (absl::Status st = CheckStateShape(state, in.size()); !st.ok()) return st;
  int64_t next_pos = 0, pending = 0;
  std::memcpy(&next_pos, in.data(), 8);
  std::memcpy(&pending, in.data() + 8, 8);
  if (pending < 0 || pending >= state.ratio) {
    return Invalid("buffer", absl::StrCat("holds pending = ", pending));
  }
  if (next_pos < 0 || next_pos < pending) {
    return Invalid("buffer", absl::StrCat("holds next_pos = ", next_pos));
  }
  state.next_pos = next_pos;
  state.pending = pending;
  const size_t n = state.kv.size() * sizeof(float);
  if (n > 0) {
    std::memcpy(state.kv.data(), in.data() + 16, n);
    std::memcpy(state.score.data(), in.data() + 16 + n, n);
  }
  return absl::OkStatus();
}

int64_t CompressMaxGroups(int64_t ratio, int64_t tokens) {
  if (ratio < 1 || tokens <= 0) return 0;
  return (tokens + ratio - 1) / ratio;
}

size_t CompressorWorkspaceBytes(const CompressorWeights& w, int64_t max_tokens,
                                const ThreadPool* pool) {
  if (!ValidateWeights(w).ok() || max_tokens < 0) return 0;
  const int64_t m = std::max<int64_t>(max_tokens, 1);
  const size_t lin = LinearWorkspaceBytes(*w.wkv, m, w.mode, pool);
  if (w.ratio == 1) return lin;
  const size_t gate = LinearWorkspaceBytes(*w.wgate, m, w.mode, pool);
  const size_t rows = static_cast<size_t>(m) * static_cast<size_t>(w.wkv->out_features());
  return 2 * AlignUp(rows * sizeof(float)) + std::max(lin, gate) + 128;
}

absl::Status ValidateCompress(const CompressParams& p, const ThreadPool* pool) {
  if (p.weights == nullptr) return Invalid("weights", "is null");
  if (absl::Status st = ValidateWeights(*p.weights); !st.ok()) return st;
  const CompressorWeights& w = *p.weights;
  const int64_t c = w.wkv->out_features(), d = w.wkv->in_features();
  if (p.state == nullptr) return Invalid("state", "is null");
  const CompressorState& s = *p.state;
  if (s.ratio != w.ratio || s.channels != c ||
      s.kv.size() != static_cast<size_t>((s.ratio - 1) * c) || s.score.size() != s.kv.size()) {
    return Invalid("state", "ratio / channels / buffers do not match the weights");
  }
  if (s.pending < 0 || s.pending >= s.ratio) return Invalid("state.pending", "out of range");
  if (p.tokens < 0) return Invalid("tokens", "< 0");
  if (p.groups_emitted == nullptr) return Invalid("groups_emitted", "is null");
  if (p.start_pos < 0) return Invalid("start_pos", "< 0");
  if (p.start_pos % w.ratio != s.pending) {
    return absl::FailedPreconditionError(absl::StrCat("compressor: start_pos ", p.start_pos,
                                                      " does not follow the state's ", s.pending,
                                                      " pending token(s) at ratio ", w.ratio));
  }
  if (s.pending > 0 && p.start_pos != s.next_pos) {
    return absl::FailedPreconditionError(
        absl::StrCat("compressor: start_pos ", p.start_pos, " != state.next_pos ", s.next_pos));
  }
  if (p.tokens == 0) return absl::OkStatus();
  if (p.start_pos > std::numeric_limits<int64_t>::max() - p.tokens) {
    return Invalid("start_pos", "+ tokens overflows");
  }
  if (p.x == nullptr) return Invalid("x", "is null");
  if (p.x_stride < d) return Invalid("x_stride", "< D");
  if (p.latent == nullptr || p.group_index == nullptr) return Invalid("latent", "is null");
  if (p.latent_stride < c) return Invalid("latent_stride", "< C");
  if (p.latent_capacity < CompressMaxGroups(w.ratio, p.tokens)) {
    return Invalid("latent_capacity", "< CompressMaxGroups(ratio, tokens)");
  }
  if (p.workspace == nullptr || p.workspace_bytes < CompressorWorkspaceBytes(w, p.tokens, pool)) {
    return Invalid("workspace", "is missing or smaller than CompressorWorkspaceBytes");
  }
  return absl::OkStatus();
}

absl::Status ValidateFinalizeCompressedKv(const FinalizeCompressedKvParams& p) {
  if (absl::Status st = ValidateFinalizeCompressedKvLayout(p); !st.ok()) return st;
  for (int64_t g = 0; g < p.rows; ++g) {
    if (p.group_index[g] < 0 || p.group_index[g] > std::numeric_limits<int64_t>::max() / p.ratio) {
      return Invalid("group_index", absl::StrCat("[", g, "] = ", p.group_index[g]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFinalizeCompressedKvLayout(const FinalizeCompressedKvParams& p) {
  if (p.table == nullptr) return Invalid("table", "is null");
  if (!ValidRatio(p.ratio)) return Invalid("ratio", absl::StrCat("= ", p.ratio));
  if (p.rows < 0) return Invalid("rows", "< 0");
  if (p.channels < p.table->rope_dims() || p.channels % formats::kFp4E4m3Block != 0 ||
      p.channels > (int64_t{1} << 24)) {
    return Invalid("channels", "must be a multiple of 16, >= rope_dims and <= 2^24");
  }
  if (p.rows == 0) return absl::OkStatus();
  if (p.group_index == nullptr) return Invalid("group_index", "is null");
  if (p.latent == nullptr) return Invalid("latent", "is null");
  if (p.kv == nullptr) return Invalid("kv", "is null");
  if (p.latent_stride < p.channels) return Invalid("latent_stride", "< channels");
  if (p.kv_stride < p.channels) return Invalid("kv_stride", "< channels");
  if (p.kv == p.latent && p.kv_stride != p.latent_stride) {
    return Invalid("kv_stride", "must equal latent_stride in place");
  }
  if (p.cache_rows != nullptr && p.cache_row_stride < formats::MainKvRowBytes(p.channels)) {
    return Invalid("cache_row_stride", "< MainKvRowBytes(channels)");
  }
  return absl::OkStatus();
}

namespace {

// The state-independent checks of CompressProjectedParams, then the state's counters.
absl::Status ValidateProjected(const CompressProjectedParams& p, int64_t state_ratio,
                               int64_t state_channels, int64_t pending, int64_t next_pos) {
  constexpr int64_t kMaxStride = int64_t{1} << 40;
  if (!ValidRatio(p.ratio)) return Invalid("ratio", absl::StrCat("= ", p.ratio));
  if (p.channels < 1 || p.channels > (int64_t{1} << 24)) {
    return Invalid("channels", absl::StrCat("= ", p.channels));
  }
  if (state_ratio != p.ratio || state_channels != p.channels) {
    return Invalid("state", "ratio / channels do not match the params");
  }
  if (pending < 0 || pending >= p.ratio) return Invalid("state.pending", "out of range");
  if (p.norm_weight == nullptr) return Invalid("norm_weight", "is null");
  if (!(p.norm_eps > 0.0f) || p.norm_eps == std::numeric_limits<float>::infinity()) {
    return Invalid("norm_eps", "must be finite and > 0");
  }
  if (p.tokens < 0 || p.tokens > kMaxStride) return Invalid("tokens", "out of range");
  if (p.groups_emitted == nullptr) return Invalid("groups_emitted", "is null");
  if (p.start_pos < 0) return Invalid("start_pos", "< 0");
  if (p.start_pos % p.ratio != pending) {
    return absl::FailedPreconditionError(absl::StrCat("compressor: start_pos ", p.start_pos,
                                                      " does not follow the state's ", pending,
                                                      " pending token(s) at ratio ", p.ratio));
  }
  if (pending > 0 && p.start_pos != next_pos) {
    return absl::FailedPreconditionError(
        absl::StrCat("compressor: start_pos ", p.start_pos, " != state.next_pos ", next_pos));
  }
  if (p.tokens == 0) return absl::OkStatus();
  if (p.start_pos > std::numeric_limits<int64_t>::max() - p.tokens) {
    return Invalid("start_pos", "+ tokens overflows");
  }
  if (p.ratio >= 2) {
    if (p.kv == nullptr) {
      return Invalid("kv", "is null (fp32 projections are needed at ratio >= 2)");
    }
    if (p.kv_bf16 != nullptr) return Invalid("kv_bf16", "must be null at ratio >= 2");
    if (p.score == nullptr) return Invalid("score", "is null at ratio >= 2");
    if (p.score_stride < p.channels || p.score_stride > kMaxStride) {
      return Invalid("score_stride", "< C (or too large)");
    }
  } else {
    if ((p.kv == nullptr) == (p.kv_bf16 == nullptr)) {
      return Invalid("kv", "and kv_bf16: exactly one must be set at ratio 1");
    }
    if (p.score != nullptr) return Invalid("score", "must be null at ratio 1");
  }
  if (p.kv_stride < p.channels || p.kv_stride > kMaxStride) {
    return Invalid("kv_stride", "< C (or too large)");
  }
  if (p.latent == nullptr) return Invalid("latent", "is null");
  if (p.group_index == nullptr) return Invalid("group_index", "is null");
  if (p.latent_stride < p.channels || p.latent_stride > kMaxStride) {
    return Invalid("latent_stride", "< C (or too large)");
  }
  if (p.latent_capacity < CompressMaxGroups(p.ratio, p.tokens)) {
    return Invalid("latent_capacity", "< CompressMaxGroups(ratio, tokens)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCompressProjected(const CompressProjectedParams& p,
                                       const CompressorState& state) {
  if (state.ratio >= 1 &&
      (state.kv.size() != static_cast<size_t>((state.ratio - 1) * state.channels) ||
       state.score.size() != state.kv.size())) {
    return Invalid("state", "was not made by MakeCompressorState");
  }
  return ValidateProjected(p, state.ratio, state.channels, state.pending, state.next_pos);
}

absl::Status ValidateCompressProjected(const CompressProjectedParams& p,
                                       const CompressorDeviceState& state) {
  if (state.ratio >= 2 && (state.kv == nullptr || state.score == nullptr)) {
    return Invalid("state", "kv / score device rows are null");
  }
  return ValidateProjected(p, state.ratio, state.channels, state.pending, state.next_pos);
}

namespace {

absl::Status InSequence(int64_t b, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("compressor batch: sequence ", b, ": ", s.message()));
}

// The fields a batched launch shares: sequence b against sequence 0.
absl::Status CheckShared(const CompressProjectedParams& p, const CompressProjectedParams& first) {
  if (p.ratio != first.ratio) return Invalid("ratio", "differs from sequence 0's");
  if (p.channels != first.channels) return Invalid("channels", "differs from sequence 0's");
  if (p.norm_weight != first.norm_weight) {
    return Invalid("norm_weight", "differs from sequence 0's");
  }
  if (p.norm_eps != first.norm_eps) return Invalid("norm_eps", "differs from sequence 0's");
  if (p.kv_stride != first.kv_stride) return Invalid("kv_stride", "differs from sequence 0's");
  if (p.score_stride != first.score_stride) {
    return Invalid("score_stride", "differs from sequence 0's");
  }
  if (p.latent_stride != first.latent_stride) {
    return Invalid("latent_stride", "differs from sequence 0's");
  }
  if ((p.kv_bf16 != nullptr) != (first.kv_bf16 != nullptr)) {
    return Invalid("kv_bf16", "set in one sequence and not in sequence 0 (one input kind)");
  }
  return absl::OkStatus();
}

template <typename State>
absl::Status ValidateBatch(const CompressProjectedBatchParams& p, const State* const* states) {
  if (p.batch < 0) return Invalid("batch", "< 0");
  if (p.batch == 0) return absl::OkStatus();
  if (p.sequences == nullptr) return Invalid("sequences", "is null");
  if (states == nullptr) return Invalid("states", "is null");
  for (int64_t b = 0; b < p.batch; ++b) {
    if (states[b] == nullptr) return InSequence(b, Invalid("state", "is null"));
    const absl::Status s = ValidateCompressProjected(p.sequences[b], *states[b]);
    if (!s.ok()) return InSequence(b, s);
    const absl::Status shared = CheckShared(p.sequences[b], p.sequences[0]);
    if (!shared.ok()) return InSequence(b, shared);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCompressProjectedBatch(const CompressProjectedBatchParams& p,
                                            const CompressorState* const* states) {
  return ValidateBatch(p, states);
}

absl::Status ValidateCompressProjectedBatch(const CompressProjectedBatchParams& p,
                                            const CompressorDeviceState* const* states) {
  return ValidateBatch(p, states);
}

int64_t CompressorDeviceStateBytes(int64_t ratio, int64_t channels) {
  return 8 * (ratio - 1) * channels;
}

absl::StatusOr<CompressorDeviceState> MakeCompressorDeviceState(int64_t ratio, int64_t channels,
                                                                void* device_memory, size_t bytes) {
  if (!ValidRatio(ratio)) return Invalid("ratio", absl::StrCat("= ", ratio));
  if (channels < 1 || channels > (int64_t{1} << 24)) {
    return Invalid("channels", absl::StrCat("= ", channels));
  }
  CompressorDeviceState s;
  s.ratio = ratio;
  s.channels = channels;
  if (ratio == 1) return s;
  const int64_t need = CompressorDeviceStateBytes(ratio, channels);
  if (device_memory == nullptr || reinterpret_cast<uintptr_t>(device_memory) % 16 != 0) {
    return Invalid("device_memory", "is null or not 16-byte aligned");
  }
  if (bytes < static_cast<size_t>(need)) {
    return Invalid("bytes", absl::StrCat("= ", bytes, ", need ", need));
  }
  s.kv = static_cast<float*>(device_memory);
  s.score = s.kv + (ratio - 1) * channels;
  return s;
}

}  // namespace flashserve::kernels
