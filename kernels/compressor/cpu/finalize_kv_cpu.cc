// FinalizeCompressedKvCpu: RoPE at the group's first position, optional serving row, FP4 QDQ.
#include <span>

#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/block_quant.h"
#include "common/formats/kv_row.h"
#include "kernels/compressor/compressor.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

absl::Status FinalizeRow(const FinalizeCompressedKvParams& p, int64_t g) {
  const int64_t c = p.channels;
  const int64_t pos = p.group_index[g] * p.ratio;
  uint16_t* out = p.kv + g * p.kv_stride;
  RopeParams rp;
  rp.table = p.table;
  rp.tokens = 1;
  rp.heads = 1;
  rp.head_dim = c;
  rp.positions = &pos;
  rp.x = p.latent + g * p.latent_stride;
  rp.x_stride = c;
  rp.x_head_stride = c;
  rp.out = out;
  rp.out_stride = c;
  rp.out_head_stride = c;
  RETURN_IF_ERROR(RopeCpu(rp, nullptr));
  std::span<uint16_t> row(out, static_cast<size_t>(c));
  if (p.cache_rows != nullptr) {
    RETURN_IF_ERROR(formats::EncodeMainKvRow(
        row, std::span<uint8_t>(p.cache_rows + g * p.cache_row_stride,
                                static_cast<size_t>(formats::MainKvRowBytes(c)))));
  }
  return formats::QdqFp4E4m3B16(row, row);
}

}  // namespace

absl::Status FinalizeCompressedKvCpu(const FinalizeCompressedKvParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateFinalizeCompressedKv(p));
  if (pool == nullptr || p.rows < 32) {
    for (int64_t g = 0; g < p.rows; ++g) {
      RETURN_IF_ERROR(FinalizeRow(p, g));
    }
    return absl::OkStatus();
  }
  // Rows are independent; validation has ruled out every per-row error, so a failure here is a
  // broken invariant of the callees: report the first one seen.
  absl::Mutex mu;
  absl::Status first;
  pool->ParallelFor(static_cast<size_t>(p.rows), 16, [&](size_t begin, size_t end) {
    for (size_t g = begin; g < end; ++g) {
      absl::Status st = FinalizeRow(p, static_cast<int64_t>(g));
      if (!st.ok()) {
        absl::MutexLock lock(&mu);
        if (first.ok()) first = st;
        return;
      }
    }
  });
  return first;
}

}  // namespace flashserve::kernels
