// Test inputs for the quantiser tests: bf16 matrices whose rows cycle through kinds chosen to
// reach every branch of the formats (random with per-row scales 2^±12, zeros, -0, tiny, huge,
// exact rounding ties, NaN). Deterministic for a seed. Test-only code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flashserve::kernels::quant::testing {

enum class RowKind {
  kRandom,       // N(0, 1) * 2^e, e uniform in [-12, 12] per row
  kZeros,        // +0
  kSignedZeros,  // +0 and -0 mixed
  kTiny,         // ~1e-30 and 1e-6 values, bf16 subnormals
  kHuge,         // ~4e37, up to the largest finite bf16
  kTies,         // blocks whose amax is 448 * 2^k or 6 * 2^k, filled with exact E4M3/E2M1 ties
  kMixedScale,   // a new scale 2^e, e in [-20, 20], every 16 values
  kPowers,       // signed powers of two over the whole bf16 range
  kNan,          // random with one value in 8 a NaN of either sign (no Inf)
};

// Kind of row r: rows 0..6 take kRandom, kZeros, kTiny, kHuge, kTies, kSignedZeros, kNan (so
// even small matrices see the special rows), and later rows cycle through all kinds.
RowKind KindOfRow(int64_t r);
std::string RowKindName(RowKind kind);

// A [rows, cols] bf16 matrix with row stride `stride` (>= cols; cols a multiple of 16). The
// padding between rows is filled with random bits (it must never influence a result).
std::vector<uint16_t> MakeMatrix(int64_t rows, int64_t cols, int64_t stride, uint64_t seed);

// Count, positions and values of the first few differences between two byte ranges ("" if
// equal). With `name_row_kinds`, each position also names its row's RowKind (for MakeMatrix data).
std::string DescribeMismatches(const uint8_t* got, const uint8_t* want, size_t n, size_t row_bytes,
                               bool name_row_kinds);

template <typename T>
std::string DescribeMismatches(const std::vector<T>& got, const std::vector<T>& want,
                               size_t row_elems, bool name_row_kinds = true) {
  if (got.size() != want.size()) return "sizes differ";
  return DescribeMismatches(reinterpret_cast<const uint8_t*>(got.data()),
                            reinterpret_cast<const uint8_t*>(want.data()), got.size() * sizeof(T),
                            row_elems * sizeof(T), name_row_kinds);
}

}  // namespace flashserve::kernels::quant::testing
