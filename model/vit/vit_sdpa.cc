#include "model/vit/vit_sdpa.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"

namespace flashserve::model::vit {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using formats::RoundToBf16;

size_t Slots(const ThreadPool* pool) {
  return pool == nullptr ? 1 : std::max<size_t>(1, pool->size());
}

absl::Status Validate(const VisionSdpaParams& p, const ThreadPool* pool) {
  if (p.patches < 1 || p.heads < 1 || p.head_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("VisionSdpa: patches (%d), heads (%d) and head_dim (%d) must be >= 1",
                        p.patches, p.heads, p.head_dim));
  }
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr) {
    return absl::InvalidArgumentError("VisionSdpa: q, k, v and out must be non-null");
  }
  const int64_t width = p.heads * p.head_dim;
  if (p.qkv_stride < width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "VisionSdpa: qkv_stride %d is smaller than heads*head_dim %d", p.qkv_stride, width));
  }
  if (p.out_stride < width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "VisionSdpa: out_stride %d is smaller than heads*head_dim %d", p.out_stride, width));
  }
  if (p.rounding != SdpaRounding::kNone && p.rounding != SdpaRounding::kProbabilitiesBf16 &&
      p.rounding != SdpaRounding::kScoresAndProbabilitiesBf16) {
    return absl::InvalidArgumentError("VisionSdpa: rounding is not a SdpaRounding value");
  }
  const size_t need = VisionSdpaWorkspaceFloats(p.patches, p.heads, p.head_dim, pool);
  if (p.workspace == nullptr || p.workspace_floats < need) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "VisionSdpa: workspace holds %d floats, needs %d", p.workspace_floats, need));
  }
  return absl::OkStatus();
}

// Runs fn(slot, begin, end) over [0, n) in at most Slots(pool) pieces; `slot` is unique among
// the pieces running at once, so it can index per-thread scratch.
template <typename Fn>
void ForEachSlot(size_t n, ThreadPool* pool, const Fn& fn) {
  const size_t slots = std::min(Slots(pool), std::max<size_t>(n, 1));
  auto run = [&](size_t s_begin, size_t s_end) {
    for (size_t s = s_begin; s < s_end; ++s) fn(s, n * s / slots, n * (s + 1) / slots);
  };
  if (pool == nullptr || slots == 1) {
    run(0, slots);
  } else {
    pool->ParallelFor(slots, 1, run);
  }
}

// One (head, query) row: scores against every key, softmax, weighted sum of the values.
void AttendRow(const VisionSdpaParams& p, const float* qs, const float* ks, const float* vs,
               int64_t head, int64_t row, float* scores, float* acc) {
  const int64_t n = p.patches;
  const int64_t d = p.head_dim;
  const int64_t width = p.heads * d;
  const float* qrow = qs + row * width + head * d;
  const bool flash = p.rounding == SdpaRounding::kProbabilitiesBf16;
  const bool bf16_math = p.rounding == SdpaRounding::kScoresAndProbabilitiesBf16;
  // The flash kernel scales the raw product; the math backend pre-scales q and k (in qs/ks).
  const float flash_scale = 1.0f / std::sqrt(static_cast<float>(d));
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float* krow = ks + j * width + head * d;
    float s = 0.0f;
    for (int64_t e = 0; e < d; ++e) s += qrow[e] * krow[e];
    if (flash) s *= flash_scale;
    if (bf16_math) s = RoundToBf16(s);
    scores[j] = s;
    max_score = std::max(max_score, s);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  const float inv_sum = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) {
    if (flash) {
      scores[j] = RoundToBf16(scores[j]);
    } else {
      scores[j] *= inv_sum;
      if (bf16_math) scores[j] = RoundToBf16(scores[j]);
    }
  }
  std::fill(acc, acc + d, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* vrow = vs + j * width + head * d;
    const float pj = scores[j];
    for (int64_t e = 0; e < d; ++e) acc[e] += pj * vrow[e];
  }
  uint16_t* out = p.out + row * p.out_stride + head * d;
  for (int64_t e = 0; e < d; ++e) {
    out[e] = FloatToBf16Bits(flash ? acc[e] / sum : acc[e]);
  }
}

}  // namespace

size_t VisionSdpaWorkspaceFloats(int64_t patches, int64_t heads, int64_t head_dim,
                                 const ThreadPool* pool) {
  if (patches < 1 || heads < 1 || head_dim < 1) return 0;
  const size_t width = static_cast<size_t>(heads) * head_dim;
  return 3 * static_cast<size_t>(patches) * width +
         Slots(pool) * (static_cast<size_t>(patches) + head_dim);
}

absl::Status VisionSdpaCpu(const VisionSdpaParams& p, ThreadPool* pool) {
  if (absl::Status s = Validate(p, pool); !s.ok()) return s;
  const int64_t n = p.patches;
  const int64_t width = p.heads * p.head_dim;
  float* qs = p.workspace;
  float* ks = qs + n * width;
  float* vs = ks + n * width;
  float* scratch = vs + n * width;

  // The math backend multiplies the fp32 upcasts of q and k by fp32(sqrt(scale)) each, scale =
  // 1/sqrt(head_dim) computed in double; without the upcast those products are bf16 tensors.
  const float root_scale =
      static_cast<float>(std::sqrt(1.0 / std::sqrt(static_cast<double>(p.head_dim))));
  const bool prescale = p.rounding != SdpaRounding::kProbabilitiesBf16;
  const bool bf16_math = p.rounding == SdpaRounding::kScoresAndProbabilitiesBf16;
  ForEachSlot(static_cast<size_t>(n), pool, [&](size_t, size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      for (int64_t e = 0; e < width; ++e) {
        float q = Bf16BitsToFloat(p.q[t * p.qkv_stride + e]);
        float k = Bf16BitsToFloat(p.k[t * p.qkv_stride + e]);
        if (prescale) {
          q *= root_scale;
          k *= root_scale;
        }
        if (bf16_math) {
          q = RoundToBf16(q);
          k = RoundToBf16(k);
        }
        qs[t * width + e] = q;
        ks[t * width + e] = k;
        vs[t * width + e] = Bf16BitsToFloat(p.v[t * p.qkv_stride + e]);
      }
    }
  });

  const size_t rows = static_cast<size_t>(p.heads) * n;
  ForEachSlot(rows, pool, [&](size_t slot, size_t begin, size_t end) {
    float* scores = scratch + slot * static_cast<size_t>(n + p.head_dim);
    float* acc = scores + n;
    for (size_t i = begin; i < end; ++i) {
      AttendRow(p, qs, ks, vs, static_cast<int64_t>(i) / n, static_cast<int64_t>(i) % n, scores,
                acc);
    }
  });
  return absl::OkStatus();
}

}  // namespace flashserve::model::vit
