#include "model/runtime/session_state.h"

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/formats/kv_row.h"
#include "common/base/endian.h"
#include "kernels/quant/quant.h"
#include "absl/strings/str_cat.h"
#include <cstring>
#include <algorithm>

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

void ResetSessionState(SessionState& state) {
  state.position = 0;
  state.failed = false;
  state.shared_index_k_layer = -1;
  state.engram = engram::NgramLookback{};
  for (LayerState& l : state.layers) {
    if (l.compressor) {
      l.compressor->pending = 0;
      l.compressor->next_pos = 0;
    }
  }
}

absl::StatusOr<SessionPool> SessionPool::Create(const ModelConfig& config,
                                                const LayerSchedule& schedule, int sessions,
                                                int64_t capacity) {
  if (sessions < 1) return absl::InvalidArgumentError("a session pool needs at least 1 session");
  SessionPool pool;
  for (int i = 0; i < sessions; ++i) {
    ASSIGN_OR_RETURN(SessionState s, MakeSessionState(config, schedule, capacity));
    pool.bytes_.swa += s.SwaBytes();
    pool.bytes_.global += s.GlobalKvBytes();
    for (const LayerState& l : s.layers) {
      pool.bytes_.mirrors += static_cast<int64_t>(
          (l.swa.bf16.size() + l.main.bf16.size() + l.index_k.bf16.size()) * sizeof(uint16_t));
      if (l.compressor) {
        pool.bytes_.compressor += static_cast<int64_t>(
            (l.compressor->kv.size() + l.compressor->score.size()) * sizeof(float));
      }
    }
    pool.bytes_.total += s.AllocatedBytes();
    pool.states_.push_back(std::make_unique<SessionState>(std::move(s)));
  }
  pool.in_use_.assign(static_cast<size_t>(sessions), false);
  return pool;
}

absl::StatusOr<SessionState*> SessionPool::Acquire() {
  for (size_t i = 0; i < states_.size(); ++i) {
    if (!in_use_[i]) {
      in_use_[i] = true;
      ++in_use_count_;
      ResetSessionState(*states_[i]);
      return states_[i].get();
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("all ", states_.size(), " sessions of the pool are in use"));
}

absl::Status SessionPool::Release(SessionState* state) {
  for (size_t i = 0; i < states_.size(); ++i) {
    if (states_[i].get() == state) {
      if (!in_use_[i]) return absl::InvalidArgumentError("the session was already released");
      in_use_[i] = false;
      --in_use_count_;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("the session does not belong to this pool");
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

namespace flashserve::model {
namespace {

constexpr char kMagic[4] = {'F', 'S', 'S', 'S'};
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    char b[sizeof(T)];
    PutLittleEndian(static_cast<uint64_t>(v), sizeof(T), b);
    out_->insert(out_->end(), b, b + sizeof(T));
  }
  void Bytes(const uint8_t* p, size_t n) { out_->insert(out_->end(), p, p + n); }

 private:
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  absl::StatusOr<T> Get(const char* what) {
    if (in_.size() - pos_ < sizeof(T)) return Short(what);
    const T v = static_cast<T>(
        GetLittleEndian(reinterpret_cast<const char*>(in_.data() + pos_), sizeof(T)));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<std::span<const uint8_t>> Bytes(size_t n, const char* what) {
    if (in_.size() - pos_ < n) return Short(what);
    std::span<const uint8_t> s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  absl::Status Short(const char* what) const {
    return absl::DataLossError(absl::StrCat("session state truncated in ", what, " at byte ",
                                            pos_));
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

int64_t ValidRows(const KvRows& rows, int64_t position, int ratio) {
  return rows.capacity == 0 ? 0 : position / ratio;
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> SerializeSessionState(const SessionState& state,
                                                           const LayerSchedule& schedule) {
  if (state.failed) return absl::FailedPreconditionError("the session failed; nothing to save");
  if (state.layers.size() != schedule.layers.size()) {
    return absl::InvalidArgumentError("the state does not match the schedule");
  }
  std::vector<uint8_t> out;
  Writer w(&out);
  w.Bytes(reinterpret_cast<const uint8_t*>(kMagic), 4);
  w.Put<uint32_t>(kVersion);
  w.Put<int64_t>(state.capacity);
  w.Put<int64_t>(state.position);
  w.Put<int32_t>(static_cast<int32_t>(state.layers.size()));
  w.Put<int32_t>(state.shared_index_k_layer);
  w.Put<int64_t>(state.engram.position);
  for (int64_t v : state.engram.recent) w.Put<int64_t>(v);
  for (size_t l = 0; l < state.layers.size(); ++l) {
    const LayerState& ls = state.layers[l];
    const int ratio = std::max(1, schedule.layers[l].compress_ratio);
    const uint8_t flags = (ls.main.capacity > 0 ? 1 : 0) | (ls.index_k.capacity > 0 ? 2 : 0) |
                          (ls.compressor ? 4 : 0);
    w.Put<uint8_t>(flags);
    w.Bytes(ls.swa.bytes.data(), ls.swa.bytes.size());
    w.Bytes(ls.main.bytes.data(),
            static_cast<size_t>(ValidRows(ls.main, state.position, ratio) * ls.main.row_bytes));
    w.Bytes(ls.index_k.bytes.data(), static_cast<size_t>(ValidRows(ls.index_k, state.position,
                                                                   ratio) *
                                                         ls.index_k.row_bytes));
    if (ls.compressor) {
      std::vector<uint8_t> comp(static_cast<size_t>(
          kernels::CompressorStateBytes(ls.compressor->ratio, ls.compressor->channels)));
      RETURN_IF_ERROR(kernels::SerializeCompressorState(*ls.compressor, comp));
      w.Bytes(comp.data(), comp.size());
    }
  }
  return out;
}

absl::Status DeserializeSessionState(std::span<const uint8_t> bytes, const LayerSchedule& schedule,
                                     SessionState& state) {
  Reader r(bytes);
  ASSIGN_OR_RETURN(std::span<const uint8_t> magic, r.Bytes(4, "magic"));
  if (std::memcmp(magic.data(), kMagic, 4) != 0) {
    return absl::InvalidArgumentError("not a session state (bad magic)");
  }
  ASSIGN_OR_RETURN(uint32_t version, r.Get<uint32_t>("version"));
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("session state version ", version,
                                                   " is not supported (", kVersion, ")"));
  }
  ASSIGN_OR_RETURN(int64_t capacity, r.Get<int64_t>("capacity"));
  ASSIGN_OR_RETURN(int64_t position, r.Get<int64_t>("position"));
  ASSIGN_OR_RETURN(int32_t layers, r.Get<int32_t>("layer count"));
  ASSIGN_OR_RETURN(int32_t shared, r.Get<int32_t>("shared index-key layer"));
  (void)capacity;
  if (layers != static_cast<int32_t>(state.layers.size()) ||
      state.layers.size() != schedule.layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("session state has ", layers,
                                                   " layers; this model has ",
                                                   state.layers.size()));
  }
  if (position < 0 || position > state.capacity) {
    return absl::InvalidArgumentError(absl::StrCat("position ", position,
                                                   " outside the state's capacity ",
                                                   state.capacity));
  }
  engram::NgramLookback lookback;
  ASSIGN_OR_RETURN(lookback.position, r.Get<int64_t>("Engram look-back"));
  for (int64_t& v : lookback.recent) {
    ASSIGN_OR_RETURN(v, r.Get<int64_t>("Engram look-back"));
  }
  // Parse into a copy so that `state` is unchanged on error.
  SessionState next = state;
  next.position = position;
  next.shared_index_k_layer = shared;
  next.engram = lookback;
  next.failed = false;
  for (size_t l = 0; l < next.layers.size(); ++l) {
    LayerState& ls = next.layers[l];
    const int ratio = std::max(1, schedule.layers[l].compress_ratio);
    ASSIGN_OR_RETURN(uint8_t flags, r.Get<uint8_t>("layer flags"));
    const uint8_t want = (ls.main.capacity > 0 ? 1 : 0) | (ls.index_k.capacity > 0 ? 2 : 0) |
                         (ls.compressor ? 4 : 0);
    if (flags != want) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, ": flags ", int{flags},
                                                     ", this model's ", int{want}));
    }
    auto rows = [&](KvRows& dst, int64_t n, kernels::quant::KvRowKind kind) -> absl::Status {
      ASSIGN_OR_RETURN(std::span<const uint8_t> b,
                       r.Bytes(static_cast<size_t>(n * dst.row_bytes), "rows"));
      if (n == 0) return absl::OkStatus();
      std::memcpy(dst.bytes.data(), b.data(), b.size());
      kernels::quant::DecodeRowsParams p{.kind = kind,
                                         .rows = n,
                                         .channels = dst.channels,
                                         .rows_in = dst.bytes.data(),
                                         .row_stride = dst.row_bytes,
                                         .out = dst.bf16.data(),
                                         .out_stride = dst.channels};
      return kernels::quant::DecodeRowsCpu(p);
    };
    RETURN_IF_ERROR(rows(ls.swa, ls.swa.capacity, kernels::quant::KvRowKind::kSwaKv))
        << "layer " << l << " SWA ring";
    RETURN_IF_ERROR(rows(ls.main, ValidRows(ls.main, position, ratio),
                         kernels::quant::KvRowKind::kMainKv))
        << "layer " << l << " compressed KV";
    RETURN_IF_ERROR(rows(ls.index_k, ValidRows(ls.index_k, position, ratio),
                         kernels::quant::KvRowKind::kIndexK))
        << "layer " << l << " index keys";
    if (ls.compressor) {
      ASSIGN_OR_RETURN(std::span<const uint8_t> b,
                       r.Bytes(static_cast<size_t>(kernels::CompressorStateBytes(
                                   ls.compressor->ratio, ls.compressor->channels)),
                               "compressor state"));
      RETURN_IF_ERROR(kernels::DeserializeCompressorState(b, *ls.compressor))
          << "layer " << l << " compressor";
    }
  }
  if (r.remaining() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(r.remaining(), " trailing bytes"));
  }
  state = std::move(next);
  return absl::OkStatus();
}

}  // namespace flashserve::model
