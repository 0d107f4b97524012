// CPU bodies of hc_pre (collapse the 4 streams) and hc_post (write back and mix the streams).
#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/mhc/cpu/mhc_cpu_internal.h"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels {
namespace {

// Enough elements per chunk that scheduling is cheap next to the work.
int64_t MinTokensPerChunk(int64_t dim) { return std::max<int64_t>(1, 16384 / dim); }

// One token of hc_post. Each element reads its 4 sources before writing its 4 destinations, which
// is what makes out == residual safe. Order as the reference's expression
// post·f + sum_i(comb[i][j]·R[i]): the source sum first (i ascending), then the post term added.
void PostToken(const HcPostParams& p, int64_t t) {
  using formats::Bf16BitsToFloat;
  constexpr int kS = kMhcStreams;
  const uint16_t* f = p.f + t * p.f_stride;
  const uint16_t* r = p.residual + t * p.residual_stride;
  uint16_t* out = p.out + t * p.out_stride;
  const float* post = p.post + t * kS;
  const float* c = p.comb + t * kS * kS;  // c[i * 4 + j]: source i, destination j
  const int64_t dim = p.dim;
  for (int64_t d = 0; d < dim; ++d) {
    const float fv = Bf16BitsToFloat(f[d]);
    float rv[kS];
    for (int i = 0; i < kS; ++i) rv[i] = Bf16BitsToFloat(r[i * dim + d]);
    float y[kS];
    for (int j = 0; j < kS; ++j) {
      float mix = c[j] * rv[0];
      for (int i = 1; i < kS; ++i) mix += c[i * kS + j] * rv[i];
      y[j] = post[j] * fv + mix;
    }
    for (int j = 0; j < kS; ++j) out[j * dim + d] = formats::FloatToBf16Bits(y[j]);
  }
}

}  // namespace

absl::Status HcPreCpu(const HcPreParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0) return absl::OkStatus();
  mhc_cpu::ForTokens(pool, p.tokens, MinTokensPerChunk(p.dim), [&p](size_t begin, size_t end) {
    for (auto t = static_cast<int64_t>(begin); t < static_cast<int64_t>(end); ++t) {
      mhc_cpu::CollapseToken(p.x + t * p.x_stride, p.dim, p.pre + t * kMhcStreams,
                             p.out + t * p.out_stride);
    }
  });
  return absl::OkStatus();
}

absl::Status HcPostCpu(const HcPostParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0) return absl::OkStatus();
  mhc_cpu::ForTokens(pool, p.tokens, MinTokensPerChunk(p.dim), [&p](size_t begin, size_t end) {
    for (auto t = static_cast<int64_t>(begin); t < static_cast<int64_t>(end); ++t) PostToken(p, t);
  });
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
