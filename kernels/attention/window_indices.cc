#include "kernels/attention/window_indices.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();

absl::Status Invalid(const char* fn, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", fn, what));
}

// Shared argument checks: window in [1, int32 max], count >= 0 and small enough that every pool
// row fits int32.
absl::Status CheckWindow(const char* fn, int64_t window) {
  if (window < 1 || window > kMaxIndex) return Invalid(fn, "window must be in [1, 2^31-1]");
  return absl::OkStatus();
}

absl::Status CheckSpan(const char* fn, size_t have, int64_t want) {
  if (static_cast<int64_t>(have) != want) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: out has %d entries, expected %d", fn, have, want));
  }
  return absl::OkStatus();
}

IndexList MakeList(int64_t rows, int64_t width) {
  IndexList l;
  l.rows = rows;
  l.width = width;
  l.ids.assign(static_cast<size_t>(rows * width), -1);
  return l;
}

}  // namespace

int64_t PrefillWindowWidth(int64_t s, int64_t window) { return std::min(s, window); }

absl::Status FillPrefillWindowIndices(int64_t s, int64_t window, absl::Span<int32_t> out) {
  constexpr const char* kFn = "FillPrefillWindowIndices";
  RETURN_IF_ERROR(CheckWindow(kFn, window));
  if (s < 0 || s > kMaxIndex) return Invalid(kFn, "s must be in [0, 2^31-1]");
  const int64_t width = PrefillWindowWidth(s, window);
  RETURN_IF_ERROR(CheckSpan(kFn, out.size(), s * width));
  for (int64_t p = 0; p < s; ++p) {
    const int64_t first = std::max<int64_t>(0, p - window + 1);
    for (int64_t i = 0; i < width; ++i) {
      const int64_t pos = first + i;
      out[p * width + i] = pos > p ? -1 : static_cast<int32_t>(pos);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<IndexList> BuildPrefillWindowIndices(int64_t s, int64_t window) {
  constexpr const char* kFn = "BuildPrefillWindowIndices";
  RETURN_IF_ERROR(CheckWindow(kFn, window));
  if (s < 0 || s > kMaxIndex) return Invalid(kFn, "s must be in [0, 2^31-1]");
  IndexList l = MakeList(s, PrefillWindowWidth(s, window));
  RETURN_IF_ERROR(FillPrefillWindowIndices(s, window, absl::MakeSpan(l.ids)));
  return l;
}

absl::Status FillDecodeWindowIndices(int64_t start_pos, int64_t window, absl::Span<int32_t> out) {
  constexpr const char* kFn = "FillDecodeWindowIndices";
  RETURN_IF_ERROR(CheckWindow(kFn, window));
  if (start_pos < 0) return Invalid(kFn, "start_pos must be >= 0");
  RETURN_IF_ERROR(CheckSpan(kFn, out.size(), window));
  for (int64_t i = 0; i < window; ++i) {
    // (start_pos + 1 + i) % window without overflowing for huge start_pos.
    const int64_t slot = (start_pos % window + 1 + i) % window;
    out[i] = slot > start_pos ? -1 : static_cast<int32_t>(slot);
  }
  return absl::OkStatus();
}

absl::StatusOr<IndexList> BuildDecodeWindowIndices(int64_t start_pos, int64_t window) {
  RETURN_IF_ERROR(CheckWindow("BuildDecodeWindowIndices", window));
  IndexList l = MakeList(1, window);
  RETURN_IF_ERROR(FillDecodeWindowIndices(start_pos, window, absl::MakeSpan(l.ids)));
  return l;
}

absl::Status FillChunkWindowIndices(int64_t start_pos, int64_t s, int64_t window, int64_t width,
                                    absl::Span<int32_t> out) {
  constexpr const char* kFn = "FillChunkWindowIndices";
  RETURN_IF_ERROR(CheckWindow(kFn, window));
  if (start_pos < 0) return Invalid(kFn, "start_pos must be >= 0");
  if (s < 0 || s > kMaxIndex - window) return Invalid(kFn, "s must be in [0, 2^31-1-window]");
  if (start_pos > std::numeric_limits<int64_t>::max() - s) {
    return Invalid(kFn, "start_pos + s overflows");
  }
  if (width < std::min(start_pos + s, window) || width > window) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: width %d must be in [min(start_pos + s, window) = %d, window = %d]",
                        kFn, width, std::min(start_pos + s, window), window));
  }
  RETURN_IF_ERROR(CheckSpan(kFn, out.size(), s * width));
  for (int64_t i = 0; i < s; ++i) {
    const int64_t p = start_pos + i;
    const int64_t first = std::max<int64_t>(0, p - window + 1);
    int32_t* row = out.data() + i * width;
    int64_t e = 0;
    for (int64_t q = first; q <= p; ++q, ++e) {
      row[e] = static_cast<int32_t>(q < start_pos ? q % window : window + (q - start_pos));
    }
    for (; e < width; ++e) row[e] = -1;
  }
  return absl::OkStatus();
}

absl::StatusOr<IndexList> BuildChunkWindowIndices(int64_t start_pos, int64_t s, int64_t window,
                                                  int64_t width) {
  constexpr const char* kFn = "BuildChunkWindowIndices";
  RETURN_IF_ERROR(CheckWindow(kFn, window));
  if (s < 0 || s > kMaxIndex || width < 0 || width > window) {
    return Invalid(kFn, "s must be in [0, 2^31-1] and width in [0, window]");
  }
  IndexList l = MakeList(s, width);
  RETURN_IF_ERROR(FillChunkWindowIndices(start_pos, s, window, width, absl::MakeSpan(l.ids)));
  return l;
}

absl::Status FillConcatIndices(int64_t rows, absl::Span<const int32_t> window, int64_t window_width,
                               absl::Span<const int32_t> compressed, int64_t compressed_width,
                               int64_t offset, absl::Span<int32_t> out) {
  constexpr const char* kFn = "FillConcatIndices";
  if (rows < 0 || window_width < 0 || compressed_width < 0) {
    return Invalid(kFn, "rows and widths must be >= 0");
  }
  if (offset < 0 || offset > kMaxIndex) return Invalid(kFn, "offset must be in [0, 2^31-1]");
  if (static_cast<int64_t>(window.size()) != rows * window_width) {
    return Invalid(kFn, "window size != rows * window_width");
  }
  if (static_cast<int64_t>(compressed.size()) != rows * compressed_width) {
    return Invalid(kFn, "compressed size != rows * compressed_width");
  }
  const int64_t width = window_width + compressed_width;
  RETURN_IF_ERROR(CheckSpan(kFn, out.size(), rows * width));
  // Check before writing so that a failure leaves `out` untouched.
  for (int32_t c : compressed) {
    if (c < -1 || (c >= 0 && c > kMaxIndex - offset)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: compressed entry %d is neither -1 nor a position with offset %d in int32", kFn, c,
          offset));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* dst = out.data() + r * width;
    std::copy_n(window.data() + r * window_width, window_width, dst);
    const int32_t* src = compressed.data() + r * compressed_width;
    for (int64_t e = 0; e < compressed_width; ++e) {
      dst[window_width + e] = src[e] < 0 ? -1 : static_cast<int32_t>(src[e] + offset);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<IndexList> ConcatIndices(const IndexList& window, const IndexList& compressed,
                                        int64_t offset) {
  if (window.rows != compressed.rows) {
    return Invalid("ConcatIndices", "window and compressed lists have different row counts");
  }
  if (window.rows < 0 || window.width < 0 || compressed.width < 0) {
    return Invalid("ConcatIndices", "rows and widths must be >= 0");
  }
  IndexList l = MakeList(window.rows, window.width + compressed.width);
  RETURN_IF_ERROR(FillConcatIndices(window.rows, window.ids, window.width, compressed.ids,
                                    compressed.width, offset, absl::MakeSpan(l.ids)));
  return l;
}

}  // namespace flashserve::kernels
