// CPU bodies of the text RoPE (interleaved pairs on the last rd dims) and the ViT's 2-D RoPE
// (half-split). Compiled with -ffp-contract=off: a*c - b*s is two rounded products and a rounded
// difference, as torch's complex multiply and its separate elementwise ops compute it.
#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

// Runs body(begin, end) over [0, n) items, on the pool when there is one.
template <typename Body>
void ForEachItem(ThreadPool* pool, int64_t n, int64_t item_elems, const Body& body) {
  if (pool == nullptr) {
    body(size_t{0}, static_cast<size_t>(n));
    return;
  }
  const size_t min_items = static_cast<size_t>(1 + (int64_t{1} << 14) / item_elems);
  pool->ParallelFor(static_cast<size_t>(n), min_items, body);
}

// Rotates the half-split pairs (j, j + half) of one ViT head.
void RotateHalfSplit(const uint16_t* x, const float* cos, const float* sin, int64_t half,
                     uint16_t* out) {
  for (int64_t j = 0; j < half; ++j) {
    const float x1 = Bf16BitsToFloat(x[j]);
    const float x2 = Bf16BitsToFloat(x[j + half]);
    const float lo = x1 * cos[j] - x2 * sin[j];
    const float hi = x2 * cos[j] + x1 * sin[j];
    out[j] = FloatToBf16Bits(lo);
    out[j + half] = FloatToBf16Bits(hi);
  }
}

}  // namespace

// Rotates the interleaved pairs of one head's rotated tail (rd = 2 * pairs values).
void RopeRotateInterleaved(const uint16_t* x, const float* cos, const float* sin, int64_t pairs,
                           uint16_t* out) {
  for (int64_t k = 0; k < pairs; ++k) {
    const float a = Bf16BitsToFloat(x[2 * k]);
    const float b = Bf16BitsToFloat(x[2 * k + 1]);
    const float re = a * cos[k] - b * sin[k];
    const float im = a * sin[k] + b * cos[k];
    out[2 * k] = FloatToBf16Bits(re);
    out[2 * k + 1] = FloatToBf16Bits(im);
  }
}

absl::Status RopeCpu(const RopeParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateRope(p));
  if (p.tokens == 0) return absl::OkStatus();
  const int64_t rd = p.table->rope_dims();
  const int64_t pairs = rd / 2;
  const int64_t nope = p.head_dim - rd;
  auto body = [&](size_t begin, size_t end) {
    float cos[kMaxRopeDims / 2];
    float sin[kMaxRopeDims / 2];
    for (size_t t = begin; t < end; ++t) {
      // One cos/sin lookup per token, shared by all heads.
      p.table->CosSin(p.positions[t], cos, sin);
      if (p.inverse) {
        for (int64_t k = 0; k < pairs; ++k) sin[k] = -sin[k];
      }
      const uint16_t* x_tok = p.x + static_cast<int64_t>(t) * p.x_stride;
      uint16_t* out_tok = p.out + static_cast<int64_t>(t) * p.out_stride;
      for (int64_t h = 0; h < p.heads; ++h) {
        const uint16_t* x = x_tok + h * p.x_head_stride;
        uint16_t* out = out_tok + h * p.out_head_stride;
        if (out != x) std::copy_n(x, nope, out);
        RopeRotateInterleaved(x + nope, cos, sin, pairs, out + nope);
      }
    }
  };
  ForEachItem(pool, p.tokens, p.heads * p.head_dim, body);
  return absl::OkStatus();
}

absl::Status RopeCosSinCpu(const RopeCosSinParams& p) {
  RETURN_IF_ERROR(ValidateRopeCosSin(p, /*host_values=*/true));
  const int64_t pairs = p.table->rope_dims() / 2;
  float cos[kMaxRopeDims / 2];
  float sin[kMaxRopeDims / 2];
  for (int64_t t = 0; t < p.tokens; ++t) {
    p.table->CosSin(p.positions[t], cos, sin);
    float* out = p.out + t * 2 * pairs;
    for (int64_t k = 0; k < pairs; ++k) {
      out[2 * k] = cos[k];
      out[2 * k + 1] = sin[k];
    }
  }
  return absl::OkStatus();
}

absl::Status VisionRope2dCpu(const VisionRope2dParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateVisionRope2d(p));
  if (p.patches == 0) return absl::OkStatus();
  const int64_t half = p.head_dim / 2;
  const int64_t quarter = p.head_dim / 4;
  float freqs[kMaxRopeDims / 4];
  RETURN_IF_ERROR(
      ComputeVisionRopeFrequencies(p.head_dim, p.theta, absl::MakeSpan(freqs, quarter)));
  auto body = [&](size_t begin, size_t end) {
    float cos[kMaxRopeDims / 2];
    float sin[kMaxRopeDims / 2];
    const absl::Span<const float> f(freqs, quarter);
    for (size_t i = begin; i < end; ++i) {
      // Angles [0, quarter) follow the patch row, [quarter, half) its column.
      RopeCosSin(f, p.rows[i], cos, sin);
      RopeCosSin(f, p.cols[i], cos + quarter, sin + quarter);
      const uint16_t* x_patch = p.x + static_cast<int64_t>(i) * p.x_stride;
      uint16_t* out_patch = p.out + static_cast<int64_t>(i) * p.out_stride;
      for (int64_t h = 0; h < p.heads; ++h) {
        RotateHalfSplit(x_patch + h * p.x_head_stride, cos, sin, half,
                        out_patch + h * p.out_head_stride);
      }
    }
  };
  ForEachItem(pool, p.patches, p.heads * p.head_dim, body);
  return absl::OkStatus();
}

absl::Status RmsNormRopeCpu(const RmsNormRopeParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateRmsNormRope(p));
  RopeParams rope;
  rope.table = p.table;
  rope.tokens = p.norm.rows;
  rope.heads = 1;
  rope.head_dim = p.norm.cols;
  rope.positions = p.positions;
  rope.x = rope.out = p.norm.out;
  rope.x_stride = rope.out_stride = p.norm.out_stride;
  rope.x_head_stride = rope.out_head_stride = p.norm.cols;
  rope.inverse = p.inverse;
  RETURN_IF_ERROR(ValidateRope(rope));  // negative positions fail before the norm writes
  RETURN_IF_ERROR(RmsNormCpu(p.norm, pool));
  return RopeCpu(rope, pool);
}

}  // namespace flashserve::kernels
