// Per-token loops shared by the CPU bodies (cpu/*.cc only; not a public header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels::mhc_cpu {

// out[d] = bf16(((p0·x0[d] + p1·x1[d]) + p2·x2[d]) + p3·x3[d]) for the 4 streams of one token
// (x: 4 rows of `dim` bf16 values, contiguous).
inline void CollapseToken(const uint16_t* x, int64_t dim, const float* pre, uint16_t* out) {
  const float p0 = pre[0], p1 = pre[1], p2 = pre[2], p3 = pre[3];
  const uint16_t* x0 = x;
  const uint16_t* x1 = x + dim;
  const uint16_t* x2 = x + 2 * dim;
  const uint16_t* x3 = x + 3 * dim;
  for (int64_t d = 0; d < dim; ++d) {
    float acc = p0 * formats::Bf16BitsToFloat(x0[d]);
    acc += p1 * formats::Bf16BitsToFloat(x1[d]);
    acc += p2 * formats::Bf16BitsToFloat(x2[d]);
    acc += p3 * formats::Bf16BitsToFloat(x3[d]);
    out[d] = formats::FloatToBf16Bits(acc);
  }
}

// Runs fn(begin, end) over [0, tokens) on `pool` (or inline when it is null).
inline void ForTokens(ThreadPool* pool, int64_t tokens, int64_t min_chunk,
                      const std::function<void(size_t, size_t)>& fn) {
  if (pool == nullptr || pool->size() <= 1 || tokens <= min_chunk) {
    fn(0, static_cast<size_t>(tokens));
    return;
  }
  pool->ParallelFor(static_cast<size_t>(tokens), static_cast<size_t>(min_chunk), fn);
}

}  // namespace flashserve::kernels::mhc_cpu
