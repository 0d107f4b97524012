// EngramGatherCpu: per token, per column, one table row dequantised block by block.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"
#include "kernels/engram/engram.h"

namespace flashserve::kernels {
namespace {

// One row: dim values, one scale per 32. Finite codes and scales take the plain product (exact
// unless it under/overflows fp32); NaNs go through EngramDequantValue's explicit rule.
void DequantRow(const uint8_t* codes, const uint8_t* scales, int64_t dim, uint16_t* out) {
  for (int64_t b = 0; b < dim / kEngramScaleBlock; ++b) {
    const uint8_t scale_byte = scales[b];
    const float scale = formats::Ue8m0ToFloat(scale_byte);
    for (int64_t i = 0; i < kEngramScaleBlock; ++i) {
      const int64_t e = b * kEngramScaleBlock + i;
      const float value = formats::E4m3ToFloat(codes[e]);
      if (value != value || scale != scale) {
        out[e] = EngramDequantValue(codes[e], scale_byte);
      } else {
        out[e] = formats::FloatToBf16Bits(value * scale);
      }
    }
  }
}

}  // namespace

absl::Status EngramGatherCpu(const EngramGatherParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateEngramGather(p));
  if (p.tokens == 0) return absl::OkStatus();
  std::atomic<uint64_t> foreign{0};
  auto body = [&](size_t begin, size_t end) {
    uint64_t local_foreign = 0;
    for (size_t t = begin; t < end; ++t) {
      const int64_t* ids = p.ids + static_cast<int64_t>(t) * p.ids_stride;
      uint16_t* out_tok = p.out + static_cast<int64_t>(t) * p.out_stride;
      for (int64_t col = 0; col < p.ids_per_token; ++col) {
        uint16_t* out = out_tok + col * p.dim;
        const int64_t id = ids[col];
        if (id < p.row_begin || id - p.row_begin >= p.rows) {
          std::fill_n(out, p.dim, uint16_t{0});  // the masked lookup: +0
          ++local_foreign;
          continue;
        }
        const int64_t row = id - p.row_begin;
        DequantRow(p.codes + row * p.codes_stride, p.scales + row * p.scales_stride, p.dim, out);
      }
    }
    foreign.fetch_add(local_foreign, std::memory_order_relaxed);
  };
  if (pool == nullptr || p.tokens < 8) {
    body(0, static_cast<size_t>(p.tokens));
  } else {
    pool->ParallelFor(static_cast<size_t>(p.tokens), 4, body);
  }
  if (p.foreign_ids != nullptr) *p.foreign_ids += foreign.load(std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
