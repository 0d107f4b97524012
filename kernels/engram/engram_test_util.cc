#include "kernels/engram/engram_test_util.h"

#include <random>

#include "common/formats/bf16.h"
#include "common/formats/fp8_e4m3.h"
#include "common/formats/ue8m0.h"

namespace flashserve::kernels::engram_test {

Table RandomTable(int64_t rows, int64_t dim, uint64_t seed, bool finite) {
  Table t;
  t.rows = rows;
  t.dim = dim;
  t.codes.resize(static_cast<size_t>(rows * dim));
  t.scales.resize(static_cast<size_t>(rows * dim / kEngramScaleBlock));
  std::mt19937_64 rng(seed);
  for (uint8_t& c : t.codes) {
    c = static_cast<uint8_t>(rng());
    if (finite && (c & 0x7F) == 0x7F) c ^= 0x01;  // NaN -> ±448, the largest finite code
  }
  for (uint8_t& s : t.scales) {
    s = finite ? static_cast<uint8_t>(110 + rng() % 31) : static_cast<uint8_t>(rng());
  }
  return t;
}

std::vector<uint8_t> PackedRows(const Table& t) {
  const int64_t sb = t.dim / kEngramScaleBlock, row_bytes = t.dim + sb;
  std::vector<uint8_t> packed(static_cast<size_t>(t.rows * row_bytes));
  for (int64_t r = 0; r < t.rows; ++r) {
    std::copy_n(t.codes.begin() + r * t.dim, t.dim, packed.begin() + r * row_bytes);
    std::copy_n(t.scales.begin() + r * sb, sb, packed.begin() + r * row_bytes + t.dim);
  }
  return packed;
}

std::vector<int64_t> RandomIds(int64_t tokens, int64_t cols, int64_t lo, int64_t hi,
                               uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  std::vector<int64_t> ids(static_cast<size_t>(tokens * cols));
  for (int64_t& id : ids) id = u(rng);
  if (ids.size() >= 2) {
    ids[0] = lo;
    ids[1] = hi - 1;
  }
  return ids;
}

std::vector<uint16_t> ForwardGather(const Table& t, const std::vector<int64_t>& ids, int64_t tokens,
                                    int64_t cols) {
  constexpr int64_t kBlock = 32;
  const int64_t hd = t.dim, in = cols * hd;
  std::vector<uint16_t> e_out(static_cast<size_t>(tokens * in));
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t row = ids[static_cast<size_t>(tok * cols + col)];
      const uint8_t* codes = t.codes.data() + row * hd;
      const uint8_t* scales = t.scales.data() + row * (hd / kBlock);
      uint16_t* out = e_out.data() + tok * in + col * hd;
      for (int64_t e = 0; e < hd; ++e) {
        const float v = formats::E4m3ToFloat(codes[e]) * formats::Ue8m0ToFloat(scales[e / kBlock]);
        out[e] = formats::FloatToBf16Bits(v);
      }
    }
  }
  return e_out;
}

EngramGatherParams DenseParams(const Table& t, int64_t tokens, int64_t cols, const int64_t* ids,
                               const uint8_t* codes, const uint8_t* scales, uint16_t* out) {
  EngramGatherParams p;
  p.tokens = tokens;
  p.ids_per_token = cols;
  p.dim = t.dim;
  p.ids = ids;
  p.ids_stride = cols;
  p.codes = codes;
  p.codes_stride = t.dim;
  p.scales = scales;
  p.scales_stride = t.dim / kEngramScaleBlock;
  p.row_begin = 0;
  p.rows = t.rows;
  p.out = out;
  p.out_stride = cols * t.dim;
  return p;
}

}  // namespace flashserve::kernels::engram_test
