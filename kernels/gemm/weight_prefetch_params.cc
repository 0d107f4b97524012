// Host-side checks of weight_prefetch.h (no CUDA).
#include <string>

#include "absl/strings/str_format.h"
#include "kernels/gemm/weight_prefetch.h"

namespace flashserve::kernels {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("LaunchL2Prefetch: %s %s", field, why));
}

// Far above any weight (2^40 bytes); keeps every chunk index and grid size in range.
constexpr int64_t kMaxBytes = int64_t{1} << 40;
// A launch's chunks: one thread each, 32 per CTA, at most 2^31 - 1 CTAs.
constexpr int64_t kMaxChunks = int64_t{1} << 36;

}  // namespace

int64_t L2PrefetchChunks(const L2PrefetchRange& r) {
  if (r.rows <= 0 || r.row_bytes <= 0) return 0;
  return r.rows * ((r.row_bytes + kL2PrefetchChunkBytes - 1) / kL2PrefetchChunkBytes);
}

absl::Status ValidateL2PrefetchParams(const L2PrefetchParams& p) {
  if (p.count < 0 || p.count > kL2PrefetchMaxRanges) {
    return Invalid("count", absl::StrFormat("%d is not in [0, %d]", p.count, kL2PrefetchMaxRanges));
  }
  int64_t chunks = 0;
  for (int i = 0; i < p.count; ++i) {
    const L2PrefetchRange& r = p.ranges[i];
    const std::string name = absl::StrFormat("ranges[%d]", i);
    if (r.rows < 0) return Invalid(name + ".rows", absl::StrFormat("%d < 0", r.rows));
    if (r.row_bytes < 0)
      return Invalid(name + ".row_bytes", absl::StrFormat("%d < 0", r.row_bytes));
    if (r.rows == 0 || r.row_bytes == 0) continue;  // empty
    if (r.ptr == nullptr) return Invalid(name + ".ptr", "is null");
    if (r.rows > 1 && r.pitch < r.row_bytes) {
      return Invalid(name + ".pitch", absl::StrFormat("%d < row_bytes %d", r.pitch, r.row_bytes));
    }
    const int64_t pitch = r.rows > 1 ? r.pitch : 0;
    if (r.rows > kMaxBytes || r.row_bytes > kMaxBytes || pitch > kMaxBytes ||
        (pitch > 0 && r.rows - 1 > (kMaxBytes - r.row_bytes) / pitch)) {
      return Invalid(name, "spans more than 2^40 bytes");
    }
    chunks += L2PrefetchChunks(r);
    if (chunks > kMaxChunks) {
      return Invalid(name, absl::StrFormat("brings the chunks past %d", kMaxChunks));
    }
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
