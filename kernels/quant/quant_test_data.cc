#include "kernels/quant/quant_test_data.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/formats/bf16.h"

namespace flashserve::kernels::quant::testing {
namespace {

using formats::FloatToBf16Bits;

constexpr RowKind kFirstKinds[] = {RowKind::kRandom, RowKind::kZeros, RowKind::kTiny,
                                   RowKind::kHuge,   RowKind::kTies,  RowKind::kSignedZeros,
                                   RowKind::kNan};
constexpr RowKind kCycle[] = {RowKind::kRandom,     RowKind::kZeros,  RowKind::kSignedZeros,
                              RowKind::kTiny,       RowKind::kHuge,   RowKind::kTies,
                              RowKind::kMixedScale, RowKind::kPowers, RowKind::kNan,
                              RowKind::kRandom,     RowKind::kRandom, RowKind::kMixedScale};

class RowFiller {
 public:
  explicit RowFiller(uint64_t seed) : rng_(seed) {}

  void Fill(RowKind kind, uint16_t* row, int64_t cols) {
    switch (kind) {
      case RowKind::kRandom: {
        const float scale = std::ldexp(1.0f, Int(-12, 12));
        for (int64_t i = 0; i < cols; ++i) row[i] = FloatToBf16Bits(normal_(rng_) * scale);
        break;
      }
      case RowKind::kZeros:
        for (int64_t i = 0; i < cols; ++i) row[i] = 0;
        break;
      case RowKind::kSignedZeros:
        for (int64_t i = 0; i < cols; ++i) row[i] = Int(0, 1) != 0 ? 0x8000 : 0;
        break;
      case RowKind::kTiny:
        for (int64_t i = 0; i < cols; ++i) {
          const int pick = Int(0, 3);
          const uint16_t sign = Int(0, 1) != 0 ? 0x8000 : 0;
          if (pick == 0) row[i] = sign | static_cast<uint16_t>(Int(1, 0x7F));  // subnormal
          if (pick == 1) row[i] = FloatToBf16Bits(normal_(rng_) * 1e-30f);
          if (pick == 2) row[i] = FloatToBf16Bits(normal_(rng_) * 1e-6f);
          if (pick == 3) row[i] = sign | 0x0080;  // smallest normal
        }
        break;
      case RowKind::kHuge:
        for (int64_t i = 0; i < cols; ++i) {
          const float v = normal_(rng_) * 4e37f;
          row[i] = std::fabs(v) > 3.3e38f ? (v < 0 ? 0xFF7F : 0x7F7F) : FloatToBf16Bits(v);
        }
        break;
      case RowKind::kTies:
        for (int64_t i = 0; i < cols; i += 16) FillTieBlock(row + i, (i / 16) % 2 == 0);
        break;
      case RowKind::kMixedScale:
        for (int64_t i = 0; i < cols; i += 16) {
          const float scale = std::ldexp(1.0f, Int(-20, 20));
          for (int64_t j = i; j < i + 16; ++j) row[j] = FloatToBf16Bits(normal_(rng_) * scale);
        }
        break;
      case RowKind::kPowers:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t sign = Int(0, 1) != 0 ? 0x8000 : 0;
          row[i] = sign | static_cast<uint16_t>(Int(1, 254) << 7);
        }
        break;
      case RowKind::kNan: {
        const float scale = std::ldexp(1.0f, Int(-12, 12));
        constexpr uint16_t kNans[] = {0x7FC0, 0xFFC0, 0x7F81, 0xFFFF};
        for (int64_t i = 0; i < cols; ++i) {
          row[i] = Int(0, 7) == 0 ? kNans[Int(0, 3)] : FloatToBf16Bits(normal_(rng_) * scale);
        }
        break;
      }
    }
  }

  uint16_t Bits() { return static_cast<uint16_t>(Int(0, 0xFFFF)); }

 private:
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // 16 values: the amax first (448 * 2^k for FP8 ties, 6 * 2^k for FP4), then exact midpoints
  // between neighbouring codes under the scale 2^k, with random signs.
  void FillTieBlock(uint16_t* block, bool fp8) {
    const int k = Int(-9, 8);
    const float unit = std::ldexp(1.0f, k);
    block[0] = FloatToBf16Bits((Int(0, 1) != 0 ? -1.0f : 1.0f) * (fp8 ? 448.0f : 6.0f) * unit);
    for (int j = 1; j < 16; ++j) {
      float v = 0;
      if (fp8) {
        // Normal E4M3 midpoints (1 + (2m + 1) / 16) * 2^e, or subnormal ones (m + 0.5) * 2^-9.
        v = Int(0, 3) == 0 ? (Int(0, 7) + 0.5f) / 512.0f
                           : (1.0f + (2 * Int(0, 7) + 1) / 16.0f) * std::ldexp(1.0f, Int(-6, 7));
      } else {
        constexpr float kMid[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
        v = kMid[Int(0, 6)];
      }
      block[j] = FloatToBf16Bits((Int(0, 1) != 0 ? -v : v) * unit);
    }
  }

  std::mt19937_64 rng_;
  std::normal_distribution<float> normal_{0.0f, 1.0f};
};

}  // namespace

RowKind KindOfRow(int64_t r) {
  constexpr int64_t kFirst = sizeof(kFirstKinds) / sizeof(kFirstKinds[0]);
  constexpr int64_t kCycleLen = sizeof(kCycle) / sizeof(kCycle[0]);
  return r < kFirst ? kFirstKinds[r] : kCycle[(r - kFirst) % kCycleLen];
}

std::string RowKindName(RowKind kind) {
  switch (kind) {
    case RowKind::kRandom:
      return "random";
    case RowKind::kZeros:
      return "zeros";
    case RowKind::kSignedZeros:
      return "signed-zeros";
    case RowKind::kTiny:
      return "tiny";
    case RowKind::kHuge:
      return "huge";
    case RowKind::kTies:
      return "ties";
    case RowKind::kMixedScale:
      return "mixed-scale";
    case RowKind::kPowers:
      return "powers";
    case RowKind::kNan:
      return "nan";
  }
  return "?";
}

std::vector<uint16_t> MakeMatrix(int64_t rows, int64_t cols, int64_t stride, uint64_t seed) {
  std::vector<uint16_t> m(static_cast<size_t>(rows * stride));
  RowFiller filler(seed);
  for (int64_t r = 0; r < rows; ++r) {
    filler.Fill(KindOfRow(r), m.data() + r * stride, cols);
    for (int64_t i = cols; i < stride; ++i) m[r * stride + i] = filler.Bits();
  }
  return m;
}

std::string DescribeMismatches(const uint8_t* got, const uint8_t* want, size_t n, size_t row_bytes,
                               bool name_row_kinds) {
  size_t count = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] == want[i]) continue;
    if (++count <= 6) {
      const auto row = static_cast<int64_t>(i / row_bytes);
      absl::StrAppendFormat(&first, " [row %d, byte %d] got %02x want %02x%s;", row, i % row_bytes,
                            got[i], want[i],
                            name_row_kinds ? " (" + RowKindName(KindOfRow(row)) + " row)" : "");
    }
  }
  return count == 0 ? std::string() : absl::StrFormat("%d bytes differ:%s", count, first);
}

}  // namespace flashserve::kernels::quant::testing
